package store

import (
	"context"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

// A server with maxmemory 64 MiB cannot hold the default 1 GiB per site:
// the relay's start-up check says so, names the figures and the fix; a
// limit that fits is quiet, and so is a server without maxmemory.
func TestSiteLimitsOverMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	capped := relaytest.StartServer(t, "--maxmemory", "64mb")
	c, err := capped.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mem, err := MaxMemory(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem) != 1 || mem[0].MaxMemory != 64<<20 {
		t.Fatalf("MaxMemory = %+v, want one server of 64 MiB", mem)
	}

	def := SiteLimits{Default: DefaultSiteLimit}
	w := SiteLimitsOverMemory(def, mem)
	if len(w) != 1 || !strings.Contains(w[0], "every site (*) store 1GiB") || !strings.Contains(w[0], "maxmemory 64MiB") ||
		!strings.Contains(w[0], "RELAY_SITE_LIMITS='*=bytes:16MiB'") {
		t.Errorf("default limit on a 64 MiB server: %q", w)
	}

	fits := SiteLimit{Jobs: 10, Bytes: 16 << 20}
	over := fits
	over.Bytes = 100 << 20
	off := fits
	off.Bytes = 0
	w = SiteLimitsOverMemory(SiteLimits{Default: fits, Sites: map[string]SiteLimit{"big": over, "free": off, "same": fits}}, mem)
	if len(w) != 2 || !strings.Contains(w[0], `site "big" store 100MiB`) || !strings.Contains(w[1], `site "free" store unlimited bytes`) {
		t.Errorf("per-site overrides: %q", w)
	}
	if w := SiteLimitsOverMemory(SiteLimits{Default: fits}, mem); w != nil {
		t.Errorf("a limit that fits warns: %q", w)
	}

	// maxmemory 0: nothing to compare with.
	free := relaytest.StartServer(t, "--maxmemory", "0")
	fc, err := free.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	mem, err = MaxMemory(ctx, fc)
	if err != nil || len(mem) != 1 || mem[0].MaxMemory != 0 {
		t.Fatalf("MaxMemory of an uncapped server = %+v, %v", mem, err)
	}
	if w := SiteLimitsOverMemory(def, mem); w != nil {
		t.Errorf("an uncapped server warns: %q", w)
	}

	// Degenerate: nothing read, or only uncapped primaries.
	if w := SiteLimitsOverMemory(def, nil); w != nil {
		t.Errorf("no servers: %q", w)
	}
}

// On a cluster every primary is read: the smallest capped one decides.
func TestMaxMemoryCluster(t *testing.T) {
	t.Parallel()
	relaytest.RequireCluster(t)
	c := relaytest.Cluster(t)
	mem, err := MaxMemory(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem) < 2 {
		t.Fatalf("MaxMemory on a cluster read %+v, want one entry per primary", mem)
	}
	for _, m := range mem {
		if m.Addr == "" || m.MaxMemory < 0 {
			t.Errorf("entry %+v", m)
		}
	}
	mem[0].MaxMemory = 1 << 20
	if w := SiteLimitsOverMemory(SiteLimits{Default: DefaultSiteLimit}, mem); len(w) != 1 || !strings.Contains(w[0], "primary "+mem[0].Addr) {
		t.Errorf("a 1 MiB primary among others: %q", w)
	}
}
