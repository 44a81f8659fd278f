package relay

import "github.com/byollm/relay-go/internal/store"

var _ Store = (*store.Store)(nil)
