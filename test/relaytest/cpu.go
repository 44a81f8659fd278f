package relaytest

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is this process's user and system CPU time so far: what a
// benchmark reports per op when its wall time also waits on Valkey.
func ProcessCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
