package store

import "github.com/byollm/relay-go/internal/scriptrun"

// Runner is the runner every call of this Store goes through, for the
// policy and the projection to share: their calls are then observed,
// bounded and classified as the store's.
func (s *Store) Runner() *scriptrun.Runner { return s.runner }

// Script is one operation of lua/: the file lua/<Name>.lua, run as one
// atomic call, FCALL of its function in the store's library (library.go)
// or EVALSHA of the script. ReadOnly scripts run with FCALL_RO or
// EVALSHA_RO (a replica may serve them; their function is flagged
// no-writes); the file's header declares the same mode ("-- mode:
// read-only" or "-- mode: write"), which TestScriptsMatchTheirHeaders checks
// and lua.TestScriptHeaders lints (a read-only script names no write
// command and never reads the clock: miniredis refuses TIME there).
type Script struct {
	Name     string
	ReadOnly bool
	// Work: the script may add queue entries or bring a due instant
	// closer on its shard, so after it runs this Store's work view re-reads
	// that shard's due head and fences its empty queues (workView).
	Work bool
}

// The store's scripts. Every call goes through Store.run with one of these,
// so every script call, from any caller, is observed the same way.
var (
	scAwaiting          = Script{Name: "awaiting", ReadOnly: true}
	scCancel            = Script{Name: "cancel", ReadOnly: false}
	scCancelRequests    = Script{Name: "cancel_requests", ReadOnly: true}
	scClaim             = Script{Name: "claim", ReadOnly: false} // Work per section: its reply says where it wrote (Store.claimSeen)
	scComplete          = Script{Name: "complete", ReadOnly: false, Work: true}
	scEnqueue           = Script{Name: "enqueue", ReadOnly: false, Work: true}
	scFinished          = Script{Name: "finished", ReadOnly: true}
	scGiveBack          = Script{Name: "give_back", ReadOnly: false, Work: true}
	scHolds             = Script{Name: "holds", ReadOnly: false, Work: true}
	scJob               = Script{Name: "job", ReadOnly: true}
	scJobsPage          = Script{Name: "jobs_page", ReadOnly: true}
	scJobRekey          = Script{Name: "job_rekey", ReadOnly: false}
	scLayout            = Script{Name: "layout", ReadOnly: false}
	scLayoutMove        = Script{Name: "layout_move", ReadOnly: false}
	scOpsChurn          = Script{Name: "ops_churn", ReadOnly: true}
	scOpsDevice         = Script{Name: "ops_device", ReadOnly: true}
	scOpsPresence       = Script{Name: "ops_presence", ReadOnly: true}
	scOpsReplicaPut     = Script{Name: "ops_replica_put", ReadOnly: false}
	scOpsReplicas       = Script{Name: "ops_replicas", ReadOnly: true}
	scOpsSite           = Script{Name: "ops_site", ReadOnly: true}
	scOpsTokenDrop      = Script{Name: "ops_token_drop", ReadOnly: false}
	scOpsTokenGet       = Script{Name: "ops_token_get", ReadOnly: true}
	scOpsTokenList      = Script{Name: "ops_token_list", ReadOnly: true}
	scOpsTokenPut       = Script{Name: "ops_token_put", ReadOnly: false}
	scPairingApprove    = Script{Name: "pairing_approve", ReadOnly: false}
	scPairingByUser     = Script{Name: "pairing_by_user", ReadOnly: false}
	scPairingDeny       = Script{Name: "pairing_deny", ReadOnly: false}
	scPairingDrop       = Script{Name: "pairing_drop", ReadOnly: false}
	scPairingGet        = Script{Name: "pairing_get", ReadOnly: false}
	scPairingPut        = Script{Name: "pairing_put", ReadOnly: false}
	scPairingShow       = Script{Name: "pairing_show", ReadOnly: false}
	scPlace             = Script{Name: "place", ReadOnly: false}
	scPlaceBackfill     = Script{Name: "place_backfill", ReadOnly: false}
	scPlaceReap         = Script{Name: "place_reap", ReadOnly: false}
	scPresenceAll       = Script{Name: "presence_all", ReadOnly: false}
	scPresenceBackfill  = Script{Name: "presence_backfill", ReadOnly: false}
	scPresenceBeat      = Script{Name: "presence_beat", ReadOnly: false}
	scPresenceByOwner   = Script{Name: "presence_by_owner", ReadOnly: false}
	scPresenceDrop      = Script{Name: "presence_drop", ReadOnly: false}
	scPresenceForget    = Script{Name: "presence_forget", ReadOnly: false}
	scPresenceGet       = Script{Name: "presence_get", ReadOnly: true}
	scPresenceReap      = Script{Name: "presence_reap", ReadOnly: false}
	scPresenceSeen      = Script{Name: "presence_seen", ReadOnly: false}
	scPresenceSeenBatch = Script{Name: "presence_seen_batch", ReadOnly: false}
	scRelease           = Script{Name: "release", ReadOnly: false, Work: true}
	scRenew             = Script{Name: "renew", ReadOnly: false, Work: true}
	scRunnerShardsAdd   = Script{Name: "runner_shards_add", ReadOnly: false}
	scSeal              = Script{Name: "seal", ReadOnly: false, Work: true}
	scSweep             = Script{Name: "sweep", ReadOnly: false, Work: true}
	scTake              = Script{Name: "take", ReadOnly: false, Work: true}
)

// Scripts is every script the store runs.
var Scripts = []Script{
	scAwaiting,
	scCancel,
	scCancelRequests,
	scClaim,
	scComplete,
	scEnqueue,
	scFinished,
	scGiveBack,
	scHolds,
	scJob,
	scJobsPage,
	scJobRekey,
	scLayout,
	scLayoutMove,
	scOpsChurn,
	scOpsDevice,
	scOpsPresence,
	scOpsReplicaPut,
	scOpsReplicas,
	scOpsSite,
	scOpsTokenDrop,
	scOpsTokenGet,
	scOpsTokenList,
	scOpsTokenPut,
	scPairingApprove,
	scPairingByUser,
	scPairingDeny,
	scPairingDrop,
	scPairingGet,
	scPairingPut,
	scPairingShow,
	scPlace,
	scPlaceBackfill,
	scPlaceReap,
	scPresenceAll,
	scPresenceBackfill,
	scPresenceBeat,
	scPresenceByOwner,
	scPresenceDrop,
	scPresenceForget,
	scPresenceGet,
	scPresenceReap,
	scPresenceSeen,
	scPresenceSeenBatch,
	scRelease,
	scRenew,
	scRunnerShardsAdd,
	scSeal,
	scSweep,
	scTake,
}
