package loadgen

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/byollm/relay-go/internal/envelope"
	"github.com/byollm/relay-go/internal/protocol"
)

// site is one simulated site: its key set and what it has sealed.
type site struct {
	id    string
	keys  *envelope.Identity
	sig   signer
	mu    sync.Mutex
	begun map[string]bool // jobId+"\x00"+leaseId whose payload seal has started
}

// daemon is one simulated device.
type daemon struct {
	runnerID string
	owner    string
	keys     *envelope.Identity
	sig      signer
	// controlPlanePublic is the grant key the pairing handed over (Grants).
	controlPlanePublic ed25519.PublicKey
	mu                 sync.Mutex
	held               map[string]*holding // by job id
}

type holding struct {
	leaseID string
	cancel  func()
}

func (d *daemon) hold(jobID, leaseID string, cancel func()) {
	d.mu.Lock()
	d.held[jobID] = &holding{leaseID: leaseID, cancel: cancel}
	d.mu.Unlock()
}

func (d *daemon) drop(jobID, leaseID string) {
	d.mu.Lock()
	if h, ok := d.held[jobID]; ok && h.leaseID == leaseID {
		delete(d.held, jobID)
	}
	d.mu.Unlock()
}

// abort cancels the work held under exactly this grant; true if there was some.
func (d *daemon) abort(g protocol.GrantRef) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.held[g.JobID]
	if !ok || h.leaseID != g.LeaseID {
		return false
	}
	h.cancel()
	delete(d.held, g.JobID)
	return true
}

func (d *daemon) activeLeases() []protocol.GrantRef {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]protocol.GrantRef, 0, len(d.held))
	for id, h := range d.held {
		out = append(out, protocol.GrantRef{JobID: id, LeaseID: h.leaseID})
	}
	return out
}

// job is one unit of work and what happened to it. Timestamps are the first
// occurrence of each step.
type job struct {
	id         string
	site       *site
	owner      string
	plaintext  string // the payload the site will seal
	want       string // the result text the site expects back
	deadlineAt int64
	createdAt  int64
	done       chan struct{}

	mu        sync.Mutex
	enqStart  time.Time
	enqDone   time.Time
	claimed   time.Time
	sealed    time.Time
	fetched   time.Time
	resulted  time.Time
	collected time.Time
	leases    map[string]bool // every lease it was claimed under
	accepted  int             // results the relay answered accepted:true
	bad       bool            // an integrity failure was already counted
	cancelled bool            // the site cancelled it and the relay said so
	settled   bool            // collected, cancelled or failed: done is closed
}

func (j *job) stamp(at *time.Time, now time.Time) {
	j.mu.Lock()
	if at.IsZero() {
		*at = now
	}
	j.mu.Unlock()
}

