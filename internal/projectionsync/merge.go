package projectionsync

import (
	"fmt"

	"github.com/byollm/relay-go/internal/projection"
)

// mergeDocs upserts the merge body patch into base, a stored document, as
// the reference host does (projection.Merge). The patch is checked on its
// own first, so a refusal names the record's place in the body; base must
// be a valid document (it is, unless written by hand around the validator).
// Both are decoded with the JS-exact parser, so ids are compared as the JS
// strings they are (a lone surrogate stays itself) and the result is the
// canonical document, validated whole.
func mergeDocs(base, patch []byte) (decoded, error) {
	p, err := projection.ParsePatch(patch)
	if err != nil {
		return decoded{}, fmt.Errorf("merge body: %w", err)
	}
	b, err := projection.Parse(base)
	if err != nil {
		return decoded{}, fmt.Errorf("stored projection: %w", err)
	}
	merged := projection.Merge(b, p)
	// Validate the result whole, as Replace does; records valid on their
	// own make a valid document today, but the check costs little and
	// keeps that true if the schema ever gains a cross-record rule.
	if err := projection.Validate(merged); err != nil {
		return decoded{}, err
	}
	return fromFixture(merged), nil
}
