package loadgen

import (
	"strconv"
	"time"
)

// History receives one Op for every operation the simulated parties finish,
// with the relay's answer, so a checker can judge the whole run afterwards
// (test/chaos). Record is called from many goroutines at once.
type History interface {
	Record(Op)
}

// OpKind names what an Op did.
type OpKind string

// Operation kinds, in the order a job meets them.
const (
	OpEnqueue OpKind = "enqueue" // site published the stub
	OpCancel  OpKind = "cancel"  // site cancelled the job
	OpGrant   OpKind = "grant"   // one job of a claim reply: a lease for Runner
	OpSeal    OpKind = "seal"    // site posted the payload for a grant
	OpFetch   OpKind = "fetch"   // daemon fetched the payload under a lease
	OpResult  OpKind = "result"  // daemon posted the result under a lease
	OpRelease OpKind = "release" // daemon handed a lease back
	OpLost    OpKind = "lost"    // heartbeat reported the lease lost (swept or requeued)
	OpNotice  OpKind = "notice"  // heartbeat asked the holder to cancel (site cancelled)
	OpCollect OpKind = "collect" // site read the result and opened it
	OpFinal   OpKind = "final"   // the job's state in the store after the run (written by the test)
)

// Outcomes an Op may carry besides a refusal's error code.
const (
	OutcomeOK        = "ok"        // the relay did what was asked
	OutcomeAccepted  = "accepted"  // result: accepted:true
	OutcomeDuplicate = "duplicate" // result: duplicate under the same lease
	OutcomeUnknown   = "unknown"   // no answer (transport error after every retry): it may or may not have happened
	OutcomeMismatch  = "mismatch"  // collect: the result opened to something other than this job's answer
	OutcomeNotFound  = "not-found" // cancel: the relay does not know the job
	OutcomeAbsent    = "absent"    // final: the job is not in the store
)

// Op is one finished operation. Start is when the first attempt was sent,
// End when the answer that settled it arrived (retries included).
type Op struct {
	Kind   OpKind    `json:"kind"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	JobID  string    `json:"jobId,omitempty"`
	Site   string    `json:"site,omitempty"`
	Runner string    `json:"runner,omitempty"`
	// LeaseID, LeaseExpiresAt and LeaseMs come from the claim reply (relay
	// clock, Unix ms); LeaseExpiresAt−LeaseMs is when the relay granted.
	LeaseID        string `json:"leaseId,omitempty"`
	LeaseExpiresAt int64  `json:"leaseExpiresAt,omitempty"`
	LeaseMs        int64  `json:"leaseMs,omitempty"`
	DeadlineAt     int64  `json:"deadlineAt,omitempty"` // enqueue: the stub's deadline
	Status         int    `json:"status"`               // HTTP status of the settling answer, 0 if none
	// Outcome is one of the Outcome constants, the refusal's error code,
	// or for final the job's state; Detail says more when something is off.
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

// record hands op to the configured history, if any.
func (r *runner) record(op Op) {
	if r.cfg.History != nil {
		r.cfg.History.Record(op)
	}
}

// answerOutcome is the Outcome of a request that did not do what was
// asked. A 5xx is as good as no answer: the relay may have lost its store
// connection after the script ran.
func answerOutcome(res response, err error) string {
	if err != nil || res.status >= 500 {
		return OutcomeUnknown
	}
	if code := res.errorCode(); code != "" {
		return code
	}
	return "http-" + strconv.Itoa(res.status)
}

// FinalOps is one OpFinal per job the history enqueued, in the order first
// enqueued, with its state in state (job id -> state, read from the store
// after the run) or OutcomeAbsent when the store no longer has it: what a
// history checker needs to account for every job.
func FinalOps(ops []Op, state map[string]string, at time.Time) []Op {
	var out []Op
	seen := map[string]bool{}
	for _, op := range ops {
		if op.Kind != OpEnqueue || seen[op.JobID] {
			continue
		}
		seen[op.JobID] = true
		s, ok := state[op.JobID]
		if !ok {
			s = OutcomeAbsent
		}
		out = append(out, Op{Kind: OpFinal, Start: at, End: at, JobID: op.JobID, Site: op.Site, Outcome: s})
	}
	return out
}
