package history

import (
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/loadgen"
)

// A planted history: one job's life written by hand, on a clock starting at
// t0, with leases of leaseMs as the relay grants them.
const leaseMs = 5000

var t0 = time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)

func at(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func enqueue(job string, ms int64) loadgen.Op {
	return loadgen.Op{Kind: loadgen.OpEnqueue, Start: at(ms), End: at(ms + 3), JobID: job, Site: "site-0",
		DeadlineAt: at(ms + 90_000).UnixMilli(), Status: 200, Outcome: loadgen.OutcomeOK}
}

// grant is a claim sent at ms, granted by the relay 2 ms later, answered at
// ms+4.
func grant(job, runner, lease string, ms int64) loadgen.Op {
	return loadgen.Op{Kind: loadgen.OpGrant, Start: at(ms), End: at(ms + 4), JobID: job, Runner: runner, LeaseID: lease,
		LeaseExpiresAt: at(ms + 2 + leaseMs).UnixMilli(), LeaseMs: leaseMs, Status: 200, Outcome: loadgen.OutcomeOK}
}

func result(job, runner, lease string, ms int64, outcome string) loadgen.Op {
	return loadgen.Op{Kind: loadgen.OpResult, Start: at(ms), End: at(ms + 3), JobID: job, Runner: runner, LeaseID: lease, Status: 200, Outcome: outcome}
}

func release(job, runner, lease string, ms int64, outcome string) loadgen.Op {
	return loadgen.Op{Kind: loadgen.OpRelease, Start: at(ms), End: at(ms + 3), JobID: job, Runner: runner, LeaseID: lease, Status: 200, Outcome: outcome}
}

func collect(job, runner string, ms int64, outcome, detail string) loadgen.Op {
	return loadgen.Op{Kind: loadgen.OpCollect, Start: at(ms), End: at(ms), JobID: job, Site: "site-0", Runner: runner, Status: 200, Outcome: outcome, Detail: detail}
}

func final(job, state string) loadgen.Op {
	return loadgen.Op{Kind: loadgen.OpFinal, JobID: job, Outcome: state}
}

// clean is a run in which everything that may legitimately happen under
// faults happens: a lease that expired and was granted to another runner,
// a lease released and taken again at once, a duplicate result, a cancelled
// job, one still queued at the end, one past its deadline, and an enqueue
// with no answer that never shows up again.
func clean() []loadgen.Op {
	return []loadgen.Op{
		// j1: straight through.
		enqueue("j1", 0), grant("j1", "r1", "l1", 10), result("j1", "r1", "l1", 200, loadgen.OutcomeAccepted),
		result("j1", "r1", "l1", 210, loadgen.OutcomeDuplicate), collect("j1", "r1", 300, loadgen.OutcomeOK, ""), final("j1", "done"),
		// j2: r1's lease runs out (its replica died), r2 is granted after the expiry.
		enqueue("j2", 0), grant("j2", "r1", "l2a", 20), grant("j2", "r2", "l2b", 20+leaseMs+50),
		result("j2", "r2", "l2b", 20+leaseMs+400, loadgen.OutcomeAccepted), collect("j2", "r2", 20+leaseMs+500, loadgen.OutcomeOK, ""),
		// j3: r1 releases (no answer: the replica was killed), r2's claim
		// sent just before the release still may follow it.
		enqueue("j3", 0), grant("j3", "r1", "l3a", 30), release("j3", "r1", "l3a", 100, loadgen.OutcomeUnknown),
		grant("j3", "r2", "l3b", 99), result("j3", "r2", "l3b", 300, loadgen.OutcomeAccepted), collect("j3", "r2", 400, loadgen.OutcomeOK, ""),
		// j4: cancelled; j5: still queued; j6: past its deadline at the end.
		enqueue("j4", 0), {Kind: loadgen.OpCancel, Start: at(50), End: at(52), JobID: "j4", Site: "site-0", Status: 200, Outcome: loadgen.OutcomeOK}, final("j4", "queued"),
		enqueue("j5", 0), final("j5", "queued"),
		{Kind: loadgen.OpEnqueue, Start: at(0), End: at(3), JobID: "j6", DeadlineAt: at(1000).UnixMilli(), Status: 200, Outcome: loadgen.OutcomeOK}, final("j6", loadgen.OutcomeAbsent),
		// j7: the enqueue got no answer; the job never appears.
		{Kind: loadgen.OpEnqueue, Start: at(0), End: at(20_000), JobID: "j7", Outcome: loadgen.OutcomeUnknown}, final("j7", loadgen.OutcomeAbsent),
	}
}

func check(ops []loadgen.Op) Summary {
	return Check(ops, Options{End: at(60_000)})
}

func TestCleanHistoryPasses(t *testing.T) {
	sum := check(clean())
	if len(sum.Violations) != 0 {
		t.Fatalf("violations in a clean history: %v", sum.Violations)
	}
	want := Summary{Ops: len(clean()), Enqueued: 6, Done: 3, Cancelled: 1, Expired: 1, InStore: 1, Grants: 5, Regranted: 2, Accepted: 3}
	if sum.Enqueued != want.Enqueued || sum.Done != want.Done || sum.Cancelled != want.Cancelled || sum.Expired != want.Expired ||
		sum.InStore != want.InStore || sum.Grants != want.Grants || sum.Regranted != want.Regranted || sum.Accepted != want.Accepted || sum.Ops != want.Ops {
		t.Fatalf("summary %+v, want %+v", sum, want)
	}
}

// Each planted fault must be found, exactly once, with the right rule and
// job, on top of the clean history.
func TestPlantedFaultsAreFound(t *testing.T) {
	cases := []struct {
		name  string
		plant []loadgen.Op
		rule  string
		job   string
		says  string
	}{
		{
			name:  "two runners under live leases",
			plant: []loadgen.Op{enqueue("x", 0), grant("x", "r1", "la", 10), grant("x", "r2", "lb", 2000), final("x", "running")},
			rule:  RuleTwoLiveLeases, job: "x", says: "lease la of r1",
		},
		{
			// The release was sent only after the second grant was answered:
			// it cannot excuse it.
			name: "release after the second grant",
			plant: []loadgen.Op{enqueue("x", 0), grant("x", "r1", "la", 10), grant("x", "r2", "lb", 2000),
				release("x", "r1", "la", 2100, loadgen.OutcomeOK), final("x", "running")},
			rule: RuleTwoLiveLeases, job: "x", says: "granted to r2",
		},
		{
			name: "second grant just inside the margin is not flagged, well inside is",
			plant: []loadgen.Op{enqueue("x", 0), grant("x", "r1", "la", 10), grant("x", "r2", "lb", 10+leaseMs-100),
				grant("x", "r3", "lc", 10+leaseMs-100+leaseMs-1000), final("x", "running")},
			rule: RuleTwoLiveLeases, job: "x", says: "granted to r3",
		},
		{
			name: "result accepted twice",
			plant: []loadgen.Op{enqueue("x", 0), grant("x", "r1", "la", 10), grant("x", "r2", "lb", 10+leaseMs+10),
				result("x", "r1", "la", 10+leaseMs+20, loadgen.OutcomeAccepted), result("x", "r2", "lb", 10+leaseMs+30, loadgen.OutcomeAccepted),
				collect("x", "r1", 10+leaseMs+100, loadgen.OutcomeOK, "")},
			rule: RuleAcceptedTwice, job: "x", says: "2 results accepted",
		},
		{
			name:  "enqueued, never accounted for",
			plant: []loadgen.Op{enqueue("x", 0), grant("x", "r1", "la", 10), final("x", loadgen.OutcomeAbsent)},
			rule:  RuleUnaccounted, job: "x", says: "absent",
		},
		{
			name:  "enqueued, final state never looked up",
			plant: []loadgen.Op{enqueue("x", 0)},
			rule:  RuleUnaccounted, job: "x", says: "not looked up",
		},
		{
			name: "result for the wrong job",
			plant: []loadgen.Op{enqueue("x", 0), grant("x", "r1", "la", 10), result("x", "r1", "la", 100, loadgen.OutcomeAccepted),
				collect("x", "r1", 200, loadgen.OutcomeMismatch, `result text "sha256:aa", want "sha256:bb"`), final("x", "done")},
			rule: RuleWrongResult, job: "x", says: "sha256:aa",
		},
		{
			name: "granted again after the result was accepted",
			plant: []loadgen.Op{enqueue("x", 0), grant("x", "r1", "la", 10), result("x", "r1", "la", 100, loadgen.OutcomeAccepted),
				grant("x", "r2", "lb", 10+leaseMs+100), collect("x", "r1", 10+leaseMs+200, loadgen.OutcomeOK, "")},
			rule: RuleGrantAfterDone, job: "x", says: "after the result under lease la",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sum := check(append(clean(), c.plant...))
			if len(sum.Violations) != 1 {
				t.Fatalf("got %d violations, want 1 (%s): %v", len(sum.Violations), c.rule, sum.Violations)
			}
			v := sum.Violations[0]
			if v.Rule != c.rule || v.JobID != c.job || !strings.Contains(v.Detail, c.says) {
				t.Fatalf("violation %v, want rule %s on %s saying %q", v, c.rule, c.job, c.says)
			}
		})
	}
}

