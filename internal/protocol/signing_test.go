package protocol

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"testing"

	"golang.org/x/crypto/curve25519"
)

// keysFromSeeds derives the Appendix A key sets: Ed25519 seed and X25519
// private key, each 32 copies of one byte.
func keysFromSeeds(t *testing.T, edSeed, xPriv byte) (ed25519.PrivateKey, PublicIdentity) {
	t.Helper()
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{edSeed}, 32))
	xpub, err := curve25519.X25519(bytes.Repeat([]byte{xPriv}, 32), curve25519.Basepoint)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString(xpub)
	id := PublicIdentity{
		Identity:      base64.RawURLEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)),
		Encryption:    enc,
		EncryptionSig: base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, EncryptionSigMessage(enc))),
	}
	return priv, id
}

func TestAppendixAIdentities(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		ed, x byte
		want  PublicIdentity
		keyID string
	}{
		{"device", 0x01, 0x11, PublicIdentity{
			Identity:      "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w",
			Encryption:    "e06Qm75__kTEZaIgA31gjuNYl9Me-XLwf3SJLLD3PxM",
			EncryptionSig: "l1bptkTYnc7hni1u9BsQvFGOhrujZKPaXc0IPHiRxnJb_Eqk2lfTLWNa6dZYRQy_Qu-y-kaI-gBhP0lhCuXZDA",
		}, "BYOLLM-6HTG-Z65X-B7YF-S53D-MHDA-NFMK"},
		{"site", 0x02, 0x12, PublicIdentity{
			Identity:      "gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q",
			Encryption:    "BSpQdzrI2Rdz8tyWYuEvDe_pFeQVuKHI4gpaPWqyuEM",
			EncryptionSig: "wEmAUJTOnu5I3bJIT36SFmOK149GxN7E4IL_PnVkPE7M0hQ4pLpFe4neCn9YBV6-hXU07V2WpW0H-Ip4sYUQCg",
		}, "BYOLLM-D8W0-7NFG-B682-M73D-NYY9-Q93J"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, got := keysFromSeeds(t, c.ed, c.x)
			if got != c.want {
				t.Fatalf("identity = %+v, want %+v", got, c.want)
			}
			if !VerifyPublicIdentity(got) {
				t.Fatal("VerifyPublicIdentity = false")
			}
			if k := KeyID(got.Identity); k != c.keyID {
				t.Fatalf("KeyID = %s, want %s", k, c.keyID)
			}
			tampered := got
			tampered.Encryption = c.want.Encryption[:42] + "A"
			if VerifyPublicIdentity(tampered) {
				t.Fatal("tampered encryption key verified")
			}
		})
	}
}

func TestAppendixARequests(t *testing.T) {
	t.Parallel()
	devPriv, dev := keysFromSeeds(t, 0x01, 0x11)
	sitePriv, site := keysFromSeeds(t, 0x02, 0x12)
	cases := []struct {
		name      string
		priv      ed25519.PrivateKey
		identity  string
		endpoint  string
		caller    string
		body      string
		canonical string
		signature string
	}{
		{"daemon claim", devPriv, dev.Identity, "claim", "runner_alice",
			`{"protocolVersion":"2","runnerId":"runner_alice","capabilities":[],"max":1}`,
			"byollm/v1/request\nclaim\nrunner_alice\n1800000000000\n32335de0c7f13fb8855435f54527ebcd0a8edd9485a3c4519bfeafec62c1c43c",
			"vRNuhuHWeMAo09ULB2jwRE9ZX0V-BCZl1oNLlRL7O-ID2IbgngUyMhzbHTWnAOxTZLNu2Za10rK4C33obRLqAQ"},
		{"site pending", sitePriv, site.Identity, "site/pending", "site_a", "",
			"byollm/v1/request\nsite/pending\nsite_a\n1800000000000\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
			"63v5lfGS_X8TmeDSwZW9inIxx8ji-R095VeW4IeDf2L7sLMvRHsUSVcGOeFB-M53faTdyTzsUJS83V3B2DZUCQ"},
	}
	const issued = int64(1800000000000)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string(CanonicalRequest(c.endpoint, c.caller, issued, []byte(c.body))); got != c.canonical {
				t.Fatalf("canonical = %q, want %q", got, c.canonical)
			}
			if got := SignRequest(c.priv, c.endpoint, c.caller, issued, []byte(c.body)); got != c.signature {
				t.Fatalf("signature = %s, want %s", got, c.signature)
			}
			verify := func(sig string, now int64, body string) (bool, bool) {
				return VerifyRequest(c.identity, c.endpoint, c.caller, issued, []byte(body), sig, now)
			}
			if ok, stale := verify(c.signature, issued, c.body); !ok || stale {
				t.Fatalf("verify = %v,%v", ok, stale)
			}
			// The window is inclusive at exactly 120000 ms, both directions.
			for _, now := range []int64{issued + 120000, issued - 120000} {
				if ok, stale := verify(c.signature, now, c.body); !ok || stale {
					t.Fatalf("at edge now=%d: %v,%v", now, ok, stale)
				}
			}
			for _, now := range []int64{issued + 120001, issued - 120001} {
				// Stale wins even over a garbage signature: no crypto runs.
				if ok, stale := verify("garbage", now, c.body); ok || !stale {
					t.Fatalf("past edge now=%d: %v,%v", now, ok, stale)
				}
			}
			if ok, stale := verify(c.signature, issued, c.body+" "); ok || stale {
				t.Fatal("changed body verified")
			}
			// Node-lenient base64: padded standard alphabet verifies too.
			raw, _ := base64.RawURLEncoding.DecodeString(c.signature)
			std := base64.StdEncoding.EncodeToString(raw)
			if ok, _ := verify(std, issued, c.body); !ok {
				t.Fatalf("padded std base64 %s did not verify", std)
			}
			if ok, _ := verify(c.signature[:40]+"!!"+c.signature[40:], issued, c.body); !ok {
				t.Fatal("signature with skipped characters did not verify")
			}
			if ok, _ := verify(c.signature[:85], issued, c.body); ok {
				t.Fatal("truncated signature verified")
			}
			if ok, _ := VerifyRequest("short", c.endpoint, c.caller, issued, []byte(c.body), c.signature, issued); ok {
				t.Fatal("malformed key verified")
			}
		})
	}
}

