#!/usr/bin/env python3
"""Idle-connection memory: holds N idle connections through a dokodemo-door -> freedom relay and
reports the proxy's RSS growth per connection. Usage: scripts/bench_idle.py N PROXY_BINARY
(the binary must accept `run -c FILE` with an Xray-style config: ferry or xray)."""
import socket, subprocess, sys, time, json, os, resource
h=resource.getrlimit(resource.RLIMIT_NOFILE)[1]; resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))
CFG=f"/tmp/bench-idle-{os.getpid()}.json"
N=int(sys.argv[1]); binary=sys.argv[2]
srv=socket.socket(); srv.bind(("127.0.0.1",0)); srv.listen(4096); tport=srv.getsockname()[1]
s=socket.socket(); s.bind(("127.0.0.1",0)); port=s.getsockname()[1]; s.close()
cfg={"inbounds":[{"listen":"127.0.0.1","port":port,"protocol":"dokodemo-door","settings":{"address":"127.0.0.1","port":tport}}],"outbounds":[{"protocol":"freedom"}],"log":{"loglevel":"error","access":"none"}}
open(CFG,"w").write(json.dumps(cfg))
p=subprocess.Popen([binary,"run","-c",CFG],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
time.sleep(1)
def rss(): 
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
r0=rss(); cs=[]; ss=[]
for i in range(N):
    c=socket.create_connection(("127.0.0.1",port)); c.send(b"x"); cs.append(c)
    a,_=srv.accept(); ss.append(a)
time.sleep(1)
r1=rss()
print(f"{os.path.basename(binary)}: rss before {r0} KB, after {N}: {r1} KB, per conn {(r1-r0)*1024/N:.0f} B")
p.kill()
