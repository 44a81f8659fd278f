package projectionsync

import (
	"errors"
	"fmt"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
)

// UniqueKeys refuses (an *InvalidError) a document that names a key twice
// in one object, for what operators write: the admin listener's PUT and
// merge, and RELAY_PROJECTION_FILE. projection.Parse itself keeps
// JSON.parse's last-wins rule, verdict for verdict with the reference's
// schema; a document written by a person or tool should mean one thing.
// Invalid JSON is left to the document's own parser.
func UniqueKeys(raw []byte) error {
	var dup *protocol.DuplicateKeyError
	if _, err := protocol.ParseJSONUnique(protocol.RequestText(raw)); errors.As(err, &dup) {
		return &InvalidError{Err: fmt.Errorf("projection: %w", dup)}
	}
	return nil
}

// decoded is a validated document: its canonical bytes (what Valkey
// stores, so equal fixtures compare equal whatever their spelling) and the
// projection built from it.
type decoded struct {
	canon  []byte
	proj   *projection.Projection
	counts Counts
}

// decodeDoc validates raw strictly as a whole RelayFixture. The error names
// the first offending field.
func decodeDoc(raw []byte) (decoded, error) {
	f, err := projection.Parse(raw)
	if err != nil {
		return decoded{}, err
	}
	return fromFixture(f), nil
}

func fromFixture(f projection.Fixture) decoded {
	return decoded{
		canon: f.JSON(),
		proj:  projection.New(f),
		counts: Counts{Sites: len(f.Sites), Consents: len(f.Consents), Devices: len(f.Devices),
			Rosters: len(f.Rosters), Revoked: len(f.Revoked)},
	}
}

// emptyDoc is the reference's default fixture: every array empty.
func emptyDoc() decoded {
	return fromFixture(projection.Fixture{
		Sites: []projection.SiteRecord{}, Consents: []projection.ConsentRecord{},
		Devices: []projection.DeviceRecord{}, Rosters: []projection.RosterRecord{},
		Revoked: []projection.RevocationRecord{},
	})
}
