package relay

import (
	"net/http"
	"net/netip"
	"testing"
)

func TestClientAddress(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name, remote string
		xff          []string
		trusted      []netip.Prefix
		want         string
	}{
		{"peer, no proxies", "198.51.100.7:5000", []string{"203.0.113.1"}, nil, "198.51.100.7"},
		{"untrusted peer: header ignored", "198.51.100.7:5000", []string{"203.0.113.1"}, proxies, "198.51.100.7"},
		{"trusted peer: rightmost untrusted hop", "10.0.0.2:5000", []string{"192.0.2.1, 203.0.113.1, 10.0.0.9"}, proxies, "203.0.113.1"},
		{"several header lines", "10.0.0.2:5000", []string{"192.0.2.1", "203.0.113.1"}, proxies, "203.0.113.1"},
		{"garbled hop: stop at the last trusted one", "10.0.0.2:5000", []string{"203.0.113.1, garbage"}, proxies, "10.0.0.2"},
		{"no header behind a proxy: the proxy", "10.0.0.2:5000", nil, proxies, "10.0.0.2"},
		{"every hop trusted: the leftmost", "10.0.0.2:5000", []string{"10.1.1.1, 10.2.2.2"}, proxies, "10.1.1.1"},
		{"IPv6 per /64", "[2001:db8:1:2:3:4:5:6]:5000", nil, nil, "2001:db8:1:2::/64"},
		{"IPv6 zone dropped", "[fe80::1%eth0]:5000", nil, nil, "fe80::/64"},
		{"IPv4-mapped is IPv4", "[::ffff:198.51.100.7]:5000", nil, nil, "198.51.100.7"},
		{"v6 proxy, v4 client", "[fd00::1]:5000", []string{"203.0.113.1"}, proxies, "203.0.113.1"},
		{"no peer address", "", nil, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hr := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
			for _, v := range c.xff {
				hr.Header.Add("X-Forwarded-For", v)
			}
			if got := clientAddress(hr, c.trusted); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}
