// Package storehooks holds the store contract's test-only Lua operations,
// which production never ships: run through Store.Testing().RunJobScript, with the
// libraries of lua/lib and the same header rules (lua's lint test reads
// them too). It imports nothing, so the store's in-package tests can use it.
package storehooks

import (
	"embed"
)

// WriteRawStub overwrites a job's stored stub bytes (ARGV[5]) as an older
// version might have written them (store contract case 13). Reply 1, or 0
// when there is no such job.
//
//go:embed write_raw_stub.lua
var WriteRawStub string

// FS holds every hook, for the header lint.
//
//go:embed *.lua
var FS embed.FS
