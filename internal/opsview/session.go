package opsview

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// A login session is a cookie value derived from the token, never the
// token: "v1.<expiry, Unix s>.<subject>.<MAC>", where subject is "admin" or
// the site token's SHA-256 (hex, the key its record is stored under) and
// MAC is HMAC-SHA256 over the rest with a key derived from
// RELAY_ADMIN_TOKEN. Every replica derives the same key, so a session
// opened on one is honoured by all, with no state kept anywhere. A site
// session is checked against the token's record on every request, so
// revoking the token (or its site leaving) ends it; an admin session ends
// at its expiry or when the admin token changes. The expiry is read from
// this replica's clock: it is a coarse bound of hours, not a routing
// decision, so a few seconds of skew between replicas do not matter.
const (
	sessionTTL   = 12 * time.Hour
	sessionAdmin = "admin"
)

type sessions struct {
	key []byte // nil: no admin token, so no sessions
}

func newSessions(adminToken string) sessions {
	if adminToken == "" {
		return sessions{}
	}
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("relay-ui-session/v1"))
	return sessions{key: m.Sum(nil)}
}

func (s sessions) enabled() bool { return s.key != nil }

func (s sessions) mac(payload string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue returns a session for subject that expires sessionTTL after now.
func (s sessions) issue(subject string, now time.Time) string {
	payload := "v1." + strconv.FormatInt(now.Add(sessionTTL).Unix(), 10) + "." + subject
	return payload + "." + s.mac(payload)
}

// open returns the subject of a well-formed, authentic, unexpired session.
func (s sessions) open(v string, now time.Time) (string, bool) {
	if !s.enabled() || len(v) > 256 {
		return "", false
	}
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return "", false
	}
	payload, mac := v[:i], v[i+1:]
	if !hmac.Equal([]byte(mac), []byte(s.mac(payload))) {
		return "", false
	}
	parts := strings.SplitN(payload, ".", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || now.Unix() >= exp {
		return "", false
	}
	return parts[2], true
}
