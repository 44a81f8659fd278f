package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// migrateUsage heads relay migrate -h.
const migrateUsage = `Usage: relay migrate [-valkey-url URL] [-namespace NS]

Moves a namespace to this relay's key layout (v5): a new namespace gets its
layout record; an older one is moved step by step, each version recorded as
it is reached, once no live replica reads an older layout only. Run it with
the relays of the older version stopped. From v4: every job whose id is a
UUID is moved to the id's compact key part, one job per script, so an
interrupted run leaves each job moved or not and a second run finishes it.
Exit 0: the namespace is in this layout; 1: it is not (the message says
why) or an error; 2: bad flags.

`

// migrate moves a namespace to this relay's layout (store.Migrate),
// refusing while a live replica's heartbeat record says it reads an older
// layout (olderReplicas).
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("relay migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("valkey-url", getenv("RELAY_VALKEY_URL"), "Valkey to migrate (RELAY_VALKEY_URL)")
	ns := fs.String("namespace", firstNonEmpty(getenv("RELAY_NAMESPACE"), store.DefaultNamespace), "namespace to migrate (RELAY_NAMESPACE)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), migrateUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "relay migrate: unexpected argument %q; see relay migrate -h\n", fs.Arg(0))
		return exitConfig
	}
	if *url == "" {
		fmt.Fprintln(stderr, "relay migrate: set RELAY_VALKEY_URL or -valkey-url: the embedded store has nothing to migrate")
		return exitConfig
	}
	client, closeFn, _, err := valkeyconn.Open(ctx, *url, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		fmt.Fprintf(stderr, "relay migrate: %v\n", err)
		return exitRuntime
	}
	defer closeFn()
	rep, err := store.Migrate(ctx, client, *ns, func(ctx context.Context, st *store.Store) error {
		recs, err := opsstore.New(st).ReplicaRecords(ctx, opsstore.MaxReplicaRecords)
		if err != nil {
			return err
		}
		if older := olderReplicas(recs, store.LayoutVersion); len(older) > 0 {
			return fmt.Errorf("namespace %q is served by replicas that cannot read layout v%d: %s. "+
				"Stop them, wait for their records to expire (15 s after they stop; the operations view's fleet page, "+
				"/ui/ on the admin listener, lists them), then run this again", *ns, store.LayoutVersion, strings.Join(older, ", "))
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "relay migrate: %v\n", err)
		return exitRuntime
	}
	switch {
	case rep.From == 0:
		fmt.Fprintf(stdout, "namespace %q: new; layout v%d recorded.\n", *ns, rep.To)
	case !rep.Written:
		fmt.Fprintf(stdout, "namespace %q: already in layout v%d; nothing to do.\n", *ns, rep.To)
	default:
		fmt.Fprintf(stdout, "namespace %q: layout v%d -> v%d; start the relays of this version.\n", *ns, rep.From, rep.To)
	}
	return exitOK
}

// olderReplicas names the replicas whose heartbeat record says they read
// a layout older than target (or says none).
func olderReplicas(recs []json.RawMessage, target int) []string {
	var older []string
	for _, raw := range recs {
		var r opsview.Replica
		if json.Unmarshal(raw, &r) != nil || r.Layout < target {
			older = append(older, fmt.Sprintf("%s (version %q)", r.ID, r.Version))
		}
	}
	return older
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}
