// Package pairings is the approval side of the device-code flow: what an
// operator's approval page (or `relay pairing`) needs to turn the user code
// a person reads off their daemon into an approved device, with no other
// knowledge of the device.
//
// A code is looked up only by its exact (normalised) value; nothing lists
// pending pairings. Approval writes the device record into the projection's
// approved devices in the same Lua script that checks the code is live and
// not approved yet (lua/pairing_approve.lua); conflicts with records the
// projection already holds are judged here against the version that script
// then requires, so a concurrent change makes the approval look again
// rather than act on a stale check.
package pairings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// attempts bounds the approval loop; each retry means the projection
// changed between our read and the script.
const attempts = 16

// Errors the admin API maps to statuses.
var (
	// ErrNotFound: no live pairing has the code (404).
	ErrNotFound = errors.New("no pending pairing has that code (unknown, expired, denied, or already collected by its daemon)")
)

// ConflictError is a request that cannot go ahead as asked (409); the
// message says why and what to do.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// InvalidError is a malformed request (400).
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// Service approves and denies pairings of one namespace.
type Service struct {
	store  *store.Store
	proj   *projectionsync.Sync
	target store.ProjectionTarget
}

// New builds the Service over the replica's store and projection (same
// namespace).
func New(st *store.Store, proj *projectionsync.Sync) *Service {
	key, channel := projectionsync.Keys(st.Namespace())
	return &Service{store: st, proj: proj, target: store.ProjectionTarget{
		Document: key, Approved: projectionsync.ApprovedKey(st.Namespace()), Channel: channel,
	}}
}

// Pairing is a pending pairing as an approval page shows it. The device
// code (the daemon's polling secret) is never part of it.
type Pairing struct {
	UserCode     string                  `json:"userCode"`
	Status       string                  `json:"status"` // "pending" or "approved"
	RunnerID     string                  `json:"runnerId,omitempty"`
	KeyID        string                  `json:"keyId"`
	Device       protocol.PublicIdentity `json:"device"`
	Label        string                  `json:"label"`
	Platform     string                  `json:"platform"`
	Capabilities json.RawMessage         `json:"capabilities"`
	ExpiresAt    int64                   `json:"expiresAt"`
}

// Show returns the live pairing of a user code (trimmed, upper-cased), or
// ErrNotFound.
func (s *Service) Show(ctx context.Context, userCode string) (Pairing, error) {
	code, err := checkCode(userCode)
	if err != nil {
		return Pairing{}, err
	}
	v, err := s.store.ShowPairing(ctx, code)
	if errors.Is(err, store.ErrPairingExpired) {
		// An approval page has nothing to show; unknown and expired look
		// alike here, as they do to the daemon's poll.
		return Pairing{}, ErrNotFound
	}
	if err != nil {
		return Pairing{}, err
	}
	if v == nil {
		return Pairing{}, ErrNotFound
	}
	p := Pairing{
		UserCode: v.UserCode, Status: "pending", RunnerID: v.ApprovedAs,
		KeyID: protocol.KeyID(v.Device.Identity), Device: v.Device,
		Label: v.Label, Platform: v.Platform, Capabilities: v.Capabilities, ExpiresAt: v.ExpiresAt,
	}
	if len(p.Capabilities) == 0 {
		p.Capabilities = json.RawMessage("[]")
	}
	if v.ApprovedAs != "" {
		p.Status = "approved"
	}
	return p, nil
}

// Approval is the request body of an approval.
type Approval struct {
	Owner    string `json:"owner"`
	RunnerID string `json:"runnerId,omitempty"`
}

// Approved is the answer to an approval.
type Approved struct {
	UserCode  string `json:"userCode"`
	RunnerID  string `json:"runnerId"`
	Owner     string `json:"owner"`
	KeyID     string `json:"keyId"`
	Version   int64  `json:"version"`
	UpdatedAt int64  `json:"updatedAt"`
}

