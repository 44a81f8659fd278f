package relay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// fromAddress posts a pair start over a connection whose local address is
// addr (any of 127.0.0.0/8 is loopback on Linux), so the relay sees addr as
// the peer: a real client address, no proxy header.
type fromAddress struct {
	t       *testing.T
	url     string
	clients map[string]*http.Client
}

func (f *fromAddress) start(addr string) (int, string) {
	f.t.Helper()
	c := f.clients[addr]
	if c == nil {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
		tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}
		f.t.Cleanup(tr.CloseIdleConnections)
		c = &http.Client{Transport: tr}
		f.clients[addr] = c
	}
	res, err := c.Post(f.url+"/byollm/pair", "application/json", bytes.NewReader(startJSON(f.t, newKeys(f.t).id)))
	if err != nil {
		f.t.Fatalf("start from %s: %v", addr, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// The run: five starts each from 127.0.3.1-102 (510 starts, more
// than the 500 live codes the relay holds) no longer fill the relay: their
// /24 holds at most PairingsPerNetwork codes, and a fresh address elsewhere
// gets a code. An address inside the busy /24 is refused as that network.
// Then many networks: they fill the capacity up to its reserve, after
// which each network still holding no code gets one more, and a fresh
// network still gets a code while networks that hold codes are refused.
func TestPairingStartsFromManyAddressesLeaveRoomForAFreshNetwork(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	st := newStore(t, c, store.Options{}) // the store's defaults: 500 codes, 5 an address, 20 a network, 100 reserved
	e := newEnvOn(t, st)
	newWorld(t).install(e)
	f := &fromAddress{t: t, url: e.srv.URL, clients: map[string]*http.Client{}}
	ctx := context.Background()
	live := func() int {
		n, err := c.Do(ctx, c.B().Zcard().Key(st.Namespace()+":{"+st.Namespace()+"}:pc:x").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	networkBusy := `{"error":"rate-limited","message":"too many pairings are in progress from this network — finish or let one expire (codes last 10 minutes), then try again"}`
	relayBusy := `{"error":"rate-limited","message":"too many pairings are in progress right now — try again in a few minutes"}`

	stored := 0
	for i := 1; i <= 102; i++ {
		for range 5 {
			status, body := f.start(fmt.Sprintf("127.0.3.%d", i))
			switch {
			case status == 200:
				stored++
			case status != 429:
				t.Fatalf("start from 127.0.3.%d: %d %s", i, status, body)
			}
		}
	}
	if stored != store.DefaultPairingsPerNetwork {
		t.Fatalf("127.0.3.1-102 stored %d codes, want the network's %d", stored, store.DefaultPairingsPerNetwork)
	}
	if status, body := f.start("127.0.4.1"); status != 200 {
		t.Fatalf("a fresh address after 510 starts from one /24: %d %s", status, body)
	}
	if status, body := f.start("127.0.3.200"); status != 429 || body != networkBusy {
		t.Fatalf("an address of the busy /24: %d %s", status, body)
	}

	// Networks 127.0.10-49.0/24, 25 starts each from 5 addresses: the
	// first ones fill the unreserved 400, every later one gets the single
	// code of a fresh network from the reserve.
	for n := 10; n < 50; n++ {
		for a := 1; a <= 5; a++ {
			for range 5 {
				if status, body := f.start(fmt.Sprintf("127.0.%d.%d", n, a)); status != 200 && status != 429 {
					t.Fatalf("start: %d %s", status, body)
				}
			}
		}
	}
	capacity, reserve := store.MaxOutstandingPairings, store.MaxOutstandingPairings/store.PairingReserveDivisor
	filled := live()
	t.Logf("live codes after 40 more networks: %d (capacity %d, %d reserved for fresh networks)", filled, capacity, reserve)
	if filled < capacity-reserve || filled >= capacity {
		t.Fatalf("%d live codes after 40 networks, want the unreserved %d plus one a fresh network, below %d", filled, capacity-reserve, capacity)
	}
	if status, body := f.start("127.0.49.9"); status != 429 || body != relayBusy {
		t.Fatalf("a network holding one code (from the reserve), past the unreserved part: %d %s", status, body)
	}
	if status, body := f.start("127.0.200.1"); status != 200 {
		t.Fatalf("a fresh network with the relay past its unreserved part: %d %s", status, body)
	}
}
