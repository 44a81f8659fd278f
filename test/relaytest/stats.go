package relaytest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls int64 // times run
	Usec  int64 // microseconds the server spent in it
}

// CommandStats reads INFO commandstats of the server c talks to (one node):
// by command name in lower case ("evalsha", "evalsha_ro", ...). Benchmarks
// read it before and after a phase for the server-side cost of scripts.
func CommandStats(ctx context.Context, c valkey.Client) (map[string]CommandStat, error) {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	out := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		out[name] = st
	}
	return out, nil
}
