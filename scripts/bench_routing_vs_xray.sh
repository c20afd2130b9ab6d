#!/usr/bin/env bash
# Routing decisions per second, Ferry vs Xray, on the same nine-rule list and 16 destinations
# with the real v2fly files: Ferry's `cargo bench -p ferry --bench routing` and the Go harness
# scripts/bench_xray_router (Xray's own router, github.com/xtls/xray-core v1.260327.0 = Xray
# 26.3.27), one right after the other, RUNS times alternating (default 3). Prints each run, the
# medians and the ratio, and fails if Xray and Ferry pick a different outbound for a destination.
# Needs Go and the geodata that scripts/bench_geodata.py fetches (GEO, default
# ~/.cache/ferry/geodata). A benchmark tool: CI does not run it. Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
GEO="${GEO:-${FERRY_GEO_CACHE:-$HOME/.cache/ferry/geodata}}"
RUNS="${RUNS:-3}"
[ -f "$GEO/geoip.dat" ] && [ -f "$GEO/geosite.dat" ] || { echo "no geodata in $GEO: run scripts/bench_geodata.py first" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd scripts/bench_xray_router && go build -o "$out/bench_xray_router" .)
FERRY_GEO_DIR="$GEO" cargo bench -q -p ferry --bench routing --no-run
# Million decisions per second from a bench's "decisions: N in S s = ..." line.
rate() { awk '/^decisions:/ { printf "%.3f\n", $2 / $4 / 1e6 }' "$@"; }
for i in $(seq "$RUNS"); do
  FERRY_GEO_DIR="$GEO" cargo bench -q -p ferry --bench routing 2>/dev/null >"$out/ferry.$i"
  XRAY_LOCATION_ASSET="$GEO" "$out/bench_xray_router" -expect "$out/ferry.$i" 2>/dev/null >"$out/xray.$i" \
    || { cat "$out/xray.$i"; exit 1; }
  printf 'run %d: Ferry %s M/s, Xray %s M/s\n' "$i" \
    "$(rate "$out/ferry.$i")" "$(rate "$out/xray.$i")"
done
grep '^same tag' "$out/xray.1"
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
f=$(rate "$out"/ferry.* | median)
x=$(rate "$out"/xray.* | median)
awk -v f="$f" -v x="$x" 'BEGIN { printf "median: Ferry %.3f M/s, Xray %.3f M/s, Ferry/Xray %.1fx\n", f, x, f / x }'
