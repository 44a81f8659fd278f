package relaytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// RelayConfig says how to run a relay process: cmd/relay by default, or any
// program that prints the same ready line ({"ready":true,"listen":...,
// "admin":...}) as its first stdout line, such as the reference relay.
type RelayConfig struct {
	Name string   // for logs; "relay" when empty
	Bin  string   // the program; RelayBinary when empty
	Args []string // its arguments
	Dir  string   // its working directory
	// Env is added to Environ(). Unless it sets RELAY_LISTEN and
	// RELAY_ADMIN_LISTEN itself, the relay gets fixed ports (FixedPort),
	// so a restart comes back on the same ones; RELAY_LOG_FORMAT=json is
	// the default.
	Env []string
	// Token is the admin bearer token (RELAY_ADMIN_TOKEN) for the helpers
	// that call the admin listener; it is added to Env when set.
	Token string
}

// Relay is one relay replica: a Process whose readiness is its ready line.
type Relay struct {
	*Process
	Listen string // host:port of the planes (from the ready line when chosen by the kernel)
	Admin  string // host:port of the admin listener ("" when it is off)
	Token  string

	fixed bool
}

// NewRelay prepares a relay (does not start it).
func NewRelay(t testing.TB, c RelayConfig) *Relay {
	t.Helper()
	if c.Name == "" {
		c.Name = "relay"
	}
	if c.Bin == "" {
		c.Bin = RelayBinary(t)
	}
	r := &Relay{Token: c.Token}
	env := []string{"RELAY_LOG_FORMAT=json"}
	if !hasVar(c.Env, "RELAY_LISTEN") && !hasVar(c.Env, "RELAY_ADMIN_LISTEN") {
		r.Listen, r.Admin, r.fixed = FixedPort(t), FixedPort(t), true
		env = append(env, "RELAY_LISTEN="+r.Listen, "RELAY_ADMIN_LISTEN="+r.Admin)
	}
	if c.Token != "" {
		env = append(env, "RELAY_ADMIN_TOKEN="+c.Token)
	}
	r.Process = NewProcess(t, c.Name, c.Bin, c.Args...)
	r.Env = Environ(append(env, c.Env...)...)
	r.Dir = c.Dir
	return r
}

// StartRelay is NewRelay and Start, failing the test when it is not ready.
func StartRelay(t testing.TB, c RelayConfig) *Relay {
	t.Helper()
	r := NewRelay(t, c)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// Start runs a new incarnation and waits up to 30 s for its ready line.
func (r *Relay) Start() error {
	if err := r.Process.Start(); err != nil {
		return err
	}
	line, err := r.FirstLine(30 * time.Second)
	if err != nil {
		return err
	}
	var ready struct {
		Ready  bool   `json:"ready"`
		Listen string `json:"listen"`
		Admin  string `json:"admin"`
		Pid    int    `json:"pid"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || !ready.Ready {
		return fmt.Errorf("%s: first line %q is not a ready line (%v)", r.Name, line, err)
	}
	if ready.Pid != 0 && ready.Pid != r.Pid() {
		return fmt.Errorf("%s: ready line %q names pid %d, not %d", r.Name, line, ready.Pid, r.Pid())
	}
	if r.fixed && (ready.Listen != r.Listen || ready.Admin != r.Admin) {
		return fmt.Errorf("%s: ready line %q, want listen %s admin %s", r.Name, line, r.Listen, r.Admin)
	}
	r.Listen, r.Admin = ready.Listen, ready.Admin
	return nil
}

// URL is the planes' base URL, AdminURL the admin listener's.
func (r *Relay) URL() string      { return "http://" + r.Listen }
func (r *Relay) AdminURL() string { return "http://" + r.Admin }

// ProjectionStatus is the admin listener's GET /projection/status.
type ProjectionStatus struct {
	Version int64 `json:"version"` // stored in Valkey
	Replica struct {
		Loaded  bool  `json:"loaded"`
		Version int64 `json:"version"` // this replica's copy
	} `json:"replica"`
}

// ProjectionStatus reads the replica's projection status.
func (r *Relay) ProjectionStatus() (ProjectionStatus, error) {
	var s ProjectionStatus
	req, err := http.NewRequest(http.MethodGet, r.AdminURL()+"/projection/status", nil)
	if err != nil {
		return s, err
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	res, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return s, fmt.Errorf("%s projection status: %w", r.Name, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return s, fmt.Errorf("%s projection status: HTTP %d", r.Name, res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("%s projection status: %w", r.Name, err)
	}
	return s, nil
}

// WaitProjection waits until the replica serves a projection at version or
// later (any loaded projection when version is 0): the one way the tests
// know a replica has what was pushed. It returns how long that took.
func (r *Relay) WaitProjection(t testing.TB, version int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last ProjectionStatus
	var err error
	ok := poll(within, 10*time.Millisecond, func() bool {
		last, err = r.ProjectionStatus()
		return err == nil && last.Replica.Loaded && last.Replica.Version >= version
	})
	if !ok {
		t.Fatalf("%s: projection not at version %d within %v (last status %+v, %v)", r.Name, version, within, last, err)
	}
	return time.Since(start)
}

// poll calls cond every interval until it holds (true) or within has
// passed (false).
func poll(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// AdminURLs are the relays' admin base URLs (loadgen.Config.StatusURLs).
func AdminURLs(relays ...*Relay) []string {
	var out []string
	for _, r := range relays {
		out = append(out, r.AdminURL())
	}
	return out
}
