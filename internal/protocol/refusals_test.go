package protocol

import (
	"strings"
	"testing"
)

func TestRefusalBodies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		r      *Refusal
		status int
		body   string
	}{
		{"1 not-found", NotFound(), 404, `{"error":"not-found"}`},
		{"4 not signed", NotSigned(), 401, `{"error":"unauthorized","message":"this request is not signed"}`},
		{"5 runner", RunnerNotRecognised(), 401, `{"error":"unauthorized","message":"this runner is not recognised"}`},
		{"6 site", SiteNotRegistered(), 401, `{"error":"unauthorized","message":"this site is not registered"}`},
		{"7 clock-skew", ClockSkew(1800000000000), 401, `{"error":"clock-skew","message":"this request's timestamp is too far from the server's clock; check the machine's time and try again","serverTime":1800000000000,"maxSkewMs":120000}`},
		{"8 bad sig", BadSignature(), 401, `{"error":"unauthorized","message":"signature check failed"}`},
		{"9 revoked", Revoked(), 403, `{"error":"revoked","message":"routing for this runner has been revoked"}`},
		{"10 schema", SchemaFailed(), 400, `{"error":"bad-request","message":"request failed schema validation"}`},
		{"11 pair schema", PairSchemaFailed(), 400, `{"error":"bad-request","message":"pair request failed schema validation"}`},
		{"12 identity", IdentityInconsistent(), 400, `{"error":"bad-request","message":"the device identity is not consistent"}`},
		{"13 consent", NoConsent(), 403, `{"error":"forbidden","message":"no consent record for this user"}`},
		{"14 approved", DeviceNotApproved(), 403, `{"error":"forbidden","message":"this device has not been approved by its owner"}`},
		{"15 other owner", DeviceOfAnotherOwner(), 403, `{"error":"forbidden","message":"this device belongs to another owner"}`},
		{"16 not offered", PairingNotOffered(), 501, `{"error":"bad-request","message":"this relay does not offer device-code pairing"}`},
		{"17 busy", PairingBusy(), 429, `{"error":"rate-limited","message":"too many pairings are in progress right now — try again in a few minutes"}`},
		{"18 runner mismatch", RunnerMismatch(), 403, `{"error":"forbidden","message":"runner id does not match the key"}`},
		{"19 unknown job", UnknownJob(), 404, `{"error":"not-found","message":"unknown job"}`},
		{"20 not holder", NotHolder(), 403, `{"error":"forbidden","message":"this runner does not hold the job"}`},
		{"21 stale lease", StaleLease(), 403, `{"error":"forbidden","message":"that lease is no longer current"}`},
		{"22 not sealed", NotSealedYet(), 409, `{"error":"not-ready","message":"the site has not sealed this job yet"}`},
		{"23 finished", AlreadyFinished(), 409, `{"error":"too-late","message":"this job has already finished"}`},
		{"24 too large", EnvelopeTooLarge(6291457), 400, `{"error":"bad-request","message":"this message is 6.1 MB and the limit is 6.0 MB — it is a limit on one message rather than on how many you send. Split the work into smaller jobs and send them separately. Every plan has the same ceiling."}`},
		{"25 floor", BelowFloor("0.1.0", "0.1.1"), 426, "{\"error\":\"daemon-below-floor\",\"message\":\"byollm 0.1.0 is below the supported floor (0.1.1). Run `npm i -g byollm@latest`, then `byollm start`.\",\"floor\":\"0.1.1\"}"},
		{"26 not your site", NotYourSite(), 403, `{"error":"forbidden","message":"that is not your site"}`},
		{"27 stub site", StubSiteMismatch(), 403, `{"error":"forbidden","message":"that stub does not name the site that signed it"}`},
		{"28 satisfiable", SatisfiableFailed(), 503, `{"error":"server-error","message":"we could not check this just now — try again shortly"}`},
		{"29 purpose", PurposeNotDeclared("summarise"), 409, `{"error":"purpose-not-declared","message":"this site does not declare summarise — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes"}`},
		{"29 no purpose", PurposeNotDeclared(""), 409, `{"error":"purpose-not-declared","message":"this site does not declare that purpose — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes"}`},
		{"30 unmapped", SlotUnsatisfiable(), 409, `{"error":"slot-unsatisfiable","message":"nobody has chosen what answers this yet"}`},
		{"31 waiting", SlotWaiting(), 409, `{"error":"slot-waiting","message":"nothing can answer this right now — try again later"}`},
		{"32 not accepted", StubNotAccepted(), 400, `{"error":"bad-request","message":"that stub was not accepted"}`},
		{"34 too late", NotAwaitingPayload("running"), 409, `{"error":"too-late","message":"job is running, not awaiting payload"}`},
		{"34 gone", NotAwaitingPayload(""), 409, `{"error":"too-late","message":"job is gone, not awaiting payload"}`},
		{"36 debug", DebugBadRequest(), 400, `{"error":"bad-request"}`},
		{"draining", Draining(), 503, `{"error":"not-ready"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.r.Status != c.status {
				t.Errorf("status = %d, want %d", c.r.Status, c.status)
			}
			if got := string(c.r.JSON()); got != c.body {
				t.Errorf("body =\n%s\nwant\n%s", got, c.body)
			}
		})
	}
}

func TestHolderRefusal(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]*Refusal{
		"not-found": UnknownJob(), "not-holder": NotHolder(), "stale-lease": StaleLease(),
		"not-ready": NotSealedYet(), "terminal": AlreadyFinished(),
	} {
		if got := HolderRefusal(reason); got == nil || string(got.JSON()) != string(want.JSON()) || got.Status != want.Status {
			t.Errorf("HolderRefusal(%q) = %v", reason, got)
		}
	}
	if HolderRefusal("too-late") != nil {
		t.Error("unknown reason mapped")
	}
}

func TestErrorStatus(t *testing.T) {
	t.Parallel()
	want := map[string]int{"bad-request": 400, "unsupported-protocol-version": 400, "daemon-below-floor": 426,
		"unauthorized": 401, "forbidden": 403, "revoked": 403, "not-found": 404, "not-ready": 409,
		"too-late": 409, "clock-skew": 401, "rate-limited": 429, "server-error": 500}
	if len(ErrorStatus) != len(want) {
		t.Fatalf("ErrorStatus has %d codes, want %d", len(ErrorStatus), len(want))
	}
	for k, v := range want {
		if ErrorStatus[k] != v {
			t.Errorf("ErrorStatus[%s] = %d, want %d", k, ErrorStatus[k], v)
		}
	}
}

func TestVersionHandshake(t *testing.T) {
	t.Parallel()
	const none = "{\"error\":\"unsupported-protocol-version\",\"message\":\"this request declared no protocol version. Upgrade the daemon: `npm i -g byollm@latest`.\",\"supported\":[\"2\"],\"minimum\":\"2\"}"
	older := func(v string) string {
		return "{\"error\":\"unsupported-protocol-version\",\"message\":\"this server speaks protocol 2 and the daemon asked for " + v + ". Upgrade the daemon: `npm i -g byollm@latest`.\",\"supported\":[\"2\"],\"minimum\":\"2\"}"
	}
	newer := func(v string) string {
		return `{"error":"unsupported-protocol-version","message":"this server speaks protocol 2 and the daemon asked for ` + v + `. This daemon is newer than the server; the server needs upgrading.","supported":["2"],"minimum":"2"}`
	}
	cases := []struct {
		name  string
		body  string // "" = no body
		query string
		want  string // "" = accepted
	}{
		{"body 2", `{"protocolVersion":"2"}`, "", ""},
		{"query 2", ``, "protocolVersion=2", ""},
		{"first query wins", ``, "protocolVersion=2&protocolVersion=3", ""},
		{"nothing", ``, "", none},
		{"empty query", ``, "protocolVersion=", none},
		{"body number beats good query", `{"protocolVersion":2}`, "protocolVersion=2", none},
		{"body null beats good query", `{"protocolVersion":null}`, "protocolVersion=2", none},
		{"body empty string", `{"protocolVersion":""}`, "", none},
		{"body wins over query", `{"protocolVersion":"3"}`, "protocolVersion=2", newer("3")},
		{"array body falls back", `[{"protocolVersion":"3"}]`, "protocolVersion=2", ""},
		{"invalid json falls back", `{"protocolVersion":"3"`, "protocolVersion=2", ""},
		{"primitive body falls back", `"3"`, "", none},
		{"1 older", `{"protocolVersion":"1"}`, "", older("1")},
		{"10 older by string", `{"protocolVersion":"10"}`, "", older("10")},
		{"3 newer", `{"protocolVersion":"3"}`, "", newer("3")},
		{"0 older", `{"protocolVersion":"0"}`, "", older("0")},
		{"astral newer", `{"protocolVersion":"😀"}`, "", newer("😀")},
		{"no other key matters", `{"version":"2"}`, "protocolVersion=2", ""},
		{"plus is space", ``, "protocolVersion=2+", newer("2 ")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := ReadBody([]byte(c.body))
			v, _ := DeclaredVersion(b.Value, ParseQuery(c.query))
			r := CheckProtocolVersion(v)
			if c.want == "" {
				if r != nil {
					t.Fatalf("refused: %s", r.JSON())
				}
				return
			}
			if r == nil {
				t.Fatal("accepted")
			}
			if r.Status != 400 || string(r.JSON()) != c.want {
				t.Fatalf("got %d %s\nwant 400 %s", r.Status, r.JSON(), c.want)
			}
		})
	}
}

func TestParseQuery(t *testing.T) {
	t.Parallel()
	cases := []struct {
		raw, key string
		want     []string
	}{
		{"siteId=a%20b&siteId=c", "siteId", []string{"a b", "c"}},
		{"siteId=a;b", "siteId", []string{"a;b"}},
		{"siteId=%zz", "siteId", []string{"%zz"}},
		{"siteId=%C3%A9", "siteId", []string{"é"}},
		{"siteId=%FF", "siteId", []string{"\uFFFD"}},
		{"siteId", "siteId", []string{""}},
		{"&&siteId=x&", "siteId", []string{"x"}},
	}
	for _, c := range cases {
		got := ParseQuery(c.raw)[c.key]
		if len(got) != len(c.want) {
			t.Errorf("%q: got %q, want %q", c.raw, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%q: got %q, want %q", c.raw, got, c.want)
			}
		}
	}
}

func TestEnvelopeBytesAndDescribe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  SealedEnvelope
		want int
	}{
		{SealedEnvelope{Ciphertext: "AAAA", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 1800003600000}, 109},
		{SealedEnvelope{Ciphertext: "é😀\"\n\u0001", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 1}, 106},
	}
	for _, c := range cases {
		if got := EnvelopeBytes(c.env); got != c.want {
			t.Errorf("EnvelopeBytes(%+v) = %d, want %d", c.env, got, c.want)
		}
	}
	for bytes, want := range map[int]string{6291456: "6.0 MB", 6291457: "6.1 MB", 0: "0.0 MB", 1: "0.1 MB", 1048576: "1.0 MB"} {
		if got := DescribeBytes(bytes); got != want {
			t.Errorf("DescribeBytes(%d) = %s, want %s", bytes, got, want)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a, b string
		want int
		ok   bool
	}{
		{"0.1.0-alpha.9", "0.1.0-alpha.83", -1, true},
		{"1.0.0", "1.0.0-rc.1", 1, true},
		{"1.0.0+b", "1.0.0", 0, true},
		{"v1.0.0", "1.0.0", 0, false},
		{"1.0.0", "v1.0.0", 0, false},
		{"1.0", "1.0.0", 0, false},
		{"1.0.0\n", "1.0.0", 0, false},
		{"0.1.1", "0.1.0-alpha.83", 1, true},
		{"1.2.3-alpha", "1.2.3-1", 1, true},
		{"1.2.3-alpha.1", "1.2.3-alpha", 1, true},
		{"1.2.3-Beta", "1.2.3-alpha", -1, true},
		{"01.2.3", "1.2.3", 0, true},
		{"10.0.0", "9.0.0", 1, true},
	}
	for _, c := range cases {
		got, ok := CompareVersions(c.a, c.b)
		if ok != c.ok || got != c.want {
			t.Errorf("CompareVersions(%q,%q) = %d,%v want %d,%v", c.a, c.b, got, ok, c.want, c.ok)
		}
	}
}

func TestUpdateOfferAndFloor(t *testing.T) {
	t.Parallel()
	offers := []struct {
		offer, daemon string
		want          bool
	}{
		{"0.1.2", "0.1.1", true},
		{"0.1.0", "0.1.1", true}, // a downgrade is still offered
		{"0.1.1", "0.1.1", false},
		{"", "0.1.1", false},
		{"latest", "0.1.1", false},
		{"0.1.2", "0.1.0-alpha.82", false},
		{"0.1.2", "0.1.0-alpha.83", true},
		{"0.1.2", "garbage", false},
	}
	for _, c := range offers {
		if got := UpdateOfferAllowed(c.offer, c.daemon); got != c.want {
			t.Errorf("UpdateOfferAllowed(%q,%q) = %v", c.offer, c.daemon, got)
		}
	}
	if BelowFloorCheck("0.1.0", "0.1.1") == nil {
		t.Error("below floor not refused")
	}
	if BelowFloorCheck("garbage", "0.1.1") != nil || BelowFloorCheck("0.1.1", "0.1.1") != nil || BelowFloorCheck("0.0.1", "") != nil {
		t.Error("refused what passes the floor")
	}
}

// EnvelopeBytes counts without serialising; it must equal the length of
// what Marshal writes for every kind of character.
func TestEnvelopeBytesMatchesMarshal(t *testing.T) {
	t.Parallel()
	texts := []string{"", "a", "\"\\/", "\b\t\n\f\r\x00\x1f\x7f", "é€😀", "\xed\xa0\x80", "\xed\xb0\x80x", "\xff", "\u2028<>&", strings.Repeat("😀x", 1000)}
	for _, s := range texts {
		env := SealedEnvelope{Ciphertext: s, RecipientKeyID: s + "r", SenderKeyID: "s" + s, Direction: "result", DeadlineAt: MaxSafeInteger}
		if got, want := EnvelopeBytes(env), UTF16Len(string(MustMarshal(env))); got != want {
			t.Errorf("EnvelopeBytes(%q) = %d, marshalled length %d", s, got, want)
		}
	}
}
