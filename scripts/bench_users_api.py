#!/usr/bin/env python3
"""User-add latency and memory per configured user through Xray's gRPC API, Ferry vs Xray.

For each implementation in turn (alternating, --rounds times): start it with one VLESS and one
VMess inbound that have no users, an `api` object (HandlerService, StatsService) and user
counters on; add N users to each inbound with Hiddify's client library (xtlsapi, the
AlterInbound/AddUserOperation calls a panel makes), one call at a time, timing each call; read
the process's RSS before and after; prove the last VLESS user added works and an unknown id is
refused (a VLESS request through the inbound to a local echo server); then remove every user
again, timing those calls, read RSS once more, and check the removed user is refused.

Usage: scripts/bench_users_api.py [--users N] [--rounds R] [--ferry BIN] [--xray BIN]
Run with the xtlsapi virtualenv that scripts/peers.sh installs:
  ~/.cache/ferry/peers/venv-xtlsapi/bin/python scripts/bench_users_api.py --users 10000
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from xtlsapi import XrayClient

PEERS = os.path.expanduser("~/.cache/ferry/peers/bin")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def wait_port(port, proc, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not open after {timeout}s")


def echo_server():
    """A TCP echo server on loopback; returns its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)

    def serve(c):
        with c:
            while True:
                b = c.recv(65536)
                if not b:
                    return
                c.sendall(b)

    def loop():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return srv.getsockname()[1]


def vless_echo(port, user_id, echo_port, payload=b"ferry-users-check"):
    """One VLESS request (plain TCP, command TCP, IPv4 127.0.0.1:echo_port) as user_id; the
    echoed payload, or None when the server refused."""
    req = bytes([0]) + uuid.UUID(user_id).bytes + bytes([0, 1]) + echo_port.to_bytes(2, "big")
    req += bytes([1, 127, 0, 0, 1]) + payload
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(req)
        got = b""
        while len(got) < 2 + len(payload):
            b = s.recv(65536)
            if not b:
                break
            got += b
        s.close()
    except OSError:
        return None
    if len(got) < 2:
        return None
    return got[2 + got[1]:]


def config(api_port, vl_port, vm_port):
    return {
        "log": {"loglevel": "warning"},
        "api": {"tag": "api", "listen": f"127.0.0.1:{api_port}",
                "services": ["HandlerService", "StatsService"]},
        "stats": {},
        "policy": {"levels": {"0": {"statsUserUplink": True, "statsUserDownlink": True}}},
        "inbounds": [
            {"tag": "vl", "listen": "127.0.0.1", "port": vl_port, "protocol": "vless",
             "settings": {"clients": [], "decryption": "none"}},
            {"tag": "vm", "listen": "127.0.0.1", "port": vm_port, "protocol": "vmess",
             "settings": {"clients": []}},
        ],
        "outbounds": [{"protocol": "freedom"}],
    }


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def one_round(name, argv_of, n, echo_port):
    api, vl, vm = free_port(), free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(config(api, vl, vm), f)
        proc = subprocess.Popen(argv_of(path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for p in (api, vl, vm):
                wait_port(p, proc)
            time.sleep(0.5)
            c = XrayClient("127.0.0.1", api)
            rss0 = rss_kib(proc.pid)
            ids = {tag: [str(uuid.uuid4()) for _ in range(n)] for tag in ("vl", "vm")}
            add = {"vl": [], "vm": []}
            for i in range(n):
                for tag, proto in (("vl", "vless"), ("vm", "vmess")):
                    t = time.perf_counter()
                    c.add_client(tag, ids[tag][i], f"{tag}{i}@bench", protocol=proto, level=0,
                                 alter_id=0 if proto == "vmess" else None)
                    add[tag].append(time.perf_counter() - t)
            time.sleep(1.0)
            rss1 = rss_kib(proc.pid)
            works = vless_echo(vl, ids["vl"][-1], echo_port) == b"ferry-users-check"
            refused_unknown = vless_echo(vl, str(uuid.uuid4()), echo_port) is None
            rem = []
            for i in range(n):
                for tag in ("vl", "vm"):
                    t = time.perf_counter()
                    c.remove_client(tag, f"{tag}{i}@bench")
                    rem.append(time.perf_counter() - t)
            time.sleep(1.0)
            rss2 = rss_kib(proc.pid)
            gone = vless_echo(vl, ids["vl"][-1], echo_port) is None
        finally:
            proc.kill()
            proc.wait()
    both = add["vl"] + add["vm"]
    first = add["vl"][: n // 10] + add["vm"][: n // 10]
    last = add["vl"][-(n // 10):] + add["vm"][-(n // 10):]
    return {
        "impl": name, "users": 2 * n,
        "add_p50_ms": 1000 * statistics.median(both), "add_p99_ms": 1000 * pct(both, 99),
        "add_first10pct_p50_ms": 1000 * statistics.median(first),
        "add_last10pct_p50_ms": 1000 * statistics.median(last),
        "remove_p50_ms": 1000 * statistics.median(rem),
        "rss_start_mib": rss0 / 1024, "rss_users_mib": rss1 / 1024, "rss_removed_mib": rss2 / 1024,
        "bytes_per_user": (rss1 - rss0) * 1024 / (2 * n),
        "last_user_works": works, "unknown_refused": refused_unknown, "removed_refused": gone,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=10000, help="users per inbound (two inbounds)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ferry", default="target/release/ferry")
    ap.add_argument("--xray", default=os.path.join(PEERS, "xray"))
    a = ap.parse_args()
    impls = {
        "ferry": lambda cfg: [a.ferry, "run", "-c", cfg],
        "xray": lambda cfg: [a.xray, "run", "-c", cfg],
    }
    echo_port = echo_server()
    rows = []
    for r in range(a.rounds):
        for name, argv_of in impls.items():
            row = one_round(name, argv_of, a.users, echo_port)
            row["round"] = r + 1
            rows.append(row)
            print(json.dumps(row), flush=True)
            if not (row["last_user_works"] and row["unknown_refused"] and row["removed_refused"]):
                print(f"FAIL: {name} did not serve/refuse users as expected", file=sys.stderr)
                sys.exit(1)
    print("\n| impl | users | add p50 ms | add p99 ms | add p50, first 10% / last 10% | remove p50 ms "
          "| RSS start MiB | RSS with users MiB | bytes per user | RSS after removal MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in impls:
        rs = [r for r in rows if r["impl"] == name]
        med = lambda k: statistics.median(r[k] for r in rs)
        print(f"| {name} | {rs[0]['users']} | {med('add_p50_ms'):.3f} | {med('add_p99_ms'):.3f} | "
              f"{med('add_first10pct_p50_ms'):.3f} / {med('add_last10pct_p50_ms'):.3f} | "
              f"{med('remove_p50_ms'):.3f} | {med('rss_start_mib'):.1f} | {med('rss_users_mib'):.1f} | "
              f"{med('bytes_per_user'):.0f} | {med('rss_removed_mib'):.1f} |")


if __name__ == "__main__":
    main()
