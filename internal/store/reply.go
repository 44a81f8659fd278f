package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/scriptrun"
)

// Reply parsing. Scripts answer with nested arrays of strings and integers;
// the shapes are documented in each script's header.

func elems(m valkey.ValkeyMessage, min int) ([]valkey.ValkeyMessage, error) {
	return scriptrun.Elems(m, min)
}

func str(m valkey.ValkeyMessage) (string, error) { return scriptrun.Text(m) }

func num(m valkey.ValkeyMessage) (int64, error) { return m.AsInt64() }

func flatMap(m valkey.ValkeyMessage) (map[string]string, error) {
	a, err := m.AsStrSlice()
	if err != nil {
		return nil, err
	}
	if len(a)%2 != 0 {
		return nil, fmt.Errorf("flat hash with %d elements", len(a))
	}
	out := make(map[string]string, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		out[a[i]] = a[i+1]
	}
	return out, nil
}

func atoi(field, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("job field %s: %w", field, err)
	}
	return n, nil
}

// snapshot is a Job as read from Valkey plus its FIFO position.
type snapshot struct {
	Job
	seq int64
}

// parseSnapshot turns {flat hash, refusedBy, flat retryAfter} into a Job;
// nil for a nil reply (no such job).
func parseSnapshot(m valkey.ValkeyMessage) (*snapshot, error) {
	if m.IsNil() {
		return nil, nil
	}
	parts, err := elems(m, 3)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	h, err := flatMap(parts[0])
	if err != nil {
		return nil, fmt.Errorf("snapshot hash: %w", err)
	}
	refused, err := parts[1].AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("snapshot refusedBy: %w", err)
	}
	ra, err := flatMap(parts[2])
	if err != nil {
		return nil, fmt.Errorf("snapshot retryAfter: %w", err)
	}
	eS, eJ, ok := strings.Cut(h["m"], ":")
	if !ok {
		return nil, fmt.Errorf("snapshot: member %q", h["m"])
	}
	site, err1 := dec("site", eS)
	id, err2 := decJob(eJ)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	s := &snapshot{Job: Job{
		ID:          id,
		SiteID:      site,
		Stub:        json.RawMessage(h["stub"]),
		State:       h["state"],
		ReofferTo:   h["ro"],
		RefusedBy:   refused,
		Cancelled:   h["cx"] == "1",
		Disposition: h["dp"],
	}}
	if s.seq, err = atoi("seq", h["seq"]); err != nil {
		return nil, err
	}
	if v, ok := h["pl"]; ok {
		s.Payload = json.RawMessage(v)
	}
	if v, ok := h["rs"]; ok {
		s.Result = json.RawMessage(v)
	}
	if v, ok := h["au"]; ok {
		if s.AwaitingUntil, err = atoi("au", v); err != nil {
			return nil, err
		}
	}
	if v, ok := h["sa"]; ok {
		n, err := atoi("sa", v)
		if err != nil {
			return nil, err
		}
		s.SealAttempts = int(n)
	}
	if lease, ok := h["cl"]; ok {
		cb := &ClaimedBy{RunnerID: h["cr"], Owner: h["co"], LeaseID: lease}
		if cb.LeaseExpiresAt, err = atoi("ce", h["ce"]); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(h["cd"]), &cb.Device); err != nil {
			return nil, fmt.Errorf("job field cd: %w", err)
		}
		s.ClaimedBy = cb
	}
	if len(ra) > 0 {
		s.RetryAfter = make(map[string]int64, len(ra))
		for runner, v := range ra {
			if s.RetryAfter[runner], err = atoi("retryAfter", v); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func parseSnapshots(m valkey.ValkeyMessage) ([]snapshot, error) {
	a, err := m.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]snapshot, 0, len(a))
	for _, e := range a {
		s, err := parseSnapshot(e)
		if err != nil {
			return nil, err
		}
		if s != nil {
			out = append(out, *s)
		}
	}
	return out, nil
}

func jobsOf(snaps []snapshot) []Job {
	out := make([]Job, len(snaps))
	for i := range snaps {
		out[i] = snaps[i].Job
	}
	return out
}

// parseReports reads {siteId, owner, expiries} triples.
func parseReports(m valkey.ValkeyMessage) ([]ChurnReport, error) {
	a, err := m.ToArray()
	if err != nil {
		return nil, fmt.Errorf("churn reports: %w", err)
	}
	out := make([]ChurnReport, 0, len(a))
	for _, e := range a {
		r, err := elems(e, 3)
		if err != nil {
			return nil, fmt.Errorf("churn report: %w", err)
		}
		eS, err1 := str(r[0])
		eO, err2 := str(r[1])
		n, err3 := num(r[2])
		site, err4 := dec("site", eS)
		owner, err5 := dec("owner", eO)
		if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
			return nil, fmt.Errorf("churn report: %w", err)
		}
		out = append(out, ChurnReport{SiteID: site, Owner: owner, Expiries: int(n), WindowMs: ChurnWindowMs})
	}
	return out, nil
}

// parsePresence reads a presence record's flat hash; nil when empty.
func parsePresence(m valkey.ValkeyMessage) (*Presence, error) {
	h, err := flatMap(m)
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	if len(h) == 0 {
		return nil, nil
	}
	p := &Presence{
		RunnerID:     h["runnerId"],
		Owner:        h["owner"],
		Capabilities: json.RawMessage(h["capabilities"]),
		Withheld:     json.RawMessage(h["withheld"]),
	}
	if p.LastSeenAt, err = strconv.ParseInt(h["lastSeenAt"], 10, 64); err != nil {
		return nil, fmt.Errorf("presence lastSeenAt: %w", err)
	}
	if err := json.Unmarshal([]byte(h["device"]), &p.Device); err != nil {
		return nil, fmt.Errorf("presence device: %w", err)
	}
	return p, nil
}

func grantRefs(flat []string) []protocol.GrantRef {
	out := make([]protocol.GrantRef, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out = append(out, protocol.GrantRef{JobID: flat[i], LeaseID: flat[i+1]})
	}
	return out
}
