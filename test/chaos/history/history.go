// Package history keeps the operations of a load run (internal/loadgen's
// History) and checks them afterwards against what the relay promises
// whatever fails around it: no job held under two live leases at once, no
// result accepted twice, every enqueued job accounted for, no result
// delivered for the wrong job.
package history

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/byollm/relay-go/internal/loadgen"
)

// Log is a loadgen.History that keeps every operation in memory.
type Log struct {
	mu  sync.Mutex
	ops []loadgen.Op
}

// Record implements loadgen.History.
func (l *Log) Record(op loadgen.Op) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

// Ops returns a copy of what was recorded so far.
func (l *Log) Ops() []loadgen.Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// Enqueued is how many enqueues were accepted so far.
func (l *Log) Enqueued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, op := range l.ops {
		if op.Kind == loadgen.OpEnqueue && op.Outcome == loadgen.OutcomeOK {
			n++
		}
	}
	return n
}

// Rules a history can break.
const (
	RuleTwoLiveLeases  = "two-live-leases"  // a job granted again while an earlier lease was live
	RuleAcceptedTwice  = "accepted-twice"   // two results of one job answered accepted:true
	RuleUnaccounted    = "unaccounted"      // enqueued, then neither done, cancelled, expired nor in the store
	RuleWrongResult    = "wrong-result"     // a site collected a result that is not its job's answer
	RuleGrantAfterDone = "grant-after-done" // a job granted after one of its results was accepted
)

// Violation is one broken rule.
type Violation struct {
	Rule   string
	JobID  string
	Detail string
}

func (v Violation) String() string { return v.Rule + " " + v.JobID + ": " + v.Detail }

// Summary is the accounting of a history and what it broke.
type Summary struct {
	Ops        int
	Enqueued   int // enqueues answered ok
	Done       int // of Enqueued: a result collected by the site
	Cancelled  int // of Enqueued: cancelled by the site, not collected
	Expired    int // of Enqueued: deadline passed before the end, neither collected nor cancelled
	InStore    int // of Enqueued: none of the above, and still in the store at the end
	Grants     int
	Regranted  int // jobs granted more than once (after an expiry, a release or a lost answer)
	Accepted   int // results answered accepted:true
	Violations []Violation
}

// Options tune the check.
type Options struct {
	// End is when the run ended: a job whose deadline is before End may
	// have been dropped by the relay's sweep.
	End time.Time
	// Margin is how far before its expiry a lease must have been granted
	// again to count as two live leases; it absorbs the rounding of the
	// relay clock to milliseconds and the local clock reading it stands in
	// for when a grant carries no leaseMs. Default 250 ms.
	Margin time.Duration
}

type jobOps struct {
	enqueued  bool
	deadline  int64
	grants    []loadgen.Op
	ends      []loadgen.Op // releases and results of any outcome: each may have ended a lease
	accepted  []loadgen.Op
	collected bool
	cancelled bool
	final     string // state in the store after the run, "" if not recorded
}

