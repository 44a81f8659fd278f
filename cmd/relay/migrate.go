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

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// migrateUsage heads relay migrate -h.
const migrateUsage = `Usage: relay migrate [-valkey-url URL] [-namespace NS] [-drop-jobs]

Moves a namespace to this relay's key layout (v4). From v3: writes v4 into the
layout record once no live replica reads v3 only; no data moves. From v2: pins
the sites with stored jobs to their shard, then v3 and v4 (stop the v2 relays
first). From v1: refuses while v1 jobs remain (exit 1), then deletes the v1
routing keys. Pairing codes, the projection, approvals and the policy carry
over. Exit 0: the namespace is in this layout; 1: not yet (or an error); 2: bad
flags.

`

// migrate moves a namespace to this relay's layout (store.Migrate). From
// layout v3 it moves no data: it writes v4 into the layout record, once no
// live replica is of a version that reads v3 only (olderReplicas). From
// layout v2 it moves no data either: it pins the sites with stored jobs to
// their shard and moves the record to v3, then v4 (run it once the v2
// relays are stopped; this version reads v2's job records as they are).
// From the single-slot layout (v1) it reports the v1 jobs still stored and, once there are none (the old relays drained them)
// or with -drop-jobs, deletes the v1 routing keys and writes the layout
// record. Pairing codes, the projection, approvals and the policy carry
// over untouched. Exit 0: the namespace is in the new layout; 1: jobs are
// still draining (or an error); 2: bad flags.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("relay migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("valkey-url", getenv("RELAY_VALKEY_URL"), "Valkey to migrate (RELAY_VALKEY_URL)")
	ns := fs.String("namespace", firstNonEmpty(getenv("RELAY_NAMESPACE"), store.DefaultNamespace), "namespace to migrate (RELAY_NAMESPACE)")
	drop := fs.Bool("drop-jobs", false, "delete v1 jobs still stored instead of waiting for them to drain")
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
	client, closeFn, _, err := valkeyconn.Open(ctx, *url, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		fmt.Fprintf(stderr, "relay migrate: %v\n", err)
		return exitRuntime
	}
	defer closeFn()
	if older, err := olderReplicas(ctx, client, *ns); err != nil {
		fmt.Fprintf(stderr, "relay migrate: %v\n", err)
		return exitRuntime
	} else if len(older) > 0 {
		fmt.Fprintf(stderr, "relay migrate: namespace %q is served by replicas that cannot read layout v%d: %s. "+
			"Replace them with relays of this version (a rolling upgrade is fine: both serve the namespace as it is), "+
			"wait for their records to expire (15 s after they stop; the operations view's fleet page, /ui/ on the admin listener, lists them), "+
			"then run this again.\n", *ns, store.LayoutVersion, strings.Join(older, ", "))
		return exitRuntime
	}
	rep, err := store.Migrate(ctx, client, *ns, *drop)
	if err != nil {
		fmt.Fprintf(stderr, "relay migrate: %v\n", err)
		return exitRuntime
	}
	if rep.From == 3 {
		fmt.Fprintf(stdout, "namespace %q: layout v3 -> v%d: no data moved; the relays write compact job records "+
			"from their next layout check (within 10 s).\n", *ns, store.LayoutVersion)
		return exitOK
	}
	if rep.From == 2 {
		fmt.Fprintf(stdout, "namespace %q: layout v2 -> v%d: %d sites with stored jobs pinned to their shard (%d jobs, none moved); "+
			"new sites are now placed balanced over the primaries; start the new relays.\n", *ns, store.LayoutVersion, rep.Pinned, rep.Jobs)
		return exitOK
	}
	if rep.From == store.LayoutVersion {
		fmt.Fprintf(stdout, "namespace %q: already in layout v%d; nothing to do.\n", *ns, store.LayoutVersion)
		return exitOK
	}
	if rep.Jobs > 0 && !*drop {
		fmt.Fprintf(stdout, "namespace %q: %d jobs still in the v1 layout %v, %d presence records; nothing changed.\n"+
			"Keep the old relays running with sites' traffic stopped until their deadlines clear them, then run this again "+
			"(or pass -drop-jobs to delete them).\n", *ns, rep.Jobs, rep.ByState, rep.Presence)
		return exitRuntime
	}
	fmt.Fprintf(stdout, "namespace %q: layout v%d (%d v1 keys deleted, %d jobs dropped); start the new relays.\n",
		*ns, store.LayoutVersion, rep.Deleted, rep.Jobs)
	return exitOK
}

// olderReplicas names the live replicas of a v3 namespace whose heartbeat
// record says they read an older layout than this relay's (records of relays
// before v4 carry none). Other namespaces have nothing to check: a v2
// namespace is served by v2 relays only, which migrate requires stopped,
// and v1 and new namespaces by none of this version's peers.
func olderReplicas(ctx context.Context, client valkey.Client, ns string) ([]string, error) {
	st, err := store.New(ctx, client, store.Options{Namespace: ns, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || st.Layout() != 3 {
		return nil, nil // store.Migrate reports what this namespace is
	}
	recs, err := st.ReplicaRecords(ctx, store.MaxReplicaRecords)
	if err != nil {
		return nil, err
	}
	var older []string
	for _, raw := range recs {
		var r opsview.Replica
		if json.Unmarshal(raw, &r) != nil || r.Layout < store.LayoutVersion {
			older = append(older, fmt.Sprintf("%s (version %q)", r.ID, r.Version))
		}
	}
	return older, nil
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}
