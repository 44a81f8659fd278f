// Command floor is the per-request floor of a Go HTTP service on this
// machine: the least any signed-request service does, so the relay's CPU
// per request can be read as a multiple of it (issue 30). The server reads
// a ~1.5 KB JSON body, decodes it, checks one Ed25519 signature over a
// message derived from the body (the relay's canonical-request shape:
// context, endpoint, caller, issued-at, SHA-256 of the body) and makes one
// Valkey script call (touch.lua, in its own namespace); the driver sends
// such requests from many keep-alive clients at a given rate, the way
// loadgen's daemons tick.
//
//	floor serve -valkey redis://127.0.0.1:6390/0 [-listen 127.0.0.1:0] [-clients 400] [-seed s] [-answer-bytes n]
//	    prints {"listen": "127.0.0.1:port"}; GET /stats answers {"requests": n, "refused": n, "cpuSeconds": s}
//	floor drive -url http://127.0.0.1:port -clients 400 -rate 84 -burst 2 -duration 30s [-json out.json]
//
// test/bench/capacity.sh starts both next to each relay cost run, at the
// request rate and with the client count that run had, and takes the
// server's user+system CPU over a window from /stats (getrusage, finer than
// the /proc clock ticks it reads for the relay over its longer runs).
package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

//go:embed touch.lua
var touchLua string

const (
	endpoint    = "heartbeat"
	signContext = "byollm-floor-v1" // the signed message's first line
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: floor serve|drive [flags] (see -h of each)")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:], log)
	case "drive":
		err = drive(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q (serve or drive)", os.Args[1])
	}
	if err != nil {
		log.Error("floor", "err", err)
		os.Exit(1)
	}
}

// clientKey is client i's id and key, derived from the seed on both sides
// so the server knows every key without a store read (the relay's key
// lookup is part of what the floor leaves out).
func clientKey(seed string, i int) (string, ed25519.PrivateKey) {
	s := sha256.Sum256([]byte(seed + "/" + strconv.Itoa(i)))
	return fmt.Sprintf("floor-%04d", i), ed25519.NewKeyFromSeed(s[:])
}

// canonical is the signed message: the shape of the relay's canonical
// request, so the hashing and the verify cost what they cost there.
func canonical(caller string, issuedAt int64, body []byte) []byte {
	sum := sha256.Sum256(body)
	b := make([]byte, 0, len(signContext)+len(endpoint)+len(caller)+2*sha256.Size+24)
	b = append(b, signContext...)
	b = append(b, '\n')
	b = append(b, endpoint...)
	b = append(b, '\n')
	b = append(b, caller...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, issuedAt, 10)
	b = append(b, '\n')
	return hex.AppendEncode(b, sum[:])
}

// heartbeat is the body: a daemon's heartbeat with enough capabilities to
// reach the body size asked for.
type heartbeat struct {
	ProtocolVersion string       `json:"protocolVersion"`
	RunnerID        string       `json:"runnerId"`
	DaemonVersion   string       `json:"daemonVersion"`
	Capabilities    []capability `json:"capabilities"`
	ActiveLeases    []string     `json:"activeLeases"`
}

type capability struct {
	Kind         string `json:"kind"`
	Service      string `json:"service"`
	BackendID    string `json:"backendId"`
	BackendClass string `json:"backendClass"`
	Model        string `json:"model"`
	OfferScope   string `json:"offerScope"`
}

func makeBody(id string, size int) []byte {
	h := heartbeat{ProtocolVersion: "2", RunnerID: id, DaemonVersion: "0.1.1", ActiveLeases: []string{}}
	for {
		b, _ := json.Marshal(h)
		if len(b) >= size {
			return b
		}
		h.Capabilities = append(h.Capabilities, capability{Kind: "llm.generate", Service: "floor", BackendID: "ollama",
			BackendClass: "http", Model: fmt.Sprintf("floor-model-%02d", len(h.Capabilities)), OfferScope: "private"})
	}
}

// ---- server -----------------------------------------------------------------

type server struct {
	keys     map[string]ed25519.PublicKey
	vk       valkey.Client
	touch    *valkey.Lua
	ns       string
	served   atomic.Int64
	refused  atomic.Int64
	log      *slog.Logger
	maxBytes int64
	// pad fills each answer out to -answer-bytes: a service that answers
	// what the relay answers writes at least as many bytes.
	pad []byte
}

