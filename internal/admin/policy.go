package admin

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
)

// Policies is the policy store the /policy routes drive (*policy.Store).
type Policies interface {
	Get(ctx context.Context) (policy.Document, int64, error)
	Put(ctx context.Context, d policy.Document) (int64, error)
	// MergeChanged merges and reports whether anything changed (a merge
	// that changes nothing keeps the version).
	MergeChanged(ctx context.Context, d policy.Document) (int64, bool, error)
}

// policyResult answers a write and the status route: the version, and the
// disagreements with the projection (policy.Check), at most policy.MaxDrift
// of them listed, driftCount saying how many in all. Agrees is false while
// any exist. With no projection stored, the empty projection is compared
// (it routes nothing, so every policy consent is drift).
type policyResult struct {
	Version int64 `json:"version"`
	// Changed is false when a merge changed nothing and kept the version
	// (as the projection's merge answers); a PUT always writes.
	Changed    *bool    `json:"changed,omitempty"`
	Agrees     bool     `json:"agrees"`
	Drift      []string `json:"drift"`
	DriftCount int      `json:"driftCount"`
}

func (s *Server) getPolicy(c echo.Context) error {
	doc, version, err := s.pol.Get(c.Request().Context())
	if err != nil {
		return s.storeFailed(c, err)
	}
	b, err := protocol.Marshal(doc)
	if err != nil {
		return s.storeFailed(c, err)
	}
	c.Response().Header().Set("X-Policy-Version", strconv.FormatInt(version, 10))
	return c.Blob(http.StatusOK, "application/json", b)
}

func (s *Server) putPolicy(c echo.Context) error {
	return s.writePolicy(c, false)
}

func (s *Server) mergePolicy(c echo.Context) error {
	return s.writePolicy(c, true)
}

// writePolicy validates the whole body before anything is written; a refused
// document leaves the policy as it was (one script applies an accepted one).
func (s *Server) writePolicy(c echo.Context, merge bool) error {
	r := c.Request()
	op := "replace"
	if merge {
		op = "merge"
	}
	doc, err := policy.Parse(body(c), merge)
	if err != nil {
		s.log.Warn("policy "+op+" refused; the policy in force is unchanged",
			slog.String("remote", r.RemoteAddr), slog.String("reason", err.Error()))
		return writeJSON(c, http.StatusBadRequest, errorBody{Error: "bad-request", Message: err.Error()})
	}
	var version int64
	changed := true
	if merge {
		version, changed, err = s.pol.MergeChanged(r.Context(), doc)
	} else {
		version, err = s.pol.Put(r.Context(), doc)
	}
	if err != nil {
		return s.storeFailed(c, err)
	}
	res := s.policyCheck(r.Context(), version)
	res.Changed = &changed
	s.log.Info("policy "+op, slog.String("remote", r.RemoteAddr), slog.Int64("version", version), slog.Bool("changed", changed), slog.Int("drift", res.DriftCount))
	return writeJSON(c, http.StatusOK, res)
}

func (s *Server) policyStatus(c echo.Context) error {
	_, version, err := s.pol.Get(c.Request().Context())
	if err != nil {
		return s.storeFailed(c, err)
	}
	return writeJSON(c, http.StatusOK, s.policyCheck(c.Request().Context(), version))
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
