package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
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
	fs := flag.NewFlagSet("relay pairing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	adminURL := fs.String("admin", defaultAdminURL(getenv), "admin listener base URL")
	token := fs.String("token", "", "admin bearer token (default $RELAY_ADMIN_TOKEN)")
	owner := fs.String("owner", "", "approve: the owner (account) the device runs for")
	runnerID := fs.String("runner-id", "", "approve: the runner id (default: derived from the device key)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(stderr, pairingUsage)
		fs.PrintDefaults()
	}
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK
			}
			return ExitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return ExitUsage
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "relay pairing %s: %s\n", pos[0], fmt.Sprintf(format, a...))
		return ExitUsage
	}
	if len(pos) != 2 {
		if pos[0] != "show" && pos[0] != "approve" && pos[0] != "deny" && pos[0] != "unpair" {
			fmt.Fprintf(stderr, "relay pairing: unknown command %q\n", pos[0])
			fs.Usage()
			return ExitUsage
		}
		return fail("want exactly one CODE, got %d arguments", len(pos)-1)
	}
	base, err := url.Parse(strings.TrimRight(*adminURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fail("--admin %q is not an http(s) URL; e.g. http://127.0.0.1:8081", *adminURL)
	}
	if *token == "" {
		*token = getenv("RELAY_ADMIN_TOKEN")
	}
	if *token == "" {
		return fail("no token: set RELAY_ADMIN_TOKEN or pass --token")
	}
	path := "/pairings/" + url.PathEscape(pos[1])
	method := http.MethodGet
	var body []byte
	switch pos[0] {
	case "show":
		if *owner != "" || *runnerID != "" {
			return fail("--owner and --runner-id are for approve")
		}
	case "approve":
		if *owner == "" {
			return fail("--owner is required: the account the device will run for")
		}
		method, path = http.MethodPost, path+"/approve"
		body, _ = json.Marshal(struct {
			Owner    string `json:"owner"`
			RunnerID string `json:"runnerId,omitempty"`
		}{*owner, *runnerID})
	case "deny":
		if *owner != "" || *runnerID != "" {
			return fail("--owner and --runner-id are for approve")
		}
		method, path = http.MethodPost, path+"/deny"
	case "unpair":
		if *owner != "" || *runnerID != "" {
			return fail("--owner and --runner-id are for approve")
		}
		method, path = http.MethodDelete, "/projection/approved/"+url.PathEscape(pos[1])
	default:
		fmt.Fprintf(stderr, "relay pairing: unknown command %q\n", pos[0])
		fs.Usage()
		return ExitUsage
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	out, err := adminCall(ctx, base, *token, method, path, body)
	var refused *adminRefusal
	if errors.As(err, &refused) {
		fmt.Fprintf(stderr, "relay pairing %s: refused (%d): %s\n", pos[0], refused.status, refused.msg)
		return ExitRefused
	}
	if err != nil {
		return fail("%v", err)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, out, "", "  ") == nil {
		out = pretty.Bytes()
	}
	stdout.Write(out) //nolint:errcheck // nothing useful to do if stdout is gone
	if len(out) > 0 && out[len(out)-1] != '\n' {
		fmt.Fprintln(stdout)
	}
	return ExitOK
}
