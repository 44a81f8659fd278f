// Package grantremote reaches a grant authority or a grant signer over HTTP:
// the two remote modes of the grant seam (wire.md §14.1, §14.2). Authority
// is a whole control plane run by the operator (the relay asks, it decides
// and signs); Signer only signs what the built-in engine decided, so the
// private key stays in a KMS or HSM behind it. The exact HTTP contract is in
// the README ("Grants").
package grantremote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/byollm/relay-go/internal/grant"
)

// Paths under the authority's base URL.
const (
	AuthorGrantPath = "/author-grant"
	SatisfiablePath = "/satisfiable"
)

// MaxReplyBytes bounds a reply body. A signed grant is about 600 bytes of
// JSON; anything near this bound is not an answer.
const MaxReplyBytes = 64 << 10

// Options configures a remote endpoint.
type Options struct {
	// Token, if set, is sent as "Authorization: Bearer <token>".
	Token string
	// Client is the HTTP client; default one with no overall timeout (the
	// relay bounds every call with its context).
	Client *http.Client
}

// Authority is a remote control plane speaking the contract in the README.
// It implements relay.GrantAuthority.
type Authority struct {
	author, satisfiable string
	token               string
	client              *http.Client
}

// NewAuthority checks base (an absolute http(s) URL, no query or fragment)
// and returns an Authority posting to base+AuthorGrantPath and
// base+SatisfiablePath.
func NewAuthority(base string, opt Options) (*Authority, error) {
	b, err := checkURL(base)
	if err != nil {
		return nil, err
	}
	return &Authority{
		author:      b + AuthorGrantPath,
		satisfiable: b + SatisfiablePath,
		token:       opt.Token,
		client:      clientOf(opt),
	}, nil
}

// checkURL returns base without trailing slashes, or why it cannot be used.
func checkURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not an absolute http(s) URL without query or fragment", base)
	}
	return strings.TrimRight(base, "/"), nil
}

func clientOf(opt Options) *http.Client {
	if opt.Client != nil {
		return opt.Client
	}
	return &http.Client{Transport: http.DefaultTransport}
}

// authorInput is the §14.1 input, keys in the reference's order; job is the
// ClaimedStub verbatim.
type authorInput struct {
	Job          json.RawMessage `json:"job"`
	SiteID       string          `json:"siteId"`
	SiteKey      string          `json:"siteKey"`
	Purpose      *string         `json:"purpose,omitempty"`
	Owner        string          `json:"owner"`
	RunnerID     string          `json:"runnerId"`
	Capabilities json.RawMessage `json:"capabilities"`
}

// AuthorGrant posts the §14.1 input and reads {granted} or {declined}.
// Anything else (a non-200 status, a body that is not exactly one of the two
// shapes, a grant that is not for this job) is an error, which the relay
// counts as a transient decline.
func (a *Authority) AuthorGrant(ctx context.Context, req grant.Request) (grant.Decision, error) {
	in := authorInput{
		Job: req.Job, SiteID: req.SiteID, SiteKey: req.SiteKey,
		Owner: req.Owner, RunnerID: req.RunnerID, Capabilities: req.Capabilities,
	}
	if req.HasPurpose {
		p := req.Purpose
		in.Purpose = &p
	}
	body, err := post(ctx, a.client, a.author, a.token, in)
	if err != nil {
		return grant.Decision{}, fmt.Errorf("author-grant: %w", err)
	}
	var out struct {
		Granted  json.RawMessage `json:"granted"`
		Declined *struct {
			Permanent *bool   `json:"permanent"`
			Reason    *string `json:"reason"`
		} `json:"declined"`
	}
	if err := strictDecode(body, &out); err != nil {
		return grant.Decision{}, fmt.Errorf("author-grant: malformed reply: %w", err)
	}
	switch {
	case out.Granted != nil && out.Declined == nil:
		if err := checkGrant(out.Granted, req); err != nil {
			return grant.Decision{}, fmt.Errorf("author-grant: malformed reply: %w", err)
		}
		return grant.Decision{Granted: out.Granted}, nil
	case out.Declined != nil && out.Granted == nil:
		if out.Declined.Permanent == nil {
			return grant.Decision{}, errors.New(`author-grant: malformed reply: "declined" has no boolean "permanent"`)
		}
		d := grant.Decision{Permanent: *out.Declined.Permanent}
		if out.Declined.Reason != nil {
			d.Reason = *out.Declined.Reason
		}
		return d, nil
	}
	return grant.Decision{}, errors.New(`author-grant: malformed reply: want exactly one of "granted" or "declined"`)
}

// checkGrant makes sure a granted document is an object naming this job: a
// reply for another job (a confused or replayed answer) would be refused by
// the daemon anyway, after costing it a round trip.
func checkGrant(raw json.RawMessage, req grant.Request) error {
	var g map[string]json.RawMessage
	if err := json.Unmarshal(raw, &g); err != nil || g == nil {
		return errors.New(`"granted" is not an object`)
	}
	var job struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(req.Job, &job); err != nil {
		return fmt.Errorf("the job does not decode: %w", err)
	}
	var jobID, sig string
	if err := json.Unmarshal(g["jobId"], &jobID); err != nil || jobID != job.ID {
		return fmt.Errorf(`"granted" names job %q, not %q`, jobID, job.ID)
	}
	if err := json.Unmarshal(g["signature"], &sig); err != nil || sig == "" {
		return errors.New(`"granted" has no string "signature"`)
	}
	return nil
}

type satisfiableInput struct {
	SiteID  string  `json:"siteId"`
	Owner   string  `json:"owner"`
	Purpose *string `json:"purpose,omitempty"`
	Kind    string  `json:"kind"`
}

// Satisfiable posts {siteId, owner, purpose?, kind} and reads {verdict}.
// A verdict outside the four is an error (the enqueue's retryable 503):
// the contract is ours, so an answer outside it is a broken authority, not
// a yes.
func (a *Authority) Satisfiable(ctx context.Context, req grant.SatisfiableRequest) (grant.Verdict, error) {
	in := satisfiableInput{SiteID: req.SiteID, Owner: req.Owner, Kind: req.Kind}
	if req.HasPurpose {
		p := req.Purpose
		in.Purpose = &p
	}
	body, err := post(ctx, a.client, a.satisfiable, a.token, in)
	if err != nil {
		return "", fmt.Errorf("satisfiable: %w", err)
	}
	var out struct {
		Verdict *string `json:"verdict"`
	}
	if err := strictDecode(body, &out); err != nil {
		return "", fmt.Errorf("satisfiable: malformed reply: %w", err)
	}
	if out.Verdict == nil {
		return "", errors.New(`satisfiable: malformed reply: no "verdict"`)
	}
	switch v := grant.Verdict(*out.Verdict); v {
	case grant.VerdictOK, grant.VerdictNotDeclared, grant.VerdictUnmapped, grant.VerdictWaiting:
		return v, nil
	}
	return "", fmt.Errorf("satisfiable: malformed reply: unknown verdict %q", *out.Verdict)
}

// post sends v as JSON and returns the 200 reply's body, read up to
// MaxReplyBytes.
func post(ctx context.Context, c *http.Client, u, token string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxReplyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read reply after %v: %w", time.Since(start).Round(time.Millisecond), err)
	}
	if len(body) > MaxReplyBytes {
		return nil, fmt.Errorf("reply larger than %d bytes", MaxReplyBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %.200q", resp.StatusCode, body)
	}
	return body, nil
}

// strictDecode decodes exactly one JSON value with no unknown keys.
func strictDecode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
