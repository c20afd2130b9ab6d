#!/usr/bin/env python3
"""Counts hijacked DNS queries over TCP that a dns outbound leaves unanswered.

Usage: scripts/dns_tcp_hijack.py PORT [PORT...]
Each PORT is a dokodemo-door (tcp) routed to a `dns` outbound whose `dns` object has a
`fakedns` server, for example:

  {"dns": {"servers": ["fakedns"]}, "fakedns": {"ipPool": "198.18.0.0/16", "poolSize": 1000},
   "inbounds": [{"tag": "dns-in", "listen": "127.0.0.1", "port": PORT, "protocol": "dokodemo-door",
                 "settings": {"address": "127.0.0.1", "port": 53, "network": "tcp,udp"}}],
   "outbounds": [{"protocol": "freedom"}, {"protocol": "dns", "tag": "dns-out"}],
   "routing": {"rules": [{"type": "field", "inboundTag": ["dns-in"], "outboundTag": "dns-out"}]}}

8 threads x 40 connections x 5 queries (A and AAAA alternating), 3 s wait per answer.
"""
import socket
import struct
import sys
import threading


def query(qid, name, qtype):
    m = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        m += bytes([len(label)]) + label.encode()
    return m + b"\0" + struct.pack(">HH", qtype, 1)


def run(port, fails, short):
    for i in range(40):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(3)
        for j, t in enumerate([1, 28, 1, 28, 1]):
            m = query(100 + j, "fake%d.test" % (i % 5), t)
            s.sendall(struct.pack(">H", len(m)) + m)
            try:
                n = struct.unpack(">H", s.recv(2, socket.MSG_WAITALL))[0]
                s.recv(n, socket.MSG_WAITALL)
                if n < 12:
                    short.append((i, j))
            except (OSError, struct.error) as e:
                fails.append((i, j, t, str(e)))
                break
        s.close()


for port in map(int, sys.argv[1:]):
    fails, short = [], []
    ts = [threading.Thread(target=run, args=(port, fails, short)) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"port {port}: 1600 queries, unanswered {len(fails)}, shorter than a header {len(short)}")
