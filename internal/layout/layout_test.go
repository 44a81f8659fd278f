package layout

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The refusal names the step an operator takes: a newer layout, an older
// one with no path of steps, and an older one with a path.
func TestRefusalNamesTheSteps(t *testing.T) {
	steps := Steps[int]{3: {From: 3, Run: func(context.Context, int) error { return nil }}}
	for _, c := range []struct {
		v    int
		want string
	}{
		{5, "newer"},
		{2, "new RELAY_NAMESPACE"},
		{3, "run `relay migrate`"},
	} {
		err := Refusal("ns", c.v, steps, 4)
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("v%d: %v, want %q", c.v, err, c.want)
		}
	}
}

// The cache keeps at most two generations; a lookup in the previous one
// moves the entry into the current one, so a site in use survives a turn.
func TestPlaceCacheGenerations(t *testing.T) {
	c := newPlaceCache(2)
	c.put("a", placed{shard: 1})
	c.put("b", placed{shard: 2})
	c.put("c", placed{shard: 3}) // "a", "b" become the previous generation
	if e, ok := c.get("a"); !ok || e.shard != 1 {
		t.Fatalf("a from the previous generation: %+v %v", e, ok)
	}
	c.put("d", placed{shard: 4}) // current {c, a} full: it becomes the previous, b forgotten
	if _, ok := c.get("b"); ok {
		t.Fatal("b outlived two generations")
	}
	if n := c.size(); n > 4 {
		t.Fatalf("size %d > two generations", n)
	}
}

func TestShardGroupsNumberPrimariesInOrder(t *testing.T) {
	if got := shardGroups([]string{"b:1", "a:1", "b:1", ""}); got != "2,1,2,0" {
		t.Fatalf("groups %q", got)
	}
	if got := shardGroups(make([]string, 3)); got != "0,0,0" {
		t.Fatalf("single node groups %q", got)
	}
}
