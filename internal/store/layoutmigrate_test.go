package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/layout"

	"github.com/byollm/relay-go/test/relaytest"
)

// The migration mechanism, with a step registered from layout 3 to 4 (this
// relay ships one from 4 to 5, tested in rekey_test.go): a namespace of an older layout is refused at start,
// Migrate runs the registered step, records the version it reached, and the
// relay then starts; one with no path of steps, or newer, is refused with
// the steps to take, and nothing is written.
func TestMigrationStepRunsAndRecordsTheVersion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := relaytest.Namespace(t, b.client)
		c := b.client
		setVersion := func(v string) {
			t.Helper()
			if err := c.Do(ctx, c.B().Hset().Key(ns+":{"+ns+"}:layout").FieldValue().FieldValue("version", v).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		version := func() string {
			t.Helper()
			v, err := c.Do(ctx, c.B().Hget().Key(ns+":{"+ns+"}:layout").Field("version").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}

		// A new namespace: Migrate writes the record.
		rep, err := Migrate(ctx, c, ns, nil)
		if err != nil || rep.From != 0 || rep.To != LayoutVersion || !rep.Written || version() != strconv.Itoa(LayoutVersion) {
			t.Fatalf("migrate a new namespace: %+v %v (record v%s)", rep, err, version())
		}
		if rep, err := Migrate(ctx, c, ns, nil); err != nil || rep.From != LayoutVersion || rep.Written || len(rep.Steps) != 0 {
			t.Fatalf("migrate a current namespace: %+v %v", rep, err)
		}

		// v3 with no step registered (this relay's own set): refused at
		// start and by Migrate, which writes nothing.
		setVersion("3")
		_, err = New(ctx, c, Options{Namespace: ns, Logger: relaytest.Discard()})
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "new RELAY_NAMESPACE") {
			t.Fatalf("New on v3 with no step: %v", err)
		}
		if _, err := Migrate(ctx, c, ns, nil); !errors.Is(err, ErrLayout) || version() != "3" {
			t.Fatalf("Migrate with no step: %v (record v%s)", err, version())
		}

		// With a step from 3: the refusal names `relay migrate`.
		var ran []string
		steps := layout.Steps[*Store]{3: {From: 3, Run: func(ctx context.Context, s *Store) error {
			ran = append(ran, s.Namespace())
			if s.Layout() != 3 {
				t.Errorf("the step's Store reads layout v%d, want the namespace's v3", s.Layout())
			}
			return s.c.Do(ctx, s.c.B().Set().Key(s.k.p+"moved").Value("1").Build()).Error()
		}}}
		if err := layout.Refusal(ns, 3, steps, 4); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "run `relay migrate`") {
			t.Fatalf("refusal with a step: %v", err)
		}

		// A ready check that refuses: no step runs.
		refuse := errors.New("an old replica is live")
		if _, err := migrate(ctx, c, ns, steps, 4, func(context.Context, *Store) error { return refuse }); !errors.Is(err, refuse) || len(ran) != 0 || version() != "3" {
			t.Fatalf("refused by ready: %v, ran %v, record v%s", err, ran, version())
		}
		// A failing step leaves the record as it was.
		boom := errors.New("boom")
		failing := layout.Steps[*Store]{3: {From: 3, Run: func(context.Context, *Store) error { return boom }}}
		if _, err := migrate(ctx, c, ns, failing, 4, nil); !errors.Is(err, boom) || version() != "3" {
			t.Fatalf("failing step: %v, record v%s", err, version())
		}

		readies := 0
		rep, err = migrate(ctx, c, ns, steps, 4, func(context.Context, *Store) error { readies++; return nil })
		if err != nil || rep.From != 3 || rep.To != 4 || !rep.Written || !slices.Equal(rep.Steps, []int{3}) || readies != 1 {
			t.Fatalf("migrate v3 -> v4: %+v %v (ready ran %d times)", rep, err, readies)
		}
		if version() != "4" || !slices.Equal(ran, []string{ns}) {
			t.Fatalf("after the step: record v%s, ran %v", version(), ran)
		}
		if got, _ := c.Do(ctx, c.B().Get().Key(ns+":{"+ns+"}:moved").Build()).ToString(); got != "1" {
			t.Fatalf("the step's write: %q", got)
		}
		// v4 is not this relay's layout: its own step (4 -> 5) moves it on.
		if _, err := New(ctx, c, Options{Namespace: ns, Logger: relaytest.Discard()}); !errors.Is(err, ErrLayout) {
			t.Fatalf("New on v4: %v", err)
		}
		if rep, err := Migrate(ctx, c, ns, nil); err != nil || !slices.Equal(rep.Steps, []int{4}) || version() != strconv.Itoa(LayoutVersion) {
			t.Fatalf("migrate v4 -> v%d: %+v %v (record v%s)", LayoutVersion, rep, err, version())
		}
		if _, err := New(ctx, c, Options{Namespace: ns, Logger: relaytest.Discard()}); err != nil {
			t.Fatalf("New after the migration: %v", err)
		}
		// Again: nothing to do, the step does not run twice.
		if rep, err := migrate(ctx, c, ns, steps, LayoutVersion, nil); err != nil || len(rep.Steps) != 0 || len(ran) != 1 {
			t.Fatalf("migrate again: %+v %v, ran %v", rep, err, ran)
		}

		// A gap in the steps (v2, with only 3 -> 4 registered) is refused.
		setVersion("2")
		if _, err := migrate(ctx, c, ns, steps, 4, nil); !errors.Is(err, ErrLayout) || len(ran) != 1 || version() != "2" {
			t.Fatalf("migrate from v2 with a gap: %v, ran %v, record v%s", err, ran, version())
		}
		// Newer than this relay: refused, by New and Migrate alike.
		newer := strconv.Itoa(LayoutVersion + 1)
		setVersion(newer)
		if _, err := Migrate(ctx, c, ns, nil); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "newer") || version() != newer {
			t.Fatalf("Migrate on a newer layout: %v", err)
		}
	})
}
