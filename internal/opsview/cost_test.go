package opsview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/store"
)

// counting is StoreSource counting the Valkey commands each read sends
// (a script call is one EVALSHA/EVALSHA_RO; Valkey() is PING + INFO).
type counting struct {
	StoreSource
	n atomic.Int64
}

func (c *counting) SiteStates(ctx context.Context, siteID string) (store.SiteStates, error) {
	st, err := c.StoreSource.SiteStates(ctx, siteID)
	c.n.Add(int64(st.Scripts))
	return st, err
}
func (c *counting) Churn(ctx context.Context, s string, o []string) (map[string]int64, error) {
	c.n.Add(1)
	return c.StoreSource.Churn(ctx, s, o)
}
func (c *counting) Job(ctx context.Context, s, j string) (*store.Job, error) {
	c.n.Add(1)
	return c.StoreSource.Job(ctx, s, j)
}
func (c *counting) Presence(ctx context.Context, r string) (*store.Presence, error) {
	c.n.Add(1)
	return c.StoreSource.Presence(ctx, r)
}
func (c *counting) PresenceMany(ctx context.Context, r []string) (map[string]store.PresenceSeen, error) {
	c.n.Add(1)
	return c.StoreSource.PresenceMany(ctx, r)
}
func (c *counting) DeviceLeases(ctx context.Context, r string) (store.DeviceLeases, error) {
	c.n.Add(1)
	return c.StoreSource.DeviceLeases(ctx, r)
}
func (c *counting) Replicas(ctx context.Context) ([]Replica, error) {
	c.n.Add(1)
	return c.StoreSource.Replicas(ctx)
}
func (c *counting) Valkey(ctx context.Context) (ValkeyInfo, error) {
	c.n.Add(2)
	return c.StoreSource.Valkey(ctx)
}
func (c *counting) Now(ctx context.Context) (int64, error) {
	c.n.Add(1)
	return c.StoreSource.Now(ctx)
}
func (c *counting) Token(ctx context.Context, d string) (json.RawMessage, error) {
	c.n.Add(1)
	return c.StoreSource.Token(ctx, d)
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
	proj := projectionsync.New(e.client, projectionsync.Options{Namespace: e.ns, Logger: quiet})
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
	c := &counting{StoreSource: StoreSource{Store: e.st, Client: e.client, Proj: proj.Current}}
	srv := httptest.NewServer(New(Options{Source: c, AdminToken: adminToken, Logger: quiet}))
	t.Cleanup(srv.Close)
	return srv, c, []string{"/ui/", "/ui/site/site-a", "/ui/device/alice-laptop", "/ui/job/site-a/j0"}
}

// One refresh of any page costs a bounded number of Valkey commands, which
// does not grow with the devices a site has (one presence script per page
// of 50) or with its jobs beyond the pages of its live set.
func TestRefreshCostIsBounded(t *testing.T) {
	want := map[string]int64{
		"/ui/":                    1 + 1 + 2,         // TIME, replicas, PING+INFO
		"/ui/site/site-a":         1 + 1 + 1 + 1 + 1, // TIME, one live-set page, replicas, churn, presence
		"/ui/device/alice-laptop": 1 + 1 + 1,         // TIME, presence, leases
		"/ui/job/site-a/j0":       1 + 1,             // TIME, job
	}
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
			if got := c.n.Load(); got != want[p] {
				t.Errorf("%d devices, %d jobs: %s sent %d Valkey commands, want %d", size.devices, size.jobs, p, got, want[p])
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