// Approve approves the live pairing of userCode for a.Owner. The runner id
// is a.RunnerID, else the id of a record the projection already holds for
// this device (same owner), else one derived from the device's key id.
func (s *Service) Approve(ctx context.Context, userCode string, a Approval) (Approved, error) {
	code, err := checkCode(userCode)
	if err != nil {
		return Approved{}, err
	}
	if a.Owner == "" {
		return Approved{}, &InvalidError{Msg: `owner: required (the account the device will run for)`}
	}
	if err := CheckID("owner", a.Owner); err != nil {
		return Approved{}, err
	}
	if a.RunnerID != "" {
		if err := CheckID("runnerId", a.RunnerID); err != nil {
			return Approved{}, err
		}
	}
	for attempt := 0; attempt < attempts; attempt++ {
		v, err := s.store.ShowPairing(ctx, code)
		if errors.Is(err, store.ErrPairingExpired) {
			return Approved{}, expired(code)
		}
		if err != nil {
			return Approved{}, err
		}
		if v == nil {
			return Approved{}, ErrNotFound
		}
		if v.ApprovedAs != "" {
			return Approved{}, &ConflictError{Msg: fmt.Sprintf("code %s is approved already (runner %q); the daemon collects it on its next poll", code, v.ApprovedAs)}
		}
		doc, err := s.proj.Get(ctx)
		if err != nil {
			return Approved{}, err
		}
		f, err := projection.Parse(doc.JSON)
		if err != nil {
			return Approved{}, fmt.Errorf("approve: the projection in Valkey is invalid: %w", err)
		}
		runner, err := chooseRunner(f, v.Device, a)
		if err != nil {
			return Approved{}, err
		}
		rec, err := projectionsync.DeviceRecordJSON(projection.DeviceRecord{Owner: a.Owner, RunnerID: runner, Device: v.Device})
		if err != nil {
			return Approved{}, &InvalidError{Msg: err.Error()}
		}
		version, at, err := s.store.ApprovePairing(ctx, s.target, store.Approval{
			UserCode: code, DeviceCode: v.DeviceCode, Version: doc.Version, RunnerID: runner, Record: rec,
		})
		switch {
		case errors.Is(err, store.ErrProjectionMoved):
			continue
		case errors.Is(err, store.ErrPairingUnknown):
			return Approved{}, ErrNotFound
		case errors.Is(err, store.ErrPairingExpired):
			return Approved{}, expired(code)
		case errors.Is(err, store.ErrPairingApproved):
			return Approved{}, &ConflictError{Msg: fmt.Sprintf("code %s: %v", code, err)}
		case errors.Is(err, store.ErrInvalidInput):
			return Approved{}, &InvalidError{Msg: err.Error()}
		case err != nil:
			return Approved{}, err
		}
		// This replica answers with the approval in force; others follow
		// the published version.
		_ = s.proj.Refresh(ctx)
		return Approved{UserCode: code, RunnerID: runner, Owner: a.Owner,
			KeyID: protocol.KeyID(v.Device.Identity), Version: version, UpdatedAt: at}, nil
	}
	return Approved{}, fmt.Errorf("approve: the projection changed concurrently %d times in a row; nothing was written, try again", attempts)
}

// CheckID applies the id rules to an approval's owner or runner id: at most
// the routing store's identifier limit (store.DefaultMaxIDBytes, the
// policy's MaxIDBytes too), and no control character (U+0000-U+001F,
// U+007F-U+009F): these are typed by a person, and a control character in
// one is a paste gone wrong that would reach logs, pages and the daemon.
// A lone surrogate (a \ud800 escape, WTF-8 here) is no character and is
// refused, as the store refuses a runner id that is not UTF-8; it is never
// turned into U+FFFD, which would make "r\ud800" and "r\ufffd" one id.
func CheckID(field, v string) error {
	if len(v) > store.DefaultMaxIDBytes {
		return &InvalidError{Msg: fmt.Sprintf("%s: too long: %d bytes, at most %d", field, len(v), store.DefaultMaxIDBytes)}
	}
	if !utf8.ValidString(v) {
		return &InvalidError{Msg: field + ": holds a lone surrogate (an unpaired \\ud800-\\udfff escape), which is not a character"}
	}
	for i, r := range v {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return &InvalidError{Msg: fmt.Sprintf("%s: holds the control character U+%04X at byte %d", field, r, i)}
		}
	}
	return nil
}

