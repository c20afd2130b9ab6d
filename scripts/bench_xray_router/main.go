// Command bench_xray_router measures Xray's routing decisions per second with real geodata, the
// counterpart of Ferry's `cargo bench -p ferry --bench routing` (crates/ferry/benches/routing.rs):
// the same nine-rule list and the same 16 destinations, routed in a loop for 3 s.
//
// It builds the rules with Xray's own config loader (infra/conf) and router (app/router), both
// public packages of github.com/xtls/xray-core, and reads geoip.dat / geosite.dat from
// XRAY_LOCATION_ASSET (as xray does; scripts/bench_geodata.py fetches the files into
// ~/.cache/ferry/geodata). Before timing it prints the outbound tag each destination gets, one
// "decision DEST TAG" line each, in the same form as Ferry's bench, so the two can be diffed.
//
// With -expect FILE (the output of Ferry's bench) it also checks that Xray picks the same tag as
// Ferry for every destination, and exits with 1 if one differs. scripts/bench_routing_vs_xray.sh
// runs both benchmarks alternately.
//
// A benchmark tool, not a test: CI does not build it. Usage:
//
//	XRAY_LOCATION_ASSET=~/.cache/ferry/geodata go run . [-seconds 3] [-expect FILE]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xtls/xray-core/app/router"
	"github.com/xtls/xray-core/common/net"
	"github.com/xtls/xray-core/common/session"
	"github.com/xtls/xray-core/features/routing"
	routingsession "github.com/xtls/xray-core/features/routing/session"
	"github.com/xtls/xray-core/infra/conf"
)

// The routing object of Ferry's bench, rule for rule.
const rules = `{"domainStrategy": "AsIs", "rules": [
  {"inboundTag": ["api"], "outboundTag": "api"},
  {"protocol": ["bittorrent"], "outboundTag": "block"},
  {"ip": ["geoip:private"], "outboundTag": "direct"},
  {"domain": ["geosite:category-ads-all"], "outboundTag": "block"},
  {"domain": ["geosite:cn", "domain:example.cn", "full:a.example.com", "keyword:baidu"], "outboundTag": "direct"},
  {"ip": ["geoip:cn"], "outboundTag": "direct"},
  {"domain": ["geosite:geolocation-!cn", "geosite:google"], "outboundTag": "proxy"},
  {"network": "udp", "port": "443", "outboundTag": "block"},
  {"port": "53,853,1000-2000", "sourceIP": ["192.168.1.0/24"], "outboundTag": "proxy"}
]}`

// The destination mix of Ferry's bench, in its order.
var dests = []string{
	"www.google.com:443",
	"www.baidu.com:443",
	"ads.example.com:80",
	"github.com:443",
	"1.0.1.5:443",
	"8.8.8.8:53",
	"192.168.1.1:80",
	"cdn.jsdelivr.net:443",
	"api.weixin.qq.com:443",
	"update.microsoft.com:443",
	"223.5.5.5:53",
	"news.ycombinator.com:443",
	"x.y.z.unknown-domain.org:8443",
	"[2001:4860:4860::8888]:443",
	"doubleclick.net:443",
	"t.co:443",
}

// parseDest splits "host:port" at the last colon; Xray's ParseAddress takes an IPv6 address in
// brackets, as Ferry's Destination::parse wants it.
func parseDest(s string) (net.Destination, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return net.Destination{}, fmt.Errorf("%s: no port", s)
	}
	port, err := strconv.ParseUint(s[i+1:], 10, 16)
	if err != nil {
		return net.Destination{}, fmt.Errorf("%s: %w", s, err)
	}
	return net.TCPDestination(net.ParseAddress(s[:i]), net.Port(port)), nil
}

// contextFor is the routing context Xray's dispatcher hands its router for a TCP connection
// that arrived on a SOCKS inbound tagged "in" from 10.0.0.2:40000 (the session of Ferry's bench),
// nothing sniffed.
func contextFor(dest net.Destination) routing.Context {
	ctx := session.ContextWithInbound(context.Background(), &session.Inbound{
		Source: net.TCPDestination(net.ParseAddress("10.0.0.2"), 40000),
		Local:  net.TCPDestination(net.ParseAddress("127.0.0.1"), 1080),
		Tag:    "in",
		Name:   "socks",
	})
	ctx = session.ContextWithOutbounds(ctx, []*session.Outbound{{Target: dest}})
	ctx = session.ContextWithContent(ctx, &session.Content{})
	return routingsession.AsRoutingContext(ctx)
}

func main() {
	seconds := flag.Float64("seconds", 3, "how long to route in a loop")
	expect := flag.String("expect", "", "a file with Ferry's \"decision DEST TAG\" lines to compare with")
	flag.Parse()
	if os.Getenv("XRAY_LOCATION_ASSET") == "" {
		fmt.Fprintln(os.Stderr, "XRAY_LOCATION_ASSET is not set (a folder with geoip.dat and geosite.dat)")
		os.Exit(2)
	}

	t := time.Now()
	var rc conf.RouterConfig
	if err := json.Unmarshal([]byte(rules), &rc); err != nil {
		fmt.Fprintln(os.Stderr, "rules:", err)
		os.Exit(1)
	}
	cfg, err := rc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rules:", err)
		os.Exit(1)
	}
	r := new(router.Router)
	// AsIs: no DNS client is consulted; no balancers, so no outbound manager or dispatcher.
	if err := r.Init(context.Background(), cfg, nil, nil, nil); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
	fmt.Printf("build: %v\n", time.Since(t))

	ctxs := make([]routing.Context, len(dests))
	got := make(map[string]string, len(dests))
	for i, d := range dests {
		dest, err := parseDest(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctxs[i] = contextFor(dest)
		tag := "-" // no rule matched: the default outbound
		if route, err := r.PickRoute(ctxs[i]); err == nil {
			tag = route.GetOutboundTag()
		}
		fmt.Printf("decision %s %s\n", d, tag)
		got[d] = tag
	}
	if *expect != "" && !sameAsFerry(*expect, got) {
		os.Exit(1)
	}

	limit := time.Duration(*seconds * float64(time.Second))
	var n, hits uint64
	start := time.Now()
	for time.Since(start) < limit {
		for _, c := range ctxs {
			if _, err := r.PickRoute(c); err == nil {
				hits++
			}
			n++
		}
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("decisions: %d in %.2f s = %.2f M/s (%.0f ns each; %d matched a rule)\n",
		n, secs, float64(n)/secs/1e6, secs*1e9/float64(n), hits)
}

// sameAsFerry compares the decisions with the "decision DEST TAG" lines of Ferry's bench output
// in path, prints the differences and a count, and says whether every destination agrees.
func sameAsFerry(path string, got map[string]string) bool {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return false
	}
	defer f.Close()
	same, seen := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[0] != "decision" {
			continue
		}
		seen++
		if tag, ok := got[fields[1]]; !ok {
			fmt.Printf("differs: %s is not in Xray's mix\n", fields[1])
		} else if tag != fields[2] {
			fmt.Printf("differs: %s Ferry %s, Xray %s\n", fields[1], fields[2], tag)
		} else {
			same++
		}
	}
	fmt.Printf("same tag as Ferry: %d of %d destinations (Ferry's file: %d)\n", same, len(got), seen)
	return same == len(got) && seen == len(got)
}
