package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// siteAuthed runs site auth, the schema and the body-site check (wire.md
// §5.8) for a POST endpoint, and returns the signer's site id.
func siteAuthed[T any](r *Relay, req *request, decode func(any) (T, error), siteOf func(T) string) (string, T, reply, bool) {
	var zero T
	siteID, refusal, ok := r.siteAuth(req)
	if !ok {
		return "", zero, refusal, false
	}
	in, err := decode(req.body)
	if err != nil {
		return "", zero, schemaFailed, false
	}
	if siteOf(in) != siteID {
		return "", zero, notYourSite, false
	}
	return siteID, in, reply{}, true
}

// siteQueryAuthed is the same for the reads, whose schema is {siteId} built
// from the query (default "").
func (r *Relay) siteQueryAuthed(req *request) (string, reply, bool) {
	siteID, refusal, ok := r.siteAuth(req)
	if !ok {
		return "", refusal, false
	}
	asked, _ := queryGet(req.query, "siteId")
	q, err := protocol.DecodeSiteQuery(asked)
	if err != nil {
		return "", schemaFailed, false
	}
	if q.SiteID != siteID {
		return "", notYourSite, false
	}
	return siteID, reply{}, true
}

// enqueue is wire.md §9.1; satisfiable is asked when an authority is configured.
func (r *Relay) enqueue(req *request) (reply, error) {
	siteID, in, refusal, ok := siteAuthed(r, req, protocol.DecodeEnqueueRequest,
		func(x protocol.EnqueueRequest) string { return x.SiteID })
	if !ok {
		return refusal, nil
	}
	stub := in.Stub
	if registered := req.proj.SiteFor(siteID); registered == nil || protocol.KeyID(registered.Site.Identity) != stub.Site {
		return stubNotYours, nil
	}
	if r.grants != nil {
		if refusal := r.satisfiable(req.ctx, siteID, stub); refusal != nil {
			return *refusal, nil
		}
	}
	job, err := r.store.Enqueue(req.ctx, store.EnqueueInput{ID: stub.ID, SiteID: siteID, Stub: stub})
	if errors.Is(err, store.ErrInvalidInput) {
		return stubNotAccepted, nil
	}
	var limited *store.SiteLimitError
	if errors.As(err, &limited) {
		r.work.SiteLimited(req.ctx, siteID, limited.Limit)
		return siteLimited(limited.Limit), nil
	}
	if err != nil {
		return reply{}, fmt.Errorf("enqueue: %w", err)
	}
	r.work.Enqueued(req.ctx, siteID)
	return ok200(newObj().val("jobId", job.ID).val("state", job.State)), nil
}

// payload is wire.md §9.2: size rule, then seal.
func (r *Relay) payload(req *request) (reply, error) {
	siteID, in, refusal, ok := siteAuthed(r, req, protocol.DecodePayloadRequest,
		func(x protocol.PayloadRequest) string { return x.SiteID })
	if !ok {
		return refusal, nil
	}
	env := in.Envelope
	if n := protocol.EnvelopeBytes(env); n > protocol.MaxEnvelopeBytes {
		return refused(protocol.EnvelopeTooLarge(n)), nil
	}
	jobID := in.JobID
	sealed, err := r.store.Seal(req.ctx, siteID, jobID, protocol.MustMarshal(env))
	if err != nil {
		return reply{}, fmt.Errorf("payload: %w", err)
	}
	switch sealed.Refused {
	case "":
		return ok200(newObj().val("jobId", jobID).val("state", sealed.State)), nil
	case store.RefusedNotFound:
		return unknownSiteJob, nil
	case store.RefusedSiteLimit:
		r.work.SiteLimited(req.ctx, siteID, sealed.Limit)
		return siteLimited(sealed.Limit), nil
	default:
		return refused(protocol.NotAwaitingPayload(sealed.Was)), nil
	}
}

// cancel is wire.md §9.3.
func (r *Relay) cancel(req *request) (reply, error) {
	siteID, in, refusal, ok := siteAuthed(r, req, protocol.DecodeCancelRequest,
		func(x protocol.CancelRequest) string { return x.SiteID })
	if !ok {
		return refusal, nil
	}
	cancelled, err := r.store.Cancel(req.ctx, siteID, in.JobID)
	if err != nil {
		return reply{}, fmt.Errorf("cancel: %w", err)
	}
	return ok200(newObj().val("cancelled", cancelled)), nil
}

