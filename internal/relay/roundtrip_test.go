package relay

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/byollm/relay-go/internal/protocol"
)

// signedRequest is one signed request that can be sent again verbatim (a
// replay).
type signedRequest struct {
	method, path string
	header       http.Header
	body         []byte
}

func (e *env) daemonReq(k keys, runner, endpoint string, body []byte) signedRequest {
	return signedRequest{"POST", "/byollm/" + endpoint, signed(protocol.HeaderRunner, k, runner, endpoint, e.now(), body), body}
}

func (e *env) siteReq(k keys, site, endpoint string, body []byte) signedRequest {
	return signedRequest{"POST", "/relay/site/" + endpoint, signed(protocol.HeaderSite, k, site, "site/"+endpoint, e.now(), body), body}
}

func (e *env) send(r signedRequest) resp { return e.do(r.method, r.path, r.header, r.body) }

type claimedJob struct {
	protocol.JobStub
	Lease protocol.Lease `json:"lease"`
}

func (e *env) claim(t *testing.T, k keys, runner string, max int) []claimedJob {
	t.Helper()
	got := e.daemonPost(k, runner, "claim", claimJSON(t, runner, max))
	if got.status != 200 {
		t.Fatalf("claim: %d %s", got.status, got.body)
	}
	var out struct {
		Jobs    []claimedJob `json:"jobs"`
		LeaseMs int64        `json:"leaseMs"`
	}
	if err := json.Unmarshal(got.body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Jobs
}

func (e *env) jobState(t *testing.T, siteID, jobID string) string {
	t.Helper()
	j, err := e.st.Job(t.Context(), siteID, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if j == nil {
		return "absent"
	}
	return j.State
}

// TestRoundTrip drives enqueue → claim → pending → payload → fetch → result
// → results over HTTP and checks every body byte for byte, including both
// envelopes, which the relay must carry unchanged.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	stub := e.stub("job-1", "alice", w.siteA)
	stub.Purpose = "summarise"

	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", stub)), 200, `{"jobId":"job-1","state":"queued"}`)
	expect(t, e.siteGet(w.siteA, "site_a", "pending", "site_a"), 200, `{"jobs":[]}`)

	// Claim: the stub's own bytes (schema order) followed by the lease.
	got := e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 4))
	var claimed struct {
		Jobs []struct {
			Lease protocol.Lease `json:"lease"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(got.body, &claimed); err != nil || len(claimed.Jobs) != 1 {
		t.Fatalf("claim: %d %s", got.status, got.body)
	}
	lease := claimed.Jobs[0].Lease
	stubJSON := string(mustJSON(t, stub))
	wantClaim := `{"jobs":[` + stubJSON[:len(stubJSON)-1] + `,"lease":` + string(mustJSON(t, lease)) + `}],"leaseMs":60000}`
	expect(t, got, 200, wantClaim)
	// A lease id is opaque to peers: here a UUID with the job's site appended.
	minted, eS, _ := strings.Cut(lease.ID, ".")
	if _, err := uuid.Parse(minted); lease.RunnerID != "runner_alice" || err != nil || eS != base64.RawURLEncoding.EncodeToString([]byte("site_a")) {
		t.Fatalf("lease %+v", lease)
	}
	// The same device cannot take it twice; bob could not take it at all now.
	if jobs := e.claim(t, w.bob, "runner_bob", 4); len(jobs) != 0 {
		t.Fatalf("claimed twice: %+v", jobs)
	}

	// Pending names the claiming device for sealing.
	j, err := e.st.Job(t.Context(), "site_a", "job-1")
	if err != nil || j == nil || j.ClaimedBy == nil {
		t.Fatalf("job: %+v %v", j, err)
	}
	wantPending := `{"jobs":[{"jobId":"job-1","device":` + string(mustJSON(t, w.alice.id)) +
		`,"runnerId":"runner_alice","leaseId":"` + lease.ID + `","awaitingUntil":` + itoa(j.AwaitingUntil) +
		`,"leaseExpiresAt":` + itoa(lease.ExpiresAt) + `}]}`
	expect(t, e.siteGet(w.siteA, "site_a", "pending", "site_a"), 200, wantPending)

	fetch := fetchJSON(t, "runner_alice", "job-1", lease.ID)
	expect(t, e.daemonPost(w.alice, "runner_alice", "fetch", fetch), 409,
		`{"error":"not-ready","message":"the site has not sealed this job yet"}`)

	payload := envelope("payload")
	expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "job-1", payload)), 200, `{"jobId":"job-1","state":"ready"}`)
	wantFetch := `{"envelope":` + string(mustJSON(t, payload)) + `}`
	expect(t, e.daemonPost(w.alice, "runner_alice", "fetch", fetch), 200, wantFetch)
	expect(t, e.daemonPost(w.alice, "runner_alice", "fetch", fetch), 200, wantFetch) // running: same envelope
	if s := e.jobState(t, "site_a", "job-1"); s != "running" {
		t.Fatalf("state %s", s)
	}

	result := envelope("result")
	complete := e.daemonReq(w.alice, "runner_alice", "result", resultJSON(t, "runner_alice", "job-1", lease.ID, result))
	expect(t, e.send(complete), 200, `{"accepted":true,"state":"done"}`)
	// A replayed result is idempotent: duplicate, and the first result stays.
	expect(t, e.send(complete), 200, `{"accepted":false,"duplicate":true,"state":"done"}`)
	other := envelope("result")
	expect(t, e.daemonPost(w.alice, "runner_alice", "result", resultJSON(t, "runner_alice", "job-1", lease.ID, other)), 200,
		`{"accepted":false,"duplicate":true,"state":"done"}`)

	wantResults := `{"jobs":[{"jobId":"job-1","envelope":` + string(mustJSON(t, result)) + `,"disposition":"ok","runnerId":"runner_alice","leaseId":"` +
		lease.ID + `","device":` + string(mustJSON(t, w.alice.id)) + `,"runnerOwner":"alice"}]}`
	expect(t, e.siteGet(w.siteA, "site_a", "results", "site_a"), 200, wantResults)
	expect(t, e.siteGet(w.siteA, "site_a", "results", "site_a"), 200, wantResults) // never removed on delivery
	expect(t, e.siteGet(w.siteB, "site_b", "results", "site_b"), 200, `{"jobs":[]}`)

	expect(t, e.daemonPost(w.alice, "runner_alice", "fetch", fetch), 409, `{"error":"too-late","message":"this job has already finished"}`)
	expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "job-1", payload)), 409,
		`{"error":"too-late","message":"job is done, not awaiting payload"}`)
	// A replayed enqueue reports the current state and changes nothing.
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", stub)), 200, `{"jobId":"job-1","state":"done"}`)
}

func itoa(n int64) string { return string(mustJSONInt(n)) }

func mustJSONInt(n int64) []byte {
	b, _ := json.Marshal(n)
	return b
}
