#!/usr/bin/env bash
# Proves the README's run command on this checkout: starts `cargo run --release -- run` exactly as
# the README says (no config: the embedded mixed SOCKS5+HTTP proxy on 127.0.0.1:1080), carries one
# file from a local HTTP server through its SOCKS5 side and through its HTTP side, compares the
# bytes, then stops ferry with SIGTERM. Any mismatch or failure exits non-zero with a reason.
set -euo pipefail
cd "$(dirname "$0")/.."

port=1080
work=$(mktemp -d)
cargo_pid=""  # the process `cargo run` started as (ferry itself once cargo execs it)
ferry_pid=""  # the real ferry process
http_pid=""

fail() {
    echo "readme_run: FAIL: $*" >&2
    if [[ -s "$work/ferry.log" ]]; then
        echo "--- ferry output ---" >&2
        tail -n 40 "$work/ferry.log" >&2
    fi
    exit 1
}

cleanup() {
    local pid
    for pid in $ferry_pid $cargo_pid $http_pid; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    for pid in $cargo_pid $http_pid; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Can a server listen on 127.0.0.1:port? (A leftover proxy would otherwise answer in ferry's
# place.) SO_REUSEADDR as servers set it, so connections in TIME_WAIT do not count.
port_free() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
EOF
}

port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

port_free "$port" || fail "127.0.0.1:$port is already in use; stop whatever listens there first"

# The file to carry: 1 MiB of random bytes plus a name with no special characters.
mkdir -p "$work/www" "$work/out"
head -c 1048576 /dev/urandom >"$work/www/blob.bin"

# A local HTTP server on a free loopback port chosen by the kernel (port 0); it prints the port.
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$work/www" >"$work/http.log" 2>&1 &
http_pid=$!
http_port=""
for _ in $(seq 1 100); do
    http_port=$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' "$work/http.log" | head -n 1)
    [[ -n "$http_port" ]] && break
    kill -0 "$http_pid" 2>/dev/null || fail "the local HTTP server exited: $(cat "$work/http.log")"
    sleep 0.1
done
[[ -n "$http_port" ]] || fail "the local HTTP server did not report its port"

# The README's command, as written.
cargo run --release -- run >"$work/ferry.log" 2>&1 &
cargo_pid=$!
ferry_pid=$cargo_pid
for _ in $(seq 1 1200); do
    port_open "$port" && break
    kill -0 "$cargo_pid" 2>/dev/null || fail "'cargo run --release -- run' exited before listening"
    sleep 0.1
done
port_open "$port" || fail "nothing listens on 127.0.0.1:$port after 120 s"

# cargo execs the binary on Unix, so the pid is ferry itself; if a cargo ever stays as the parent,
# signal its child instead so that SIGTERM reaches the real ferry process.
exe=$(basename "$(readlink "/proc/$cargo_pid/exe" 2>/dev/null || echo unknown)")
if [[ "$exe" != ferry ]]; then
    child=$(pgrep -P "$cargo_pid" -x ferry | head -n 1 || true)
    [[ -n "$child" ]] || fail "cannot find the ferry process started by cargo (pid $cargo_pid is '$exe')"
    ferry_pid=$child
fi

# Both requests must go through the proxy: no environment proxy settings, no bypass list.
unset http_proxy https_proxy all_proxy no_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY
url="http://127.0.0.1:$http_port/blob.bin"
curl -sS --fail --max-time 30 --noproxy '' --socks5-hostname "127.0.0.1:$port" \
    -o "$work/out/socks.bin" "$url" || fail "curl through SOCKS5 127.0.0.1:$port failed"
cmp "$work/www/blob.bin" "$work/out/socks.bin" || fail "bytes through SOCKS5 differ from the file"
curl -sS --fail --max-time 30 --noproxy '' -x "http://127.0.0.1:$port" \
    -o "$work/out/http.bin" "$url" || fail "curl through the HTTP proxy 127.0.0.1:$port failed"
cmp "$work/www/blob.bin" "$work/out/http.bin" || fail "bytes through the HTTP proxy differ from the file"

# Stop ferry as a service manager would and expect a clean exit (cargo, if it stayed, passes
# ferry's exit status on).
kill -TERM "$ferry_pid"
for _ in $(seq 1 150); do
    kill -0 "$cargo_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$cargo_pid" 2>/dev/null; then
    fail "ferry still runs 15 s after SIGTERM"
fi
status=0
wait "$cargo_pid" || status=$?
cargo_pid=""
ferry_pid=""
[[ "$status" -eq 0 ]] || fail "ferry exited with status $status after SIGTERM"
port_free "$port" || fail "127.0.0.1:$port is still bound after ferry stopped"
echo "readme_run: ok (cargo run --release -- run: SOCKS5 and HTTP carried $(wc -c <"$work/www/blob.bin") bytes each, stopped by SIGTERM)"
