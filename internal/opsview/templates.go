package opsview

import (
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// One page layout, no script, styles inline; a meta refresh every 5 s keeps
// a page live (the poll costs what one page costs: see the README).
var templates = template.Must(template.New("ops").Funcs(template.FuncMap{
	"ts": func(ms int64) string {
		if ms == 0 {
			return "—"
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z")
	},
	"ago": func(now, ms int64) string {
		if ms == 0 {
			return "never"
		}
		return (time.Duration(now-ms) * time.Millisecond).Round(time.Second).String() + " ago"
	},
	"in": func(now, ms int64) string {
		if ms == 0 {
			return "—"
		}
		return "in " + (time.Duration(ms-now) * time.Millisecond).Round(time.Second).String()
	},
	"dur": func(ms int64) string { return (time.Duration(ms) * time.Millisecond).Round(time.Second).String() },
	"mib": func(b int64) string {
		return formatMiB(b)
	},
	"minute": func(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04") },
	// seg is one path segment of a link: an id holding "/", "?", "#", "%"
	// or being "." or ".." still names itself (html/template keeps these
	// escapes; it only normalises the URL).
	"seg": pathSegment,
}).Parse(`
{{define "head"}}<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{{if .Refresh}}<meta http-equiv="refresh" content="5">{{end}}
<title>{{.Title}} · relay</title>
<style>
body{font:15px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:.6rem 1rem;display:flex;gap:1rem;flex-wrap:wrap;align-items:center}
header a{color:#cfe3ff;text-decoration:none}header form{margin:0 0 0 auto}
main{padding:1rem;max-width:70rem;margin:auto}
h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;width:100%;background:#fff;margin-bottom:.5rem}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #e3e6ea;vertical-align:top;word-break:break-all}
th{font-weight:600;background:#eef1f4}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(9rem,1fr));gap:.5rem}
.card{background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:.5rem .7rem}
.card b{display:block;font-size:1.5rem}
.ok{color:#0a7a2f}.bad{color:#b42318}.muted{color:#667085}
input,button{font:inherit;padding:.4rem .6rem}
@media (max-width:40rem){th,td{padding:.3rem}.hide-s{display:none}}
</style></head><body>
<header><b>relay ops</b>{{if .Scope}}<span>site {{.Scope}}</span>{{else}}<a href="/ui/">fleet</a>{{end}}
<form method="get" action="/ui/job"><input name="id" placeholder="job id" size="10" aria-label="job id">{{if not .Scope}}<input name="site" placeholder="site" size="8" aria-label="site">{{end}}<button>find</button></form>
<form method="post" action="/ui/logout"><button>log out</button></form></header><main>{{end}}
{{define "foot"}}</main></body></html>{{end}}

{{define "login"}}{{template "head" .}}
<h1>Operations view</h1>
{{if .Message}}<p class="bad" id="message">{{.Message}}</p>{{end}}
<form method="post" action="/ui/login"><p><label>Token<br><input type="password" name="token" id="token" size="40" autocomplete="current-password"></label></p>
<p><button id="login">Log in</button></p></form>
<p class="muted">The admin token sees the fleet; a site token sees its site only.</p>
{{template "foot" .}}{{end}}

{{define "fleet"}}{{template "head" .}}{{with .Data}}
<h1>Fleet</h1>
<h2>Replicas ({{len .Replicas}})</h2>
<table id="replicas"><tr><th>replica</th><th>state</th><th class="hide-s">version</th><th>projection</th><th>seen</th></tr>
{{range .Replicas}}<tr><td>{{.ID}}</td><td>{{if .Draining}}<span class="bad">draining</span>{{else if .Ready}}<span class="ok">ready</span>{{else}}<span class="bad">not ready {{range .NotReady}}{{.}} {{end}}</span>{{end}}</td>
<td class="hide-s">{{.Version}}</td><td>v{{.ProjectionVersion}}, {{printf "%.0f" .ProjectionAgeSec}} s old</td><td>{{ago $.Data.Now .SeenAt}}</td></tr>{{end}}</table>
<h2>Valkey</h2>
{{with .Valkey}}<div class="cards">
<div class="card">memory<b>{{mib .UsedMemory}}</b>{{if .MaxMemory}}of {{mib .MaxMemory}}{{else}}no maxmemory{{end}}</div>
<div class="card">commands/s<b id="valkey-ops">{{.OpsPerSec}}</b></div>
<div class="card">latency<b>{{.LatencyMicros}} µs</b>PING from this replica</div>
<div class="card">keys<b>{{.Keys}}</b>{{.Topology}}</div>
<div class="card">clients<b>{{.Clients}}</b>{{.Version}}</div></div>{{else}}<p class="bad">{{.ValkeyErr}}</p>{{end}}
<h2>Sweeps and churn reports, recently</h2>
{{if .Events}}<table><tr><th>when</th><th>what</th></tr>{{range .Events}}<tr><td>{{ago $.Data.Now .At}}</td><td>{{if eq .Kind "sweep"}}sweep: {{.Requeued}} requeued, {{.Removed}} removed{{else}}churn report: site {{.SiteID}}, owner {{.Owner}}, {{.Expiries}} expiries{{end}}</td></tr>{{end}}</table>{{else}}<p class="muted">none in the replicas' memory</p>{{end}}
<h2>Sites ({{.Projection.Sites}}), devices in the projection: {{.Projection.Device}}</h2>
<table id="sites"><tr><th>site</th></tr>{{range .Sites}}<tr><td><a href="/ui/site/{{seg .}}">{{.}}</a></td></tr>{{end}}</table>
{{if .NextPage}}<a href="?page={{.NextPage}}">next page</a>{{end}}
{{end}}{{template "foot" .}}{{end}}

{{define "site"}}{{template "head" .}}{{with .Data}}
<h1>Site {{.SiteID}}</h1><p class="muted">key {{.KeyID}}</p>
<h2>Jobs by state{{if .Partial}} (at least: the live set is larger than one refresh reads){{end}}</h2>
<div class="cards">
<div class="card">queued<b id="st-queued">{{index .Jobs "queued"}}</b></div>
<div class="card">awaiting payload<b id="st-awaiting-payload">{{index .Jobs "awaiting-payload"}}</b></div>
<div class="card">ready<b id="st-ready">{{index .Jobs "ready"}}</b></div>
<div class="card">running<b id="st-running">{{index .Jobs "running"}}</b></div>
<div class="card">done<b id="st-done">{{index .Jobs "done"}}</b></div>
<div class="card">unsealed lapses<b id="lapses">{{.UnsealedLapses}}</b>in the churn window</div>
</div>
<p>Oldest queued job: {{if .OldestQueued}}<a href="/ui/job/{{seg .SiteID}}/{{seg .OldestQueued}}">{{.OldestQueued}}</a>, enqueued {{if .Partial}}at least {{end}}<span id="oldest-age">{{dur .OldestQueuedAgeMs}}</span> ago{{if .Partial}} (the oldest of the live jobs read){{end}}{{else}}none{{end}}</p>
<h2>Per minute (all replicas)</h2>
{{if .PerMinute}}<table id="per-minute"><tr><th>minute (UTC)</th><th>enqueued</th><th>completed</th></tr>{{range .PerMinute}}<tr><td>{{minute .At}}</td><td>{{.Enqueued}}</td><td>{{.Completed}}</td></tr>{{end}}</table>{{else}}<p class="muted">nothing in the last 10 minutes</p>{{end}}
<h2>Refusals, last 10 minutes</h2>
{{if .Refusals}}<table id="refusals"><tr><th>reason</th><th>count</th></tr>{{range $k, $v := .Refusals}}<tr><td>{{$k}}</td><td>{{$v}}</td></tr>{{end}}</table>{{else}}<p class="muted">none</p>{{end}}
<h2>Devices that may serve it ({{.DevicesTotal}})</h2>
<table id="devices"><tr><th>device</th><th>owner</th><th>now</th><th class="hide-s">capabilities</th></tr>
{{range .Devices}}<tr><td><a href="/ui/device/{{seg .RunnerID}}">{{.RunnerID}}</a></td><td>{{.Owner}}</td>
<td style="white-space:nowrap">{{if .Paused}}<span class="bad">paused</span>{{else if .Online}}<span class="ok">online</span>{{else}}<span class="muted">offline</span>{{end}}<br><span class="muted">{{ago $.Data.Now .LastSeenAt}}</span></td>
<td class="hide-s">{{printf "%s" .Capabilities}}</td></tr>{{end}}</table>
{{if .NextPage}}<a href="?page={{.NextPage}}">next page</a>{{end}}
{{end}}{{template "foot" .}}{{end}}

{{define "device"}}{{template "head" .}}{{with .Data}}
<h1>Device {{.RunnerID}}</h1>
<table><tr><th>owner</th><td>{{.Owner}}</td></tr>
<tr><th>now</th><td id="online">{{if .Revoked}}<span class="bad">revoked</span>{{else if .Online}}<span class="ok">online</span>{{else}}<span class="muted">offline</span>{{end}}</td></tr>
<tr><th>last seen</th><td>{{ts .LastSeenAt}} ({{ago .Now .LastSeenAt}})</td></tr>
<tr><th>leases held</th><td id="held">{{.Held}}</td></tr>
<tr><th>capabilities</th><td>{{printf "%s" .Capabilities}}</td></tr></table>
<h2>Active leases</h2>
{{if .Active}}<table id="active"><tr><th>site</th><th>job</th><th>state</th><th>lease expires</th></tr>{{range .Active}}<tr><td>{{.SiteID}}</td><td><a href="/ui/job/{{seg .SiteID}}/{{seg .JobID}}">{{.JobID}}</a></td><td>{{.State}}</td><td>{{in $.Data.Now .LeaseExpiresAt}}</td></tr>{{end}}</table>{{else}}<p class="muted">none</p>{{end}}
<h2>Sites it serves</h2>
<table id="served"><tr><th>site</th><th>consent</th></tr>{{range .Sites}}<tr><td><a href="/ui/site/{{seg .SiteID}}">{{.SiteID}}</a></td><td>{{if .Paused}}<span class="bad">paused</span>{{else}}<span class="ok">live</span>{{end}}</td></tr>{{end}}</table>
{{end}}{{template "foot" .}}{{end}}

{{define "job"}}{{template "head" .}}{{with .Data}}
<h1>Job {{.JobID}}</h1>
<table id="job"><tr><th>site</th><td><a href="/ui/site/{{seg .SiteID}}">{{.SiteID}}</a></td></tr>
<tr><th>state</th><td id="job-state">{{.State}}{{if .Cancelled}} (cancelled){{end}}</td></tr>
<tr><th>kind / owner / audience</th><td>{{.Kind}} / {{.Owner}} / {{.Audience}}</td></tr>
<tr><th>holder</th><td id="job-holder">{{if .Holder}}<a href="/ui/device/{{seg .Holder}}">{{.Holder}}</a> ({{.HolderOwner}}){{else}}—{{end}}</td></tr>
<tr><th>lease expires</th><td>{{ts .LeaseExpiresAt}}{{if .LeaseExpiresAt}} ({{in .Now .LeaseExpiresAt}}){{end}}</td></tr>
<tr><th>awaiting payload until</th><td>{{ts .AwaitingUntil}}</td></tr>
<tr><th>deadline</th><td>{{ts .DeadlineAt}}</td></tr>
<tr><th>seal attempts</th><td>{{.SealAttempts}}</td></tr>
<tr><th>refused by</th><td>{{range .RefusedBy}}{{.}} {{else}}—{{end}}</td></tr>
<tr><th>payload / result</th><td>{{if .HasPayload}}payload stored{{else}}no payload{{end}}, {{if .HasResult}}result stored{{else}}no result{{end}} (never shown){{if .Disposition}}, {{.Disposition}}{{end}}</td></tr>
</table>
{{end}}{{template "foot" .}}{{end}}
`))

// pathSegment escapes an id as one URL path segment (url.PathEscape, which
// leaves "." alone: a segment of only dots would be cleaned away by the
// router, so its dots are escaped too).
func pathSegment(id string) string {
	if strings.Trim(id, ".") == "" {
		return strings.Repeat("%2E", len(id))
	}
	return url.PathEscape(id)
}

func formatMiB(b int64) string {
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
}
