#!/usr/bin/env bash
# Installs Ferry as a service, where Xray's installer puts Xray (with ferry in place of xray):
#   PREFIX/bin/ferry                      the binary, debug info stripped (85 MB -> about 16 MB)
#   PREFIX/etc/ferry/config.json          the config (kept if present; `{}` otherwise)
#   PREFIX/share/ferry/                   geoip.dat / geosite.dat (Ferry downloads none)
#   PREFIX/share/doc/ferry/README.md      this README
#   /etc/systemd/system/ferry.service     the service (and ferry@NAME.service for etc/ferry/NAME.json)
# then enables and starts ferry.service when systemd runs (not with --root or --no-start).
#
# Usage: scripts/install.sh [--binary PATH] [--prefix DIR] [--root DIR] [--as-xray] [--no-start]
#        scripts/install.sh --uninstall [--prefix DIR] [--root DIR]
#   --binary   the ferry binary to install (default: target/release/ferry, built if missing)
#   --prefix   default /usr/local
#   --root     install into this directory as if it were / (packaging, tests); starts nothing
#   --as-xray  also PREFIX/bin/xray -> ferry, for panels that run /usr/local/bin/xray
#   --no-start install and enable nothing in systemd
#   --uninstall removes the binary, the units and the xray link; keeps configs and assets
set -euo pipefail
cd "$(dirname "$0")/.."

binary=target/release/ferry
prefix=/usr/local
root=""
as_xray=0
start=1
uninstall=0
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --root) root="${2%/}"; start=0; shift 2 ;;
    --as-xray) as_xray=1; shift ;;
    --no-start) start=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install.sh: --prefix must be an absolute path" >&2; exit 2 ;; esac

bin_dir="$root$prefix/bin"
etc_dir="$root$prefix/etc/ferry"
share_dir="$root$prefix/share/ferry"
doc_dir="$root$prefix/share/doc/ferry"
unit_dir="$root/etc/systemd/system"
have_systemd() { [ -z "$root" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }
log() { printf '[install] %s\n' "$*"; }

if [ "$uninstall" = 1 ]; then
  if have_systemd; then systemctl disable --now ferry.service 2>/dev/null || true; fi
  rm -f "$bin_dir/ferry" "$unit_dir/ferry.service" "$unit_dir/ferry@.service"
  if [ -L "$bin_dir/xray" ] && [ "$(readlink "$bin_dir/xray")" = ferry ]; then rm -f "$bin_dir/xray"; fi
  if have_systemd; then systemctl daemon-reload; fi
  log "removed ferry from $root$prefix (configs in $etc_dir and assets in $share_dir kept)"
  exit 0
fi

if [ ! -x "$binary" ]; then
  [ "$binary" = target/release/ferry ] || { echo "install.sh: $binary is not an executable" >&2; exit 2; }
  log "building target/release/ferry (cargo build --release)"
  cargo build --release -p ferry --bin ferry
fi
"$binary" version >/dev/null

install -d -m 755 "$bin_dir" "$share_dir" "$doc_dir" "$unit_dir"
install -d -m 750 "$etc_dir"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# Debug info is what makes the release binary large; the code is the same.
objcopy --strip-debug "$binary" "$tmp"
install -m 755 "$tmp" "$bin_dir/ferry"
log "installed $bin_dir/ferry ($(du -h "$bin_dir/ferry" | cut -f1), from $(du -h "$binary" | cut -f1))"
if [ "$as_xray" = 1 ]; then
  ln -sfn ferry "$bin_dir/xray"
  log "linked $bin_dir/xray -> ferry"
fi
if [ ! -e "$etc_dir/config.json" ]; then
  echo '{}' > "$etc_dir/config.json"
  log "wrote an empty $etc_dir/config.json (put your config there; examples/ has some)"
else
  log "kept $etc_dir/config.json"
fi
# The service runs as nobody (and its group); configs hold keys, so they are not world-readable.
if group=$(id -gn nobody 2>/dev/null) && [ "$(id -u)" = 0 ]; then
  chgrp "$group" "$etc_dir" "$etc_dir/config.json"
fi
chmod 640 "$etc_dir/config.json"
install -m 644 README.md "$doc_dir/README.md"
for u in ferry.service ferry@.service; do
  sed "s|@PREFIX@|$prefix|g" "dist/systemd/$u" > "$unit_dir/$u"
  chmod 644 "$unit_dir/$u"
done
log "installed $unit_dir/ferry.service and ferry@.service"

if [ "$start" = 1 ] && have_systemd; then
  systemctl daemon-reload
  systemctl enable --now ferry.service
  log "ferry.service enabled and started (systemctl status ferry; journalctl -u ferry)"
else
  log "not started: systemctl daemon-reload && systemctl enable --now ferry"
fi
