#!/usr/bin/env bash
# A/B of two ferry binaries with iperf3 through the same chains, samples alternating between the
# two builds (A B A B ...; the order flips every round) so drift on a shared machine hits both
# alike. Chains on loopback: relay (dokodemo-door -> freedom, one process), and dokodemo-door ->
# shadowsocks aes-128-gcm / vmess aes-128-gcm -> freedom (two processes). Per sample: 2 GiB from
# the iperf3 client, 1 and 4 streams; CPU is utime+stime of the ferry processes from /proc.
# Prints the median Gbit/s and CPU ticks per chain and build, and the ratios B/A.
# Usage: scripts/ab_iperf3.sh A_BIN B_BIN [ROUNDS]   (needs iperf3: scripts/peers.sh debian)
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-6}
IPERF=$(command -v iperf3 || echo "${FERRY_PEERS:-$HOME/.cache/ferry/peers/bin}/iperf3")
work=$(mktemp -d); trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT
ID=b831381d-6324-4d53-ad4f-8cda48b30811
entry='{"listen":"127.0.0.1","port":15201,"protocol":"dokodemo-door","settings":{"address":"127.0.0.1","port":15202}}'
out_of() {
  case $1 in
    relay) echo '{"protocol":"freedom"}' ;;
    ss) echo '{"protocol":"shadowsocks","settings":{"servers":[{"address":"127.0.0.1","port":15210,"method":"aes-128-gcm","password":"pw"}]}}' ;;
    vmess) echo "{\"protocol\":\"vmess\",\"settings\":{\"vnext\":[{\"address\":\"127.0.0.1\",\"port\":15210,\"users\":[{\"id\":\"$ID\",\"security\":\"aes-128-gcm\"}]}]}}" ;;
  esac
}
in_of() {
  case $1 in
    ss) echo '{"listen":"127.0.0.1","port":15210,"protocol":"shadowsocks","settings":{"method":"aes-128-gcm","password":"pw"}}' ;;
    vmess) echo "{\"listen\":\"127.0.0.1\",\"port\":15210,\"protocol\":\"vmess\",\"settings\":{\"clients\":[{\"id\":\"$ID\"}]}}" ;;
  esac
}
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
sample() { # BIN CHAIN STREAMS -> "gbit ticks"
  local bin=$1 chain=$2 p=$3 pids=() t=0
  echo "{\"inbounds\":[$entry],\"outbounds\":[$(out_of "$chain")]}" >"$work/c.json"
  "$IPERF" -s -p 15202 -1 >/dev/null 2>&1 &
  local ip=$!
  if [ "$chain" != relay ]; then
    echo "{\"inbounds\":[$(in_of "$chain")],\"outbounds\":[{\"protocol\":\"freedom\"}]}" >"$work/s.json"
    "$bin" run -c "$work/s.json" >/dev/null 2>&1 & pids+=($!)
  fi
  "$bin" run -c "$work/c.json" >/dev/null 2>&1 & pids+=($!)
  sleep 0.4
  local r
  r=$("$IPERF" -c 127.0.0.1 -p 15201 -n 2G -P "$p" 2>&1 | grep receiver | tail -1 | awk '{print $(NF-2)}')
  for pid in "${pids[@]}"; do t=$((t + $(ticks "$pid"))); kill "$pid"; done
  wait "$ip" 2>/dev/null || true
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "$r $t"
}
results="$work/results"
for chain in relay ss vmess; do
  for p in 1 4; do
    for round in $(seq 1 "$ROUNDS"); do
      if [ $((round % 2)) = 1 ]; then order="A B"; else order="B A"; fi
      for w in $order; do
        bin=$A; [ "$w" = B ] && bin=$B
        echo "$chain $p $w $(sample "$bin" "$chain" "$p")" >>"$results"
      done
    done
  done
done
python3 - "$results" <<'EOF'
import statistics as st, sys
d = {}
for line in open(sys.argv[1]):
    chain, p, w, g, t = line.split()
    d.setdefault((chain, p, w), []).append((float(g), int(t)))
print("| chain | streams | samples | A Gbit/s | B Gbit/s | B/A | A CPU ticks | B CPU ticks | B/A |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for chain in ["relay", "ss", "vmess"]:
    for p in ["1", "4"]:
        a, b = d[(chain, p, "A")], d[(chain, p, "B")]
        ag, bg = st.median(x[0] for x in a), st.median(x[0] for x in b)
        at, bt = st.median(x[1] for x in a), st.median(x[1] for x in b)
        print(f"| {chain} | {p} | {len(a)}/{len(b)} | {ag:.1f} | {bg:.1f} | {bg/ag:.3f} | {at} | {bt} | {bt/at:.3f} |")
EOF