func expired(code string) error {
	return &ConflictError{Msg: fmt.Sprintf("code %s has expired; the daemon must start pairing again for a new code", code)}
}

// chooseRunner applies the projection's existing records to an approval:
// the first record of the same identity decides (another owner, or
// revoked, is a conflict); otherwise the requested or derived runner id
// must not belong to another device.
func chooseRunner(f projection.Fixture, device protocol.PublicIdentity, a Approval) (string, error) {
	for _, d := range f.Devices {
		if d.Device.Identity != device.Identity {
			continue
		}
		switch {
		case d.Owner != a.Owner:
			return "", &ConflictError{Msg: fmt.Sprintf("this device is already in the projection for another owner (runner %q); remove that record before approving it for %q", d.RunnerID, a.Owner)}
		case d.Revoked:
			return "", &ConflictError{Msg: fmt.Sprintf("this device is revoked in the projection (runner %q); lift the revocation there instead", d.RunnerID)}
		case a.RunnerID != "" && a.RunnerID != d.RunnerID:
			return "", &ConflictError{Msg: fmt.Sprintf("this device is already in the projection as runner %q, not %q", d.RunnerID, a.RunnerID)}
		}
		return d.RunnerID, nil
	}
	runner := a.RunnerID
	if runner == "" {
		runner = DefaultRunnerID(device.Identity)
	}
	for _, d := range f.Devices {
		if d.RunnerID == runner {
			return "", &ConflictError{Msg: fmt.Sprintf("runnerId %q belongs to another device in the projection; choose another", runner)}
		}
	}
	return runner, nil
}

// DefaultRunnerID derives a runner id from the device's key id, so the same
// keypair approved again gets the same id: "runner-" and the 24 key id
// symbols in lower case.
func DefaultRunnerID(identity string) string {
	kid := strings.TrimPrefix(protocol.KeyID(identity), "BYOLLM-")
	return "runner-" + strings.ToLower(strings.ReplaceAll(kid, "-", ""))
}

// Deny drops the live pairing of userCode: the daemon's next poll answers
// "expired".
func (s *Service) Deny(ctx context.Context, userCode string) error {
	code, err := checkCode(userCode)
	if err != nil {
		return err
	}
	err = s.store.DenyPairing(ctx, code)
	switch {
	case errors.Is(err, store.ErrPairingUnknown):
		return ErrNotFound
	case errors.Is(err, store.ErrPairingExpired):
		return &ConflictError{Msg: fmt.Sprintf("code %s has expired already", code)}
	case errors.Is(err, store.ErrPairingApproved):
		return &ConflictError{Msg: fmt.Sprintf("code %s: %v; to unpair the device, revoke its record in the projection", code, err)}
	}
	return err
}

// checkCode normalises a user code (§13: trim, upper case) and refuses
// what no minted code can be, before any store call. Minted codes are
// XXXX-XXXX over the Crockford alphabet; anything up to 64 printable
// characters is looked up (a lookup is one hash read), longer or control
// characters are refused.
func checkCode(userCode string) (string, error) {
	code := store.NormalizeUserCode(userCode)
	if code == "" {
		return "", &InvalidError{Msg: "user code: empty"}
	}
	if len(code) > 64 {
		return "", &InvalidError{Msg: "user code: longer than 64 bytes (codes look like 6HTG-Z65X)"}
	}
	for _, r := range code {
		if r < 0x20 || r == 0x7f {
			return "", &InvalidError{Msg: "user code: holds a control character (codes look like 6HTG-Z65X)"}
		}
	}
	return code, nil
}
