package relay

import (
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/store"
)

// One results answer carries at most the cap (at least one result), and
// since results stay until their deadline and are read again and again,
// every one of them reaches the site over a few reads: none is starved by
// those ahead of it in store order.
func TestResultsAnswerCapped(t *testing.T) {
	var jobs []*store.ResultJob
	for i := range 40 {
		jobs = append(jobs, &store.ResultJob{JobID: "job-" + strconv.Itoa(i), Result: []byte(`{"ciphertext":"` + strings.Repeat("A", 100_000) + `"}`)})
	}
	const limit = 1 << 20
	seen := map[string]bool{}
	for range 200 {
		got, size := capResults(jobs, limit)
		if len(got) == 0 || size > limit {
			t.Fatalf("%d results, %d bytes; want at least one and at most %d", len(got), size, limit)
		}
		last := -1
		for _, j := range got {
			i, _ := strconv.Atoi(strings.TrimPrefix(j.JobID, "job-"))
			if i <= last {
				t.Fatalf("answer out of store order: %s after job-%d", j.JobID, last)
			}
			last = i
			seen[j.JobID] = true
		}
	}
	if len(seen) != len(jobs) {
		t.Fatalf("over 200 reads only %d of %d results were delivered", len(seen), len(jobs))
	}
	// Under the cap: every result, as the wire says.
	if got, _ := capResults(jobs[:5], limit); len(got) != 5 {
		t.Fatalf("under the cap: %d of 5", len(got))
	}
	// One result larger than the cap still goes out, alone.
	huge := []*store.ResultJob{{JobID: "big", Result: make([]byte, 2*limit)}, {JobID: "small"}}
	if got, _ := capResults(huge, limit); len(got) != 1 {
		t.Fatalf("an over-cap result: %d results, want 1", len(got))
	}
}
