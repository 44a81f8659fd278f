package store

import "encoding/base64"

// enc is the key-part encoding of store.md §9.2: base64url without padding.
// Its alphabet has no ':', '{', '}' or ';', so every key splits unambiguously
// and a hash tag built from it stays well-formed, whatever bytes the id holds.
func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// keys builds every key name of one namespace. All of them start with
// "<ns>:{<ns>}:", so they share one hash tag and one cluster slot (mode G).
type keys struct{ p string }

func newKeys(namespace string) (keys, error) {
	if err := CheckNamespace(namespace); err != nil {
		return keys{}, err
	}
	return keys{p: namespace + ":{" + namespace + "}:"}, nil
}

// member names a job inside indexes that span sites: <eS>:<eJ>.
func member(siteID, jobID string) string { return enc(siteID) + ":" + enc(jobID) }

func (k keys) job(siteID, jobID string) string { return k.p + "j:" + member(siteID, jobID) }
func (k keys) seq() string                     { return k.p + "seq" }
func (k keys) all() string                     { return k.p + "all" }
func (k keys) due() string                     { return k.p + "due" }
func (k keys) lease() string                   { return k.p + "lease" }
func (k keys) epoch() string                   { return k.p + "epoch" }

func (k keys) readyQueue(siteID, owner, kind, audience string) string {
	return k.p + "q:" + enc(siteID) + ":" + enc(owner) + ":" + enc(kind) + ":" + enc(audience)
}
func (k keys) stickyQueue(siteID, owner, runnerID string) string {
	return k.p + "sq:" + enc(siteID) + ":" + enc(owner) + ":" + enc(runnerID)
}
func (k keys) unsealed(siteID, owner string) string {
	return k.p + "uns:" + enc(siteID) + ":" + enc(owner)
}
func (k keys) awaiting(siteID string) string  { return k.p + "aw:" + enc(siteID) }
func (k keys) siteLive(siteID string) string  { return k.p + "sl:" + enc(siteID) }
func (k keys) siteBytes(siteID string) string { return k.p + "sb:" + enc(siteID) }
func (k keys) siteRate(siteID string) string  { return k.p + "sr:" + enc(siteID) }
func (k keys) finished(siteID string) string  { return k.p + "fin:" + enc(siteID) }
func (k keys) held(runnerID string) string    { return k.p + "held:" + enc(runnerID) }
func (k keys) heldIDs(runnerID string) string {
	return k.p + "hid:" + enc(runnerID)
}
func (k keys) cancelled(runnerID string) string { return k.p + "cxl:" + enc(runnerID) }

func (k keys) presence(runnerID string) string { return k.p + "p:" + enc(runnerID) }
func (k keys) presenceIndex() string           { return k.p + "pidx" }
func (k keys) presenceSeq() string             { return k.p + "pseq" }
func (k keys) presenceByOwner(owner string) string {
	return k.p + "po:" + enc(owner)
}

func (k keys) pairing(part string) string { return k.p + "pc:" + part }

// pattern matches every key of the namespace (tests, operators).
func (k keys) pattern() string { return k.p + "*" }