// pending is wire.md §9.4: sweep, then the site's awaiting-payload jobs.
// The answer is written straight from the stored fields: the device JSON is
// copied as stored (see appendDevice).
func (r *Relay) pending(req *request) (reply, error) {
	siteID, refusal, ok := r.siteQueryAuthed(req)
	if !ok {
		return refusal, nil
	}
	if err := r.sweep(req.ctx); err != nil {
		return reply{}, fmt.Errorf("pending: sweep: %w", err)
	}
	jobs, err := r.store.PendingJobs(req.ctx, siteID)
	if err != nil {
		return reply{}, fmt.Errorf("pending: %w", err)
	}
	size := 16
	for _, j := range jobs {
		size += 160 + len(j.JobID) + len(j.Device) + len(j.RunnerID) + len(j.LeaseID)
	}
	b := make([]byte, 0, size)
	b = append(b, `{"jobs":[`...)
	for i, j := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"jobId":`...)
		b = protocol.AppendJSString(b, j.JobID)
		if j.Claimed {
			b = append(b, `,"device":`...)
			if b, err = appendDevice(b, j.Device); err != nil {
				return reply{}, fmt.Errorf("pending: %w", err)
			}
			b = append(b, `,"runnerId":`...)
			b = protocol.AppendJSString(b, j.RunnerID)
			b = append(b, `,"leaseId":`...)
			b = protocol.AppendJSString(b, j.LeaseID)
		}
		if j.AwaitingUntil != 0 {
			b = append(b, `,"awaitingUntil":`...)
			b = strconv.AppendInt(b, j.AwaitingUntil, 10)
		}
		if j.Claimed {
			b = append(b, `,"leaseExpiresAt":`...)
			b = strconv.AppendInt(b, j.LeaseExpiresAt, 10)
		}
		b = append(b, '}')
	}
	return reply{status: 200, body: append(b, "]}"...)}, nil
}

// results is wire.md §9.5: every done job with a result, never removed on
// delivery, no sweep. Envelopes and devices are copied as stored. One
// answer carries at most MaxResultsAnswerBytes (see capResults), and one
// site has at most MaxResultsInFlightPerSite of them in flight here.
func (r *Relay) results(req *request) (reply, error) {
	siteID, refusal, ok := r.siteQueryAuthed(req)
	if !ok {
		return refusal, nil
	}
	if !r.answers.take(siteID) {
		return resultsBusy, nil
	}
	if !onWritten(req.ctx, func() { r.answers.give(siteID) }) {
		defer r.answers.give(siteID)
	}
	jobs, err := r.store.ResultJobs(req.ctx, siteID)
	if err != nil {
		return reply{}, fmt.Errorf("results: %w", err)
	}
	jobs, size := capResults(jobs, MaxResultsAnswerBytes)
	b := answerBuffer(size)
	b = append(b, `{"jobs":[`...)
	for i, j := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		// A result is re-sent on every poll until its deadline, and the
		// store's cache hands the same job back each time: its entry is
		// encoded on the first poll only.
		entry := j.Encoded.Load()
		if entry == nil {
			e, err := resultEntry(j)
			if err != nil {
				return reply{}, fmt.Errorf("results: %w", err)
			}
			j.Encoded.Store(&e)
			entry = &e
		}
		b = append(b, *entry...)
	}
	b = append(b, "]}"...)
	recycleAfterWrite(req.ctx, b)
	return reply{status: 200, body: b}, nil
}

// resultEntry is j's entry of a results answer (wire.md §9.5).
func resultEntry(j *store.ResultJob) ([]byte, error) {
	b := make([]byte, 0, resultSize(j))
	b = append(b, `{"jobId":`...)
	b = protocol.AppendJSString(b, j.JobID)
	if len(j.Result) > 0 {
		b = append(b, `,"envelope":`...)
		b = append(b, j.Result...)
	}
	if j.Disposition != "" {
		b = append(b, `,"disposition":`...)
		b = protocol.AppendJSString(b, j.Disposition)
	}
	if j.Claimed {
		b = append(b, `,"runnerId":`...)
		b = protocol.AppendJSString(b, j.RunnerID)
		b = append(b, `,"leaseId":`...)
		b = protocol.AppendJSString(b, j.LeaseID)
		b = append(b, `,"device":`...)
		var err error
		if b, err = appendDevice(b, j.Device); err != nil {
			return nil, err
		}
		b = append(b, `,"runnerOwner":`...)
		b = protocol.AppendJSString(b, j.RunnerOwner)
	}
	return append(b, '}'), nil
}

// appendDevice appends a stored device identity as the answers show it: the
// PublicIdentity decoded and encoded again. The store holds the bytes
// protocol.Marshal wrote for that same struct, and those re-encode to
// themselves unless they hold a \u escape (a control character, or a lone
// surrogate that decoding turns into U+FFFD), so only then is the round
// trip made.
func appendDevice(b []byte, raw []byte) ([]byte, error) {
	if !bytes.Contains(raw, []byte(`\u`)) {
		return append(b, raw...), nil
	}
	var d protocol.PublicIdentity
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("stored device: %w", err)
	}
	return append(b, protocol.MustMarshal(d)...), nil
}

// MaxResultsAnswerBytes bounds one results answer. Results stay until their
// deadline and are re-sent on every read (wire.md §9.5), so without a bound
// one answer grows with completion rate × deadline, and each unread copy is
// held while it is written. 4 MiB holds hundreds of ordinary results; a
// single result larger than that (an envelope may be 6 MB) still goes out
// alone.
const MaxResultsAnswerBytes = 4 << 20

// resultSize is about what one job adds to a results answer.
func resultSize(j *store.ResultJob) int {
	return 128 + len(j.JobID) + len(j.Result) + len(j.Disposition) + len(j.RunnerID) + len(j.LeaseID) + len(j.Device) + len(j.RunnerOwner)
}

// capResults keeps what fits in limit bytes of answer and returns it with
// the answer's estimated size. When everything fits the answer is every
// result, as the wire says. When not, the answer is the results that fit
// from a random starting point in store order (wrapping round; at least
// one), kept in store order: the published site (@byollm/server) reads
// results on every pump and skips those it has completed, so the rest
// reach it over the next reads without anything on the wire changing —
// each result is in a given answer with a chance of about limit/total, and
// none is starved by those ahead of it in store order.
func capResults(jobs []*store.ResultJob, limit int) ([]*store.ResultJob, int) {
	total := 16
	for _, j := range jobs {
		total += resultSize(j)
	}
	if total <= limit || len(jobs) <= 1 {
		return jobs, total
	}
	keep := make([]bool, len(jobs))
	size, start := 16, rand.IntN(len(jobs))
	for k := range jobs {
		i := (start + k) % len(jobs)
		n := resultSize(jobs[i])
		if k > 0 && size+n > limit {
			continue // a smaller one further on may still fit
		}
		keep[i] = true
		size += n
	}
	out := make([]*store.ResultJob, 0, len(jobs))
	for i, j := range jobs {
		if keep[i] {
			out = append(out, j)
		}
	}
	return out, size
}
