package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/grantremote"
	"github.com/byollm/relay-go/internal/relay"
)

// signer is the built-in engine's signing seam: what grantremote.Signer
// (and a key held in a file) provide.
type signer interface {
	Sign(ctx context.Context, msg []byte) ([]byte, error)
	Public() string
}

// newBuiltinAuthority is where the built-in engine (a Go port of
// @byollm/control-plane, its policy in Valkey) is constructed with a
// signer: a key from RELAY_GRANT_KEY_FILE, or the remote signer. This build
// does not carry the engine yet, so the signer mode refuses to start rather
// than pretend.
var newBuiltinAuthority = func(cfg config.Config, s signer, log *slog.Logger) (relay.GrantAuthority, error) {
	return nil, errors.New("RELAY_GRANT_SIGNER_URL needs the built-in grant engine, which this build does not include; use RELAY_GRANT_AUTHORITY_URL, or unset it")
}

// grantAuthority builds the authority the configuration asks for; nil when
// grants are off.
func grantAuthority(ctx context.Context, cfg config.Config, log *slog.Logger) (relay.GrantAuthority, error) {
	opt := grantremote.Options{Token: cfg.GrantAuthorityToken}
	switch cfg.GrantMode() {
	case config.GrantsAuthority:
		a, err := grantremote.NewAuthority(cfg.GrantAuthorityURL, opt)
		if err != nil {
			return nil, fmt.Errorf("RELAY_GRANT_AUTHORITY_URL: %w", err)
		}
		log.Info("grants: remote authority decides and signs; devices pair with its key",
			slog.String("authorGrant", cfg.GrantAuthorityURL+grantremote.AuthorGrantPath),
			slog.String("satisfiable", cfg.GrantAuthorityURL+grantremote.SatisfiablePath))
		return a, nil
	case config.GrantsSigner:
		s, err := grantremote.NewSigner(cfg.GrantSignerURL, cfg.ControlPlanePublic, opt)
		if err != nil {
			return nil, fmt.Errorf("RELAY_GRANT_SIGNER_URL: %w", err)
		}
		probeSigner(ctx, s, cfg.GrantTimeout, log)
		return newBuiltinAuthority(cfg, s, log)
	}
	log.Info("grants: off; claims carry no grant, so daemons serve only their owner's jobs (direct mode), and enqueue refuses nothing for satisfiability")
	return nil, nil
}

// probeSigner signs one throwaway message at start, so a signer holding
// another key than RELAY_CONTROL_PLANE_PUBLIC is reported now rather than
// as every grant refused at every device. A signer that is down is only
// logged: it may come up after the relay, and each grant retries anyway.
func probeSigner(ctx context.Context, s *grantremote.Signer, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := s.Sign(ctx, []byte("byollm relay: signer probe")); err != nil {
		log.Warn("grants: the remote signer did not sign a probe; grants fail (transient declines) until it does", slog.Any("err", err))
		return
	}
	log.Info("grants: remote signer answered a probe with a signature that verifies against RELAY_CONTROL_PLANE_PUBLIC")
}
