#!/usr/bin/env python3
"""What traffic counters cost, counted rather than timed: runs a Ferry server under
`valgrind --tool=callgrind`, pushes the same bytes through it with stats off and on, and prints
Ferry's user-space instruction totals (deterministic, unlike wall-clock throughput on a shared
machine).

Modes:
  relay      dokodemo-door -> freedom (spliced); counters: inbound and outbound, up and down
  vless-tls  a VLESS+TLS inbound (TLS 1.3, Ferry's record layer) -> freedom, one user with an
             email; counters: the user's, the inbound's and the outbound's, up and down

Usage: scripts/stats_cost.py [MB] [FERRY_BINARY] [--mode relay|vless-tls] [--rounds N]
"""
import argparse, json, os, signal, socket, ssl, subprocess, tempfile, threading, time, uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER = "5783a3e7-e373-51cd-8642-c83782b807c5"


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def connect_client(mode, port, sink_port, cert_dir):
    """A connection through the server to the sink: plain for the relay, VLESS over TLS 1.3
    (a VLESS request for 127.0.0.1:sink_port as USER) otherwise."""
    for _ in range(600):
        try:
            c = socket.create_connection(("127.0.0.1", port)); break
        except OSError:
            time.sleep(0.1)
    if mode == "relay":
        return c
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    s = ctx.wrap_socket(c, server_hostname="stats.test")
    req = bytes([0]) + uuid.UUID(USER).bytes + bytes([0, 1]) + sink_port.to_bytes(2, "big")
    s.sendall(req + bytes([1, 127, 0, 0, 1]))
    return s


def config(mode, stats, port, sink_port, cert_dir):
    if mode == "relay":
        inbound = {"tag": "in", "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
                   "settings": {"address": "127.0.0.1", "port": sink_port}}
    else:
        inbound = {"tag": "in", "listen": "127.0.0.1", "port": port, "protocol": "vless",
                   "settings": {"clients": [{"id": USER, "email": "user@stats", "level": 0}],
                                "decryption": "none"},
                   "streamSettings": {"network": "tcp", "security": "tls", "tlsSettings": {
                       "certificates": [{"certificateFile": os.path.join(cert_dir, "srv.crt"),
                                         "keyFile": os.path.join(cert_dir, "srv.key")}]}}}
    cfg = {"log": {"loglevel": "error", "access": "none"}, "inbounds": [inbound],
           "outbounds": [{"tag": "out", "protocol": "freedom"}]}
    if stats:
        cfg["stats"] = {}
        cfg["policy"] = {"system": {k: True for k in ("statsInboundUplink", "statsInboundDownlink",
                                                      "statsOutboundUplink", "statsOutboundDownlink")}}
        if mode != "relay":
            cfg["policy"]["levels"] = {"0": {"statsUserUplink": True, "statsUserDownlink": True}}
    return cfg


def run(mode, stats, d, mb, ferry):
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
    path = os.path.join(d, f"cfg-{stats}.json")
    json.dump(config(mode, stats, port, sink.getsockname()[1], d), open(path, "w"))
    out = os.path.join(d, f"callgrind-{stats}.out")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", ferry, "run",
                          "-c", path, "--grace", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = connect_client(mode, port, sink.getsockname()[1], d)
    block = os.urandom(1 << 20)
    for _ in range(mb):
        c.sendall(block)
    if mode == "relay":
        c.shutdown(socket.SHUT_WR); c.recv(1)
    else:
        # close_notify ends the upload; Ferry answers with its own once the sink has closed.
        c.settimeout(60)
        try:
            c.unwrap()
        except (ssl.SSLError, OSError):
            pass
    c.close()
    t.join(60)
    p.send_signal(signal.SIGTERM); p.wait(120)
    assert got == [mb << 20], f"sink got {got}, sent {mb << 20}"
    for line in open(out):
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit("no callgrind totals")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mb", nargs="?", type=int, default=200)
    ap.add_argument("ferry", nargs="?", default=os.path.join(ROOT, "target/release/ferry"))
    ap.add_argument("--mode", choices=["relay", "vless-tls"], default="relay")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        if a.mode == "vless-tls":
            subprocess.run([a.ferry, "tls", "cert", "--domain", "stats.test", "--file",
                            os.path.join(d, "srv")], check=True, capture_output=True)
        for _ in range(a.rounds):
            rows.append((run(a.mode, False, d, a.mb, a.ferry), run(a.mode, True, d, a.mb, a.ferry)))
    print(f"| mode | round | stats off | stats on | on vs off |")
    print("|---|---:|---:|---:|---:|")
    for i, (off, on) in enumerate(rows):
        print(f"| {a.mode} | {i + 1} | {off:,} | {on:,} | {(on - off) / off * 100:+.2f}% |")
    print(f"\nFerry's user-space instructions for {a.mb} MB; the difference is what the counters cost")


if __name__ == "__main__":
    main()
