package scriptrun

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/valkey-io/valkey-go"
)

// replyErr is a real error reply of text, as valkey-go hands it over.
func replyErr(t *testing.T, c valkey.Client, text string) error {
	t.Helper()
	err := c.Do(context.Background(), c.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(text).Build()).Error()
	if _, ok := valkey.IsValkeyErr(err); !ok {
		t.Fatalf("%q: not an error reply: %v", text, err)
	}
	return err
}

// Each reply is classed by its code, from the one table: the class the
// observer records and whether the caller may retry agree for every code,
// and a reply without a code (valkey-go takes "ERR" off) is the script's.
func TestReplyClasses(t *testing.T) {
	c := testClient(t)
	for _, tc := range []struct {
		reply, prefix, class string
		unavailable          bool
	}{
		{"CROSSSLOT Keys in request don't hash to the same slot", "CROSSSLOT", "script", false},
		{"OOM command not allowed when used memory > 'maxmemory'.", "OOM", "full", true},
		{"NOLAYOUT relay: no layout record", "NOLAYOUT", "lost", true},
		{"MOVED 3999 127.0.0.1:6381", "MOVED", "cluster", true},
		{"TRYAGAIN Multiple keys request during rehashing of slot", "TRYAGAIN", "cluster", true},
		{"BUSY Redis is busy running a script.", "BUSY", "busy", true},
		{"LOADING Redis is loading the dataset in memory", "LOADING", "busy", true},
		{"READONLY You can't write against a read only replica.", "READONLY", "busy", true},
		{"NOSCRIPT No matching script.", "NOSCRIPT", "script", false},
		{"ERR Function not found", "ERR", "script", false},
		{"bad input: no such job", "ERR", "script", false},
	} {
		err := replyErr(t, c, tc.reply)
		if p := ReplyPrefix(err); p != tc.prefix {
			t.Errorf("%q: prefix %q, want %q", tc.reply, p, tc.prefix)
		}
		wrapped := fmt.Errorf("op: %w", err)
		if got := Class(wrapped); got != tc.class {
			t.Errorf("%q: class %q, want %q", tc.reply, got, tc.class)
		}
		if got := Unavailable(wrapped); got != tc.unavailable {
			t.Errorf("%q: unavailable %v, want %v", tc.reply, got, tc.unavailable)
		}
	}
	for err, class := range map[error]string{
		context.DeadlineExceeded: "timeout", context.Canceled: "canceled", errors.New("dial tcp: refused"): "connection",
	} {
		if got := Class(err); got != class {
			t.Errorf("%v: class %q, want %q", err, got, class)
		}
	}
	if !Unavailable(context.DeadlineExceeded) || Unavailable(errors.New("parse")) {
		t.Error("a deadline is unavailable, a plain error is not")
	}
}