func serve(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	url := fs.String("valkey", "redis://127.0.0.1:6379/0", "Valkey URL")
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	clients := fs.Int("clients", 400, "client keys to accept (ids floor-0000 up)")
	seed := fs.String("seed", "floor", "the key seed the driver uses too")
	ns := fs.String("ns", "", "key namespace (default floor-<random>); its keys are deleted on exit")
	answerBytes := fs.Int("answer-bytes", 0, "pad each answer body out to this many bytes (0: the short answer alone; at most 64 MiB)")
	_ = fs.Parse(args)
	if *answerBytes < 0 || *answerBytes > 64<<20 {
		return fmt.Errorf("-answer-bytes %d: want 0 to %d", *answerBytes, 64<<20)
	}
	if *ns == "" {
		*ns = fmt.Sprintf("floor-%06x", rand.N(1<<24)) //nolint:gosec // a namespace, not a secret
	}
	// Connected as a replica connects (its default connection count), so
	// the floor's Valkey CPU compares with the relay's.
	vk, closeVK, _, err := valkeyconn.Open(context.Background(), *url, 0, log)
	if err != nil {
		return fmt.Errorf("valkey: %w", err)
	}
	defer closeVK()
	s := &server{keys: make(map[string]ed25519.PublicKey, *clients), vk: vk, touch: valkey.NewLuaScript(touchLua),
		ns: *ns, log: log, maxBytes: 64 << 10, pad: bytes.Repeat([]byte("x"), *answerBytes)}
	for i := range *clients {
		id, priv := clientKey(*seed, i)
		s.keys[id] = priv.Public().(ed25519.PublicKey)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /floor", s.handle)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "application/json")
		// Its own CPU, from getrusage: a smoke run's few hundred requests
		// cost less than one /proc clock tick (10 ms).
		_ = json.NewEncoder(w).Encode(map[string]any{"requests": s.served.Load(), "refused": s.refused.Load(), "cpuSeconds": cpuSeconds()})
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The relay's keep-alive settings (internal/httpserve), so idle
	// connections live as long as there.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	line, _ := json.Marshal(map[string]string{"listen": ln.Addr().String(), "namespace": *ns})
	fmt.Println(string(line))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = hs.Shutdown(sctx)
		cancel()
	}
	if cerr := s.cleanup(); cerr != nil {
		log.Warn("floor: namespace not cleaned", "ns", *ns, "err", cerr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	caller := r.Header.Get("x-floor-client")
	pub, ok := s.keys[caller]
	issuedAt, err := strconv.ParseInt(r.Header.Get("x-floor-issued-at"), 10, 64)
	if !ok || err != nil {
		s.refuse(w, http.StatusUnauthorized, "unknown client or no issued-at")
		return
	}
	sig, err := base64.RawURLEncoding.DecodeString(r.Header.Get("x-floor-signature"))
	if err != nil || len(sig) != ed25519.SignatureSize {
		s.refuse(w, http.StatusUnauthorized, "bad signature encoding")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBytes))
	if err != nil {
		s.refuse(w, http.StatusRequestEntityTooLarge, "body")
		return
	}
	var hb heartbeat
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hb); err != nil || hb.RunnerID != caller {
		s.refuse(w, http.StatusBadRequest, "body does not decode or names another client")
		return
	}
	if !ed25519.Verify(pub, canonical(caller, issuedAt, body), sig) {
		s.refuse(w, http.StatusUnauthorized, "signature")
		return
	}
	n, err := s.touch.Exec(r.Context(), s.vk, []string{s.ns + ":" + caller}, []string{strconv.FormatInt(issuedAt, 10)}).AsInt64()
	if err != nil {
		s.log.Warn("floor: touch", "err", err)
		s.refuse(w, http.StatusServiceUnavailable, "store")
		return
	}
	s.served.Add(1)
	s.answer(w, n)
}

// answer writes {"ok":true,"n":n}, padded with a "pad" field of x's to
// len(s.pad) bytes when that is longer.
func (s *server) answer(w http.ResponseWriter, n int64) {
	head := fmt.Appendf(nil, `{"ok":true,"n":%d`, n)
	const padOpen, tail = `,"pad":"`, `"}`
	fill := len(s.pad) - len(head) - len(padOpen) - len(tail)
	w.Header().Set("content-type", "application/json")
	if fill <= 0 {
		w.Header().Set("content-length", strconv.Itoa(len(head)+1))
		_, _ = w.Write(append(head, '}'))
		return
	}
	w.Header().Set("content-length", strconv.Itoa(len(s.pad)))
	_, _ = w.Write(append(head, padOpen...))
	_, _ = w.Write(s.pad[:fill])
	_, _ = w.Write([]byte(tail))
}

func (s *server) refuse(w http.ResponseWriter, status int, why string) {
	s.refused.Add(1)
	http.Error(w, why, status)
}

// cleanup deletes the namespace's keys: one per client id.
func (s *server) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ids := make([]string, 0, len(s.keys))
	for id := range s.keys {
		ids = append(ids, s.ns+":"+id)
	}
	for chunk := range slices.Chunk(ids, 200) {
		if err := s.vk.Do(ctx, s.vk.B().Del().Key(chunk...).Build()).Error(); err != nil {
			return fmt.Errorf("del: %w", err)
		}
	}
	return nil
}

// ---- driver -----------------------------------------------------------------

