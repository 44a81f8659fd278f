// Package relaytest is the one place of test support for this module, in the
// spirit of river's riversharedtest and asynq's internal/testbroker. Tests of
// every package use it instead of writing their own; it imports no package
// under test beyond internal/valkeyconn, so internal/store's own in-package
// tests can use it too.
//
// Servers (valkey.go). ValkeyURL and ClusterURL are the only readers of
// RELAY_TEST_VALKEY_URL (default redis://127.0.0.1:6379/0) and
// RELAY_TEST_VALKEY_CLUSTER_URL (unset: cluster tests skip; .ci/run sets it,
// `.ci/cluster start` prints one). Client, Embedded and Cluster hand out one
// client per server, opened once per test process and shared; Open gives a
// test a client of its own, closed when the test ends.
//
// Namespaces (namespace.go). Namespace gives each test a private, random
// namespace and deletes every key of it ("<ns>:*") when the test ends, so the
// shared server is left as it was found; never FLUSHDB. DeleteKeys and
// CleanupKeys do the same for any SCAN pattern; on a cluster they walk every
// primary.
//
// Private servers (server.go, process.go). StartServer runs a redis-server
// (or valkey-server, ServerBinary) of one test's own, without persistence,
// for tests that kill, freeze (SIGSTOP), demote or overload it;
// NewValkeyServer prepares one that fsyncs every write to its append-only
// file and restarts on the same port, for the fault tests. Both are a
// ValkeyServer, one Process; the shared server is never stopped.
//
// CommandStats (stats.go) reads a server's INFO commandstats, for the
// benchmarks that report what scripts cost the server.
//
// Logs (log.go). Logger is a slog.Logger that writes through t.Log: quiet for
// a passing test, shown beside a failing one (and with -v). Lines logged
// after the test has ended are dropped instead of panicking. RecordLogs also
// keeps the lines, for a test that waits for something only logged.
//
// Waiting (wait.go). WaitFor polls a condition until it holds or a deadline
// passes, then fails the test with a message saying what never happened.
// Tests wait on something observable, never on a fixed sleep.
//
// Node (node.go). NodeModules runs `npm ci` once per directory and test
// process; Vitest runs a published contract suite and returns its report,
// whose RequireAll fails the test unless every case passed.
//
// Processes (process.go, binary.go, balancer.go, ports.go, relay.go).
// RelayBinary and LoadgenBinary build cmd/relay and cmd/loadgen once per test
// process (a package's TestMain calls Main, which removes them); FixedPort
// hands out loopback ports below the ephemeral range, never twice, so a
// restarted process comes back where its clients expect it; Process runs a
// child with a log per incarnation, SIGTERM then SIGKILL after a limit,
// restart, and the log tails printed when the test failed; Relay is a relay
// (or the reference relay) started on its ready line, whose projection is
// read from its /projection/status (WaitProjection); Balancer is the one load
// balancer in front of replicas.
package relaytest
