package store

import (
	"regexp"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

// hashTag is the part of key a cluster hashes (the Redis Cluster rule): the
// text between the first '{' and the first '}' after it, when that is not
// empty; otherwise "" (the whole key is hashed).
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// derivedTag is what a tag the store makes looks like: a namespace, a shard
// of one ("<ns>/<i>-<n>"), or an
// encoding of an id (base64url, hex), never raw id bytes; in particular it
// holds no brace, so an id cannot open or close a tag of its own.
var derivedTag = regexp.MustCompile(`^[A-Za-z0-9_.\-/]+$`)

// Ids crafted to move keys into a slot of the sender's choosing: braces
// around a chosen tag, an empty tag, an unbalanced brace. Every key the
// store writes for them (jobs, queues, indexes, presence, leases) carries a
// tag the store derived, never text taken from an id; on the cluster
// backend, the keys live where those derived tags say. The ids' own tag
// text ("evil") never becomes a hash tag.
func TestCraftedIDsCannotChooseTheHashTag(t *testing.T) {
	t.Parallel()
	hostile := []string{"{evil}", "x{evil}y", "{}evil", "}{evil}", "{", "}", "{{evil}}"}
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		for i, id := range hostile {
			siteID, owner, runnerID, jobID := "site"+id, "owner"+id, "runner"+id, "job"+id
			st := stub(jobID, owner)
			if _, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: jobID, SiteID: siteID, Stub: st}); err != nil {
				t.Fatalf("enqueue %q: %v", id, err)
			}
			got := h.claim(runner(runnerID), deviceOwner(owner), func(in *ClaimInput) {
				in.Routes = []Route{{SiteID: siteID, Owner: owner}}
			})
			if len(got) != 1 || stubID(got[0]) != jobID {
				t.Fatalf("%d %q: claim granted %q", i, id, ids(got))
			}
			if r, err := h.s.Seal(h.ctx, siteID, jobID, envelope); err != nil || r.State != StateReady {
				t.Fatalf("%q: seal %+v %v", id, r, err)
			}
			if r, err := h.s.TakePayload(h.ctx, HolderInput{JobID: jobID, RunnerID: runnerID, LeaseID: got[0].Lease.ID}); err != nil || r.Envelope == nil {
				t.Fatalf("%q: take %+v %v", id, r, err)
			}
			// A second job stays queued, so queue keys exist at the end too.
			if _, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: jobID + "2", SiteID: siteID, Stub: stub(jobID+"2", owner)}); err != nil {
				t.Fatalf("enqueue 2 %q: %v", id, err)
			}
			h.seen(runnerID, owner, freshDevice(), `[]`, "")
		}
		keys := scanKeys(t, b.client, h.s.KeyPattern())
		if len(keys) < 10 {
			t.Fatalf("only %d keys written: %q", len(keys), keys)
		}
		tags := map[string]int{}
		for _, k := range keys {
			tag := hashTag(k)
			if !derivedTag.MatchString(tag) || strings.Contains(tag, "evil") {
				t.Errorf("key %q hashes on %q, not a tag the store derived", k, tag)
			}
			tags[tag]++
		}
		if b.name == "cluster" {
			// The server agrees on each key's slot: one slot per derived tag.
			slotOf := map[string]int64{}
			for _, k := range keys {
				slot, err := b.client.Do(h.ctx, b.client.B().ClusterKeyslot().Key(k).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				tag := hashTag(k)
				if s, ok := slotOf[tag]; ok && s != slot {
					t.Errorf("key %q in slot %d, other keys of tag %q in %d", k, slot, tag, s)
				}
				slotOf[tag] = slot
			}
		}
		t.Logf("%d keys under %d derived tags", len(keys), len(tags))
	})
}

// A namespace is a tag itself, so one that could open or close a tag is
// refused before anything is written.
func TestNamespaceWithBracesRefused(t *testing.T) {
	t.Parallel()
	b := allBackends(t)[0]
	for _, ns := range []string{"{x}", "a{b", "a}b", "{}"} {
		if _, err := New(t.Context(), b.client, Options{Namespace: ns, Logger: relaytest.Discard()}); err == nil {
			t.Errorf("namespace %q accepted", ns)
		}
	}
}
