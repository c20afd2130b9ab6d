#!/usr/bin/env python3
"""What traffic counters cost, counted rather than timed: runs ferry's dokodemo-door -> freedom
relay under `valgrind --tool=callgrind`, pushes the same bytes through it with stats off and on,
and prints Ferry's user-space instruction totals (deterministic, unlike wall-clock throughput on
a shared machine). Usage: scripts/stats_cost.py [MB] [FERRY_BINARY]
"""
import json, os, signal, socket, subprocess, sys, tempfile, threading, time

MB = int(sys.argv[1]) if len(sys.argv) > 1 else 200
FERRY = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target/release/ferry")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def run(stats, d):
    sink = socket.socket(); sink.bind(("127.0.0.1", 0)); sink.listen(8)
    got = []
    def drain():
        c, _ = sink.accept(); n = 0
        while True:
            b = c.recv(1 << 20)
            if not b: break
            n += len(b)
        got.append(n); c.close()
    t = threading.Thread(target=drain); t.start()
    port = free_port()
    cfg = {"log": {"loglevel": "error", "access": "none"},
           "inbounds": [{"tag": "in", "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
                         "settings": {"address": "127.0.0.1", "port": sink.getsockname()[1]}}],
           "outbounds": [{"tag": "out", "protocol": "freedom"}]}
    if stats:
        cfg["stats"] = {}
        cfg["policy"] = {"system": {k: True for k in ("statsInboundUplink", "statsInboundDownlink",
                                                      "statsOutboundUplink", "statsOutboundDownlink")}}
    path = os.path.join(d, f"cfg-{stats}.json"); json.dump(cfg, open(path, "w"))
    out = os.path.join(d, f"callgrind-{stats}.out")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", FERRY, "run",
                          "-c", path, "--grace", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            c = socket.create_connection(("127.0.0.1", port)); break
        except OSError:
            time.sleep(0.1)
    block = os.urandom(1 << 20)
    for _ in range(MB):
        c.sendall(block)
    c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
    t.join(60)
    p.send_signal(signal.SIGTERM); p.wait(120)
    assert got == [MB << 20], f"sink got {got}, sent {MB << 20}"
    for line in open(out):
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit("no callgrind totals")


with tempfile.TemporaryDirectory() as d:
    off, on = run(False, d), run(True, d)
print(f"| stats | Ferry user-space instructions for {MB} MB | per MB |")
print("|---|---:|---:|")
print(f"| off | {off:,} | {off // MB:,} |")
print(f"| on (inbound+outbound, up+down) | {on:,} | {on // MB:,} |")
print(f"\nstats on costs {on - off:+,} instructions ({(on - off) / off * 100:+.2f}% of Ferry's user-space work)")
