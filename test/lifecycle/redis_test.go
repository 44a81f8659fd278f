package lifecycle_test

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
)

// privateValkey is a redis-server (or valkey-server) of this test alone, on
// a free loopback port, persisting to an append-only file in a temporary
// directory with an fsync per write, so a stop and a restart on the same
// port and directory bring back every acknowledged write. The shared test
// Valkey is never stopped.
type privateValkey struct {
	bin, addr, dir string
	cmd            *exec.Cmd
	done           chan struct{}
	starts         int
}

func serverBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("RELAY_TEST_REDIS_SERVER"); b != "" {
		return b
	}
	for _, name := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no valkey-server or redis-server on PATH (set RELAY_TEST_REDIS_SERVER): the outage test stops and restarts a server of its own")
	return ""
}

func newPrivateValkey(t *testing.T) *privateValkey {
	v := &privateValkey{bin: serverBinary(t), addr: freePort(t), dir: t.TempDir()}
	v.start(t)
	t.Cleanup(func() {
		if v.cmd != nil {
			select {
			case <-v.done:
			default:
				_ = v.cmd.Process.Kill()
				<-v.done
			}
		}
	})
	return v
}

func (v *privateValkey) url() string { return "redis://" + v.addr + "/0" }

// start runs the server and waits until it answers PING (the append-only
// file loaded).
func (v *privateValkey) start(t *testing.T) {
	t.Helper()
	_, port, _ := strings.Cut(v.addr, ":")
	v.starts++
	logFile, err := os.Create(filepath.Join(v.dir, fmt.Sprintf("server.%d.log", v.starts)))
	if err != nil {
		t.Fatal(err)
	}
	v.cmd = exec.Command(v.bin,
		"--bind", "127.0.0.1", "--port", port, "--dir", v.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", "",
		"--maxmemory-policy", "noeviction",
	)
	v.cmd.Stdout, v.cmd.Stderr = logFile, logFile
	if err := v.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", v.bin, err)
	}
	done := make(chan struct{})
	v.done = done
	cmd := v.cmd
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := v.client()
		if err == nil {
			err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			c.Close()
			if err == nil {
				return
			}
		}
		select {
		case <-done:
			t.Fatalf("%s exited at start: %s", v.bin, v.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering after 15s: %v\n%s", v.bin, err, v.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (v *privateValkey) client() (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{v.addr}, DisableCache: true, DisableRetry: true})
}

func (v *privateValkey) logs() string {
	b, _ := os.ReadFile(filepath.Join(v.dir, fmt.Sprintf("server.%d.log", v.starts)))
	return string(b)
}

// stop ends the server with SIGTERM (it fsyncs the append-only file and
// exits) and waits for the exit.
func (v *privateValkey) stop(t *testing.T) {
	t.Helper()
	if err := v.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", v.bin, err)
	}
	select {
	case <-v.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit 15s after SIGTERM", v.bin)
	}
}