func TestDecodeBase64URLLenient(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"AQID", "\x01\x02\x03"},
		{"AQI", "\x01\x02"},
		{"AQ", "\x01"},
		{"A", ""},
		{"AQ==AQ", "\x01"},
		{"-_8", "\xfb\xff"},
		{"+/8", "\xfb\xff"},
		{"A Q\nI D", "\x01\x02\x03"},
	}
	for _, c := range cases {
		if got := string(DecodeBase64URL(c.in)); got != c.want {
			t.Errorf("DecodeBase64URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSignatureFromHeaders(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		issued []string
		caller []string
		sig    []string
		ok     bool
		want   int64
	}{
		{"plain", []string{"1800000000000"}, []string{"r"}, []string{"s"}, true, 1800000000000},
		{"hex", []string{"0x1a3185c5000"}, []string{"r"}, []string{"s"}, true, 0x1a3185c5000},
		{"exponent", []string{"1.8e12"}, []string{"r"}, []string{"s"}, true, 1800000000000},
		{"whitespace", []string{" 1800000000000\t"}, []string{"r"}, []string{"s"}, true, 1800000000000},
		{"trailing .0", []string{"1800000000000.0"}, []string{"r"}, []string{"s"}, true, 1800000000000},
		{"binary", []string{"0b101"}, []string{"r"}, []string{"s"}, true, 5},
		{"empty issued", []string{""}, []string{"r"}, []string{"s"}, false, 0},
		{"zero", []string{"0"}, []string{"r"}, []string{"s"}, false, 0},
		{"negative", []string{"-5"}, []string{"r"}, []string{"s"}, false, 0},
		{"fraction", []string{"1.5"}, []string{"r"}, []string{"s"}, false, 0},
		{"unsafe", []string{"9007199254740992"}, []string{"r"}, []string{"s"}, false, 0},
		{"word", []string{"soon"}, []string{"r"}, []string{"s"}, false, 0},
		{"signed hex", []string{"-0x10"}, []string{"r"}, []string{"s"}, false, 0},
		{"underscore", []string{"1_000"}, []string{"r"}, []string{"s"}, false, 0},
		{"repeated issued joins", []string{"1", "2"}, []string{"r"}, []string{"s"}, false, 0},
		{"missing caller", []string{"1"}, nil, []string{"s"}, false, 0},
		{"empty caller", []string{"1"}, []string{""}, []string{"s"}, false, 0},
		{"missing signature", []string{"1"}, []string{"r"}, nil, false, 0},
		{"empty signature", []string{"1"}, []string{"r"}, []string{""}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range c.issued {
				h.Add(HeaderIssuedAt, v)
			}
			for _, v := range c.caller {
				h.Add(HeaderRunner, v)
			}
			for _, v := range c.sig {
				h.Add(HeaderSignature, v)
			}
			got, ok := SignatureFromHeaders(h, HeaderRunner)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			if ok && got.IssuedAt != c.want {
				t.Fatalf("issuedAt = %d, want %d", got.IssuedAt, c.want)
			}
			// The site caller header is a different header.
			if _, ok := SignatureFromHeaders(h, HeaderSite); ok {
				t.Fatal("runner header accepted as site caller")
			}
		})
	}
	h := http.Header{}
	h.Add(HeaderRunner, "a")
	h.Add(HeaderRunner, "b")
	h.Set(HeaderIssuedAt, "1")
	h.Set(HeaderSignature, "s")
	if got, _ := SignatureFromHeaders(h, HeaderRunner); got.RunnerID != "a, b" {
		t.Fatalf("repeated caller = %q, want %q", got.RunnerID, "a, b")
	}
}
