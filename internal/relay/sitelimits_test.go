package relay

import (
	"fmt"
	"sync"
	"testing"

	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// One site flooding the relay meets its limits (429 rate-limited, nothing
// stored) while another site enqueues and is served as usual; the limits
// come back as the flooding site's jobs end.
func TestSiteFloodLeavesOthersServed(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	const jobsA = 5
	// site_a's 4 KiB byte limit holds its five stubs but not a 4 KiB payload.
	st := newStore(t, c, store.Options{SiteLimits: store.SiteLimits{
		Default: store.SiteLimit{Jobs: 1000},
		Sites:   map[string]store.SiteLimit{"site_a": {Jobs: jobsA, Bytes: 4096}},
	}})
	e := newEnvOn(t, st)
	w := newWorld(t)
	w.install(e)

	jobsBusy := `{"error":"rate-limited","message":"this site has too many unfinished jobs at the relay — try again once some have finished"}`
	bytesBusy := `{"error":"rate-limited","message":"this site has too much stored at the relay — try again once some jobs have finished or passed their deadline"}`

	// site_a floods with 60 enqueues at once while site_b enqueues 20.
	var wg sync.WaitGroup
	var mu sync.Mutex
	statusA := map[int]int{}
	var failuresB []string
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub(fmt.Sprint("flood-", i), "alice", w.siteA)))
			mu.Lock()
			defer mu.Unlock()
			statusA[got.status]++
			if got.status == 429 && string(got.body) != jobsBusy {
				t.Errorf("flood refusal body: %s", got.body)
			}
		}()
	}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := e.sitePost(w.siteB, "site_b", "enqueue", enqueueJSON(t, "site_b", e.stub(fmt.Sprint("b-", i), "bob", w.siteB)))
			if got.status != 200 {
				mu.Lock()
				failuresB = append(failuresB, fmt.Sprint(got.status, " ", string(got.body)))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if statusA[200] != jobsA || statusA[429] != 60-jobsA || len(statusA) != 2 {
		t.Fatalf("site_a flood answers: %v, want %d accepted and the rest 429", statusA, jobsA)
	}
	if len(failuresB) > 0 {
		t.Fatalf("site_b refused during site_a's flood: %q", failuresB)
	}
	use, err := st.SiteUse(t.Context(), []string{"site_a", "site_b"})
	if err != nil || use["site_a"].LiveJobs != jobsA || use["site_b"].LiveJobs != 20 {
		t.Fatalf("use %+v %v", use, err)
	}

	// site_b is served: bob's device claims its jobs and site_b seals one.
	jobs := e.claim(t, w.bob, "runner_bob", 64)
	var bJob *claimedJob
	for i := range jobs {
		if jobs[i].Site == w.siteB.keyID() {
			bJob = &jobs[i]
			break
		}
	}
	if bJob == nil {
		t.Fatalf("bob claimed no site_b job: %+v", jobs)
	}
	expect(t, e.sitePost(w.siteB, "site_b", "payload", payloadJSON(t, "site_b", bJob.ID, envelope("payload"))), 200,
		`{"jobId":"`+bJob.ID+`","state":"ready"}`)

	// site_a: a payload past its byte limit is refused and the job keeps
	// waiting for it.
	aJobs := e.claim(t, w.alice, "runner_alice", 64)
	if len(aJobs) == 0 {
		t.Fatal("alice claimed no site_a job")
	}
	aJob := aJobs[0]
	big := envelope("payload")
	big.Ciphertext = randomHex(2048)
	expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", aJob.ID, big)), 429, bytesBusy)
	if j, _ := st.Job(t.Context(), "site_a", aJob.ID); j == nil || j.State != store.StateAwaitingPayload {
		t.Fatalf("after the refused payload: %+v", j)
	}

	// Cancelling frees a slot for one more enqueue, not two.
	expect(t, e.sitePost(w.siteA, "site_a", "cancel", cancelJSON(t, "site_a", aJob.ID)), 200, `{"cancelled":true}`)
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("after-cancel", "alice", w.siteA))), 200,
		`{"jobId":"after-cancel","state":"queued"}`)
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("one-too-many", "alice", w.siteA))), 429, jobsBusy)
	// A repeat of a stored job is answered as before, limit or not.
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("after-cancel", "alice", w.siteA))), 200,
		`{"jobId":"after-cancel","state":"queued"}`)
}