// Grants without leaseMs (an older reply shape) fall back to the local
// clock, taking the answer time so the check errs towards no violation.
func TestGrantWithoutLeaseMsUsesAnswerTime(t *testing.T) {
	a := grant("x", "r1", "la", 10)
	b := grant("x", "r2", "lb", 10+leaseMs-10) // answered at +4: inside the margin
	a.LeaseMs, b.LeaseMs = 0, 0
	if sum := check([]loadgen.Op{enqueue("x", 0), a, b, final("x", "running")}); len(sum.Violations) != 0 {
		t.Fatalf("violations %v, want none", sum.Violations)
	}
	b = grant("x", "r2", "lb", 1000)
	b.LeaseMs = 0
	if sum := check([]loadgen.Op{enqueue("x", 0), a, b, final("x", "running")}); len(sum.Violations) != 1 || sum.Violations[0].Rule != RuleTwoLiveLeases {
		t.Fatalf("violations %v, want one %s", sum.Violations, RuleTwoLiveLeases)
	}
}

func TestLogKeepsEveryRecord(t *testing.T) {
	var l Log
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			for range 100 {
				l.Record(loadgen.Op{Kind: loadgen.OpGrant, JobID: string(rune('a' + i))})
			}
			done <- struct{}{}
		}()
	}
	for range 8 {
		<-done
	}
	if n := len(l.Ops()); n != 800 {
		t.Fatalf("%d ops recorded, want 800", n)
	}
}
