package relay

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/byollm/relay-go/internal/protocol"
)

var stateColour = map[string]string{
	"queued":           "#8a8a8a",
	"awaiting-payload": "#c98a00",
	"ready":            "#0a7",
	"running":          "#06c",
	"done":             "#444",
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// debugPage is wire.md §10 with one deliberate change (§17.29): the page is
// per-site. It lists only the named site's jobs and only devices whose owner
// has a consent record for that site; 0.1.1 listed every tenant's jobs and
// every device through any site's page.
func (r *Relay) debugPage(req *request) (reply, error) {
	if !r.debug {
		return notFoundBare, nil
	}
	proj := r.projections.Current()
	if proj == nil {
		return notReady, nil
	}
	siteID, has := queryGet(req.query, "site")
	if !has || proj.SiteFor(siteID) == nil {
		return debugBadRequest, nil
	}
	all, err := r.store.Jobs(req.ctx)
	if err != nil {
		return reply{}, fmt.Errorf("debug: jobs: %w", err)
	}
	everyone, err := r.store.Everyone(req.ctx)
	if err != nil {
		return reply{}, fmt.Errorf("debug: presence: %w", err)
	}
	now := r.now()

	var jobs strings.Builder
	n := 0
	for _, j := range all {
		if j.SiteID != siteID {
			continue
		}
		n++
		var st struct {
			Kind, Owner, Audience, SizeClass string
			Streaming                        bool
		}
		if s, perr := parseStub(j.Stub); perr == nil {
			st.Kind, st.Owner, st.Audience, st.SizeClass, st.Streaming = s.Kind, s.Owner, s.Audience, s.SizeClass, s.Streaming
		}
		waiting := ""
		if j.State == "awaiting-payload" && j.AwaitingUntil != 0 {
			waiting = strconv.FormatInt(max(0, j.AwaitingUntil-now), 10) + "ms left"
		}
		stream := "no"
		if st.Streaming {
			stream = "yes"
		}
		claimed := "<span class='dim'>—</span>"
		if j.ClaimedBy != nil {
			claimed = "<code>" + esc(protocol.KeyID(j.ClaimedBy.Device.Identity)) + "</code>"
		}
		payload := "<span class='dim'>—</span>"
		if len(j.Payload) > 0 {
			payload = "sealed"
		}
		result := "<span class='dim'>—</span>"
		if len(j.Result) > 0 {
			result = "?"
			if j.Disposition != "" {
				result = esc(j.Disposition)
			}
		}
		colour, known := stateColour[j.State]
		if !known {
			colour = "#000"
		}
		if n > 1 {
			jobs.WriteString("\n")
		}
		fmt.Fprintf(&jobs, `<tr>
    <td><code>%s</code></td>
    <td>%s</td>
    <td>%s</td>
    <td>%s</td>
    <td>%s</td>
    <td>%s</td>
    <td><b style="color:%s">%s</b> <span class="dim">%s</span></td>
    <td>%s</td>
    <td>%s</td>
    <td>%s</td>
  </tr>`, esc(j.ID), esc(st.Kind), esc(st.Owner), esc(st.Audience), esc(st.SizeClass), stream,
			colour, esc(j.State), esc(waiting), claimed, payload, result)
	}
	if n == 0 {
		jobs.WriteString(`<tr><td colspan="10" class="dim">nothing routed yet</td></tr>`)
	}

	var devices strings.Builder
	m := 0
	for _, d := range everyone {
		consent := proj.ConsentFor(d.Owner, siteID)
		if consent == nil {
			continue
		}
		m++
		routing := "active"
		if consent.Paused {
			routing = "paused"
		}
		if m > 1 {
			devices.WriteString("\n")
		}
		fmt.Fprintf(&devices, `<tr>
  <td><code>%s</code></td>
  <td>%s</td>
  <td><code>%s</code></td>
  <td>%dms ago</td>
  <td>%s</td>
</tr>`, esc(d.RunnerID), esc(d.Owner), esc(protocol.KeyID(d.Device.Identity)), max(0, now-d.LastSeenAt), routing)
	}
	if m == 0 {
		devices.WriteString(`<tr><td colspan="5" class="dim">no devices connected</td></tr>`)
	}

	page := `<!doctype html>
<html><head><meta charset="utf-8"><title>byollm relay — debug</title>
<meta http-equiv="refresh" content="1">
<style>
 body{font:13px/1.5 ui-monospace,SFMono-Regular,Menlo,monospace;margin:24px;color:#111;background:#fff}
 h1{font-size:15px;margin:0 0 4px} h2{font-size:13px;margin:24px 0 6px}
 table{border-collapse:collapse;width:100%;margin-top:4px}
 th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eee;vertical-align:top}
 th{font-weight:600;color:#666;border-bottom:1px solid #ccc}
 code{background:#f5f5f5;padding:1px 4px;border-radius:3px}
 .dim{color:#aaa} .note{color:#666;max-width:70ch;margin:8px 0 0}
 @media(prefers-color-scheme:dark){
  body{background:#111;color:#eee} th{color:#999;border-color:#333}
  td{border-color:#222} code{background:#1c1c1c} .note{color:#999}
 }
</style></head><body>
<h1>byollm relay — debug</h1>
<p class="note">What this relay knows about site <code>` + esc(siteID) + `</code>, which is everything on this page.
There is no prompt or result text here because it holds none: payloads and
results are sealed to their endpoints and pass through as ciphertext.</p>

<h2>Routed jobs (` + strconv.Itoa(n) + `)</h2>
<table>
<tr><th>job</th><th>kind</th><th>owner</th><th>audience</th><th>size</th>
    <th>stream</th><th>state</th><th>claimed by</th><th>payload</th><th>result</th></tr>
` + jobs.String() + `
</table>

<h2>Presence (` + strconv.Itoa(m) + `)</h2>
<table>
<tr><th>runner</th><th>owner</th><th>fingerprint</th><th>last seen</th><th>routing</th></tr>
` + devices.String() + `
</table>
</body></html>`
	return reply{status: 200, body: []byte(page), html: true}, nil
}

func esc(s string) string { return htmlEscaper.Replace(s) }

func parseStub(b []byte) (protocol.JobStub, error) {
	var s protocol.JobStub
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("parse stub: %w", err)
	}
	return s, nil
}
