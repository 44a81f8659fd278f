package relaytest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Process is a child process of a test that can be stopped and started
// again with the same command line (a replica or a Valkey restarted in
// place). Each incarnation logs its stderr, and its stdout after the first
// line, to a file of its own; when the test has failed, cleanup kills what
// still runs and logs the tail of every incarnation's log.
type Process struct {
	Name string
	Path string
	Args []string
	Env  []string // the whole environment of the child
	Dir  string

	t      testing.TB
	logDir string

	mu     sync.Mutex
	starts int
	logs   []string // one file per incarnation
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current incarnation has exited
	err    error         // its Wait result
	first  chan string   // its first stdout line (closed without one at exit)
}

// NewProcess prepares (does not start) a process; it is SIGKILLed, if still
// running, when the test ends.
func NewProcess(t testing.TB, name, path string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, Path: path, Args: args, t: t, logDir: t.TempDir()}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			for i, path := range p.LogFiles() {
				t.Logf("%s (incarnation %d) log tail:\n%s", p.Name, i+1, TailFile(path, 40))
			}
		}
	})
	return p
}

// Start runs a new incarnation. It returns once the process has started;
// FirstLine or a probe of the caller's says when it is ready.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !Closed(p.done) {
		return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	p.starts++
	logPath := filepath.Join(p.logDir, fmt.Sprintf("%s.%d.log", p.Name, p.starts))
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("log of %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env, cmd.Dir, cmd.Stderr = p.Env, p.Dir, logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return fmt.Errorf("stdout of %s: %w", p.Name, err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done, first := make(chan struct{}), make(chan string, 1)
	p.cmd, p.done, p.first, p.err = cmd, done, first, nil
	p.logs = append(p.logs, logPath)
	go func() {
		br := bufio.NewReader(stdout)
		if line, err := br.ReadString('\n'); err == nil || line != "" {
			first <- strings.TrimRight(line, "\r\n")
			_, _ = logFile.WriteString(line)
		}
		close(first)
		// The rest of stdout goes to the log too (an *os.File: the child's
		// stderr writes and these do not interleave within a write).
		_, _ = io.Copy(logFile, br)
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// FirstLine waits up to within for the current incarnation's first line on
// stdout (a relay's ready line); an exit before it is an error with the log.
func (p *Process) FirstLine(within time.Duration) (string, error) {
	p.mu.Lock()
	first, done := p.first, p.done
	p.mu.Unlock()
	if first == nil {
		return "", fmt.Errorf("%s was never started", p.Name)
	}
	select {
	case line, ok := <-first:
		if ok {
			return line, nil
		}
		<-done
		return "", fmt.Errorf("%s exited before its first line (%v):\n%s", p.Name, p.ExitErr(), p.Tail(40))
	case <-time.After(within):
		return "", fmt.Errorf("%s said nothing on stdout within %v:\n%s", p.Name, within, p.Tail(40))
	}
}

// Running reports whether the current incarnation has not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !Closed(p.done)
}

// Done is closed when the current incarnation exits.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is the current incarnation's Wait result (nil while it runs or
// after a status-0 exit).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ExitCode is the current incarnation's exit status (-1 while it runs or
// when a signal ended it).
func (p *Process) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState == nil || !Closed(p.done) {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Pid is the current incarnation's process id (0 before the first start).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the current incarnation.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s was never started", p.Name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%v to %s: %w", sig, p.Name, err)
	}
	return nil
}

// ErrStillRunning is Stop's error when the process outlived its limit (it
// has been SIGKILLed since).
var ErrStillRunning = errors.New("still running")

// Stop sends sig and waits up to limit for the exit, then SIGKILLs. It
// returns how long the exit took and the exit's Wait result, or
// ErrStillRunning when the limit passed.
func (p *Process) Stop(sig syscall.Signal, limit time.Duration) (time.Duration, error) {
	done := p.Done()
	start := time.Now()
	if err := p.Signal(sig); err != nil {
		if done != nil && Closed(done) {
			return 0, p.ExitErr() // it had exited already
		}
		return 0, err
	}
	select {
	case <-done:
		return time.Since(start), p.ExitErr()
	case <-time.After(limit):
		p.Kill()
		return time.Since(start), fmt.Errorf("%s %w %v after %v", p.Name, ErrStillRunning, limit, sig)
	}
}

// Kill SIGKILLs the current incarnation, if it runs, and waits for it.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || Closed(done) {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Log is everything the current incarnation has logged so far.
func (p *Process) Log() string {
	p.mu.Lock()
	n := len(p.logs)
	path := ""
	if n > 0 {
		path = p.logs[n-1]
	}
	p.mu.Unlock()
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// LogFiles are the paths of every incarnation's log, oldest first.
func (p *Process) LogFiles() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logs...)
}

// Tail is the last n lines of the current incarnation's log.
func (p *Process) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TailFile is the last n lines of the file at path (or why it cannot be
// read).
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Environ is this process's environment without the RELAY_* variables (a
// developer's shell settings must not reach a relay under test), plus env.
func Environ(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// ValkeyServer is a valkey-server (or redis-server) of one test alone, on a
// fixed loopback port, persisting every write to an append-only file with
// an fsync before the reply (appendfsync always): a SIGKILL loses nothing a
// client was told had happened, and a restart on the same port and
// directory brings it all back. The shared test server is never stopped.
type ValkeyServer struct {
	*Process
	Addr string
}

// NewValkeyServer prepares one (ServerBinary); Start runs it.
func NewValkeyServer(t testing.TB) *ValkeyServer {
	t.Helper()
	return newValkeyServer(t, true)
}

// newValkeyServer prepares a private server on a FixedPort, with the
// append-only file fsynced on every write when persist, none otherwise,
// and extra command-line args last.
func newValkeyServer(t testing.TB, persist bool, extra ...string) *ValkeyServer {
	t.Helper()
	bin := ServerBinary(t)
	addr := FixedPort(t)
	_, port, _ := strings.Cut(addr, ":")
	args := []string{"--bind", "127.0.0.1", "--port", port, "--dir", t.TempDir(), "--save", "",
		"--daemonize", "no", "--logfile", "", "--maxmemory-policy", "noeviction"}
	if persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	p := NewProcess(t, "valkey", bin, append(args, extra...)...)
	p.Env = Environ()
	return &ValkeyServer{Process: p, Addr: addr}
}

// URL is the server's address for RELAY_VALKEY_URL.
func (v *ValkeyServer) URL() string { return "redis://" + v.Addr + "/0" }

// Start runs a new incarnation and waits up to 20 s until it answers PING
// (its append-only file loaded).
func (v *ValkeyServer) Start() error {
	if err := v.Process.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := v.Client()
		if err == nil {
			err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			c.Close()
			if err == nil {
				return nil
			}
		}
		if !v.Running() {
			return fmt.Errorf("%s exited at start:\n%s", v.Path, v.Tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after 20s (%v):\n%s", v.Path, err, v.Tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client is a new direct client of the server, without retries (the
// caller closes it).
func (v *ValkeyServer) Client() (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{v.Addr}, DisableCache: true, DisableRetry: true})
}
