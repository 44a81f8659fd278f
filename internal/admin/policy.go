package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
)

// Policies is the policy store the /policy routes drive (*policy.Store).
type Policies interface {
	Get(ctx context.Context) (policy.Document, int64, error)
	Put(ctx context.Context, d policy.Document) (int64, error)
	Merge(ctx context.Context, d policy.Document) (int64, error)
}

// policyResult answers a write and the status route: the version, and the
// disagreements with the projection (policy.Check), at most policy.MaxDrift
// of them listed, driftCount saying how many in all. Agrees is false while
// any exist. With no projection stored, the empty projection is compared
// (it routes nothing, so every policy consent is drift).
type policyResult struct {
	Version    int64    `json:"version"`
	Agrees     bool     `json:"agrees"`
	Drift      []string `json:"drift"`
	DriftCount int      `json:"driftCount"`
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	doc, version, err := s.pol.Get(r.Context())
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	b, err := protocol.Marshal(doc)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	w.Header().Set("X-Policy-Version", strconv.FormatInt(version, 10))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b) //nolint:errcheck // the client went away
}

func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request) {
	s.writePolicy(w, r, false)
}

func (s *Server) mergePolicy(w http.ResponseWriter, r *http.Request) {
	s.writePolicy(w, r, true)
}

// writePolicy validates the whole body before anything is written; a refused
// document leaves the policy as it was (one script applies an accepted one).
func (s *Server) writePolicy(w http.ResponseWriter, r *http.Request, merge bool) {
	op := "replace"
	if merge {
		op = "merge"
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: "too-large",
				Message: fmt.Sprintf("body exceeds %d bytes (raise RELAY_ADMIN_MAX_BODY to accept more)", s.maxBody)})
			return
		}
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad-request", Message: "cannot read body: " + err.Error()})
		return
	}
	doc, err := policy.Parse(body, merge)
	if err != nil {
		s.log.Warn("policy "+op+" refused; the policy in force is unchanged",
			slog.String("remote", r.RemoteAddr), slog.String("reason", err.Error()))
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad-request", Message: err.Error()})
		return
	}
	apply := s.pol.Put
	if merge {
		apply = s.pol.Merge
	}
	version, err := apply(r.Context(), doc)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	res := s.policyCheck(r.Context(), version)
	s.log.Info("policy "+op, slog.String("remote", r.RemoteAddr), slog.Int64("version", version), slog.Int("drift", res.DriftCount))
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) policyStatus(w http.ResponseWriter, r *http.Request) {
	_, version, err := s.pol.Get(r.Context())
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.policyCheck(r.Context(), version))
}

// policyCheck compares the stored policy with the stored projection and
// logs one warning when they disagree, so drift is never silent.
func (s *Server) policyCheck(ctx context.Context, version int64) policyResult {
	res := policyResult{Version: version, Agrees: true}
	if s.proj == nil {
		return res
	}
	pdoc, err := s.proj.Get(ctx)
	if err != nil {
		s.log.Warn("policy check: cannot read the projection", slog.Any("err", err))
		return res
	}
	f := projection.Fixture{}
	if len(pdoc.JSON) > 0 {
		if f, err = projection.Parse(pdoc.JSON); err != nil {
			s.log.Warn("policy check: stored projection unreadable", slog.Any("err", err))
			return res
		}
	}
	doc, _, err := s.pol.Get(ctx)
	if err != nil {
		s.log.Warn("policy check: cannot read the policy", slog.Any("err", err))
		return res
	}
	res.Drift, res.DriftCount = policy.Check(doc, f)
	if res.Drift == nil {
		res.Drift = []string{}
	}
	res.Agrees = res.DriftCount == 0
	if !res.Agrees {
		s.log.Warn("the grant policy and the projection disagree; grants follow the policy, routing the projection",
			slog.Int("disagreements", res.DriftCount), slog.String("first", res.Drift[0]))
	}
	return res
}
