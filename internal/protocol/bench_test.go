package protocol

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

var benchStub = JobStub{ID: "job-123456", Kind: KindChat, Owner: "alice", Site: "BYOLLM-D8W0-7NFG-B682-M73D-NYY9-Q93J",
	Audience: AudienceTeam, Purpose: "default", SizeClass: "small", Streaming: true, DeadlineAt: 1800000000000}

func BenchmarkMarshalJobStub(b *testing.B) {
	for b.Loop() {
		if _, err := Marshal(benchStub); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodingJSONJobStub(b *testing.B) {
	for b.Loop() {
		if _, err := json.Marshal(benchStub); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeHeartbeat(b *testing.B) {
	body := []byte(`{"protocolVersion":"2","runnerId":"runner_alice","daemonVersion":"0.1.1","capabilities":[{"kind":"llm.chat","service":"svc","backendId":"ollama","backendClass":"http","model":"llama3","knownModels":["a","b"],"offerScope":"team"}],"activeLeases":[{"jobId":"j1","leaseId":"6f1c2a4e-1111-4222-8333-944445555666"}]}`)
	for b.Loop() {
		if _, err := DecodeHeartbeatRequest(ReadBody(body).Value); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyRequest(b *testing.B) {
	const id = "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"
	body := []byte(`{"protocolVersion":"2","runnerId":"runner_alice","capabilities":[],"max":1}`)
	const sig = "vRNuhuHWeMAo09ULB2jwRE9ZX0V-BCZl1oNLlRL7O-ID2IbgngUyMhzbHTWnAOxTZLNu2Za10rK4C33obRLqAQ"
	for b.Loop() {
		if ok, _ := VerifyRequest(id, "claim", "runner_alice", 1800000000000, body, sig, 1800000000000); !ok {
			b.Fatal("did not verify")
		}
	}
}

// BenchmarkEd25519Verify is the floor a signed request is read against: one
// standard-library Ed25519 verification of a canonical-request-sized
// message, nothing around it (test/bench/reqcpu.sh divides by it). Besides
// wall time per op it reports the process's CPU time per op (cpu-ns/op),
// which a machine busy with other work inflates far less, and which is
// what relay CPU per request is compared with.
func BenchmarkEd25519Verify(b *testing.B) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	msg := []byte(`BYOLLM-REQ-v1` + "\nclaim\nrunner_alice\n1800000000000\n" + `{"protocolVersion":"2","runnerId":"runner_alice","capabilities":[],"max":1}`)
	sig := ed25519.Sign(priv, msg)
	cpu0 := relaytest.ProcessCPU(b)
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("did not verify")
		}
	}
	b.ReportMetric(float64(relaytest.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
