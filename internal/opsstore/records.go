package opsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/internal/store"
)

// MaxReplicaRecords bounds the replica index.
const MaxReplicaRecords = 256

// maxReplicaRecordBytes bounds one replica's heartbeat record.
const maxReplicaRecordBytes = 1 << 20

// PutReplicaRecord writes a replica's heartbeat record (JSON), which expires
// after ttlMs unless written again, and returns Valkey's clock.
func (s *Store) PutReplicaRecord(ctx context.Context, replicaID string, record []byte, ttlMs int64) (int64, error) {
	if err := s.r.CheckID("replica id", replicaID); err != nil {
		return 0, fmt.Errorf("replica record: %w", err)
	}
	if !json.Valid(record) || len(record) > maxReplicaRecordBytes {
		return 0, fmt.Errorf("replica record: %w: not JSON or over 1 MiB", store.ErrInvalidInput)
	}
	k := s.r.OpsKeys()
	msg, err := s.r.RunOpsScript(ctx, "ops_replica_put", []string{k.Replicas, k.ReplicaRecord(replicaID)},
		store.EncodeKeyPart(replicaID), string(record), strconv.FormatInt(ttlMs, 10), strconv.Itoa(MaxReplicaRecords))
	if err != nil {
		return 0, fmt.Errorf("replica record: %w", err)
	}
	v, err := scriptrun.Text(msg)
	if err != nil {
		return 0, fmt.Errorf("replica record: %w", err)
	}
	return strconv.ParseInt(v, 10, 64)
}

// ReplicaRecords reads the live replicas' records, newest first, at most limit.
func (s *Store) ReplicaRecords(ctx context.Context, limit int) ([]json.RawMessage, error) {
	msg, err := s.r.RunOpsScript(ctx, "ops_replicas", []string{s.r.OpsKeys().Replicas}, strconv.Itoa(limit))
	if err != nil {
		return nil, fmt.Errorf("replica records: %w", err)
	}
	return rawList(msg, "replica records")
}

func rawList(msg valkey.ValkeyMessage, what string) ([]json.RawMessage, error) {
	parts, err := scriptrun.Elems(msg, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make([]json.RawMessage, 0, len(parts))
	for _, p := range parts {
		v, err := scriptrun.Text(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, json.RawMessage(v))
	}
	return out, nil
}

// MaxViewTokens bounds how many scoped view tokens exist at once.
const MaxViewTokens = 1000

// ErrTokenRefused is PutViewToken's answer when the cap is reached or the
// id or digest exists already.
var ErrTokenRefused = errors.New("view token refused: too many tokens, or the id exists")

// ErrTokenSiteGone is PutViewToken's answer when the stored projection has
// no such site, and ErrTokenProjectionMoved when the projection changed
// since the caller saw the site in it (read it again and retry).
var (
	ErrTokenSiteGone        = errors.New("view token refused: the stored projection has no such site")
	ErrTokenProjectionMoved = errors.New("view token refused: the projection changed since it was read; try again")
)

// PutViewToken stores a view token's record under the token's digest (the
// caller hashes; the token itself is never stored), bound to the current
// generation of its site: the token reads nothing once the site leaves the
// projection, even if a site of that id comes back. version is the
// projection version in which the caller saw the site ("" skips the check,
// which only matters before the projection records site generations).
func (s *Store) PutViewToken(ctx context.Context, digest, id string, record []byte, site, version string) error {
	k := s.r.OpsKeys()
	n, err := s.runInt(ctx, "ops_token_put", []string{k.Tokens, k.TokenIDs, k.TokenGens, k.ProjectionSites, k.Projection},
		digest, id, string(record), strconv.Itoa(MaxViewTokens), site, version)
	if err != nil {
		return fmt.Errorf("put view token: %w", err)
	}
	switch n {
	case 1:
		return nil
	case -1:
		return ErrTokenProjectionMoved
	case -2:
		return ErrTokenSiteGone
	}
	return ErrTokenRefused
}

// ViewToken reads a token's record by digest; nil, nil when there is none,
// or its site's generation has passed.
func (s *Store) ViewToken(ctx context.Context, digest string) (json.RawMessage, error) {
	k := s.r.OpsKeys()
	msg, err := s.r.RunOpsScript(ctx, "ops_token_get", []string{k.Tokens, k.TokenGens, k.ProjectionSites}, digest)
	if err != nil {
		return nil, fmt.Errorf("view token: %w", err)
	}
	if msg.IsNil() {
		return nil, nil
	}
	v, err := scriptrun.Text(msg)
	if err != nil {
		return nil, fmt.Errorf("view token: %w", err)
	}
	return json.RawMessage(v), nil
}

// DropViewToken revokes a token by id; false when there was none.
func (s *Store) DropViewToken(ctx context.Context, id string) (bool, error) {
	k := s.r.OpsKeys()
	n, err := s.runInt(ctx, "ops_token_drop", []string{k.Tokens, k.TokenIDs, k.TokenGens}, id)
	if err != nil {
		return false, fmt.Errorf("drop view token: %w", err)
	}
	return n == 1, nil
}

// ViewTokens lists every token's record.
func (s *Store) ViewTokens(ctx context.Context) ([]json.RawMessage, error) {
	msg, err := s.r.RunOpsScript(ctx, "ops_token_list", []string{s.r.OpsKeys().Tokens})
	if err != nil {
		return nil, fmt.Errorf("view tokens: %w", err)
	}
	return rawList(msg, "view tokens")
}
