package store

import (
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/lua"
)

// Every script the store runs is a typed value whose mode is the one its
// header declares, and every operation file in lua/ (other than the policy
// store's) is one of them.
func TestScriptsMatchTheirHeaders(t *testing.T) {
	t.Parallel()
	declared := map[string]bool{}
	for _, sc := range Scripts {
		declared[sc.Name] = true
		body, err := fs.ReadFile(lua.FS, sc.Name+".lua")
		if err != nil {
			t.Errorf("%s: %v", sc.Name, err)
			continue
		}
		mode := ""
		for _, line := range strings.Split(string(body), "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			if m, ok := strings.CutPrefix(line, "-- mode: "); ok {
				mode = strings.Fields(m)[0]
			}
		}
		if want := map[bool]string{true: "read-only", false: "write"}[sc.ReadOnly]; mode != want {
			t.Errorf("%s: Go says %s, the header says %q", sc.Name, want, mode)
		}
	}
	ops, _ := fs.Glob(lua.FS, "*.lua")
	for _, op := range ops {
		name := strings.TrimSuffix(op, ".lua")
		if !declared[name] && !strings.HasPrefix(name, "policy_") {
			t.Errorf("lua/%s has no Script value", op)
		}
	}
}

// The routing constants are written twice, in api.go and lib/store.lua;
// they must agree.
func TestLuaConstantsMatchGo(t *testing.T) {
	t.Parallel()
	body, err := fs.ReadFile(lua.FS, "lib/store.lua")
	if err != nil {
		t.Fatal(err)
	}
	local := regexp.MustCompile(`(?m)^local ([A-Z_]+) = '?([0-9A-Za-z_-]+)'?`)
	got := map[string]string{}
	for _, m := range local.FindAllStringSubmatch(string(body), -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{
		"AWAITING_MS":         strconv.Itoa(AwaitingPayloadMs),
		"UNSEALED_PER_PAIR":   strconv.Itoa(UnsealedPerPair),
		"EVICT_AT":            strconv.Itoa(SealAttemptsBeforeEviction),
		"CHURN_EXPIRIES":      strconv.Itoa(ChurnExpiries),
		"CHURN_WINDOW_MS":     strconv.Itoa(ChurnWindowMs),
		"CHURN_QUIET_MS":      strconv.Itoa(ChurnQuietMs),
		"RUNNER_SHARDS_GRAIN": strconv.Itoa(runnerShardsGrain),
		"QUEUED":              StateQueued,
		"AWAITING":            StateAwaitingPayload,
		"READY":               StateReady,
		"RUNNING":             StateRunning,
		"DONE":                StateDone,
		"PRIVATE_EA":          enc(protocol.AudiencePrivate),
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("lib/store.lua %s = %q, Go says %q", name, got[name], v)
		}
	}
}

// core() in lib/store.lua reads CORE's fields with one HMGET and names
// them in one table constructor by position: both lists must be the same
// fields in the same order.
func TestCoreConstructorFollowsCORE(t *testing.T) {
	t.Parallel()
	body, err := fs.ReadFile(lua.FS, "lib/store.lua")
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`(?s)local CORE = \{(.*?)\}`).FindStringSubmatch(string(body))
	if list == nil {
		t.Fatal("no CORE list in lib/store.lua")
	}
	var fields []string
	for _, m := range regexp.MustCompile(`'([A-Za-z]+)'`).FindAllStringSubmatch(list[1], -1) {
		fields = append(fields, m[1])
	}
	ctor := regexp.MustCompile(`([A-Za-z]+) = v\[(\d+)\] or nil`).FindAllStringSubmatch(string(body), -1)
	if len(fields) == 0 || len(ctor) != len(fields) {
		t.Fatalf("CORE has %d fields, the constructor names %d", len(fields), len(ctor))
	}
	for i, m := range ctor {
		if m[1] != fields[i] || m[2] != strconv.Itoa(i+1) {
			t.Errorf("constructor entry %d is %s = v[%s], CORE says %s at %d", i, m[1], m[2], fields[i], i+1)
		}
	}
}
