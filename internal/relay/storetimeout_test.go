package relay

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// frozenServer is a redis-server of one test, which the test stops with
// SIGSTOP (the process keeps its sockets open and answers nothing, as a
// Valkey that is swapping, paused or stuck in a long fork does) and resumes
// with SIGCONT. The shared test server is never frozen.
type frozenServer struct {
	cmd  *exec.Cmd
	addr string
}

func startPrivateServer(t *testing.T) *frozenServer {
	t.Helper()
	bin := os.Getenv("RELAY_TEST_REDIS_SERVER")
	if bin == "" {
		for _, name := range []string{"valkey-server", "redis-server"} {
			if p, err := exec.LookPath(name); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		t.Fatal("no valkey-server or redis-server on PATH (set RELAY_TEST_REDIS_SERVER): this test freezes a server of its own")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &frozenServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir())
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	return s
}

// A frozen store gets the retryable 503 server-error within the store
// timeout, not when the connection is finally declared dead, and the relay
// serves again as soon as the store answers.
func TestFrozenStoreAnswersFast503(t *testing.T) {
	srv := startPrivateServer(t)
	deadline := time.Now().Add(10 * time.Second)
	ctx := context.Background()
	c, closeFn, _, err := valkeyconn.Open(ctx, "redis://"+srv.addr+"/0", nil)
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the server is still starting
		c, closeFn, _, err = valkeyconn.Open(ctx, "redis://"+srv.addr+"/0", nil)
	}
	if err != nil {
		t.Fatalf("private server: %v", err)
	}
	t.Cleanup(closeFn)

	st := newStore(t, c, "relaytest-frozen-"+randomHex(6))
	// Runs before the namespace cleanup, should the test stop while frozen.
	t.Cleanup(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) })
	const timeout = 300 * time.Millisecond
	// The plane clock and the signing clock are local here: the harness's
	// default reads the store, which is the thing being frozen.
	e := newEnvOn(t, st, func(cfg *Config) {
		cfg.StoreTimeout = timeout
		cfg.Clock = func() int64 { return time.Now().UnixMilli() }
	})
	w := newWorld(t)
	w.install(e)
	post := func(k keys, runner, endpoint string, body []byte) resp {
		h := signed(protocol.HeaderRunner, k, runner, endpoint, time.Now().UnixMilli(), body)
		return e.do("POST", "/byollm/"+endpoint, h, body)
	}
	site := func(endpoint string, body []byte) resp {
		h := signed(protocol.HeaderSite, w.siteA, "site_a", "site/"+endpoint, time.Now().UnixMilli(), body)
		return e.do("POST", "/relay/site/"+endpoint, h, body)
	}
	expect(t, post(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)), 200, `{"jobs":[],"leaseMs":60000}`)
	// Bodies made now: a stub's deadline is read from the store clock.
	frozenStub := enqueueJSON(t, "site_a", e.stub("frozen", "alice", w.siteA))
	thawedStub := enqueueJSON(t, "site_a", e.stub("after-thaw", "alice", w.siteA))

	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	down := `{"error":"server-error","message":"the relay cannot reach its routing store just now — try again shortly"}`
	// Without the bound these wait until valkey-go gives up on the
	// connection (about 15 s measured). Allow the timeout plus generous
	// slack for a loaded machine.
	const within = 3 * time.Second
	for i, call := range []func() resp{
		func() resp { return post(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)) },
		func() resp { return post(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.1.1")) },
		func() resp { return site("enqueue", frozenStub) },
	} {
		start := time.Now()
		got := call()
		took := time.Since(start)
		expect(t, got, 503, down)
		t.Logf("request %d: 503 after %v", i, took.Round(time.Millisecond))
		if took > within {
			t.Fatalf("request %d answered after %v with the store frozen; want within %v", i, took, within)
		}
	}

	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	// Back: the next requests are served (the connection was never cut,
	// the replies to the abandoned calls are read and dropped).
	recovered := time.Now().Add(10 * time.Second)
	for {
		got := site("enqueue", thawedStub)
		if got.status == 200 {
			break
		}
		if time.Now().After(recovered) {
			t.Fatalf("store back for 10s, still %d %s", got.status, got.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	jobs := e.claim(t, w.alice, "runner_alice", 1)
	if len(jobs) != 1 || jobs[0].ID != "after-thaw" {
		t.Fatalf("after thaw: claimed %+v", jobs)
	}
}
