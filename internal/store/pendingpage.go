package store

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"
)

// opPendingPage names a pending page's reads in the store's call metrics.
const opPendingPage = "pending_page"

// pendingFields is what one HMGET of a pending page reads per entry: the
// state, the answer's fields but the device, then the device's head
// (deviceHead).
var pendingFields = deviceHead([]string{"state", "cr", "cl", "au", "ce"})

// pendingPage is one page of PendingJobs, read with plain commands: the
// index's page, then every entry's record in one pipeline of HMGETs (and,
// for a device longer than deviceGuess slices, one more). It answers the
// index's cursor ("" once it is exhausted) and one row per awaiting-payload
// job: eJ, device, runnerId, leaseId, awaitingUntil, leaseExpiresAt, each
// "" when absent.
//
// A script would read the index and the records at one instant; this reads
// them one after the other, which a poll cannot tell apart from a read at
// some instant per job: an entry whose record has left awaiting-payload by
// the time it is read is skipped, one that joins after the index was read
// is in the next poll, and a job's row comes from one HMGET, or from two
// that agree on its grant (lease id), so it never mixes two grants. The
// same holds on a cluster: every key read is in the site's slot, and while
// that slot migrates each command is redirected on its own, which is one
// more reading at its own instant.
func (s *Store) pendingPage(ctx context.Context, k keys, siteID, exclusive string, limit int) (string, [][6]string, error) {
	page, err := s.doMulti(ctx, opPendingPage,
		s.c.B().Zrangebyscore().Key(k.awaiting(siteID)).Min(exclusive).Max("+inf").Withscores().Limit(0, int64(limit)).Build())[0].AsZScores()
	if err != nil {
		return "", nil, fmt.Errorf("pending page: %w", err)
	}
	cursor := ""
	if len(page) == limit {
		if cursor, err = seqText(page[len(page)-1]); err != nil {
			return "", nil, fmt.Errorf("pending page: %w", err)
		}
	}
	if len(page) == 0 {
		return cursor, nil, nil
	}
	prefix := k.siteJobs(siteID)
	reads := make(valkey.Commands, len(page))
	for i, z := range page {
		reads[i] = s.c.B().Hmget().Key(prefix + z.Member).Field(pendingFields...).Build()
	}
	rows := make([][6]string, 0, len(page))
	var long []int // rows whose device has more slices than were read
	var slices []int
	for i, res := range s.doMulti(ctx, opPendingPage, reads...) {
		v, err := res.ToArray()
		if err != nil {
			return "", nil, fmt.Errorf("pending page: %w", err)
		}
		f, err := optionalStrings(v)
		if err != nil || len(f) != len(pendingFields) {
			return "", nil, fmt.Errorf("pending page: %w: record of %d fields (%v)", ErrUnexpectedReply, len(f), err)
		}
		if f[0] != StateAwaitingPayload {
			continue
		}
		dev, more, err := deviceFromHead(f[5:])
		if err != nil {
			return "", nil, fmt.Errorf("pending page: %w", err)
		}
		if more > 0 {
			long, slices = append(long, len(rows)), append(slices, more)
		}
		rows = append(rows, [6]string{page[i].Member, dev, f[1], f[2], f[3], f[4]})
	}
	if len(long) == 0 {
		return cursor, rows, nil
	}
	reads = reads[:0]
	for j, r := range long {
		fields := blobFields([]string{"cl"}, blobBaseDevice, 1, slices[j])
		reads = append(reads, s.c.B().Hmget().Key(prefix+rows[r][0]).Field(fields...).Build())
	}
	drop := map[int]bool{}
	for j, res := range s.doMulti(ctx, opPendingPage, reads...) {
		v, err := res.ToArray()
		if err != nil {
			return "", nil, fmt.Errorf("pending page: %w", err)
		}
		f, err := optionalStrings(v)
		if err != nil {
			return "", nil, fmt.Errorf("pending page: %w", err)
		}
		r := long[j]
		if f[0] != rows[r][3] {
			drop[r] = true // granted again since the first read
			continue
		}
		rows[r][1] = concat(f[1:])
	}
	kept := rows[:0]
	for i, row := range rows {
		if !drop[i] {
			kept = append(kept, row)
		}
	}
	return cursor, kept, nil
}

// optionalStrings is an HMGET's reply with "" for a missing field.
func optionalStrings(v []valkey.ValkeyMessage) ([]string, error) {
	out := make([]string, len(v))
	for i, m := range v {
		if m.IsNil() {
			continue
		}
		s, err := m.ToString()
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
