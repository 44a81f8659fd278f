package projectionsync

import (
	"github.com/byollm/relay-go/internal/projection"
)

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
