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
	"os"
	"strings"
	"time"
)

// Exit codes of RunCLI.
const (
	ExitOK      = 0
	ExitRefused = 1 // the admin listener answered, and not with 2xx
	ExitUsage   = 2 // bad arguments, unreadable file, unreachable listener
)

const cliUsage = `Usage:
  relay projection push [--admin URL] [--token TOKEN] [--merge] FILE
  relay projection get  [--admin URL] [--token TOKEN]
  relay projection status [--admin URL] [--token TOKEN]

push  sends FILE (a RelayFixture JSON document; "-" reads stdin) to the admin
      listener: PUT /projection replaces the projection, --merge upserts the
      file's records instead (POST /projection/merge). It prints the result
      and exits 1 if the relay refused the document.
get   prints the stored projection.
status prints the stored version and the answering replica's version.

The token defaults to $RELAY_ADMIN_TOKEN (prefer it: flags show up in ps);
the admin URL to $RELAY_ADMIN_URL, else http:// + $RELAY_ADMIN_LISTEN, else
http://127.0.0.1:8081.

Flags:
`

const policyUsage = `Usage:
  relay policy push [--admin URL] [--token TOKEN] [--merge] FILE
  relay policy get  [--admin URL] [--token TOKEN]
  relay policy status [--admin URL] [--token TOKEN]

push  sends FILE (a policy document: consents with their mappings, teams,
      declares; "-" reads stdin) to the admin listener: PUT /policy replaces
      the policy, --merge upserts the file's entries and withdraws its
      "revoke" list instead (POST /policy/merge). It prints the result (the
      version, and where the policy and the projection disagree) and exits 1
      if the relay refused the document.
get   prints the stored policy.
status prints the version and the disagreements with the projection.

The token defaults to $RELAY_ADMIN_TOKEN (prefer it: flags show up in ps);
the admin URL to $RELAY_ADMIN_URL, else http:// + $RELAY_ADMIN_LISTEN, else
http://127.0.0.1:8081.

Flags:
`

// RunCLI runs `relay projection ...` with args after "projection". It
// returns the process exit code.
func RunCLI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return runCLI(ctx, "projection", cliUsage, args, getenv, stdout, stderr)
}

// RunPolicyCLI runs `relay policy ...` with args after "policy", against the
// /policy routes, exactly as RunCLI does for the projection.
func RunPolicyCLI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return runCLI(ctx, "policy", policyUsage, args, getenv, stdout, stderr)
}

func runCLI(ctx context.Context, resource, usage string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newAdminCLI("relay "+resource, usage, getenv, stdout, stderr)
	merge := c.fs.Bool("merge", false, "push: upsert the file's records instead of replacing the "+resource)
	if code, ok := c.parse(args); !ok {
		return code
	}
	pos := c.pos
	base, token, err := c.endpoint()
	if err != nil {
		return c.fail("%v", err)
	}

	var method, path string
	var body []byte
	switch pos[0] {
	case "push":
		if len(pos) != 2 {
			return c.fail("want exactly one FILE, got %d arguments", len(pos)-1)
		}
		if pos[1] == "-" {
			body, err = io.ReadAll(os.Stdin)
		} else {
			body, err = os.ReadFile(pos[1])
		}
		if err != nil {
			return c.fail("cannot read %s: %v", pos[1], err)
		}
		method, path = http.MethodPut, "/"+resource
		if *merge {
			method, path = http.MethodPost, "/"+resource+"/merge"
		}
	case "get", "status":
		if len(pos) != 1 {
			return c.fail("takes no arguments")
		}
		method, path = http.MethodGet, "/"+resource
		if pos[0] == "status" {
			path = "/" + resource + "/status"
		}
	default:
		return c.unknown()
	}
	return c.call(ctx, base, token, method, path, body, false)
}

// adminCLI is what the admin subcommands (projection, policy, pairing)
// share: the --admin, --token and --timeout flags, flags accepted between
// positional arguments, the error lines and the call itself.
type adminCLI struct {
	name           string // "relay pairing"
	fs             *flag.FlagSet
	adminURL       *string
	token          *string
	timeout        *time.Duration
	getenv         func(string) string
	stdout, stderr io.Writer
	pos            []string // the positional arguments; pos[0] is the command
}

