#!/usr/bin/env bash
# The test command: installs the peers (cached outside the clone), checks format and lints,
# then runs every test, interop tests against the real peers included.
set -euo pipefail
cd "$(dirname "$0")/.."
export FERRY_PEERS="${FERRY_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry/peers/bin}"
bash scripts/peers.sh ${FERRY_PEER_GROUPS:-all}
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo build --release -p ferry --bin ferry
cargo test --workspace --release -- --test-threads=2
