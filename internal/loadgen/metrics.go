package loadgen

import (
	"math"
	"slices"
	"sync"
	"time"
)

// samples collects durations; percentiles are exact over everything kept.
// A run is bounded in jobs and time, so keeping every sample is affordable
// (8 bytes each) and avoids histogram bucketing error in the report.
type samples struct {
	mu sync.Mutex
	v  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.v = append(s.v, d)
	s.mu.Unlock()
}

// Latency summarises a set of durations in milliseconds.
type Latency struct {
	Count  int     `json:"count"`
	MeanMs float64 `json:"meanMs"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MaxMs  float64 `json:"maxMs"`
}

func (s *samples) summary() Latency {
	s.mu.Lock()
	v := slices.Clone(s.v)
	s.mu.Unlock()
	return summarise(v)
}

func summarise(v []time.Duration) Latency {
	if len(v) == 0 {
		return Latency{}
	}
	slices.Sort(v)
	var sum time.Duration
	for _, d := range v {
		sum += d
	}
	return Latency{
		Count:  len(v),
		MeanMs: ms(sum / time.Duration(len(v))),
		P50Ms:  ms(quantile(v, 0.50)),
		P90Ms:  ms(quantile(v, 0.90)),
		P99Ms:  ms(quantile(v, 0.99)),
		MaxMs:  ms(v[len(v)-1]),
	}
}

// quantile is the nearest-rank quantile of sorted v.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// endpointStats counts one endpoint's responses by status and times them.
type endpointStats struct {
	mu       sync.Mutex
	statuses map[int]int
	bytes    int64 // answer bodies read
	latency  samples
}

// EndpointReport is one endpoint's line in the report. Status 0 counts
// transport failures (no HTTP response).
type EndpointReport struct {
	Requests int         `json:"requests"`
	Statuses map[int]int `json:"statuses"`
	// AnswerBytes is the answer bodies read, headers not counted.
	AnswerBytes int64   `json:"answerBytes"`
	Latency     Latency `json:"latency"`
}

type requestStats struct {
	mu  sync.Mutex
	per map[string]*endpointStats
}

func (r *requestStats) endpoint(name string) *endpointStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.per == nil {
		r.per = map[string]*endpointStats{}
	}
	e, ok := r.per[name]
	if !ok {
		e = &endpointStats{statuses: map[int]int{}}
		r.per[name] = e
	}
	return e
}

// record counts one request: its status (0: no answer), how long it took
// and the bytes of the answer body read.
func (r *requestStats) record(name string, status int, d time.Duration, bodyBytes int) {
	e := r.endpoint(name)
	e.mu.Lock()
	e.statuses[status]++
	e.bytes += int64(bodyBytes)
	e.mu.Unlock()
	e.latency.add(d)
}

func (r *requestStats) report() map[string]EndpointReport {
	r.mu.Lock()
	names := make([]string, 0, len(r.per))
	for n := range r.per {
		names = append(names, n)
	}
	r.mu.Unlock()
	out := map[string]EndpointReport{}
	for _, n := range names {
		e := r.endpoint(n)
		e.mu.Lock()
		st := map[int]int{}
		total := 0
		for k, v := range e.statuses {
			st[k] = v
			total += v
		}
		bytes := e.bytes
		e.mu.Unlock()
		out[n] = EndpointReport{Requests: total, Statuses: st, AnswerBytes: bytes, Latency: e.latency.summary()}
	}
	return out
}
