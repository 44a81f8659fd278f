// Package opsview drives the operations view (/ui/) the way a person does:
// Debian's chromium, headless, through chromedp, against three relay
// replicas that share one Valkey namespace and have just carried a small
// load (internal/loadgen).
package opsview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

const adminToken = "ui-browser-admin-token-0123456789"

func TestMain(m *testing.M) { relaytest.Main(m) }

// chromium finds Debian's browser; without it the test skips locally and
// fails under CI (.ci/run installs it).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); skipping the browser test")
	return ""
}

type replicas struct {
	servers []*relaytest.Relay
	ns      string
}

// startReplicas starts n relay replicas on one fresh namespace of the test
// Valkey, with env added.
func startReplicas(t *testing.T, n int, env ...string) replicas {
	t.Helper()
	url := relaytest.ValkeyURL()
	r := replicas{ns: relaytest.Namespace(t, relaytest.Open(t, url))}
	for i := range n {
		r.servers = append(r.servers, relaytest.StartRelay(t, relaytest.RelayConfig{
			Name: fmt.Sprintf("relay-%d", i+1),
			Env: append([]string{"RELAY_VALKEY_URL=" + url, "RELAY_NAMESPACE=" + r.ns,
				"RELAY_LOG_LEVEL=warn", "RELAY_OPS_HEARTBEAT=200ms"}, env...),
			Token: adminToken,
		}))
	}
	return r
}

func getJSON(t *testing.T, url, tok string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v\n%s", url, err, b)
		}
	}
	return res.StatusCode
}

// siteView is the part of /ui/site/{id}'s JSON the test reads.
type siteView struct {
	Jobs      map[string]int64 `json:"jobs"`
	PerMinute []struct {
		Enqueued, Completed int64
	} `json:"perMinute"`
	Devices []struct {
		RunnerID string `json:"runnerId"`
		Online   bool   `json:"online"`
	} `json:"devices"`
}

