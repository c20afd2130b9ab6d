#!/usr/bin/env bash
# The test command: installs the peers (cached outside the clone), checks format and lints,
# then runs every test, interop tests against the real peers included.
set -euo pipefail
cd "$(dirname "$0")/.."
export FERRY_PEERS="${FERRY_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry/peers/bin}"
# Each step's start, in seconds since this script began (the run's time budget is read from them).
step() { echo "== test.sh +${SECONDS}s: $*" >&2; }
step peers
bash scripts/peers.sh ${FERRY_PEER_GROUPS:-all}
step fmt
cargo fmt --all -- --check
# The layers: no import circle, no import from a lower layer to a higher one (scripts/layers.py).
step layers
python3 scripts/layers.py
step clippy
cargo clippy --workspace --all-targets -- -D warnings
step build
cargo build --release -p ferry --bin ferry
step readme_run
# The README's run command, as written, carries a request through its SOCKS5 and HTTP sides.
bash scripts/readme_run.sh
step readme_quickstart
# The README's five-minute VLESS + REALITY + Vision section, as a newcomer runs it.
bash scripts/readme_quickstart.sh target/release/ferry
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Every test binary runs even when one fails, so a red run names all its failures.
status=0
step tests
cargo test --workspace --profile ci --no-fail-fast -- --test-threads=2 2>&1 | tee "$log" || status=$?
# One closing line over every test binary (the last binary cargo runs is often doc-tests with 0).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } }
     END { printf "Summary: %d passed, %d failed\n", p, f }' "$log"
step done
exit "$status"
