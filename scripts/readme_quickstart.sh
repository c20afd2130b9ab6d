#!/usr/bin/env bash
# A newcomer's run of the README's "VLESS + REALITY + Vision server and its client in five
# minutes", on one machine: new keys from `ferry x25519`, `ferry uuid` and `openssl rand -hex 8`
# put into copies of the two example files, `ferry test` on both, `ferry run` on both, a file
# carried through the client's SOCKS5 and HTTP sides (curl, as the README does), the server's
# access line with the user's email, and what a stranger sees: the target's own certificate.
# What cannot be reached here stands in locally: the server listens on 127.0.0.1, the REALITY
# target is an nginx TLS site for www.microsoft.com on loopback, and the page fetched is a
# loopback web server, which the server's freedom outbound is allowed to reach with a
# `finalRules` allow (a server refuses its own loopback to proxy users otherwise).
# Any step that fails exits non-zero with a reason.
#
# Usage: scripts/readme_quickstart.sh [FERRY_BINARY]   (default target/release/ferry, built if
# missing); nginx from $FERRY_PEERS (scripts/peers.sh) or the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

ferry=${1:-target/release/ferry}
[[ -x "$ferry" ]] || cargo build --release -p ferry --bin ferry
ferry=$(realpath "$ferry")
peers=${FERRY_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry/peers/bin}
nginx=$(PATH="$peers:$PATH" command -v nginx || true)
[[ -n "$nginx" ]] || { echo "readme_quickstart: FAIL: no nginx (run scripts/peers.sh)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
fail() {
    echo "readme_quickstart: FAIL: $*" >&2
    for f in server.log client.log nginx/error.log; do
        if [[ -s "$work/$f" ]]; then echo "--- $f" >&2; tail -n 30 "$work/$f" >&2; fi
    done
    exit 1
}
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
    local i
    for i in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    fail "nothing listens on 127.0.0.1:$1 ($2)"
}

# 1. Keys, as the README makes them.
keys=$("$ferry" x25519)
private=$(sed -n 's/^PrivateKey: //p' <<<"$keys")
public=$(sed -n 's/^Password (PublicKey): //p' <<<"$keys")
uuid=$("$ferry" uuid)
short=$(openssl rand -hex 8)
[[ ${#private} -eq 43 && ${#public} -eq 43 ]] || fail "ferry x25519 printed no key pair: $keys"
[[ $uuid =~ ^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$ ]] || fail "ferry uuid printed $uuid"

# What stands in for the internet: the target site and a web page.
site=$(free_port)
mkdir -p "$work/nginx" "$work/www"
"$ferry" tls cert --domain www.microsoft.com --file "$work/site" >/dev/null 2>&1
cat >"$work/nginx/nginx.conf" <<EOF
user root;
master_process off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log info;
events { worker_connections 64; }
http {
    access_log $work/nginx/access.log;
    client_body_temp_path $work/nginx/t-body;
    proxy_temp_path $work/nginx/t-proxy;
    fastcgi_temp_path $work/nginx/t-fastcgi;
    uwsgi_temp_path $work/nginx/t-uwsgi;
    scgi_temp_path $work/nginx/t-scgi;
    server {
        listen 127.0.0.1:$site ssl;
        server_name www.microsoft.com;
        ssl_certificate $work/site.crt;
        ssl_certificate_key $work/site.key;
        ssl_protocols TLSv1.3;
        location / { return 200 "the target site\n"; }
    }
}
EOF
"$nginx" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' 2>>"$work/nginx/error.log" &
pids+=($!)
head -c 1048576 /dev/urandom >"$work/www/file.bin"
web=$(free_port)
python3 -m http.server "$web" --bind 127.0.0.1 --directory "$work/www" >/dev/null 2>&1 &
pids+=($!)

# 2. and 3. The two example files with the new keys (the README's edits), on local ports.
server_port=$(free_port)
socks_port=$(free_port)
python3 - "$work" "$private" "$public" "$uuid" "$short" "$site" "$server_port" "$socks_port" <<'EOF'
import json, sys
work, private, public, uuid, short, site, sport, cport = sys.argv[1:]
def example(name):
    text = open(f"examples/{name}").read()
    return json.loads("\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//")))
s = example("vless-reality-vision-server.json")
i = s["inbounds"][0]
i["listen"], i["port"] = "127.0.0.1", int(sport)
i["settings"]["clients"][0]["id"] = uuid
r = i["streamSettings"]["realitySettings"]
r["privateKey"], r["shortIds"], r["target"] = private, [short], f"127.0.0.1:{site}"
for o in s["outbounds"]:
    if o["protocol"] == "freedom":
        o["settings"] = {"finalRules": [{"action": "allow", "ip": ["127.0.0.0/8"]}]}
json.dump(s, open(f"{work}/server.json", "w"), indent=2)
c = example("vless-reality-vision-client.json")
c["inbounds"][0]["port"] = int(cport)
v = c["outbounds"][0]["settings"]["vnext"][0]
v["address"], v["port"], v["users"][0]["id"] = "127.0.0.1", int(sport), uuid
r = c["outbounds"][0]["streamSettings"]["realitySettings"]
r["publicKey"], r["shortId"] = public, short
json.dump(c, open(f"{work}/client.json", "w"), indent=2)
EOF
for side in server client; do
    out=$("$ferry" test -c "$work/$side.json" 2>&1) || fail "ferry test refuses the $side: $out"
    grep -q "Configuration OK" <<<"$out" || fail "ferry test on the $side: $out"
done
"$ferry" run -c "$work/server.json" >"$work/server.log" 2>&1 &
pids+=($!)
"$ferry" run -c "$work/client.json" >"$work/client.log" 2>&1 &
pids+=($!)
wait_port "$site" nginx
wait_port "$web" "the web server"
wait_port "$server_port" "the server"
wait_port "$socks_port" "the client"

# The file through the client's SOCKS5 side and its HTTP side, byte for byte.
url="http://127.0.0.1:$web/file.bin"
curl -sS --max-time 20 --socks5-hostname "127.0.0.1:$socks_port" -o "$work/socks.bin" "$url" \
    || fail "curl through SOCKS5"
cmp -s "$work/www/file.bin" "$work/socks.bin" || fail "the file through SOCKS5 differs"
curl -sS --max-time 20 -x "http://127.0.0.1:$socks_port" -o "$work/http.bin" "$url" \
    || fail "curl through HTTP"
cmp -s "$work/www/file.bin" "$work/http.bin" || fail "the file through HTTP differs"
sleep 0.2
grep -q "accepted tcp:127.0.0.1:$web \[vless-reality-in >> direct\] email: alice@example.com" \
    "$work/server.log" || fail "no access line for alice@example.com in the server's log"

# 4. What a stranger sees: the target's own certificate, and the target's page.
fp() { openssl x509 -noout -fingerprint -sha256; }
want=$(fp <"$work/site.crt")
got=$(openssl s_client -connect "127.0.0.1:$server_port" -servername www.microsoft.com \
    </dev/null 2>/dev/null | fp) || fail "no certificate from the server's port"
[[ "$got" == "$want" ]] || fail "a stranger sees $got, not the target's $want"
page=$(curl -sS --max-time 10 -k --resolve "www.microsoft.com:$server_port:127.0.0.1" \
    "https://www.microsoft.com:$server_port/") || fail "a stranger's request got no page"
[[ "$page" == "the target site" ]] || fail "a stranger's request got $page"
echo "readme_quickstart: ok (keys made, both configs tested, 1 MiB through SOCKS5 and HTTP, a stranger sees the target)"
