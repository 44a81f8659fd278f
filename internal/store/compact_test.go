package store

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// blobOf is a JSON envelope of exactly n bytes.
func blobOf(n int) json.RawMessage {
	head, tail := `{"ciphertext":"`, `"}`
	return json.RawMessage(head + strings.Repeat("B", n-len(head)-len(tail)) + tail)
}

// Blobs of every size class come back byte for byte through every read
// (claim, take, Job, Finished, ResultJobs): whole (at most 64 bytes, or over
// 4 KiB), and sliced (65 bytes up to 4 KiB, a chunk boundary included). A
// record of a queued job with a sliced stub stays in Valkey's compact hash
// encoding.
func TestBlobsRoundTripEverySize(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		for i, n := range []int{40, 64, 65, 128, 129, 1349, 4096, 4097, 20000} {
			id := "blob-" + strings.Repeat("x", i)
			st := stub(id, "alice")
			h.enqueueStub(site, st)
			if b.name == "valkey" && n == 1349 {
				enc, err := b.client.Do(h.ctx, b.client.B().ObjectEncoding().Key(h.s.k.job(site, id)).Build()).ToString()
				if err != nil || enc != "listpack" {
					t.Fatalf("queued record encoding %q (%v), want listpack", enc, err)
				}
			}
			g := h.claim(maxJobs(1))
			if len(g) != 1 || stubID(g[0]) != id {
				t.Fatalf("size %d: claim %v", n, ids(g))
			}
			want, _ := protocol.Marshal(st)
			if string(g[0].Stub) != string(want) {
				t.Fatalf("size %d: stub %s, want %s", n, g[0].Stub, want)
			}
			payload, result := blobOf(n), blobOf(n+1)
			if r, err := h.s.Seal(h.ctx, site, id, payload); err != nil || r.State != StateReady {
				t.Fatalf("size %d: seal %+v %v", n, r, err)
			}
			if r := h.take(id, "runner_1", g[0].Lease.ID); string(r.Envelope) != string(payload) {
				t.Fatalf("size %d: take %d bytes, want %d", n, len(r.Envelope), len(payload))
			}
			if r, err := h.s.Complete(h.ctx, CompleteInput{JobID: id, RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
				t.Fatalf("size %d: complete %+v %v", n, r, err)
			}
			j := h.job(site, id)
			if string(j.Payload) != string(payload) || string(j.Result) != string(result) || string(j.Stub) != string(want) || j.ClaimedBy == nil {
				t.Fatalf("size %d: job read back wrong: %+v", n, j)
			}
			rs, err := h.s.ResultJobs(h.ctx, site)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, r := range rs {
				if r.JobID == id {
					found = string(r.Result) == string(result) && r.Claimed
				}
			}
			if !found {
				t.Fatalf("size %d: result not read back", n)
			}
		}
	})
}

// blobField: field f of a job record holds part of blob name, in any form
// a layout wrote (whole; v3's name#, name.N; v4's numbered fields).
func blobField(f, name string) bool {
	base := map[string]int{"stub": 100, "cd": 200, "pl": 300, "rs": 400}[name]
	if n, err := strconv.Atoi(f); err == nil {
		return n >= base && n < base+100
	}
	return f == name || f == name+"#" || strings.HasPrefix(f, name+".")
}
