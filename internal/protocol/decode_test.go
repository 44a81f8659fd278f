package protocol

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// testdata/zod_decode.json was produced by running each body through the
// real schemas of @byollm/protocol@0.1.1 (zod 4.6.7) and the relay's
// site-plane/fixture-pair schemas rebuilt from the same parts: JSON.parse
// (after stripping a BOM), safeParse, and JSON.stringify of the parsed data.
// Rows: [schema, body text, outcome, zod's re-emitted data or ""].
// Outcome is ok/fail, or for pair the matching shape (start/poll/fixture/none).
func TestDecodeMatchesZod(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/zod_decode.json")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][4]string
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 100 {
		t.Fatalf("only %d rows", len(rows))
	}
	decoders := map[string]func(any) (any, error){
		"claim":     func(v any) (any, error) { return DecodeClaimRequest(v) },
		"fetch":     func(v any) (any, error) { return DecodeFetchRequest(v) },
		"result":    func(v any) (any, error) { return DecodeResultRequest(v) },
		"heartbeat": func(v any) (any, error) { return DecodeHeartbeatRequest(v) },
		"release":   func(v any) (any, error) { return DecodeReleaseRequest(v) },
		"enqueue":   func(v any) (any, error) { return DecodeEnqueueRequest(v) },
		"payload":   func(v any) (any, error) { return DecodePayloadRequest(v) },
		"cancel":    func(v any) (any, error) { return DecodeCancelRequest(v) },
	}
	for i, row := range rows {
		schema, text, want, data := row[0], row[1], row[2], row[3]
		body := ReadBody([]byte(text))
		var (
			got     string
			decoded any
		)
		if schema == "pair" {
			r, ok := DecodePairRequest(body.Value)
			switch {
			case !ok:
				got = "none"
			case r.Start != nil:
				got, decoded = "start", r.Start
			case r.Poll != nil:
				got, decoded = "poll", r.Poll
			case r.Fixture != nil:
				got, decoded = "fixture", r.Fixture
			}
		} else {
			v, err := decoders[schema](body.Value)
			got = "ok"
			if err != nil {
				got = "fail"
				var se *SchemaError
				if !errors.As(err, &se) {
					t.Errorf("row %d: error %v is not a *SchemaError", i, err)
				}
			}
			decoded = v
		}
		if got != want {
			t.Errorf("row %d %s %s: got %s, zod %s", i, schema, text, got, want)
			continue
		}
		if data != "" {
			out, err := Marshal(decoded)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != data {
				t.Errorf("row %d %s: re-emitted\n%s\nzod\n%s", i, schema, out, data)
			}
		}
	}
}

func TestDecodeErrorPaths(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		dec  func(any) error
		body string
		want string
	}{
		{"nested unknown key", func(v any) error { _, err := DecodeResultRequest(v); return err },
			`{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l","envelope":{"ciphertext":"c","recipientKeyId":"r","senderKeyId":"s","direction":"payload","deadlineAt":1,"x":1},"disposition":"ok"}`,
			`envelope: unrecognized key "x"`},
		{"array element", func(v any) error { _, err := DecodeHeartbeatRequest(v); return err },
			`{"protocolVersion":"2","runnerId":"r","daemonVersion":"1","capabilities":[],"activeLeases":[{"jobId":"j","leaseId":"l"},{"jobId":"j","leaseId":7}]}`,
			`activeLeases[1].leaseId: expected string, received number`},
		{"string int", func(v any) error { _, err := DecodeClaimRequest(v); return err },
			`{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":"1"}`,
			`max: expected number, received string`},
		{"null optional", func(v any) error { _, err := DecodeEnqueueRequest(v); return err },
			`{"protocolVersion":"2","siteId":"s","stub":{"id":"j","kind":"llm.chat","owner":"o","site":"k","audience":"team","purpose":null,"sizeClass":"small","streaming":false,"deadlineAt":1}}`,
			`stub.purpose: expected string, received null`},
		{"absent body", func(v any) error { _, err := DecodeCancelRequest(v); return err },
			``, `expected object, received null`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.dec(ReadBody([]byte(c.body)).Value)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestDecodeSiteQuery(t *testing.T) {
	t.Parallel()
	if _, err := DecodeSiteQuery(""); err == nil {
		t.Error("empty siteId accepted")
	}
	if q, err := DecodeSiteQuery("site_a"); err != nil || q.SiteID != "site_a" {
		t.Errorf("DecodeSiteQuery = %+v, %v", q, err)
	}
}

func TestHeartbeatWithheldDefault(t *testing.T) {
	t.Parallel()
	r, err := DecodeHeartbeatRequest(ReadBody([]byte(`{"protocolVersion":"2","runnerId":"r","daemonVersion":"1","capabilities":[],"activeLeases":[]}`)).Value)
	if err != nil {
		t.Fatal(err)
	}
	if r.Withheld == nil || len(r.Withheld) != 0 {
		t.Fatalf("withheld = %#v, want empty non-nil", r.Withheld)
	}
}
