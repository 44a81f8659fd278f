package store

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"
)

// resultRow is one job of a results read: its position in the batch asked
// and the seven strings the results answer shows: eJ, result, disposition,
// runnerId, leaseId, device, runnerOwner ("" when absent; no leaseId: no
// grant).
type resultRow struct {
	pos int
	f   [7]string
}

// opResultsGet names a results read's pipelines in the store's call
// metrics.
const opResultsGet = "results_get"

// resultsHead is what the first read of resultsGet asks of each job:
// the fields the answer shows but the result, the device's length and
// first slices when it is sliced, and the result's length when it is.
var resultsHead = blobFields(deviceHead([]string{"state", "seq", "dp", "cr", "cl", "co"}), blobBaseResult, 0, 0)

// resultsGet reads the results of asked (done jobs named by the finished
// index): how many pairs of asked it consumed (at least one; fewer than all
// once the results read reach budget bytes) and a row for each consumed job
// still there under the same seq with a result. Plain commands in two
// pipelined reads: the first reads every asked job's head (resultsHead)
// and the length of a result stored whole (HSTRLEN), no result bytes, so
// it chooses which jobs fit the budget without carrying a result it will
// not answer; the second reads those jobs' results (and a device longer
// than the first read's slices) with their seq again. A done job's result,
// disposition, device and grant never change while a record of that seq
// exists, and seq is never reused, so a job whose seq still matches is the
// job the first read saw; one whose record went or was replaced in between
// is left out. On a cluster every key read is in the site's slot, and
// while it migrates each command is redirected on its own: one more read
// at its own instant, checked by seq like the rest.
func (s *Store) resultsGet(ctx context.Context, k keys, siteID string, asked []listed, budget int) (int, []resultRow, error) {
	prefix := k.siteJobs(siteID)
	reads := make(valkey.Commands, 0, 2*len(asked))
	for _, a := range asked {
		reads = append(reads,
			s.c.B().Hmget().Key(prefix+a.eJ).Field(resultsHead...).Build(),
			s.c.B().Hstrlen().Key(prefix+a.eJ).Field("rs").Build())
	}
	heads := s.doMulti(ctx, opResultsGet, reads...)
	type more struct {
		fields      []string
		whole       bool // the result is the field rs itself
		resultParts int  // else its slices
		devParts    int  // device slices to read (0: read already)
	}
	var rows []resultRow
	var wants []more
	consumed, bytes := 0, 0
	for i, a := range asked {
		consumed = i + 1
		v, err := heads[2*i].ToArray()
		if err != nil {
			return 0, nil, err
		}
		f, err := optionalStrings(v)
		if err != nil || len(f) != len(resultsHead) {
			return 0, nil, fmt.Errorf("%w: record of %d fields (%v)", ErrUnexpectedReply, len(f), err)
		}
		if f[0] != StateDone || f[1] != a.seq {
			continue
		}
		wholeLen, err := heads[2*i+1].AsInt64()
		if err != nil {
			return 0, nil, err
		}
		m := more{fields: []string{"seq"}}
		size := int(wholeLen)
		switch {
		case wholeLen > 0:
			m.whole = true
			m.fields = append(m.fields, "rs")
		case f[12] != "":
			n, err := slicedLen(f[12])
			if err != nil {
				return 0, nil, err
			}
			size, m.resultParts = n, blobSlices(n)
			m.fields = blobFields(m.fields, blobBaseResult, 1, m.resultParts)
		default:
			continue // no result: not answered, as the script does
		}
		dev, more, err := deviceFromHead(f[6:])
		if err != nil {
			return 0, nil, err
		}
		if more > 0 {
			m.devParts = more
			m.fields = blobFields(m.fields, blobBaseDevice, 1, more)
		}
		r := resultRow{pos: i, f: [7]string{a.eJ, "", f[2], f[3], f[4], dev, f[5]}}
		rows, wants = append(rows, r), append(wants, m)
		if bytes += size; bytes >= budget {
			break
		}
	}
	if len(rows) == 0 {
		return consumed, nil, nil
	}
	reads = reads[:0]
	for j, r := range rows {
		reads = append(reads, s.c.B().Hmget().Key(prefix+asked[r.pos].eJ).Field(wants[j].fields...).Build())
	}
	kept := rows[:0]
	for j, res := range s.doMulti(ctx, opResultsGet, reads...) {
		v, err := res.ToArray()
		if err != nil {
			return 0, nil, err
		}
		f, err := optionalStrings(v)
		if err != nil || len(f) != len(wants[j].fields) {
			return 0, nil, fmt.Errorf("%w: record of %d fields (%v)", ErrUnexpectedReply, len(f), err)
		}
		r, m := rows[j], wants[j]
		if f[0] != asked[r.pos].seq {
			continue // gone or replaced since the first read
		}
		at := 1
		if m.whole {
			r.f[1], at = f[1], 2
		} else {
			r.f[1] = concat(f[at : at+m.resultParts])
			at += m.resultParts
		}
		if m.devParts > 0 {
			r.f[5] = concat(f[at : at+m.devParts])
		}
		kept = append(kept, r)
	}
	return consumed, kept, nil
}
