package store

// Script is one operation of lua/: the file lua/<Name>.lua, run as one
// atomic EVALSHA. ReadOnly scripts run with EVALSHA_RO (a replica may
// serve them); the file's header declares the same mode ("-- mode:
// read-only" or "-- mode: write"), which TestScriptsMatchTheirHeaders checks
// and lua.TestScriptHeaders lints (a read-only script names no write
// command and never reads the clock: miniredis refuses TIME there).
type Script struct {
	Name     string
	ReadOnly bool
}

// The store's scripts. Every call goes through Store.run with one of these,
// so every script call, from any caller, is observed the same way.
var (
	scAwaiting        = Script{Name: "awaiting", ReadOnly: true}
	scCancel          = Script{Name: "cancel", ReadOnly: false}
	scCancelRequests  = Script{Name: "cancel_requests", ReadOnly: true}
	scClaim           = Script{Name: "claim", ReadOnly: false}
	scComplete        = Script{Name: "complete", ReadOnly: false}
	scEnqueue         = Script{Name: "enqueue", ReadOnly: false}
	scFinished        = Script{Name: "finished", ReadOnly: true}
	scHolds           = Script{Name: "holds", ReadOnly: false}
	scJob             = Script{Name: "job", ReadOnly: true}
	scJobsPage        = Script{Name: "jobs_page", ReadOnly: true}
	scLayout          = Script{Name: "layout", ReadOnly: false}
	scPairingApprove  = Script{Name: "pairing_approve", ReadOnly: false}
	scPairingByUser   = Script{Name: "pairing_by_user", ReadOnly: false}
	scPairingDeny     = Script{Name: "pairing_deny", ReadOnly: false}
	scPairingDrop     = Script{Name: "pairing_drop", ReadOnly: false}
	scPairingGet      = Script{Name: "pairing_get", ReadOnly: false}
	scPairingPut      = Script{Name: "pairing_put", ReadOnly: false}
	scPairingShow     = Script{Name: "pairing_show", ReadOnly: false}
	scPendingPage     = Script{Name: "pending_page", ReadOnly: true}
	scPresenceAll     = Script{Name: "presence_all", ReadOnly: false}
	scPresenceByOwner = Script{Name: "presence_by_owner", ReadOnly: false}
	scPresenceDrop    = Script{Name: "presence_drop", ReadOnly: false}
	scPresenceGet     = Script{Name: "presence_get", ReadOnly: true}
	scPresenceHead    = Script{Name: "presence_head", ReadOnly: true}
	scPresenceSeen    = Script{Name: "presence_seen", ReadOnly: false}
	scRelease         = Script{Name: "release", ReadOnly: false}
	scRenew           = Script{Name: "renew", ReadOnly: false}
	scResultsGet      = Script{Name: "results_get", ReadOnly: true}
	scResultsPage     = Script{Name: "results_page", ReadOnly: true}
	scSeal            = Script{Name: "seal", ReadOnly: false}
	scSweep           = Script{Name: "sweep", ReadOnly: false}
	scTake            = Script{Name: "take", ReadOnly: false}
	scWriteRawStub    = Script{Name: "write_raw_stub", ReadOnly: false}
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
	scHolds,
	scJob,
	scJobsPage,
	scLayout,
	scPairingApprove,
	scPairingByUser,
	scPairingDeny,
	scPairingDrop,
	scPairingGet,
	scPairingPut,
	scPairingShow,
	scPendingPage,
	scPresenceAll,
	scPresenceByOwner,
	scPresenceDrop,
	scPresenceGet,
	scPresenceHead,
	scPresenceSeen,
	scRelease,
	scRenew,
	scResultsGet,
	scResultsPage,
	scSeal,
	scSweep,
	scTake,
	scWriteRawStub,
}
