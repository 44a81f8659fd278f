package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/byollm/relay-go/internal/pairings"
)

// Pairings is the approval service the /pairings routes drive; the relay
// passes its *pairings.Service.
type Pairings interface {
	Show(ctx context.Context, userCode string) (pairings.Pairing, error)
	Approve(ctx context.Context, userCode string, a pairings.Approval) (pairings.Approved, error)
	Deny(ctx context.Context, userCode string) error
}

// maxApprovalBody bounds an approval body: an owner and a runner id.
const maxApprovalBody = 64 << 10

// There is deliberately no route listing pending pairings: a code is only
// ever looked up by the exact value a person read off their daemon.
func (s *Server) registerPairings(p Pairings) {
	s.authed.HandleFunc("GET /pairings/{userCode}", func(w http.ResponseWriter, r *http.Request) {
		got, err := p.Show(r.Context(), r.PathValue("userCode"))
		if err != nil {
			s.pairingError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, got)
	})
	s.authed.HandleFunc("POST /pairings/{userCode}/approve", func(w http.ResponseWriter, r *http.Request) {
		var a pairings.Approval
		if msg := decodeApproval(w, r, &a); msg != "" {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad-request", Message: msg})
			return
		}
		got, err := p.Approve(r.Context(), r.PathValue("userCode"), a)
		if err != nil {
			s.pairingError(w, r, err)
			return
		}
		s.log.Info("pairing approved", slog.String("remote", r.RemoteAddr), slog.String("runnerId", got.RunnerID),
			slog.String("keyId", got.KeyID), slog.Int64("version", got.Version))
		writeJSON(w, http.StatusOK, got)
	})
	s.authed.HandleFunc("POST /pairings/{userCode}/deny", func(w http.ResponseWriter, r *http.Request) {
		// The body is ignored, but bounded like every other.
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxApprovalBody)); err != nil {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: "too-large", Message: "deny takes no body"})
			return
		}
		if err := p.Deny(r.Context(), r.PathValue("userCode")); err != nil {
			s.pairingError(w, r, err)
			return
		}
		s.log.Info("pairing denied", slog.String("remote", r.RemoteAddr))
		writeJSON(w, http.StatusOK, map[string]string{"status": "denied"})
	})
}

// decodeApproval reads {"owner": string, "runnerId"?: string} strictly: no
// other keys, no trailing data. It returns "" or what is wrong.
func decodeApproval(w http.ResponseWriter, r *http.Request, a *pairings.Approval) string {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxApprovalBody))
	if err != nil {
		return fmt.Sprintf("cannot read body (at most %d bytes): %v", maxApprovalBody, err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var raw struct {
		Owner    *string `json:"owner"`
		RunnerID *string `json:"runnerId"`
	}
	if err := dec.Decode(&raw); err != nil {
		return `body must be {"owner": string, "runnerId"?: string}: ` + err.Error()
	}
	if dec.More() {
		return "body holds data after the JSON object"
	}
	if raw.Owner == nil || *raw.Owner == "" {
		return "owner: required, a non-empty string (the account the device will run for)"
	}
	a.Owner = *raw.Owner
	if raw.RunnerID != nil {
		if *raw.RunnerID == "" {
			return "runnerId: must be non-empty when given (leave it out to derive one from the device key)"
		}
		a.RunnerID = *raw.RunnerID
	}
	return ""
}

func (s *Server) pairingError(w http.ResponseWriter, r *http.Request, err error) {
	var conflict *pairings.ConflictError
	var invalid *pairings.InvalidError
	switch {
	case errors.Is(err, pairings.ErrNotFound):
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not-found", Message: err.Error()})
	case errors.As(err, &conflict):
		writeJSON(w, http.StatusConflict, errorBody{Error: "conflict", Message: err.Error()})
	case errors.As(err, &invalid):
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad-request", Message: err.Error()})
	default:
		s.unavailable(w, r, err)
	}
}

// unapprove forgets a device approved through /pairings (the way to unpair
// one the control plane's document does not name). 404 when there is none.
func (s *Server) unapprove(w http.ResponseWriter, r *http.Request) {
	runner := r.PathValue("runnerId")
	removed, version, err := s.proj.Unapprove(r.Context(), runner)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	if !removed {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not-found",
			Message: fmt.Sprintf("no device approved by code has runner id %q (records of the projection document are changed with PUT or merge)", runner)})
		return
	}
	s.log.Info("approved device forgotten", slog.String("remote", r.RemoteAddr), slog.String("runnerId", runner), slog.Int64("version", version))
	writeJSON(w, http.StatusOK, map[string]any{"runnerId": runner, "removed": true, "version": version})
}
