package store

import (
	"fmt"
	"regexp"
)

// NamespacePattern is the one rule for a namespace, wherever one is
// checked (configuration, this store, the policy store): 1-64 letters,
// digits, '.', '_' or '-', starting with a letter or digit. A namespace is
// part of every key name and of the hash tag "{<ns>}", so braces, colons
// and spaces would break the layout (doc.go).
var NamespacePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckNamespace returns nil when ns follows NamespacePattern, or an error
// saying what a namespace must be.
func CheckNamespace(ns string) error {
	if !NamespacePattern.MatchString(ns) {
		return fmt.Errorf("namespace %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", ns)
	}
	return nil
}

// KeyPrefix is the prefix of every fleet-wide key of namespace ns,
// "<ns>:{<ns>}:": the one place it is built, for this store, the policy
// and the projection alike. Its hash tag puts every such key in one slot.
func KeyPrefix(ns string) string { return ns + ":{" + ns + "}:" }