// resultText is what a daemon answers for a prompt: a digest bound to the
// job, so a payload delivered to the wrong job, or altered on the way, shows
// up as a mismatch when the site opens the result.
func resultText(jobID, prompt string) string {
	sum := sha256.Sum256([]byte(jobID + "\n" + prompt))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// outcomePlaintext is a SealedOutcome exactly as the daemon renders an ok
// result (envelope.md §4.3), key order included.
func outcomePlaintext(text string) string {
	return `{"outcome":{"outcome":"ok","text":` + envelope.JSString(text) +
		`},"ran":{"model":"loadgen","backendClass":"http","durationMs":0,"stop":"end","stopReported":true}}`
}

// checkOutcome is the site's acceptance (openSealedOutcome) plus the
// load generator's own check of the text.
func checkOutcome(plaintext, disposition, want string) error {
	var o struct {
		Outcome struct {
			Outcome string `json:"outcome"`
			Text    string `json:"text"`
		} `json:"outcome"`
		Ran struct {
			Model        string `json:"model"`
			BackendClass string `json:"backendClass"`
		} `json:"ran"`
	}
	if err := json.Unmarshal([]byte(plaintext), &o); err != nil {
		return fmt.Errorf("result plaintext is not a SealedOutcome: %w", err)
	}
	if o.Outcome.Outcome != disposition {
		return fmt.Errorf("disposition %q but sealed outcome %q", disposition, o.Outcome.Outcome)
	}
	if o.Outcome.Text != want {
		return fmt.Errorf("result text %q, want %q", o.Outcome.Text, want)
	}
	return nil
}

// promptOf reads the prompt back out of an opened llm.generate payload.
func promptOf(plaintext string) (string, error) {
	var p struct {
		Prompt *string `json:"prompt"`
	}
	if err := json.Unmarshal([]byte(plaintext), &p); err != nil || p.Prompt == nil {
		return "", fmt.Errorf("payload is not an llm.generate payload")
	}
	return *p.Prompt, nil
}

func newIdentity(now int64) (*envelope.Identity, error) {
	return envelope.Generate(now, rand.Reader)
}

// Wire bodies the simulated parties send and read.
type (
	claimRequest struct {
		ProtocolVersion string                `json:"protocolVersion"`
		RunnerID        string                `json:"runnerId"`
		Capabilities    []protocol.Capability `json:"capabilities"`
		Max             int                   `json:"max"`
	}
	claimedStub struct {
		protocol.JobStub
		Lease protocol.Lease  `json:"lease"`
		Grant json.RawMessage `json:"grant,omitempty"`
	}
	claimResponse struct {
		Jobs    []claimedStub `json:"jobs"`
		LeaseMs int64         `json:"leaseMs"`
	}
	grantRequest struct {
		ProtocolVersion string `json:"protocolVersion"`
		RunnerID        string `json:"runnerId"`
		JobID           string `json:"jobId"`
		LeaseID         string `json:"leaseId"`
	}
	fetchResponse struct {
		Envelope protocol.SealedEnvelope `json:"envelope"`
	}
	resultRequest struct {
		ProtocolVersion string                  `json:"protocolVersion"`
		RunnerID        string                  `json:"runnerId"`
		JobID           string                  `json:"jobId"`
		LeaseID         string                  `json:"leaseId"`
		Envelope        protocol.SealedEnvelope `json:"envelope"`
		Disposition     string                  `json:"disposition"`
	}
	resultResponse struct {
		Accepted  bool   `json:"accepted"`
		Duplicate bool   `json:"duplicate"`
		State     string `json:"state"`
	}
	heartbeatRequest struct {
		ProtocolVersion string                `json:"protocolVersion"`
		RunnerID        string                `json:"runnerId"`
		DaemonVersion   string                `json:"daemonVersion"`
		Capabilities    []protocol.Capability `json:"capabilities"`
		ActiveLeases    []protocol.GrantRef   `json:"activeLeases"`
	}
	heartbeatResponse struct {
		Sites  map[string]protocol.PublicIdentity `json:"sites"`
		Cancel []protocol.GrantRef                `json:"cancel"`
		Lost   []protocol.GrantRef                `json:"lost"`
	}
	releaseRequest struct {
		ProtocolVersion string              `json:"protocolVersion"`
		RunnerID        string              `json:"runnerId"`
		Leases          []protocol.GrantRef `json:"leases"`
		Reason          string              `json:"reason"`
	}
	enqueueRequest struct {
		ProtocolVersion string           `json:"protocolVersion"`
		SiteID          string           `json:"siteId"`
		Stub            protocol.JobStub `json:"stub"`
	}
	cancelRequest struct {
		ProtocolVersion string `json:"protocolVersion"`
		SiteID          string `json:"siteId"`
		JobID           string `json:"jobId"`
	}
	payloadRequest struct {
		ProtocolVersion string                  `json:"protocolVersion"`
		SiteID          string                  `json:"siteId"`
		JobID           string                  `json:"jobId"`
		Envelope        protocol.SealedEnvelope `json:"envelope"`
	}
	pendingResponse struct {
		Jobs []struct {
			JobID    string                  `json:"jobId"`
			Device   protocol.PublicIdentity `json:"device"`
			RunnerID string                  `json:"runnerId"`
			LeaseID  string                  `json:"leaseId"`
		} `json:"jobs"`
	}
	// resultEntry is a results entry the site has not collected yet (the
	// others are only scanned for their jobId: scanResults).
	resultEntry struct {
		JobID       string                  `json:"jobId"`
		Envelope    protocol.SealedEnvelope `json:"envelope"`
		Disposition string                  `json:"disposition"`
		RunnerID    string                  `json:"runnerId"`
		Device      protocol.PublicIdentity `json:"device"`
		RunnerOwner string                  `json:"runnerOwner"`
	}
	pairRequest struct {
		ProtocolVersion string                  `json:"protocolVersion"`
		Owner           string                  `json:"owner"`
		Device          protocol.PublicIdentity `json:"device"`
	}
	pairResponse struct {
		RunnerID           string                             `json:"runnerId"`
		Sites              map[string]protocol.PublicIdentity `json:"sites"`
		ControlPlanePublic string                             `json:"controlPlanePublic"`
	}
)

// capabilities is what every simulated daemon offers.
var capabilities = []protocol.Capability{{
	Kind: protocol.KindGenerate, Service: "loadgen", BackendID: "ollama", BackendClass: "http",
	Model: "loadgen", OfferScope: "private",
}}

// teamCapabilities is the same offer made to the device owner's team (the
// widening scope a teammate's grant needs).
var teamCapabilities = func() []protocol.Capability {
	c := append([]protocol.Capability(nil), capabilities...)
	for i := range c {
		c[i].OfferScope = "team"
	}
	return c
}()

// Projection records, in the RelayFixture shape.
type (
	fixtureSite struct {
		SiteID string                  `json:"siteId"`
		Site   protocol.PublicIdentity `json:"site"`
	}
	fixtureConsent struct {
		Owner  string `json:"owner"`
		SiteID string `json:"siteId"`
	}
	fixtureDevice struct {
		Owner    string                  `json:"owner"`
		RunnerID string                  `json:"runnerId"`
		Device   protocol.PublicIdentity `json:"device"`
	}
	fixtureRoster struct {
		ID      string   `json:"id"`
		Owner   string   `json:"owner"`
		Members []string `json:"members"`
	}
	fixture struct {
		Sites    []fixtureSite    `json:"sites"`
		Consents []fixtureConsent `json:"consents"`
		Devices  []fixtureDevice  `json:"devices"`
		Rosters  []fixtureRoster  `json:"rosters,omitempty"`
	}
)
