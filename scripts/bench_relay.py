#!/usr/bin/env python3
"""Relay benchmark: dokodemo-door -> freedom on loopback with iperf3, Ferry vs its peers in one run.

For each implementation (and stats off/on where the implementation has stats), starts the proxy
forwarding a loopback port to an iperf3 server, runs iperf3 through it with 1 and 4 streams in
both directions, and reads the proxy's CPU time (utime+stime from /proc/PID/stat) around each
run. Prints a Markdown table: Gbit/s and proxy CPU-seconds per GB moved.

Usage: scripts/bench_relay.py [--seconds 10] [--impl ferry,ferry-stats,xray,xray-stats,sing-box]
                              [--streams 1,4] [--reverse both|no|only]
"""
import argparse, json, os, socket, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.environ.get("FERRY_PEERS") or os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ferry/peers/bin")
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_port(port, proc, limit=20):
    t = time.time()
    while time.time() - t < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close(); return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never listened")


def xray_config(port, target, stats):
    cfg = {"log": {"loglevel": "error", "access": "none"},
           "inbounds": [{"tag": "in", "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
                         "settings": {"address": "127.0.0.1", "port": target, "network": "tcp"}}],
           "outbounds": [{"tag": "direct", "protocol": "freedom"}]}
    if stats:
        cfg["stats"] = {}
        cfg["policy"] = {"system": {k: True for k in ("statsInboundUplink", "statsInboundDownlink",
                                                      "statsOutboundUplink", "statsOutboundDownlink")}}
    return cfg


def command(impl, port, target, d):
    stats = impl.endswith("-stats")
    name = impl.replace("-stats", "")
    path = os.path.join(d, f"{impl}.json")
    if name in ("ferry", "xray"):
        cfg = xray_config(port, target, stats)
        bin_ = os.path.join(ROOT, "target/release/ferry") if name == "ferry" else os.path.join(PEERS, "xray")
        args = [bin_, "run", "-c", path]
    elif name == "sing-box":
        cfg = {"log": {"level": "error"},
               "inbounds": [{"type": "direct", "listen": "127.0.0.1", "listen_port": port,
                             "override_address": "127.0.0.1", "override_port": target}],
               "outbounds": [{"type": "direct"}]}
        args = [os.path.join(PEERS, "sing-box"), "run", "-c", path]
    else:
        raise SystemExit(f"unknown implementation {impl}")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return args


def iperf(port, streams, seconds, reverse):
    args = [os.path.join(PEERS, "iperf3"), "-c", "127.0.0.1", "-p", str(port), "-P", str(streams),
            "-t", str(seconds), "-J", "-O", "1"]
    if reverse:
        args.append("-R")
    out = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60)
    j = json.loads(out.stdout)
    if "error" in j:
        raise RuntimeError(j["error"])
    end = j["end"]
    recv = end["sum_received"]
    return recv["bytes"], recv["seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--impl", default="ferry,ferry-stats,xray,xray-stats,sing-box")
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--reverse", default="both", choices=["both", "no", "only"])
    a = ap.parse_args()
    dirs = {"both": [False, True], "no": [False], "only": [True]}[a.reverse]
    iport = free_port()
    server = subprocess.Popen([os.path.join(PEERS, "iperf3"), "-s", "-p", str(iport)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        wait_port(iport, server)
        # Baseline: iperf3 straight over loopback.
        for streams in map(int, a.streams.split(",")):
            for rev in dirs:
                b, s = iperf(iport, streams, a.seconds, rev)
                rows.append(("loopback (no proxy)", streams, rev, b * 8 / s / 1e9, None))
                print(rows[-1], file=sys.stderr)
        with tempfile.TemporaryDirectory() as d:
            for impl in a.impl.split(","):
                port = free_port()
                p = subprocess.Popen(command(impl, port, iport, d), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
                try:
                    wait_port(port, p)
                    for streams in map(int, a.streams.split(",")):
                        for rev in dirs:
                            c0 = cpu_seconds(p.pid)
                            b, s = iperf(port, streams, a.seconds, rev)
                            c1 = cpu_seconds(p.pid)
                            rows.append((impl, streams, rev, b * 8 / s / 1e9, (c1 - c0) / (b / 1e9)))
                            print(rows[-1], file=sys.stderr)
                finally:
                    p.terminate(); p.wait(10)
    finally:
        server.terminate(); server.wait(10)
    print(f"| implementation | streams | direction | Gbit/s | proxy CPU-s/GB |")
    print(f"|---|---|---|---|---|")
    for impl, streams, rev, gbps, cpg in rows:
        cpu = "-" if cpg is None else f"{cpg:.2f}"
        print(f"| {impl} | {streams} | {'server->client' if rev else 'client->server'} | {gbps:.2f} | {cpu} |")


if __name__ == "__main__":
    main()
