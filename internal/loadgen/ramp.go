package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// RampStep is one offered rate of a ramp and how the run took it.
type RampStep struct {
	Rate      float64 `json:"rate"`      // jobs/s asked
	Sustained bool    `json:"sustained"` // Report.Sustained at the ramp's p99 limit
	Why       string  `json:"why,omitempty"`
	Offered   float64 `json:"offeredPerSecond"`
	Collected int64   `json:"collected"`
	P50Ms     float64 `json:"endToEndP50Ms"`
	P99Ms     float64 `json:"endToEndP99Ms"`
	// LoadgenCPUMsPerJob is the load generator's own CPU per collected job:
	// it must stay well below the relay's, or the ramp measures itself.
	LoadgenCPUMsPerJob float64 `json:"loadgenCpuMsPerJob"`
	Report             *Report `json:"report"`
}

// RampReport is a whole ramp: the highest rate sustained, and every step.
type RampReport struct {
	MaxP99Ms float64 `json:"maxP99Ms"`
	// Highest is the highest rate a step sustained (0: none did).
	Highest float64 `json:"highestSustained"`
	// Limit is the first rate not sustained (0: every step was).
	Limit float64    `json:"firstNotSustained"`
	Steps []RampStep `json:"steps"`
}

// Ramp runs cfg in the open loop at each rate in turn (ascending), each a
// fresh run of cfg.Duration or cfg.Jobs, and stops after the first step
// that is not sustained. progress, if not nil, gets one line per step.
func Ramp(ctx context.Context, cfg Config, rates []float64, maxP99 time.Duration, progress io.Writer) (*RampReport, error) {
	if len(rates) == 0 {
		return nil, errors.New("ramp: no rates")
	}
	for i, r := range rates {
		if r <= 0 || (i > 0 && r <= rates[i-1]) {
			return nil, fmt.Errorf("ramp: rates must be positive and ascending, have %v", rates)
		}
	}
	if maxP99 <= 0 {
		return nil, errors.New("ramp: the p99 limit must be positive")
	}
	out := &RampReport{MaxP99Ms: float64(maxP99) / float64(time.Millisecond)}
	for _, rate := range rates {
		c := cfg
		c.Rate, c.Concurrency, c.RunID = rate, 0, ""
		if cfg.RunID != "" {
			c.RunID = fmt.Sprintf("%s-r%g", cfg.RunID, rate)
		}
		rep, err := Run(ctx, c, nil)
		if err != nil {
			return out, fmt.Errorf("ramp step %g jobs/s: %w", rate, err)
		}
		ok, why := rep.Sustained(maxP99)
		st := RampStep{Rate: rate, Sustained: ok, Why: why, Offered: rep.OfferedPerSecond, Collected: rep.Jobs.Collected,
			P50Ms: rep.Phases["end-to-end"].P50Ms, P99Ms: rep.Phases["end-to-end"].P99Ms, Report: rep}
		if rep.Jobs.Collected > 0 {
			st.LoadgenCPUMsPerJob = round3(rep.LoadgenCPUSeconds * 1000 / float64(rep.Jobs.Collected))
		}
		out.Steps = append(out.Steps, st)
		if progress != nil {
			verdict := "sustained"
			if !ok {
				verdict = "NOT sustained: " + why
			}
			fmt.Fprintf(progress, "ramp %8.1f jobs/s asked  %8.1f offered  %6d collected  e2e p50 %7.1f p99 %7.1f ms  loadgen %.3f ms CPU/job  %s\n",
				rate, st.Offered, st.Collected, st.P50Ms, st.P99Ms, st.LoadgenCPUMsPerJob, verdict)
		}
		if !ok {
			out.Limit = rate
			break
		}
		out.Highest = rate
		if ctx.Err() != nil {
			break
		}
	}
	return out, nil
}
