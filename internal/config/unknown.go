package config

import (
	"fmt"
	"slices"
	"strings"
)

// otherVars are RELAY_* variables read outside Load: the admin CLIs'
// RELAY_ADMIN_URL. Variables under RELAY_TEST_ belong to the test suites.
var otherVars = []string{"RELAY_ADMIN_URL"}

// UnknownVars checks an environment (os.Environ form) for RELAY_* variables
// no part of the relay reads, and says for each which known name is nearest:
// a misspelt RELAY_VALKEY_URI would otherwise leave the relay on its
// embedded store without a word. One message per variable, sorted.
func UnknownVars(environ []string) []string {
	known := append(EnvVars(), otherVars...)
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "RELAY_") || strings.HasPrefix(name, "RELAY_TEST_") || slices.Contains(known, name) {
			continue
		}
		msg := fmt.Sprintf("%s is not a relay setting and is ignored", name)
		if near, d := nearest(name, known); d <= max(3, len(name)/4) {
			msg += fmt.Sprintf("; did you mean %s?", near)
		} else {
			msg += "; relay -h lists every setting"
		}
		out = append(out, msg)
	}
	slices.Sort(out)
	return out
}

// nearest is the known name at the least edit distance from name.
func nearest(name string, known []string) (string, int) {
	best, bestD := "", -1
	for _, k := range known {
		if d := editDistance(name, k); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	return best, bestD
}

// editDistance is the Levenshtein distance between a and b (bytes: the
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
