package opsview

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// counting is StoreSource over a store whose every Valkey call (script,
// TIME, the pipelined reads) passes its ObserveScript hook, which counts
// them; Valkey() adds its PING and INFO, which go to the client directly.
type counting struct {
	StoreSource
	n atomic.Int64
}

func (c *counting) Valkey(ctx context.Context) (ValkeyInfo, error) {
	c.n.Add(2)
	return c.StoreSource.Valkey(ctx)
}

// bigSite is site-a with many devices and live jobs, behind a counting
// source, and the pages one refresh of each view loads.
func bigSite(t testing.TB, devices, jobs int) (*httptest.Server, *counting, []string) {
	e := setup(t)
	ctx := context.Background()
	var ds, cs []string
	for i := range devices {
		o := fmt.Sprintf("owner-%d", i)
		cs = append(cs, `{"owner":"`+o+`","siteId":"site-a"}`)
		ds = append(ds, fmt.Sprintf(`{"owner":"%s","runnerId":"dev-%d","device":{"identity":"aWQ%d","encryption":"ZQ","encryptionSig":"cw"}}`, o, i, i))
	}
	proj := projectionsync.New(e.client, projectionsync.Options{Namespace: e.ns, Logger: relaytest.Logger(t)})
	if _, err := proj.Merge(ctx, []byte(`{"consents":[`+strings.Join(cs, ",")+`],"devices":[`+strings.Join(ds, ",")+`]}`)); err != nil {
		t.Fatal(err)
	}
	if err := proj.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		enqueue(t, e.st, "site-a", fmt.Sprintf("j%d", i), "alice")
	}
	claim(t, e.st, "alice-laptop", "alice", store.Route{SiteID: "site-a", Owner: "alice"})
	c := &counting{}
	st, err := store.New(ctx, e.client, store.Options{Namespace: e.ns, Logger: relaytest.Logger(t),
		ObserveScript: func(ctx context.Context, _ string) (context.Context, func(error)) {
			c.n.Add(1)
			return ctx, func(error) {}
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.StoreSource = StoreSource{Store: st, Client: e.client, Proj: proj.Current}
	srv := httptest.NewServer(New(Options{Source: c, AdminToken: adminToken, Logger: relaytest.Logger(t)}))
	t.Cleanup(srv.Close)
	return srv, c, []string{"/ui/", "/ui/site/site-a", "/ui/device/alice-laptop", "/ui/job/site-a/j0"}
}

// One refresh of any page costs a bounded number of Valkey commands, which
// does not grow with the devices a site has (a page of 50 devices costs
// one presence script per shard they are on, at most store.DefaultShards)
// or with its jobs beyond the pages of its live set.
func TestRefreshCostIsBounded(t *testing.T) {
	t.Parallel()
	want := map[string]int64{
		"/ui/":                    1 + 1 + 2,                               // TIME, replicas, PING+INFO
		"/ui/site/site-a":         1 + 1 + 1 + 1 + 1 + store.DefaultShards, // TIME, one live-set page, replicas, churn, the site's placement (a replica's first look only), presence (at most)
		"/ui/device/alice-laptop": 1 + 1 + 1 + 1,                           // TIME, presence, its record of shards, held leases on its one shard
		"/ui/job/site-a/j0":       1 + 1,                                   // TIME, job
	}
	exact := map[string]bool{"/ui/": true, "/ui/device/alice-laptop": true, "/ui/job/site-a/j0": true}
	for _, size := range []struct{ devices, jobs int }{{3, 10}, {120, 100}} {
		srv, c, pages := bigSite(t, size.devices, size.jobs)
		for _, p := range pages {
			c.n.Store(0)
			req, _ := http.NewRequest(http.MethodGet, srv.URL+p, nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			req.Header.Set("Accept", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("%s: %d", p, res.StatusCode)
			}
			if got := c.n.Load(); got > want[p] || (exact[p] && got != want[p]) {
				t.Errorf("%d devices, %d jobs: %s sent %d Valkey commands, want %d (at most, for the site page)", size.devices, size.jobs, p, got, want[p])
			}
		}
	}
}

// BenchmarkRefresh is one refresh of each page, as a browser's poll sends
// it (admin token), against the real Valkey, for a site with 50 devices
// and 500 live jobs: wall time per page, which bounds the Valkey time the
// page costs, and Valkey commands per page.
//
//	go test -run '^$' -bench Refresh -benchtime 300x ./internal/opsview/
func BenchmarkRefresh(b *testing.B) {
	srv, c, pages := bigSite(b, 50, 500)
	for _, page := range pages {
		b.Run(strings.NewReplacer("/", "_").Replace(page), func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+page, nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			req.Header.Set("Accept", "application/json")
			c.n.Store(0)
			b.ResetTimer()
			for range b.N {
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			b.ReportMetric(float64(c.n.Load())/float64(b.N), "cmds/op")
		})
	}
}
