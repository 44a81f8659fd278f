package replica

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/grantremote"
	"github.com/byollm/relay-go/internal/relay"
)

// newBuiltinAuthority builds the built-in engine (the Go port of
// @byollm/control-plane): it decides from the policy in Valkey and from what
// devices advertise (the relay's presence records), and signs with s, a key
// from RELAY_GRANT_KEY_FILE or the remote signer. issuedAt is the policy
// read's Valkey clock (now nil), so every replica stamps grants with one clock.
func newBuiltinAuthority(policy grantengine.PolicyReader, advertised grantengine.Advertiser, s grantengine.Signer) (*grantengine.Engine, error) {
	eng, err := grantengine.New(policy, advertised, s, nil)
	if err != nil {
		return nil, fmt.Errorf("built-in grant engine: %w", err)
	}
	return eng, nil
}

// grantAuthority builds the authority the configuration asks for, and the
// key devices pin at pairing (controlPlanePublic); nil and "" when grants
// are off. policy and advertised feed the built-in engine (key file and
// signer modes).
func grantAuthority(ctx context.Context, cfg config.Config, policy grantengine.PolicyReader, advertised grantengine.Advertiser, log *slog.Logger) (relay.GrantAuthority, string, error) {
	opt := grantremote.Options{Token: cfg.GrantAuthorityToken}
	switch cfg.GrantMode() {
	case config.GrantsBuiltin:
		key, err := grantengine.LoadKeyFile(cfg.GrantKeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("RELAY_GRANT_KEY_FILE: %w", err)
		}
		// config refused a RELAY_CONTROL_PLANE_PUBLIC that differs from
		// the key; checked again here because the file is read twice and
		// may have been replaced in between.
		if cfg.ControlPlanePublic != "" && cfg.ControlPlanePublic != key.Public() {
			return nil, "", fmt.Errorf("RELAY_CONTROL_PLANE_PUBLIC is %s but the key in RELAY_GRANT_KEY_FILE (%s) has the public half %s; unset RELAY_CONTROL_PLANE_PUBLIC or set it to %s",
				cfg.ControlPlanePublic, cfg.GrantKeyFile, key.Public(), key.Public())
		}
		eng, err := newBuiltinAuthority(policy, advertised, key)
		if err != nil {
			return nil, "", err
		}
		log.Info("grants: built-in engine decides from the policy in Valkey and signs with the key file; devices pair with its public half",
			slog.String("controlPlanePublic", eng.Public()), slog.String("keyFile", cfg.GrantKeyFile))
		return eng, eng.Public(), nil
	case config.GrantsAuthority:
		a, err := grantremote.NewAuthority(cfg.GrantAuthorityURL, opt)
		if err != nil {
			return nil, "", fmt.Errorf("RELAY_GRANT_AUTHORITY_URL: %w", err)
		}
		log.Info("grants: remote authority decides and signs; devices pair with its key",
			slog.String("authorGrant", cfg.GrantAuthorityURL+grantremote.AuthorGrantPath),
			slog.String("satisfiable", cfg.GrantAuthorityURL+grantremote.SatisfiablePath))
		return a, cfg.ControlPlanePublic, nil
	case config.GrantsSigner:
		s, err := grantremote.NewSigner(cfg.GrantSignerURL, cfg.ControlPlanePublic, opt)
		if err != nil {
			return nil, "", fmt.Errorf("RELAY_GRANT_SIGNER_URL: %w", err)
		}
		probeSigner(ctx, s, cfg.GrantTimeout, log)
		eng, err := newBuiltinAuthority(policy, advertised, s)
		if err != nil {
			return nil, "", err
		}
		log.Info("grants: built-in engine decides from the policy in Valkey; the remote signer signs",
			slog.String("signer", cfg.GrantSignerURL), slog.String("controlPlanePublic", eng.Public()))
		return eng, eng.Public(), nil
	}
	log.Info("grants: off; claims carry no grant, so daemons serve only their owner's jobs (direct mode), and enqueue refuses nothing for satisfiability")
	return nil, "", nil
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
