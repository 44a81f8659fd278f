package protocol

import (
	"runtime"
	"strings"
	"testing"
)

func TestBodyCost(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body string
		want int64
	}{
		{``, valueCost},
		{`{"a":1}`, 3 * valueCost},
		{`{"a":"x,y:{[","b":[1,2]}`, 7 * valueCost}, // punctuation inside strings is not counted
		{`{"a":"q\",{[","b":1}`, 5 * valueCost},     // nor after an escaped quote
		{`{"a":"q\\","b":1}`, 5 * valueCost},        // an escaped backslash ends the escape
		{"\xff{}", valueCost*2 + 9},                 // invalid UTF-8 may triple
	} {
		if got := BodyCost([]byte(tt.body)); got != tt.want {
			t.Errorf("BodyCost(%q) = %d, want %d", tt.body, got, tt.want)
		}
	}
}

// The estimate must cover what parsing really takes, for the shapes that
// amplify most. Not parallel: it measures the heap.
func TestBodyCostCoversParse(t *testing.T) {
	for _, unit := range []string{"{},", "[],", "0,", `"",`, `{"a":{}},`} {
		body := []byte("[" + strings.Repeat(unit, 100_000) + "0]")
		runtime.GC()
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		v, err := ParseJSON(body)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&b)
		runtime.KeepAlive(v)
		took := int64(b.HeapInuse) - int64(a.HeapInuse)
		if cost := BodyCost(body); cost < took {
			t.Errorf("%q: BodyCost %d below the %d bytes parsing took", unit, cost, took)
		}
	}
}