// newAdminCLI defines the shared flags; the caller adds its own to c.fs
// before parse.
func newAdminCLI(name, usage string, getenv func(string) string, stdout, stderr io.Writer) *adminCLI {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &adminCLI{name: name, fs: fs, getenv: getenv, stdout: stdout, stderr: stderr}
	c.adminURL = fs.String("admin", defaultAdminURL(getenv), "admin listener base URL")
	// The default is resolved after parsing so -h never prints the token.
	c.token = fs.String("token", "", "admin bearer token (default $RELAY_ADMIN_TOKEN)")
	c.timeout = fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return c
}

// parse reads args into the flags and c.pos, accepting flags after
// positional arguments too (push FILE --merge). When !ok the command is
// over with exit code: help asked for, a bad flag, or no command.
func (c *adminCLI) parse(args []string) (code int, ok bool) {
	rest := args
	for {
		if err := c.fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK, false
			}
			return ExitUsage, false
		}
		if c.fs.NArg() == 0 {
			break
		}
		c.pos = append(c.pos, c.fs.Arg(0))
		rest = c.fs.Args()[1:]
	}
	if len(c.pos) == 0 {
		c.fs.Usage()
		return ExitUsage, false
	}
	return ExitOK, true
}

// fail says what is wrong with the command and returns ExitUsage.
func (c *adminCLI) fail(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "%s %s: %s\n", c.name, c.pos[0], fmt.Sprintf(format, a...))
	return ExitUsage
}

// unknown refuses a command the subcommand does not have.
func (c *adminCLI) unknown() int {
	fmt.Fprintf(c.stderr, "%s: unknown command %q\n", c.name, c.pos[0])
	c.fs.Usage()
	return ExitUsage
}

// endpoint is the admin listener's base URL and the token, from the flags
// or RELAY_ADMIN_TOKEN.
func (c *adminCLI) endpoint() (*url.URL, string, error) {
	base, err := url.Parse(strings.TrimRight(*c.adminURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, "", fmt.Errorf("--admin %q is not an http(s) URL; e.g. http://127.0.0.1:8081", *c.adminURL)
	}
	token := *c.token
	if token == "" {
		token = c.getenv("RELAY_ADMIN_TOKEN")
	}
	if token == "" {
		return nil, "", errors.New("no token: set RELAY_ADMIN_TOKEN or pass --token")
	}
	return base, token, nil
}

// call sends the request within --timeout and writes the answer's body to
// stdout (indented when pretty and it is JSON).
func (c *adminCLI) call(ctx context.Context, base *url.URL, token, method, path string, body []byte, pretty bool) int {
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	out, err := adminCall(ctx, base, token, method, path, body)
	var refused *adminRefusal
	if errors.As(err, &refused) {
		fmt.Fprintf(c.stderr, "%s %s: refused (%d): %s\n", c.name, c.pos[0], refused.status, refused.msg)
		return ExitRefused
	}
	if err != nil {
		return c.fail("%v", err)
	}
	var indented bytes.Buffer
	if pretty && json.Indent(&indented, out, "", "  ") == nil {
		out = indented.Bytes()
	}
	c.stdout.Write(out) //nolint:errcheck // nothing useful to do if stdout is gone
	if len(out) > 0 && out[len(out)-1] != '\n' {
		fmt.Fprintln(c.stdout)
	}
	return ExitOK
}

func defaultAdminURL(getenv func(string) string) string {
	if u := getenv("RELAY_ADMIN_URL"); u != "" {
		return u
	}
	if l := getenv("RELAY_ADMIN_LISTEN"); l != "" && !strings.EqualFold(l, "off") {
		if strings.HasPrefix(l, ":") {
			l = "127.0.0.1" + l
		}
		return "http://" + l
	}
	return "http://127.0.0.1:8081"
}

// adminRefusal is a non-2xx answer of the admin listener: its status and
// the message of its error body (or the body itself).
type adminRefusal struct {
	status int
	msg    string
}

func (r *adminRefusal) Error() string { return fmt.Sprintf("refused (%d): %s", r.status, r.msg) }

// adminCall sends one request with the admin token to the admin listener at
// base and returns the answer's body; a refusal is an *adminRefusal.
func adminCall(ctx context.Context, base *url.URL, token, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, base.String()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the admin listener at %s: %v", base, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %v", err)
	}
	if resp.StatusCode/100 != 2 {
		var e errorBody
		msg := strings.TrimSpace(string(out))
		if json.Unmarshal(out, &e) == nil && e.Error != "" {
			msg = e.Error
			if e.Message != "" {
				msg += ": " + e.Message
			}
		}
		return nil, &adminRefusal{status: resp.StatusCode, msg: msg}
	}
	return out, nil
}
