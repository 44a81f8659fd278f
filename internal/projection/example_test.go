package projection_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/byollm/relay-go/internal/envelope"
	"github.com/byollm/relay-go/internal/projection"
)

// TestDeployExampleProjection loads deploy/projection.example.json, the
// example deploy/docs/projection.md explains, with the relay's own parser: one site,
// one consent, one device, each key set signed by its own identity, and the
// consent routing that device to that site.
func TestDeployExampleProjection(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "projection.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := projection.Parse(data)
	if err != nil {
		t.Fatalf("the example is refused: %v", err)
	}
	if len(f.Sites) != 1 || len(f.Consents) != 1 || len(f.Devices) != 1 {
		t.Fatalf("want one site, one consent, one device; got %d, %d, %d", len(f.Sites), len(f.Consents), len(f.Devices))
	}
	if !envelope.VerifyPublicIdentity(f.Sites[0].Site) {
		t.Errorf("site %q: encryptionSig does not verify against its identity", f.Sites[0].SiteID)
	}
	if !envelope.VerifyPublicIdentity(f.Devices[0].Device) {
		t.Errorf("device %q: encryptionSig does not verify against its identity", f.Devices[0].RunnerID)
	}
	p := projection.New(f)
	site, dev := f.Sites[0].SiteID, f.Devices[0]
	if !p.MayRouteFor(dev.Owner, site) {
		t.Errorf("the example's device owner %q may not route for %q: the consent does not match", dev.Owner, site)
	}
	if p.DeviceFor(dev.RunnerID) == nil || p.SiteFor(site) == nil {
		t.Errorf("lookups do not find the example's records")
	}
}