type report struct {
	Clients      int     `json:"clients"`
	Rate         float64 `json:"rate"`
	Burst        int     `json:"burst"`
	BodyBytes    int     `json:"bodyBytes"`
	OwnConns     bool    `json:"ownConns"`
	DurationS    float64 `json:"durationS"`
	Sent         int64   `json:"sent"`
	OK           int64   `json:"ok"`
	AnswerBytes  int64   `json:"answerBytes"` // answer bodies read
	Failed       int64   `json:"failed"`
	AchievedRate float64 `json:"achievedRate"`
	P50Ms        float64 `json:"p50Ms"`
	P99Ms        float64 `json:"p99Ms"`
	CPUSeconds   float64 `json:"cpuSeconds"`
	FirstError   string  `json:"firstError,omitempty"`
}

func drive(args []string) error {
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	base := fs.String("url", "http://127.0.0.1:8080", "the floor server")
	clients := fs.Int("clients", 400, "keep-alive clients (each ticks on its own)")
	rate := fs.Float64("rate", 84, "requests a second over all clients")
	burst := fs.Int("burst", 2, "requests a tick sends back to back (a real-profile daemon's heartbeat then claim: 2)")
	dur := fs.Duration("duration", 30*time.Second, "how long to send")
	size := fs.Int("body", 1536, "body bytes (at least)")
	seed := fs.String("seed", "floor", "the key seed the server uses too")
	own := fs.Bool("own-conns", false, "one connection pool per client instead of loadgen's one shared pool")
	jsonOut := fs.String("json", "", "write the report here too")
	_ = fs.Parse(args)
	if *clients < 1 || *rate <= 0 || *burst < 1 {
		return errors.New("drive: -clients, -rate and -burst must be positive")
	}
	// loadgen's transport: one pool shared by every simulated party, idle
	// connections kept (internal/loadgen newClient), so the server sees the
	// connection pattern the relay saw.
	newTransport := func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = 1024
		tr.IdleConnTimeout = 4 * time.Second // loadgen's idleConnTimeout
		return tr
	}
	shared := &http.Client{Transport: newTransport(), Timeout: 10 * time.Second}
	period := max(time.Duration(float64(*clients**burst) / *rate * float64(time.Second)), time.Millisecond)
	rep := report{Clients: *clients, Rate: *rate, Burst: *burst, OwnConns: *own}
	var (
		mu       sync.Mutex
		lat      []time.Duration
		sent, ok atomic.Int64
		answered atomic.Int64
		firstErr atomic.Value
	)
	cpu0 := cpuSeconds()
	start := time.Now()
	deadline := start.Add(*dur)
	var wg sync.WaitGroup
	for i := range *clients {
		id, priv := clientKey(*seed, i)
		body := makeBody(id, *size)
		rep.BodyBytes = len(body)
		hc := shared
		if *own {
			hc = &http.Client{Transport: newTransport(), Timeout: 10 * time.Second}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A long-idle fleet (loadgen -idle-start): the first tick at a
			// random moment of the first period, then the period ×0.85–1.15,
			// counted from each tick's start so the rate holds.
			next := start.Add(rand.N(period)) //nolint:gosec // phase
			for next.Before(deadline) {
				time.Sleep(time.Until(next))
				tick := time.Now()
				for range *burst {
					sent.Add(1)
					t0 := time.Now()
					n, err := send(hc, *base, id, priv, body)
					if err != nil {
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					answered.Add(int64(n))
					d := time.Since(t0)
					ok.Add(1)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
				next = tick.Add(time.Duration(float64(period) * (0.85 + rand.Float64()*0.3))) //nolint:gosec // jitter
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	rep.DurationS = elapsed
	rep.Sent, rep.OK = sent.Load(), ok.Load()
	rep.Failed = rep.Sent - rep.OK
	rep.AnswerBytes = answered.Load()
	rep.AchievedRate = float64(rep.OK) / elapsed
	rep.CPUSeconds = cpuSeconds() - cpu0
	if e, isStr := firstErr.Load().(string); isStr {
		rep.FirstError = e
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		rep.P50Ms = float64(lat[len(lat)/2]) / 1e6
		rep.P99Ms = float64(lat[min(len(lat)-1, len(lat)*99/100)]) / 1e6
	}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	if *jsonOut != "" {
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *jsonOut, err)
		}
	}
	if rep.OK == 0 {
		return fmt.Errorf("drive: no request answered (%s)", rep.FirstError)
	}
	return nil
}

// send sends one signed request and answers the bytes of its answer body.
func send(hc *http.Client, base, id string, priv ed25519.PrivateKey, body []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/floor", bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	now := time.Now().UnixMilli()
	req.Header.Set("content-type", "application/json")
	req.Header.Set("accept", "application/json")
	req.Header.Set("x-floor-client", id)
	req.Header.Set("x-floor-issued-at", strconv.FormatInt(now, 10))
	req.Header.Set("x-floor-signature", base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, canonical(id, now, body))))
	res, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	defer res.Body.Close()
	msg, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d: %s", res.StatusCode, bytes.TrimSpace(msg))
	}
	return len(msg), nil
}

// cpuSeconds is this process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
