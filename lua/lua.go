// Package lua holds the routing store's Lua scripts, one file per operation,
// and the helper libraries they share (lib/). internal/store loads them as
// one Valkey Functions library (every library defined once, one function
// per operation: FCALL), or, where the server will not take it, as scripts:
// each prepended with lib/common.lua and with every library its header
// names on a "-- lib: <name>" line, then run with EVALSHA (EVAL on
// NOSCRIPT).
package lua

import "embed"

// FS holds *.lua (operations) and lib/*.lua (shared helpers).
//
//go:embed *.lua lib/*.lua
var FS embed.FS

// The projection's scripts (internal/projectionsync), self-contained: they
// take no common prefix and name only fleet-wide keys ("<ns>:{<ns>}:").
var (
	//go:embed projection/projection_put.lua
	ProjectionPut string
	//go:embed projection/projection_get.lua
	ProjectionGet string
	//go:embed projection/projection_unapprove.lua
	ProjectionUnapprove string
)

// ProjectionFS holds projection/*.lua, for the header lint.
//
//go:embed projection/*.lua
var ProjectionFS embed.FS
