package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
)

const pairingUsage = `Usage:
  relay pairing show    [--admin URL] [--token TOKEN] CODE
  relay pairing approve [--admin URL] [--token TOKEN] --owner OWNER [--runner-id ID] CODE
  relay pairing deny    [--admin URL] [--token TOKEN] CODE
  relay pairing unpair  [--admin URL] [--token TOKEN] RUNNER_ID

CODE is the user code the daemon shows its person (e.g. 6HTG-Z65X; case and
surrounding spaces do not matter).

show     prints the pending pairing: the device's key id and identity, label,
         platform, capabilities and expiry. Check the key id with the one the
         daemon prints before approving.
approve  approves it for OWNER; the daemon's next poll is approved. The
         runner id defaults to one derived from the device's key.
deny     drops it; the daemon's next poll answers "expired".
unpair   forgets a device approved by code (by its runner id): it is no
         longer recognised. Devices of the projection document are changed
         there instead.

Exit status: 0 done, 1 refused by the relay (unknown or expired code,
conflict), 2 usage or the admin listener unreachable. The token and URL
defaults are those of "relay projection".

Flags:
`

// RunPairingCLI runs `relay pairing ...` with args after "pairing".
func RunPairingCLI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newAdminCLI("relay pairing", pairingUsage, getenv, stdout, stderr)
	owner := c.fs.String("owner", "", "approve: the owner (account) the device runs for")
	runnerID := c.fs.String("runner-id", "", "approve: the runner id (default: derived from the device key)")
	if code, ok := c.parse(args); !ok {
		return code
	}
	pos := c.pos
	if len(pos) != 2 {
		if pos[0] != "show" && pos[0] != "approve" && pos[0] != "deny" && pos[0] != "unpair" {
			return c.unknown()
		}
		return c.fail("want exactly one CODE, got %d arguments", len(pos)-1)
	}
	base, token, err := c.endpoint()
	if err != nil {
		return c.fail("%v", err)
	}
	path := "/pairings/" + url.PathEscape(pos[1])
	method := http.MethodGet
	var body []byte
	switch pos[0] {
	case "show":
		if *owner != "" || *runnerID != "" {
			return c.fail("--owner and --runner-id are for approve")
		}
	case "approve":
		if *owner == "" {
			return c.fail("--owner is required: the account the device will run for")
		}
		method, path = http.MethodPost, path+"/approve"
		body, _ = json.Marshal(struct {
			Owner    string `json:"owner"`
			RunnerID string `json:"runnerId,omitempty"`
		}{*owner, *runnerID})
	case "deny":
		if *owner != "" || *runnerID != "" {
			return c.fail("--owner and --runner-id are for approve")
		}
		method, path = http.MethodPost, path+"/deny"
	case "unpair":
		if *owner != "" || *runnerID != "" {
			return c.fail("--owner and --runner-id are for approve")
		}
		method, path = http.MethodDelete, "/projection/approved/"+url.PathEscape(pos[1])
	default:
		return c.unknown()
	}
	return c.call(ctx, base, token, method, path, body, true)
}