func TestBrowser(t *testing.T) {
	chrome := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r := startReplicas(t, 3)
	admins := make([]string, len(r.servers))
	cfg := loadgen.Config{AdminToken: adminToken, Sites: 2, Daemons: 4, Jobs: 60, Concurrency: 6,
		Drain: 30 * time.Second, TTL: 10 * time.Minute}
	for i, s := range r.servers {
		cfg.Replicas = append(cfg.Replicas, s.URL())
		admins[i] = s.AdminURL()
	}
	cfg.AdminURLs = admins[:1]
	cfg.StatusURLs = admins
	rep, err := loadgen.Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("load did not balance: %+v", rep.Jobs)
	}
	t.Logf("load: %d jobs enqueued and collected over %d replicas", rep.Jobs.Enqueued, len(r.servers))

	// The projection the load generator pushed: sites, consents, devices.
	req, _ := http.NewRequest(http.MethodGet, admins[0]+"/projection", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fix, err := projection.Parse(raw)
	if err != nil || len(fix.Sites) < 2 {
		t.Fatalf("projection: %v (%d sites)", err, len(fix.Sites))
	}
	proj := projection.New(fix)
	siteA, siteB := fix.Sites[0].SiteID, fix.Sites[1].SiteID
	var owner, runner string
	for _, d := range fix.Devices {
		if proj.MayRouteFor(d.Owner, siteA) {
			owner, runner = d.Owner, d.RunnerID
			break
		}
	}
	if runner == "" {
		t.Fatal("no device serves the first site")
	}

	// Leave something to see: three queued jobs and one granted, written
	// through the store the replicas share (the daemons have stopped).
	vo, _ := valkey.ParseURL(relaytest.ValkeyURL())
	vc, err := valkey.NewClient(vo)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	st, err := store.New(ctx, vc, store.Options{Namespace: r.ns})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		id := fmt.Sprintf("ui-job-%d", i)
		if _, err := st.Enqueue(ctx, store.EnqueueInput{SiteID: siteA, ID: id, Stub: protocol.JobStub{ID: id,
			Kind: protocol.KindGenerate, Owner: owner, Site: fix.Sites[0].KeyID(), Audience: protocol.AudiencePrivate,
			SizeClass: "small", DeadlineAt: time.Now().Add(10 * time.Minute).UnixMilli()}}); err != nil {
			t.Fatal(err)
		}
	}
	var dev protocol.PublicIdentity
	for _, d := range fix.Devices {
		if d.RunnerID == runner {
			dev = d.Device
		}
	}
	granted, err := st.Claim(ctx, store.ClaimInput{RunnerID: runner, Owner: owner, Device: dev,
		Routes: []store.Route{{SiteID: siteA, Owner: owner}}, Kinds: []string{protocol.KindGenerate}, Max: 1, LeaseMs: 120_000})
	if err != nil || len(granted) != 1 {
		t.Fatalf("claim: %d %v", len(granted), err)
	}
	var grantedID struct{ ID string }
	json.Unmarshal(granted[0].Stub, &grantedID)
	// Sealed at once: an unsealed grant goes back to the queue after the
	// 10 s awaiting-payload window, which a slow machine spends before the
	// browser reaches the pages; a ready job keeps its 120 s lease.
	if r, err := st.Seal(ctx, siteA, grantedID.ID, json.RawMessage(`{"ciphertext":"c2VhbGVk","recipientKeyId":"k"}`)); err != nil || r.Refused != "" {
		t.Fatalf("seal: %+v %v", r, err)
	}

	want := map[string]int64{}
	all, err := st.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range all {
		if j.SiteID == siteA {
			want[j.State]++
		}
	}
	t.Logf("store: site %s holds %v", siteA, want)

	// Every replica's heartbeat carries its activity; the view adds them
	// up. Wait until the three records have caught up with the load.
	var enq, done int64
	deadline := time.Now().Add(15 * time.Second)
	for {
		enq, done = 0, 0
		for _, s := range fix.Sites {
			var v siteView
			getJSON(t, admins[1]+"/ui/site/"+s.SiteID, adminToken, &v)
			for _, m := range v.PerMinute {
				enq += m.Enqueued
				done += m.Completed
			}
		}
		if enq == rep.Jobs.Enqueued && done == rep.Jobs.Collected || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if enq != rep.Jobs.Enqueued || done != rep.Jobs.Collected {
		t.Errorf("per-minute activity over all sites: enqueued %d completed %d; the load enqueued %d and collected %d",
			enq, done, rep.Jobs.Enqueued, rep.Jobs.Collected)
	}

	// A site token for the first site, minted through the admin API.
	mint, _ := http.NewRequest(http.MethodPost, admins[2]+"/ui/tokens", strings.NewReader(`{"site":"`+siteA+`"}`))
	mint.Header.Set("Authorization", "Bearer "+adminToken)
	res, err = http.DefaultClient.Do(mint)
	if err != nil {
		t.Fatal(err)
	}
	var minted struct{ Token string }
	json.NewDecoder(res.Body).Decode(&minted)
	res.Body.Close()
	if res.StatusCode != 201 || minted.Token == "" {
		t.Fatalf("mint: %d", res.StatusCode)
	}

	shots := os.Getenv("RELAY_UI_SCREENSHOTS")
	if shots == "" {
		shots, err = os.MkdirTemp("", "relay-ui-screenshots-")
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", shots)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.WindowSize(1100, 1400))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		}
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	location := func() string {
		t.Helper()
		loc, err := chromedp.Run(bctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }

	// Without a token: the login form, nothing else.
	do("open without a token", chromedp.Navigate(admins[0]+"/ui/site/"+siteA), visible("#token"))
	body := text("body")
	shot("0-refused")
	if strings.Contains(body, runner) || !strings.Contains(body, "Log in") {
		t.Errorf("a page without a token shows:\n%s", body)
	}
	if code := getJSON(t, admins[0]+"/ui/site/"+siteA, "", nil); code != 401 {
		t.Errorf("JSON without a token: %d, want 401", code)
	}

	// The admin logs in and sees the fleet: three replicas, all ready.
	do("log in as admin", chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Click(chromedp.CSS("#login")), visible("#replicas"))
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#replicas tr").length - 1`))
	if err != nil {
		t.Fatal(err)
	}
	fleet := text("#replicas")
	if rows != 3 || strings.Count(fleet, "ready") != 3 {
		t.Errorf("fleet shows %d replicas:\n%s", rows, fleet)
	}
	shot("1-fleet")

	// The site page, on another replica (the cookie is the host's): the
	// numbers are the store's.
	do("site page", chromedp.Navigate(admins[1]+"/ui/site/"+siteA), visible("#st-queued"))
	for _, s := range []string{store.StateQueued, store.StateAwaitingPayload, store.StateReady, store.StateRunning, store.StateDone} {
		if got := text("#st-" + s); got != strconv.FormatInt(want[s], 10) {
			t.Errorf("site page %s: shows %s, the store holds %d", s, got, want[s])
		}
	}
	if devs := text("#devices"); !strings.Contains(devs, runner) {
		t.Errorf("site page devices lack %s:\n%s", runner, devs)
	}
	shot("2-site")

	// The device holding the grant, then the job it holds.
	do("device page", chromedp.Navigate(admins[2]+"/ui/device/"+runner), visible("#held"))
	if got := text("#active"); !strings.Contains(got, grantedID.ID) || !strings.Contains(got, store.StateReady) {
		t.Errorf("device page active leases:\n%s", got)
	}
	if got := text("#online"); got != "online" {
		t.Errorf("device page: %q, want online (the daemon heartbeat during the load)", got)
	}
	shot("3-device")
	do("job page", chromedp.Navigate(admins[0]+"/ui/job/"+siteA+"/"+grantedID.ID), visible("#job-state"))
	if got := text("#job-state"); got != store.StateReady {
		t.Errorf("job state %q, want ready", got)
	}
	if got := text("#job-holder"); !strings.Contains(got, runner) {
		t.Errorf("job holder %q, want %s", got, runner)
	}
	shot("4-job")

	// Log out, log in with the site token: its site only.
	do("log in with the site token", chromedp.Click(chromedp.CSS(`form[action="/ui/logout"] button`)), visible("#token"),
		chromedp.SendKeys(chromedp.CSS("#token"), minted.Token), chromedp.Click(chromedp.CSS("#login")), visible("#st-queued"))
	if loc := location(); !strings.HasSuffix(loc, "/ui/site/"+siteA) {
		t.Errorf("site token landed on %s", loc)
	}
	if body := text("body"); strings.Contains(body, siteB) {
		t.Errorf("the site token's page names the other site %s", siteB)
	}
	shot("5-site-token")
	do("other site", chromedp.Navigate(admins[0]+"/ui/site/"+siteB))
	if body := text("body"); !strings.Contains(body, `"not-found"`) || strings.Contains(body, "queued") {
		t.Errorf("the site token opened another site's page:\n%s", body)
	}
	shot("6-other-site-refused")
	do("fleet with a site token", chromedp.Navigate(admins[0]+"/ui/"), visible("#st-queued"))
	if loc := location(); !strings.HasSuffix(loc, "/ui/site/"+siteA) {
		t.Errorf("fleet with the site token went to %s", loc)
	}

	if dst := os.Getenv("RELAY_UI_README_SHOT"); dst != "" {
		b, err := os.ReadFile(filepath.Join(shots, "2-site.png"))
		if err == nil {
			err = os.WriteFile(dst, b, 0o644)
		}
		if err != nil {
			t.Errorf("copy the site page screenshot: %v", err)
		}
	}
}
