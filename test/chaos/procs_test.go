package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/test/testproc"
)

// storeProc is a redis-server of this test alone, persisting every write to an
// append-only file with an fsync before the reply (appendfsync always), so
// even a SIGKILL loses nothing a client was told had happened. The shared
// test server is never touched.
type storeProc struct {
	bin, addr, dir string
	starts         int
	cur            *testproc.Proc
}

func newStore(t *testing.T) *storeProc {
	t.Helper()
	bin := os.Getenv("RELAY_TEST_REDIS_SERVER")
	for _, name := range []string{"valkey-server", "redis-server"} {
		if bin != "" {
			break
		}
		bin, _ = exec.LookPath(name)
	}
	if bin == "" {
		t.Fatal("no valkey-server or redis-server on PATH (set RELAY_TEST_REDIS_SERVER): the chaos test restarts a server of its own")
	}
	s := &storeProc{bin: bin, addr: testproc.FixedPort(t), dir: t.TempDir()}
	t.Cleanup(func() {
		if s.cur.Running() {
			_ = s.cur.Stop(syscall.SIGKILL, 10*time.Second)
		}
	})
	return s
}

func (s *storeProc) url() string { return "redis://" + s.addr + "/0" }

// start runs the server on its port and directory and waits until it
// answers PING, the append-only file loaded.
func (s *storeProc) start() error {
	_, port, _ := strings.Cut(s.addr, ":")
	s.starts++
	logPath := filepath.Join(s.dir, fmt.Sprintf("server.%d.log", s.starts))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin,
		"--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", "", "--maxmemory-policy", "noeviction")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &testproc.Proc{Cmd: cmd, Done: make(chan struct{})}
	s.cur = p
	go func() { p.Err = cmd.Wait(); logFile.Close(); close(p.Done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := s.client()
		if err == nil {
			err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			c.Close()
			if err == nil {
				return nil
			}
		}
		if !p.Running() {
			return fmt.Errorf("%s exited at start:\n%s", s.bin, testproc.Tail(logPath, 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after 20s (%v):\n%s", s.bin, err, testproc.Tail(logPath, 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *storeProc) client() (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.addr}, DisableCache: true, DisableRetry: true})
}
