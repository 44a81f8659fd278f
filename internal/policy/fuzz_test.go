package policy

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// policySeeds are the documents this package's tests write and refuse
// (TestPutMergeGet, TestParseRefusesMalformedDocuments, the ids of
// TestOddIDsNeitherCorruptNorCollide), each tried as a replacing and as a
// merge document.
var policySeeds = []string{
	`{}`,
	`{"consents":[],"teams":[],"declares":[]}`,
	`{"consents":[{"siteId":"s1","user":"alice","mappings":[{"purpose":"default","kind":"llm.generate","service":"qwen","owner":"bob"}]},
	  {"siteId":"s1","user":"carol","paused":true,"mappings":[]}],
	  "teams":[{"owner":"bob","members":["alice","carol"]}],
	  "declares":[{"siteId":"s1","purposes":["default","writing"]}]}`,
	`{"consents":[{"siteId":"s2","user":"alice","mappings":[]}],"teams":[{"owner":"bob","members":["dave"]}],"revoke":[{"siteId":"s1","user":"carol"}]}`,
	`{"consents":[{"siteId":"a:b","user":"{c}","mappings":[{"purpose":"p","kind":"k","service":"q","owner":null}]},{"siteId":"a","user":"b:{c}","mappings":[]}]}`,
	`{"teams":[{"owner":"o","members":[]},{"owner":"p","members":["\ud83d\ude00","é"]}]}`,
	`{"consents":[{"siteId":"s","user":"u","paused":"yes","mappings":[]}]}`,
	`{"consents":[{"siteId":"s","user":"a\u0000b","mappings":[]}]}`,
	`{"consents":[{"siteId":"s","user":"u","mappings":[{"purpose":"p","kind":"k","service":"q","owner":7}]}]}`,
	`{"consents":[{"siteId":"s","user":"u","mappings":[]},{"siteId":"s","user":"u","mappings":[]}]}`,
	`{"teams":[{"owner":"o","members":["a","a"]}]}`,
	`{"declares":[{"siteId":"s"}]}`,
	`{"consents":[{"siteId":"s","user":"u","mappings":[]}],"revoke":[{"siteId":"s","user":"u"}]}`,
	`{"consent":[]}`,
	`{`,
}

// FuzzParsePolicy: an accepted document round-trips (parse, marshal, parse
// gives the same document); a merge document accepts whatever a replacing
// one does, to the same value; and in the Valkey-backed store, a policy
// replaced by a document reads back as that document, and merging the
// document into it again changes nothing. Which documents are refused, and
// with what message, is TestParseRefusesMalformedDocuments' job.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range policySeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	ctx := context.Background()
	c := relaytest.Client(f)
	ns := relaytest.Namespace(f, c)
	s, err := NewStore(c, ns)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, doc []byte, merge bool) {
		d, err := Parse(doc, merge)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "policy: ") {
				t.Fatalf("refusal %q does not say what it refuses", err)
			}
			return
		}
		blob, err := protocol.Marshal(d)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := Parse(blob, merge)
		if err != nil {
			t.Fatalf("marshalled %s refused: %v", blob, err)
		}
		if again, _ := protocol.Marshal(back); !bytes.Equal(again, blob) {
			t.Fatalf("round trip changed it:\n%s\n%s", blob, again)
		}
		if !merge {
			if m, err := Parse(doc, true); err != nil {
				t.Fatalf("accepted as a policy, refused as a merge: %v", err)
			} else if mb, _ := protocol.Marshal(m); !bytes.Equal(mb, blob) {
				t.Fatalf("merge reading differs:\n%s\n%s", blob, mb)
			}
		}

		// The store: replace with the document (less its revoke list,
		// which only a merge carries), then merge it in again.
		d.Revoke = nil
		if _, err := s.Put(ctx, d); err != nil {
			t.Fatalf("put %s: %v", blob, err)
		}
		put, _, err := s.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := marshalForCompare(normalise(d))
		if got, _ := marshalForCompare(put); !bytes.Equal(got, want) {
			t.Fatalf("put then get:\n got %s\nwant %s", got, want)
		}
		if _, err := s.Merge(ctx, d); err != nil {
			t.Fatalf("merge %s: %v", blob, err)
		}
		merged, _, err := s.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := marshalForCompare(merged); !bytes.Equal(got, want) {
			t.Fatalf("merging the document into itself changed it:\n got %s\nwant %s", got, want)
		}
	})
}
