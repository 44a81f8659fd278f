package relaytest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Server is a redis-server (or valkey-server) of one test's own, for tests
// that kill, freeze, demote or overload a server: the shared test server is
// never treated so.
type Server struct {
	URL  string // redis://127.0.0.1:<port>/0
	Addr string // 127.0.0.1:<port>
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// StartServer starts a private server with extra command-line args (e.g.
// "--lua-time-limit", "10") and returns once it answers PING. The binary is
// RELAY_TEST_REDIS_SERVER, else valkey-server or redis-server on PATH. It
// is killed when t ends.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := ServerBinary(t)
	// The port is picked by listening and closing, which another process
	// may take in between: then the server exits at once and we try again.
	var last error
	for range 5 {
		s, err := startServer(t, bin, args)
		if err == nil {
			return s
		}
		last = err
	}
	t.Fatalf("relaytest: private server: %v", last)
	return nil
}

// ServerBinary is the server tests start for themselves:
// RELAY_TEST_REDIS_SERVER, else valkey-server or redis-server on PATH. It
// fails t when there is none.
func ServerBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("RELAY_TEST_REDIS_SERVER")
	for _, name := range []string{"valkey-server", "redis-server"} {
		if bin != "" {
			break
		}
		bin, _ = exec.LookPath(name)
	}
	if bin == "" {
		t.Fatal("relaytest: no valkey-server or redis-server on PATH (or set RELAY_TEST_REDIS_SERVER): this test needs a server of its own")
	}
	return bin
}

func startServer(t testing.TB, bin string, args []string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick a port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	s.URL = "redis://" + s.Addr + "/0"
	s.cmd = exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir()}, args...)...)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = s.Signal(syscall.SIGCONT) // a frozen server ignores SIGKILL's cleanup until thawed
		s.Kill()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := ping(s.Addr)
		switch {
		case err == nil:
			return s, nil
		case s.exited():
			return nil, fmt.Errorf("%s on %s exited at start (port taken?)", bin, s.Addr)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("%s on %s: no PING answer: %w", bin, s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond) // still starting
	}
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the server (SIGSTOP freezes it, SIGCONT thaws it).
func (s *Server) Signal(sig os.Signal) error {
	if s.exited() {
		return nil
	}
	return s.cmd.Process.Signal(sig)
}

// Kill kills the server and waits until it has exited.
func (s *Server) Kill() {
	_ = s.Signal(syscall.SIGKILL)
	<-s.done
}

// ping connects to addr afresh (valkey-go dials at NewClient) and PINGs.
func ping(addr string) error {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, DisableRetry: true})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Ping().Build()).Error()
}
