package projectionsync

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// mergeKeys names, per array of a RelayFixture, the fields that identify a
// record for an upsert. They are the reference host's (server.mjs) keys.
var mergeKeys = map[string][]string{
	"sites":    {"siteId"},
	"consents": {"owner", "siteId"},
	"devices":  {"runnerId"},
	"rosters":  {"id"},
	"revoked":  {"owner", "siteId"},
}

// mergeDocs upserts patch into base, both RelayFixture-shaped JSON objects,
// as the reference host does: for each array the patch names, a record whose
// key matches an existing one replaces it in place (array order matters to
// the projection's first-match lookups), and a new record is appended.
// Arrays the patch leaves out are kept. Records are carried as raw JSON; the
// result is validated whole afterwards, so this only checks the shape it
// needs.
func mergeDocs(base, patch []byte) ([]byte, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(patch, &p); err != nil || p == nil {
		return nil, fmt.Errorf("merge body must be a JSON object (a partial RelayFixture)")
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(base, &out); err != nil || out == nil {
		return nil, fmt.Errorf("stored projection is not a JSON object: %v", err)
	}
	for name, raw := range p {
		keys, ok := mergeKeys[name]
		if !ok {
			return nil, fmt.Errorf("%s: unknown projection key; a merge may name sites, consents, devices, rosters and revoked", name)
		}
		var incoming []json.RawMessage
		if err := json.Unmarshal(raw, &incoming); err != nil || incoming == nil {
			return nil, fmt.Errorf("%s: must be an array", name)
		}
		var current []json.RawMessage
		if existing, ok := out[name]; ok {
			if err := json.Unmarshal(existing, &current); err != nil {
				return nil, fmt.Errorf("stored projection: %s: must be an array", name)
			}
		}
		merged, err := upsert(current, incoming, keys)
		if err != nil {
			return nil, fmt.Errorf("%s%w", name, err)
		}
		if out[name], err = json.Marshal(merged); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return json.Marshal(out)
}

func upsert(current, incoming []json.RawMessage, keys []string) ([]json.RawMessage, error) {
	out := append([]json.RawMessage(nil), current...)
	index := make(map[string]int, len(out))
	for i, r := range out {
		k, err := recordKey(r, keys)
		if err != nil {
			return nil, fmt.Errorf("[%d] (stored): %w", i, err)
		}
		// With duplicates the last one is replaced, as the reference host's
		// new Map(entries) keeps the last index.
		index[k] = i
	}
	for i, r := range incoming {
		k, err := recordKey(r, keys)
		if err != nil {
			return nil, fmt.Errorf("[%d] (in the merge body): %w", i, err)
		}
		if at, ok := index[k]; ok {
			out[at] = r
			continue
		}
		index[k] = len(out)
		out = append(out, r)
	}
	return out, nil
}

// recordKey is the JSON array of the key fields' values; an absent field is
// null, like the reference's JSON.stringify([r?.siteId]).
func recordKey(r json.RawMessage, keys []string) (string, error) {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return "", fmt.Errorf("must be an object")
	}
	vals := make([]any, len(keys))
	for i, k := range keys {
		vals[i] = obj[k]
	}
	b, err := json.Marshal(vals)
	return string(b), err
}

// validatePatch checks a merge body's records against the RelayFixture
// schema. A patch may leave out consents (required in a whole document).
func validatePatch(patch []byte) error {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(patch, &p); err != nil {
		return fmt.Errorf("merge body must be a JSON object (a partial RelayFixture)")
	}
	if _, ok := p["consents"]; !ok {
		p["consents"] = json.RawMessage("[]")
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = decodeDoc(b)
	return err
}
