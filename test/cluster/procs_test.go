package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/test/relaytest"
)

// privateCluster is a 3-primary cluster with one replica per primary.
type privateCluster struct {
	base int
	dir  string
	url  string
}

// newPrivateCluster starts one (relaytest.PrivateCluster), stopped at cleanup.
func newPrivateCluster(t *testing.T) *privateCluster {
	t.Helper()
	c := &privateCluster{}
	c.url, c.base, c.dir = relaytest.PrivateCluster(t, 1)
	return c
}

// node opens a plain client to one node (no redirects), for admin commands.
func node(t *testing.T, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string // master: the primary's id, for a replica
	primary          bool
	slots            []string
}

func (c *privateCluster) nodes(t *testing.T, via string) []clusterNode {
	t.Helper()
	// Its own client, closed here: callers poll this every 50 ms.
	n, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{via}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connect %s: %v", via, err)
	}
	defer n.Close()
	text, err := n.Do(context.Background(), n.B().ClusterNodes().Build()).ToString()
	if err != nil {
		t.Fatalf("CLUSTER NODES via %s: %v", via, err)
	}
	// RESP3 sends CLUSTER NODES as a verbatim string, which keeps its
	// "txt:" format prefix here.
	text = strings.TrimPrefix(text, "txt:")
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		cn := clusterNode{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], primary: strings.Contains(f[2], "master")}
		if f[3] != "-" {
			cn.master = f[3]
		}
		if strings.Contains(f[2], "fail") && !strings.Contains(f[2], "fail?") {
			continue // a node the cluster has given up on
		}
		cn.slots = f[8:]
		out = append(out, cn)
	}
	return out
}

// owner is the primary serving slot, as node via sees it, and its replica.
func (c *privateCluster) owner(t *testing.T, via string, slot int) (primary, replica clusterNode) {
	t.Helper()
	primary, replica, ok := c.findOwner(t, via, slot)
	if !ok {
		t.Fatalf("no primary serves slot %d (via %s): %+v", slot, via, c.nodes(t, via))
	}
	return primary, replica
}

// findOwner is owner, reporting false while no live primary serves slot.
func (c *privateCluster) findOwner(t *testing.T, via string, slot int) (primary, replica clusterNode, ok bool) {
	t.Helper()
	all := c.nodes(t, via)
	for _, n := range all {
		if !n.primary {
			continue
		}
		for _, r := range n.slots {
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				primary = n
			}
		}
	}
	if primary.id == "" {
		return primary, replica, false
	}
	for _, n := range all {
		if n.master == primary.id {
			replica = n
		}
	}
	return primary, replica, true
}

// pid is the process id of the server on addr.
func (c *privateCluster) pid(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	b, err := os.ReadFile(filepath.Join(c.dir, port, "server.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// jobSlots reads, from every primary, the namespace's job records
// (<ns>:{<shard tag>}:j:...) and counts them by cluster slot: the slots of
// the shards that hold jobs right now.
func (c *privateCluster) jobSlots(t *testing.T, ns string) map[int]int {
	t.Helper()
	ctx := context.Background()
	out := map[int]int{}
	slotOf := map[string]int{}
	for _, n := range c.nodes(t, fmt.Sprintf("127.0.0.1:%d", c.base)) {
		if !n.primary {
			continue
		}
		cl := node(t, n.addr)
		cursor := uint64(0)
		for {
			e, err := cl.Do(ctx, cl.B().Scan().Cursor(cursor).Match(ns+":{*}:j:*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatalf("SCAN on %s: %v", n.addr, err)
			}
			for _, k := range e.Elements {
				if strings.Count(k, ":") > 4 { // j:<S>:<J>:ref and :ra are parts of a job
					continue
				}
				tag, _, _ := strings.Cut(k[strings.Index(k, "{")+1:], "}")
				if _, ok := slotOf[tag]; !ok {
					slotOf[tag] = c.keyslot(t, "{"+tag+"}")
				}
				out[slotOf[tag]]++
			}
			if e.Cursor == 0 {
				break
			}
			cursor = e.Cursor
		}
	}
	return out
}

func sumValues(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// keyslot is the cluster slot of key.
func (c *privateCluster) keyslot(t *testing.T, key string) int {
	t.Helper()
	n := node(t, fmt.Sprintf("127.0.0.1:%d", c.base))
	slot, err := n.Do(context.Background(), n.B().ClusterKeyslot().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return int(slot)
}