// Check judges a whole history. It is conservative: an operation whose
// outcome is unknown (no answer) is assumed to have happened if that
// excuses the relay, so only what the relay certainly did is held against
// it.
func Check(ops []loadgen.Op, opt Options) Summary {
	if opt.Margin == 0 {
		opt.Margin = 250 * time.Millisecond
	}
	sum := Summary{Ops: len(ops)}
	jobs := map[string]*jobOps{}
	var order []string
	get := func(id string) *jobOps {
		j := jobs[id]
		if j == nil {
			j = &jobOps{}
			jobs[id] = j
			order = append(order, id)
		}
		return j
	}
	for _, op := range ops {
		j := get(op.JobID)
		switch op.Kind {
		case loadgen.OpEnqueue:
			if op.Outcome == loadgen.OutcomeOK {
				j.enqueued = true
				j.deadline = op.DeadlineAt
			}
		case loadgen.OpCancel:
			if op.Outcome == loadgen.OutcomeOK {
				j.cancelled = true
			}
		case loadgen.OpGrant:
			j.grants = append(j.grants, op)
			sum.Grants++
		case loadgen.OpRelease:
			j.ends = append(j.ends, op)
		case loadgen.OpResult:
			j.ends = append(j.ends, op)
			if op.Outcome == loadgen.OutcomeAccepted {
				j.accepted = append(j.accepted, op)
				sum.Accepted++
			}
		case loadgen.OpCollect:
			if op.Outcome == loadgen.OutcomeOK {
				j.collected = true
			} else {
				sum.Violations = append(sum.Violations, Violation{RuleWrongResult, op.JobID,
					fmt.Sprintf("site %s collected a result from runner %s that does not belong to the job: %s", op.Site, op.Runner, op.Detail)})
			}
		case loadgen.OpFinal:
			j.final = op.Outcome
		}
	}
	for _, id := range order {
		j := jobs[id]
		sum.Violations = append(sum.Violations, leaseViolations(id, j, opt.Margin)...)
		if len(j.grants) > 1 {
			sum.Regranted++
		}
		if len(j.accepted) > 1 {
			a, b := j.accepted[0], j.accepted[1]
			sum.Violations = append(sum.Violations, Violation{RuleAcceptedTwice, id,
				fmt.Sprintf("%d results accepted: lease %s by %s at %s, lease %s by %s at %s", len(j.accepted),
					a.LeaseID, a.Runner, stamp(a.End), b.LeaseID, b.Runner, stamp(b.End))})
		}
		if !j.enqueued {
			continue
		}
		sum.Enqueued++
		switch {
		case j.collected:
			sum.Done++
		case j.cancelled:
			sum.Cancelled++
		case j.deadline > 0 && !opt.End.IsZero() && j.deadline <= opt.End.UnixMilli():
			sum.Expired++
		case j.final != "" && j.final != loadgen.OutcomeAbsent:
			sum.InStore++
		default:
			state := j.final
			if state == "" {
				state = "not looked up"
			}
			sum.Violations = append(sum.Violations, Violation{RuleUnaccounted, id,
				fmt.Sprintf("enqueued (deadline %s), %d grants, %d accepted results, never collected or cancelled; in the store at the end: %s",
					stamp(time.UnixMilli(j.deadline)), len(j.grants), len(j.accepted), state)})
		}
	}
	return sum
}

// leaseViolations compares every grant of one job with every later one.
// Grant a is live from its grant until its expiry (the relay's clock,
// from the claim reply; a renewal only pushes it later), or until a
// release or result under it that may have reached the relay first. A
// later grant b inside that window is a violation; so is any grant after
// an accepted result, since a done job is never offered again.
func leaseViolations(id string, j *jobOps, margin time.Duration) []Violation {
	var out []Violation
	grants := slices.Clone(j.grants)
	sort.SliceStable(grants, func(x, y int) bool { return grantedAt(grants[x]) < grantedAt(grants[y]) })
	for bi, b := range grants {
		gb := grantedAt(b)
		for _, acc := range j.accepted {
			// acc answered before b's claim was even sent: the job was done.
			if acc.End.Before(b.Start) {
				out = append(out, Violation{RuleGrantAfterDone, id,
					fmt.Sprintf("granted to %s (lease %s) at %s after the result under lease %s was accepted at %s",
						b.Runner, b.LeaseID, stamp(time.UnixMilli(gb)), acc.LeaseID, stamp(acc.End))})
				break
			}
		}
		for _, a := range grants[:bi] {
			if a.LeaseID == b.LeaseID {
				continue // the same grant recorded twice is not two leases
			}
			if gb >= a.LeaseExpiresAt-margin.Milliseconds() {
				continue // a had expired (or nearly) when b was granted
			}
			if endedBefore(j.ends, a, b) {
				continue
			}
			out = append(out, Violation{RuleTwoLiveLeases, id,
				fmt.Sprintf("granted to %s (lease %s) at %s while lease %s of %s was live until %s and neither released nor completed",
					b.Runner, b.LeaseID, stamp(time.UnixMilli(gb)), a.LeaseID, a.Runner, stamp(time.UnixMilli(a.LeaseExpiresAt)))})
		}
	}
	return out
}

// grantedAt is when the relay made the grant, in Unix ms: exactly
// expiry−leaseMs on the relay's clock when the reply says leaseMs, else
// the local time the claim was answered (the latest it can have happened,
// so the check errs towards no violation).
func grantedAt(g loadgen.Op) int64 {
	if g.LeaseMs > 0 {
		return g.LeaseExpiresAt - g.LeaseMs
	}
	return g.End.UnixMilli()
}

// endedBefore reports whether a release or result under a's lease was sent
// before b's claim was answered, so it may have ended a first.
func endedBefore(ends []loadgen.Op, a, b loadgen.Op) bool {
	for _, e := range ends {
		if e.LeaseID == a.LeaseID && e.Runner == a.Runner && e.Start.Before(b.End) {
			return true
		}
	}
	return false
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }
