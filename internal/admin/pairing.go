package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/byollm/relay-go/internal/pairings"
	"github.com/byollm/relay-go/internal/protocol"
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
	s.echo.GET("/pairings/:userCode", func(c echo.Context) error {
		got, err := p.Show(c.Request().Context(), param(c, "userCode"))
		if err != nil {
			return s.pairingError(c, err)
		}
		return writeJSON(c, http.StatusOK, got)
	})
	approvalTooLarge := refusal{http.StatusBadRequest, errorBody{Error: "bad-request",
		Message: fmt.Sprintf("cannot read body (at most %d bytes): it is larger", maxApprovalBody)}}
	s.echo.POST("/pairings/:userCode/approve", func(c echo.Context) error {
		var a pairings.Approval
		if msg := decodeApproval(body(c), &a); msg != "" {
			return writeJSON(c, http.StatusBadRequest, errorBody{Error: "bad-request", Message: msg})
		}
		got, err := p.Approve(c.Request().Context(), param(c, "userCode"), a)
		if err != nil {
			return s.pairingError(c, err)
		}
		s.log.Info("pairing approved", slog.String("remote", c.Request().RemoteAddr), slog.String("runnerId", got.RunnerID),
			slog.String("keyId", got.KeyID), slog.Int64("version", got.Version))
		return writeJSON(c, http.StatusOK, got)
	}, s.bodyLimit(maxApprovalBody, approvalTooLarge))
	// The body is ignored, but bounded like every other.
	denyTooLarge := refusal{http.StatusRequestEntityTooLarge, errorBody{Error: "too-large", Message: "deny takes no body"}}
	s.echo.POST("/pairings/:userCode/deny", func(c echo.Context) error {
		if err := p.Deny(c.Request().Context(), param(c, "userCode")); err != nil {
			return s.pairingError(c, err)
		}
		s.log.Info("pairing denied", slog.String("remote", c.Request().RemoteAddr))
		return writeJSON(c, http.StatusOK, map[string]string{"status": "denied"})
	}, s.bodyLimit(maxApprovalBody, denyTooLarge))
}

// decodeApproval reads {"owner": string, "runnerId"?: string} strictly,
// with the wire's own parser and schema checks (internal/protocol): no
// other keys, no key named twice, no trailing data; the ids' length and
// characters (no control character, no lone surrogate) are checked by
// pairings.CheckID. It returns "" or what is wrong.
func decodeApproval(body []byte, a *pairings.Approval) string {
	const shape = `body must be {"owner": string, "runnerId"?: string}`
	v, err := protocol.ParseJSONUnique(protocol.RequestText(body))
	var dup *protocol.DuplicateKeyError
	switch {
	case errors.As(err, &dup):
		return shape + ": " + dup.Error()
	case err != nil:
		return shape + ": not valid JSON"
	}
	o, err := protocol.StrictObject(v, "", "owner", "runnerId")
	if err != nil {
		return shape + ": " + err.Error()
	}
	owner, _, err := o.OptString("owner", 0, -1)
	if err != nil {
		return err.Error()
	}
	if owner == "" {
		return "owner: required, a non-empty string (the account the device will run for)"
	}
	if err := pairings.CheckID("owner", owner); err != nil {
		return err.Error()
	}
	a.Owner = owner
	runner, present, err := o.OptString("runnerId", 0, -1)
	if err != nil {
		return err.Error()
	}
	if present {
		if runner == "" {
			return "runnerId: must be non-empty when given (leave it out to derive one from the device key)"
		}
		if err := pairings.CheckID("runnerId", runner); err != nil {
			return err.Error()
		}
		a.RunnerID = runner
	}
	return ""
}

func (s *Server) pairingError(c echo.Context, err error) error {
	var conflict *pairings.ConflictError
	var invalid *pairings.InvalidError
	switch {
	case errors.Is(err, pairings.ErrNotFound):
		return writeJSON(c, http.StatusNotFound, errorBody{Error: "not-found", Message: err.Error()})
	case errors.As(err, &conflict):
		return writeJSON(c, http.StatusConflict, errorBody{Error: "conflict", Message: err.Error()})
	case errors.As(err, &invalid):
		return writeJSON(c, http.StatusBadRequest, errorBody{Error: "bad-request", Message: err.Error()})
	}
	return s.storeFailed(c, err)
}

// unapprove forgets a device approved through /pairings (the way to unpair
// one the control plane's document does not name). 404 when there is none.
func (s *Server) unapprove(c echo.Context) error {
	runner := param(c, "runnerId")
	removed, version, err := s.proj.Unapprove(c.Request().Context(), runner)
	if err != nil {
		return s.storeFailed(c, err)
	}
	if !removed {
		return writeJSON(c, http.StatusNotFound, errorBody{Error: "not-found",
			Message: fmt.Sprintf("no device approved by code has runner id %q (records of the projection document are changed with PUT or merge)", runner)})
	}
	s.log.Info("approved device forgotten", slog.String("remote", c.Request().RemoteAddr), slog.String("runnerId", runner), slog.Int64("version", version))
	return writeJSON(c, http.StatusOK, map[string]any{"runnerId": runner, "removed": true, "version": version})
}
