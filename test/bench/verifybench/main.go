// Command verifybench times one Ed25519 request-signature check on this
// machine, the floor under every signed request the relay serves: a
// heartbeat-sized body signed as the daemons sign it, checked both with
// crypto/ed25519.Verify alone (CPU time per check) and with protocol.VerifyRequest (the relay's
// check: key decoding, canonical string, staleness, Verify).
//
//	verifybench [-n 4000] [-reps 5]   # prints {"verifyNs":…, "verifyRequestNs":…} (medians of reps)
//
// test/bench/capacity.sh runs it next to its load runs so every per-request
// figure is read against a verification timed under the same conditions.
package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
)

func main() {
	n := flag.Int("n", 4000, "verifications per repetition")
	reps := flag.Int("reps", 5, "repetitions (the median is reported)")
	flag.Parse()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "verifybench:", err)
		os.Exit(1)
	}
	id := base64.RawURLEncoding.EncodeToString(pub)
	const caller = "lg0000000-runner-17"
	body := []byte(`{"protocolVersion":"2","runnerId":"lg0000000-runner-17","daemonVersion":"0.1.1","capabilities":[{"kind":"llm.generate","service":"loadgen","backendId":"ollama","backendClass":"http","model":"loadgen","offerScope":"private"}],"activeLeases":[]}`)
	now := time.Now().UnixMilli()
	sig := protocol.SignRequest(priv, "heartbeat", caller, now, body)
	raw, _ := base64.RawURLEncoding.DecodeString(sig)
	msg := protocol.CanonicalRequest("heartbeat", caller, now, body)

	// CPU time, not wall time: the machine is shared, and the relay's
	// figures it is compared with are CPU time too.
	time1 := func(f func() bool) float64 {
		var per []float64
		for range *reps {
			start := cpu()
			for range *n {
				if !f() {
					fmt.Fprintln(os.Stderr, "verifybench: signature did not verify")
					os.Exit(1)
				}
			}
			per = append(per, float64(cpu()-start)/float64(*n))
		}
		slices.Sort(per)
		return per[len(per)/2]
	}
	out := map[string]any{
		"verifyNs":        time1(func() bool { return ed25519.Verify(pub, msg, raw) }),
		"verifyRequestNs": time1(func() bool { ok, _ := protocol.VerifyRequest(id, "heartbeat", caller, now, body, sig, now); return ok }),
		"n":               *n, "reps": *reps,
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

// cpu is this process's user+system CPU time in nanoseconds.
func cpu() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "verifybench: getrusage:", err)
		os.Exit(1)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
