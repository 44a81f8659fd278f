package loadgen

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// byDecoder is what encoding/json makes of a results answer: each entry's
// bytes and its jobId when that is a string.
func byDecoder(t *testing.T, b []byte) []resultRef {
	t.Helper()
	var rr struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(b, &rr); err != nil {
		t.Fatalf("encoding/json refuses %s: %v", b, err)
	}
	out := make([]resultRef, 0, len(rr.Jobs))
	for _, raw := range rr.Jobs {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("entry %s: %v", raw, err)
		}
		id, _ := m["jobId"].(string)
		out = append(out, resultRef{raw: raw, jobID: id})
	}
	return out
}

// agrees scans answer b and checks it finds what encoding/json does.
func agrees(t *testing.T, b []byte) {
	t.Helper()
	got, err := scanResults(b)
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := byDecoder(t, b)
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", b, len(got), len(want))
	}
	for i := range got {
		if got[i].jobID != want[i].jobID || !bytes.Equal(bytes.TrimSpace(got[i].raw), bytes.TrimSpace(want[i].raw)) {
			t.Fatalf("%s: entry %d is %q %s, want %q %s", b, i, got[i].jobID, got[i].raw, want[i].jobID, want[i].raw)
		}
	}
}

func TestScanResultsAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{
		`{"jobs":[]}`,
		` { "jobs" : [ ] } `,
		`{}`,
		`{"other":1}`,
		`{"jobs":[{}]}`,
		`{"jobs":[{"jobId":"a"}]}`,
		`{"jobs":[{"envelope":{"ct":"x}]\"{["},"jobId":"b","n":-1.5e3,"t":true,"f":false,"z":null}]}`,
		`{"jobs":[{"jobId":"c\"d\\e\u00e9\ud83d\ude00"},{"jobId":7},{"jobId":null,"x":[1,[2,{"jobId":"inner"}]]}]}`,
		`{"before":{"jobs":[{"jobId":"no"}]},"jobs":[{"jobId":"yes"}],"after":[1,2]}`,
		"{\n\t\"jobs\" :\r\n [ {\"jobId\" : \"ws\" } , { \"jobId\":\"ws2\"} ]\n}",
	} {
		agrees(t, []byte(answer))
	}
}

// Random entries shaped like real results, with strings full of what a
// scanner could trip on (quotes, backslashes, brackets, unicode).
func TestScanResultsAgreesOnRandomAnswers(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", `"`, `\`, "{", "}", "[", "]", ",", ":", " ", "é", "\u2028", "\x01", "😀", "/"}
	word := func() string {
		var sb strings.Builder
		for range rng.IntN(12) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	var value func(depth int) any
	value = func(depth int) any {
		switch k := rng.IntN(7); {
		case k == 0 || depth > 3:
			return word()
		case k == 1:
			return rng.Float64()*2e6 - 1e6
		case k == 2:
			return rng.IntN(2) == 0
		case k == 3:
			return nil
		case k == 4:
			a := make([]any, rng.IntN(4))
			for i := range a {
				a[i] = value(depth + 1)
			}
			return a
		default:
			m := map[string]any{}
			for range rng.IntN(4) {
				m[word()] = value(depth + 1)
			}
			return m
		}
	}
	for range 300 {
		jobs := make([]map[string]any, rng.IntN(6))
		for i := range jobs {
			jobs[i] = map[string]any{"envelope": value(0), "disposition": word(), "device": value(0)}
			if rng.IntN(5) > 0 {
				jobs[i]["jobId"] = word()
			}
		}
		b, err := json.Marshal(map[string]any{"jobs": jobs, "x": value(0)})
		if err != nil {
			t.Fatal(err)
		}
		agrees(t, b)
	}
}

func TestScanResultsRefusesBrokenAnswers(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{
		``,
		` `,
		`[]`,
		`null`,
		`{`,
		`{"jobs"`,
		`{"jobs":`,
		`{"jobs":[`,
		`{"jobs":[{"jobId":"a"}`,
		`{"jobs":[{"jobId":"a"]}`,
		`{"jobs":[{"jobId":"a}]}`,
		`{"jobs":[{"jobId":"a\"}]}`,
		`{"jobs":[{"jobId":"a"},]}`,
		`{"jobs":[,{"jobId":"a"}]}`,
		`{"jobs":[{"jobId" "a"}]}`,
		`{"jobs":[{"jobId":}]}`,
		`{"jobs":[{jobId:"a"}]}`,
		`{"jobs":["a"]}`,
		`{"jobs":[1]}`,
		`{"jobs":{"jobId":"a"}}`,
		`{"jobs":[{"envelope":{"a":[1,2}]}`,
		`{"jobs":[]}x`,
		`{"jobs":[]}{}`,
		`{"a":1 "jobs":[]}`,
		`{"a":1,}`,
		`{"a":tr"ue}`,
	} {
		if got, err := scanResults([]byte(answer)); err == nil {
			t.Errorf("%q: read as %d entries, want a refusal", answer, len(got))
		}
	}
}
