package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Approving and denying pending pairings by the user code a person types on
// the approval page. The relay's daemon plane never calls these; the admin
// API does (internal/pairings).

// NormalizeUserCode is §13's normalisation: trimmed, upper case. Stored
// codes already are.
func NormalizeUserCode(code string) string { return strings.ToUpper(strings.TrimSpace(code)) }

// PairingView is a live pending pairing as the approval page sees it.
type PairingView struct {
	PendingPairing
	// ApprovedAs is the runner id it was approved as; "" while pending.
	ApprovedAs string
}

// ShowPairing returns the live pairing of a user code (normalised here),
// with its approval if any; nil when no pairing holds the code, and
// ErrPairingExpired when it expired but is not purged yet.
func (s *Store) ShowPairing(ctx context.Context, userCode string) (*PairingView, error) {
	code := NormalizeUserCode(userCode)
	if err := s.checkID("user code", code); err != nil {
		return nil, fmt.Errorf("show pairing: %w", err)
	}
	msg, err := s.run(ctx, scPairingShow, s.userCodeKeys(), code)
	if err != nil {
		return nil, fmt.Errorf("show pairing: %w", err)
	}
	if msg.IsNil() {
		return nil, nil
	}
	parts, err := msg.AsStrSlice()
	if err == nil && len(parts) == 1 && parts[0] == "expired" {
		return nil, ErrPairingExpired
	}
	if err != nil || len(parts) != 3 || parts[0] != "live" {
		return nil, fmt.Errorf("show pairing: unexpected reply (%v)", err)
	}
	p, err := parsePairing(false, func() (string, error) { return parts[1], nil })
	if err != nil {
		return nil, fmt.Errorf("show pairing: %w", err)
	}
	return &PairingView{PendingPairing: *p, ApprovedAs: parts[2]}, nil
}

// Approval outcomes other than success.
var (
	// ErrPairingUnknown: no pairing holds the code (never minted, denied,
	// consumed by the daemon's approved poll, or expired and purged).
	ErrPairingUnknown = errors.New("no pairing has that code")
	// ErrPairingExpired: the code expired (and is not purged yet).
	ErrPairingExpired = errors.New("that code has expired")
	// ErrPairingApproved: the code was approved already.
	ErrPairingApproved = errors.New("that code is approved already")
	// ErrProjectionMoved: the projection changed since the caller read the
	// version it checked the record against; read again and retry.
	ErrProjectionMoved = errors.New("the projection changed concurrently")
)

// ProjectionTarget names the projection keys an approval writes. They are
// internal/projectionsync's; the caller passes them so this package need
// not know the projection's layout. They must share this store's hash tag.
type ProjectionTarget struct {
	Document string // HASH version, json, sha, updatedAt
	Approved string // HASH runnerId -> DeviceRecord JSON
	Channel  string // PUB/SUB channel told of the new version
}

// Approval is one approval request: the code as looked up, the projection
// version the record was checked against, and the record to add.
type Approval struct {
	UserCode   string
	DeviceCode string
	Version    int64
	RunnerID   string
	Record     []byte // DeviceRecord JSON, written verbatim
}

// ApprovePairing approves a live, not yet approved code and writes its
// device record into the projection's approved devices, in one script. It
// returns the projection version and its Valkey TIME; ErrPairingUnknown,
// ErrPairingExpired, ErrPairingApproved (wrapped, with the runner id) or ErrProjectionMoved
// when nothing was written.
func (s *Store) ApprovePairing(ctx context.Context, t ProjectionTarget, a Approval) (version, updatedAt int64, err error) {
	code := NormalizeUserCode(a.UserCode)
	for _, f := range []struct{ name, v string }{
		{"user code", code}, {"device code", a.DeviceCode}, {"runner id", a.RunnerID},
	} {
		if err := s.checkID(f.name, f.v); err != nil {
			return 0, 0, fmt.Errorf("approve pairing: %w", err)
		}
	}
	if err := s.checkBlob("device record", a.Record); err != nil {
		return 0, 0, fmt.Errorf("approve pairing: %w", err)
	}
	if !strings.HasPrefix(t.Document, s.k.p) || !strings.HasPrefix(t.Approved, s.k.p) {
		return 0, 0, fmt.Errorf("approve pairing: projection keys %q, %q are outside namespace %q", t.Document, t.Approved, s.opts.Namespace)
	}
	keys := append(s.userCodeKeys(), t.Document, t.Approved)
	msg, err := s.run(ctx, scPairingApprove, keys, code, a.DeviceCode,
		strconv.FormatInt(a.Version, 10), a.RunnerID, string(a.Record), t.Channel)
	if err != nil {
		return 0, 0, fmt.Errorf("approve pairing: %w", err)
	}
	parts, err := msg.AsStrSlice()
	if err != nil || len(parts) == 0 {
		return 0, 0, fmt.Errorf("approve pairing: unexpected reply (%v)", err)
	}
	switch {
	case parts[0] == "ok" && len(parts) == 3:
		v, err1 := strconv.ParseInt(parts[1], 10, 64)
		at, err2 := strconv.ParseInt(parts[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("approve pairing: %w", err)
		}
		return v, at, nil
	case parts[0] == "unknown":
		return 0, 0, ErrPairingUnknown
	case parts[0] == "expired":
		return 0, 0, ErrPairingExpired
	case parts[0] == "approved" && len(parts) == 2:
		return 0, 0, fmt.Errorf("%w (as runner %q)", ErrPairingApproved, parts[1])
	case parts[0] == "conflict":
		return 0, 0, ErrProjectionMoved
	}
	return 0, 0, fmt.Errorf("approve pairing: unexpected reply %q", parts)
}

// DenyPairing drops a live, not yet approved code, so the daemon's next
// poll answers "expired". ErrPairingUnknown, ErrPairingExpired or
// ErrPairingApproved (wrapped)
// when nothing was dropped.
func (s *Store) DenyPairing(ctx context.Context, userCode string) error {
	code := NormalizeUserCode(userCode)
	if err := s.checkID("user code", code); err != nil {
		return fmt.Errorf("deny pairing: %w", err)
	}
	msg, err := s.run(ctx, scPairingDeny, s.userCodeKeys(), code)
	if err != nil {
		return fmt.Errorf("deny pairing: %w", err)
	}
	parts, err := msg.AsStrSlice()
	if err != nil || len(parts) == 0 {
		return fmt.Errorf("deny pairing: unexpected reply (%v)", err)
	}
	switch parts[0] {
	case "denied":
		return nil
	case "unknown":
		return ErrPairingUnknown
	case "expired":
		return ErrPairingExpired
	case "approved":
		if len(parts) == 2 {
			return fmt.Errorf("%w (as runner %q)", ErrPairingApproved, parts[1])
		}
	}
	return fmt.Errorf("deny pairing: unexpected reply %q", parts)
}

func (s *Store) userCodeKeys() []string {
	return []string{s.k.pairing("u"), s.k.pairing("ok")}
}
