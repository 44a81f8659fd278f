package projectionsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/projection"
)

// Approved devices.
//
// A device approved through the admin API (a person typed the daemon's user
// code on an approval page) is kept as a record of its own in
// <ns>:{<ns>}:projection:approved, beside the document, not inside it. The
// projection in force is the stored document plus every approved record
// whose runnerId the document does not name, appended in runnerId order.
// So a control plane that replaces the document wholesale (PUT /projection)
// without having heard of an approval does not unpair the device, and a
// control plane that has heard of it (GET /projection shows approved
// devices) takes it over by writing a record with that runnerId: the
// document's record wins, revoked or not. Approvals bump the document's
// version, so every replica follows them like any other change, and a
// merge that read the document before an approval retries after it.

// ApprovedKey is the hash of approved devices of a namespace.
func ApprovedKey(namespace string) string {
	key, _ := Keys(namespace)
	return key + ":approved"
}

// Get reads the projection as replicas put it in force: the stored
// document plus the approved devices it does not name. With nothing stored
// it returns version 0 and the empty projection's JSON.
func (s *Sync) Get(ctx context.Context) (Document, error) {
	msg, err := s.run.Run(ctx, getScript, []string{s.key, s.approvedKey}, nil)
	var vals []string
	if err == nil {
		vals, err = msg.AsStrSlice()
	}
	if err != nil {
		return Document{}, fmt.Errorf("projection: read document: %w", err)
	}
	if len(vals) < 4 || len(vals)%2 != 0 {
		return Document{}, fmt.Errorf("projection: read document: unexpected reply of %d elements", len(vals))
	}
	version, err1 := strconv.ParseInt(vals[0], 10, 64)
	updated, err2 := strconv.ParseInt(vals[3], 10, 64)
	if err1 != nil || err2 != nil {
		return Document{}, fmt.Errorf("projection: version %q or updatedAt %q is not a number", vals[0], vals[3])
	}
	if version == 0 {
		return Document{Version: 0, JSON: emptyDoc().canon}, nil
	}
	doc := Document{Version: version, UpdatedAt: updated, JSON: []byte(vals[1]), sha: vals[2]}
	if vals[1] == "" {
		doc.JSON = emptyDoc().canon
	}
	if len(vals) == 4 {
		return doc, nil
	}
	records := make(map[string][]byte, (len(vals)-4)/2)
	for i := 4; i < len(vals); i += 2 {
		records[vals[i]] = []byte(vals[i+1])
	}
	if _, err := projection.Parse(doc.JSON); err != nil {
		// An invalid stored document (written by hand) is handed on as it
		// is: Refresh refuses it, logs once and keeps what it has.
		return doc, nil
	}
	doc.JSON, doc.Approved, err = withApproved(doc.JSON, records)
	if err != nil {
		return Document{}, fmt.Errorf("projection: version %d: %w", version, err)
	}
	return doc, nil
}

// withApproved appends to the document's devices every approved record
// whose runnerId the document does not name, in runnerId order, and
// re-encodes the document canonically. It reports how many it added.
func withApproved(doc []byte, records map[string][]byte) ([]byte, int, error) {
	f, err := projection.Parse(doc)
	if err != nil {
		return nil, 0, fmt.Errorf("stored document: %w", err)
	}
	named := make(map[string]bool, len(f.Devices))
	for _, d := range f.Devices {
		named[d.RunnerID] = true
	}
	ids := make([]string, 0, len(records))
	for id := range records {
		if !named[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		rec, err := decodeDevice(records[id])
		if err != nil {
			return nil, 0, fmt.Errorf("approved device %q: %w", id, err)
		}
		if rec.RunnerID != id {
			return nil, 0, fmt.Errorf("approved device %q: record names runner %q", id, rec.RunnerID)
		}
		f.Devices = append(f.Devices, rec)
	}
	return f.JSON(), len(ids), nil
}

// decodeDevice validates one DeviceRecord with the fixture's own strict
// schema (a one-device fixture), so an approved record is held to exactly
// the rules a document's record is.
func decodeDevice(raw []byte) (projection.DeviceRecord, error) {
	var b bytes.Buffer
	b.WriteString(`{"consents":[],"devices":[`)
	b.Write(raw)
	b.WriteString(`]}`)
	f, err := projection.Parse(b.Bytes())
	if err != nil {
		return projection.DeviceRecord{}, err
	}
	if len(f.Devices) != 1 {
		return projection.DeviceRecord{}, fmt.Errorf("not one device record")
	}
	return f.Devices[0], nil
}

// DeviceRecordJSON is the canonical encoding of one device record, as an
// approval stores it.
func DeviceRecordJSON(d projection.DeviceRecord) ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("device record: %w", err)
	}
	if _, err := decodeDevice(b); err != nil {
		return nil, fmt.Errorf("device record: %w", err)
	}
	return b, nil
}

// installWritten puts a version this replica just wrote in force. Without
// approved devices the written document is the projection; with them, the
// effective projection is read back (one more round trip on an admin
// write, which is rare).
func (s *Sync) installWritten(ctx context.Context, d decoded, version int64, sum string) {
	n, err := s.run.Do(ctx, "projection_approved", s.client.B().Hlen().Key(s.approvedKey).Build()).AsInt64()
	if err == nil && n == 0 {
		s.installIfNewer(d, version, sum)
		return
	}
	if err := s.Refresh(ctx); err != nil {
		// The poll loop installs it within one interval.
		s.log.Warn("projection: written, but reading it back failed", slog.Int64("version", version), slog.Any("err", err))
	}
}

// Unapprove forgets the approved device with that runner id, so it leaves
// the projection (unless the document names that runner id itself). It
// reports whether there was one, and the version after the call; this
// replica has that version in force when it returns.
func (s *Sync) Unapprove(ctx context.Context, runnerID string) (bool, int64, error) {
	msg, err := s.run.Run(ctx, unapproveScript, []string{s.key, s.approvedKey}, []string{runnerID, s.channel})
	var reply []valkey.ValkeyMessage
	if err == nil {
		reply, err = msg.ToArray()
	}
	if err != nil {
		return false, 0, fmt.Errorf("projection: unapprove: %w", err)
	}
	if len(reply) != 2 {
		return false, 0, fmt.Errorf("projection: unapprove: unexpected reply of %d elements", len(reply))
	}
	removed, err1 := reply[0].AsInt64()
	vs, err2 := reply[1].ToString()
	version, err3 := strconv.ParseInt(vs, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return false, 0, fmt.Errorf("projection: unapprove: %w", err)
	}
	if removed == 1 {
		if err := s.Refresh(ctx); err != nil {
			s.log.Warn("projection: unapproved, but reading it back failed", slog.Int64("version", version), slog.Any("err", err))
		}
	}
	return removed == 1, version, nil
}
