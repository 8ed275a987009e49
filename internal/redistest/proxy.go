package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy in front of a server, run in-process by toxiproxy, that
// a test can freeze: the connections stay open and every byte is dropped, as
// in a network partition or a paused peer.
type Proxy struct {
	t     testing.TB
	proxy *toxiproxy.Proxy
}

// StartProxy starts a proxy to upstream (host:port) on a free loopback port,
// stopped when the test ends.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "redis-"+randomHex(3), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("redistest: start proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{t: t, proxy: p}
}

// Addr returns the proxy's address: point a client here instead of upstream.
func (p *Proxy) Addr() string { return p.proxy.Listen }

// Freeze stops all data in both directions until Thaw; connections stay open.
func (p *Proxy) Freeze() {
	p.t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		spec := fmt.Sprintf(`{"name":"freeze-%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, stream, stream)
		if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			p.t.Fatalf("redistest: freeze proxy: %v", err)
		}
	}
}

// Thaw lets data through again.
func (p *Proxy) Thaw() {
	p.t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		if err := p.proxy.Toxics.RemoveToxic(context.Background(), "freeze-"+stream); err != nil {
			p.t.Fatalf("redistest: thaw proxy: %v", err)
		}
	}
}
