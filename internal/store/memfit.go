package store

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// ServerMemory is one primary's memory cap: maxmemory in bytes, 0 when the
// server has none (it grows until the host or container kills it).
type ServerMemory struct {
	Addr      string // "" for a single node
	MaxMemory int64
}

// MaxMemory reads maxmemory from INFO memory of the server, or of every
// primary of a cluster (a site's keys live on one shard, so what one site
// may store must fit in one primary). INFO, unlike CONFIG GET, is allowed
// on managed services.
func MaxMemory(ctx context.Context, c valkey.Client) ([]ServerMemory, error) {
	nodes := map[string]valkey.Client{"": c}
	if valkeyconn.IsCluster(c) {
		nodes = c.Nodes()
	}
	var out []ServerMemory
	for addr, n := range nodes {
		if addr != "" {
			// Replicas copy their primary; only primaries hold writes.
			if r, err := n.Do(ctx, n.B().Role().Build()).ToArray(); err == nil && len(r) > 0 {
				if s, _ := r[0].ToString(); s == "slave" {
					continue
				}
			}
		}
		txt, err := n.Do(ctx, n.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("INFO memory on %q: %w", addr, err)
		}
		v := infoField(txt, "maxmemory")
		m, err := strconv.ParseInt(v, 10, 64)
		if err != nil || m < 0 {
			return nil, fmt.Errorf("INFO memory on %q: maxmemory %q is not a byte count", addr, v)
		}
		out = append(out, ServerMemory{Addr: addr, MaxMemory: m})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// SiteLimitWarnings is SiteLimitsOverMemory for this store's limits and
// server, read within 5 s.
func (s *Store) SiteLimitWarnings(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	mem, err := MaxMemory(ctx, s.c)
	if err != nil {
		return nil, err
	}
	return SiteLimitsOverMemory(s.opts.SiteLimits, mem), nil
}

func infoField(txt, name string) string {
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// SiteLimitsOverMemory says, one sentence each, which per-site byte limits
// exceed what the smallest capped primary can hold: such a site could fill
// the store alone, and then every write of every site is refused (with
// noeviction) or the server is killed. A limit that is off counts as
// unbounded. Servers without maxmemory bound nothing and give no warning.
func SiteLimitsOverMemory(l SiteLimits, mem []ServerMemory) []string {
	var smallest ServerMemory
	for _, m := range mem {
		if m.MaxMemory > 0 && (smallest.MaxMemory == 0 || m.MaxMemory < smallest.MaxMemory) {
			smallest = m
		}
	}
	if smallest.MaxMemory == 0 {
		return nil
	}
	where := "Valkey"
	if smallest.Addr != "" {
		where = "the Valkey primary " + smallest.Addr
	}
	check := func(who string, lim SiteLimit) string {
		if lim.Bytes > 0 && lim.Bytes <= smallest.MaxMemory {
			return ""
		}
		amount := "unlimited bytes (bytes:off)"
		if lim.Bytes > 0 {
			amount = byteSize(lim.Bytes)
		}
		return fmt.Sprintf("RELAY_SITE_LIMITS lets %s store %s, more than %s can hold (maxmemory %s): one site could fill the store and every site's writes would be refused; lower it (e.g. RELAY_SITE_LIMITS='*=bytes:%s') or raise maxmemory",
			who, amount, where, byteSize(smallest.MaxMemory), byteSize(smallest.MaxMemory/4))
	}
	var out []string
	if w := check("every site (*)", l.Default); w != "" {
		out = append(out, w)
	}
	sites := make([]string, 0, len(l.Sites))
	for id := range l.Sites {
		sites = append(sites, id)
	}
	sort.Strings(sites)
	for _, id := range sites {
		if l.Sites[id] == l.Default {
			continue // already said for every site
		}
		if w := check(fmt.Sprintf("site %q", id), l.Sites[id]); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// byteSize writes n in the largest binary unit that divides it, as
// RELAY_SITE_LIMITS reads it back (bytes:NMiB).
func byteSize(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	if n >= 1<<20 {
		return strconv.FormatInt(n>>20, 10) + "MiB"
	}
	return strconv.FormatInt(n, 10)
}
