"""Drives Ferry's API with Hiddify's client library (xtlsapi 3.3.0, grpcio) as hiddifypanel
does: users added and removed per protocol, traffic counters read and reset, Xray's error
texts turned into xtlsapi's exceptions; then 1,000 users added and removed while another
user's transfer runs. Exits non-zero (with the reason) on any mismatch.

Usage: xtlsapi_check.py API_PORT PORTS_JSON   (PORTS_JSON: {"vm": port, "vl": ..., "tr": ..., "ss": ...},
the Ferry client's entry port per server inbound)"""

import json
import socket
import sys
import threading
import time
import uuid

from xtlsapi import XrayClient, exceptions

API = int(sys.argv[1])
PORTS = json.loads(sys.argv[2])
IDS = {"vm": "6fd4b5a2-0c3e-4a8e-9d6c-1b2a3c4d5e6f", "vl": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
       "tr": "trojan-pw", "ss": "ss-pw"}
PROTO = {"vm": "vmess", "vl": "vless", "tr": "trojan", "ss": "shadowsocks"}


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def echo(port, data, timeout=5.0):
    """Sends data through the client port and reads the same length back; None on failure."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            b = s.recv(65536)
            if not b:
                break
            got += b
        s.close()
        return got
    except OSError:
        return None


c = XrayClient("127.0.0.1", API)
for tag, p in PROTO.items():
    if p == "trojan":
        # xtlsapi 3.3.0's add_client sets a `flow` its own Trojan Account lacks (a ValueError
        # before any call): send the same AlterInbound with its generated messages instead.
        from xtlsapi.ext import utils
        from xtlsapi.xray_api.app.proxyman.command import command_pb2
        from xtlsapi.xray_api.common.protocol import user_pb2
        from xtlsapi.xray_api.proxy.trojan import config_pb2
        account = utils.to_typed_message(config_pb2.Account(password=IDS[tag]))
        op = command_pb2.AddUserOperation(user=user_pb2.User(email=f"{tag}@x", level=0, account=account))
        c.handler_stub.AlterInbound(command_pb2.AlterInboundRequest(tag=tag, operation=utils.to_typed_message(op)))
        continue
    extra = {"cipher": "aes_128_gcm"} if p == "shadowsocks" else {}
    c.add_client(tag, IDS[tag], f"{tag}@x", protocol=p, level=0, **extra)
try:
    c.add_client("vl", str(uuid.uuid4()), "VL@x", protocol="vless", level=0)
    fail("a duplicate email was accepted")
except exceptions.EmailAlreadyExists:
    pass
try:
    c.add_client("nope", IDS["vl"], "x@x", protocol="vless", level=0)
    fail("an unknown inbound was accepted")
except exceptions.InboundNotFound:
    pass

data = bytes((i * 7 + 3) % 251 for i in range(50_000))
for tag in PROTO:
    if echo(PORTS[tag], data) != data:
        fail(f"no echo through {tag}")
for tag in PROTO:
    up = c.get_client_upload_traffic(f"{tag}@x")
    down = c.get_client_download_traffic(f"{tag}@x", reset=True)
    if (up, down) != (50_000, 50_000):
        fail(f"{tag}: counters {up}/{down}, want 50000/50000")
    if c.get_client_download_traffic(f"{tag}@x") != 0:
        fail(f"{tag}: reset did not zero the counter")
# What hiddifypanel does: discover inbound tags from the counters, read users with reset.
tags = {s.name.split(">>>")[1] for s in c.stats_query("inbound")}
if not {"vm", "vl", "tr", "ss"} <= tags:
    fail(f"inbound counters missing: {tags}")
ups = {s.name: s.value for s in c.stats_query("user", reset=True) if s.name.endswith("uplink")}
if ups.get("user>>>vm@x>>>traffic>>>uplink") != 50_000:
    fail(f"stats_query: {ups}")

c.remove_client("vm", "vm@x")
try:
    c.remove_client("vm", "vm@x")
    fail("removing a missing user succeeded")
except exceptions.EmailNotFound:
    pass
if echo(PORTS["vm"], data, timeout=2.0) == data:
    fail("a removed user still gets through")

# 1,000 users come and go on the VLESS inbound while vl@x transfers.
total = 8 * 1024 * 1024
payload = bytes((i * 13 + 1) % 256 for i in range(total))
result = {}


def long_transfer():
    s = socket.create_connection(("127.0.0.1", PORTS["vl"]), timeout=30)
    got = bytearray()

    def reader():
        while len(got) < total:
            b = s.recv(65536)
            if not b:
                break
            got.extend(b)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(0, total, 64 * 1024):
        s.sendall(payload[i:i + 64 * 1024])
        time.sleep(0.002)
    t.join(60)
    s.close()
    result["ok"] = bytes(got) == payload
    result["len"] = len(got)


c.get_client_upload_traffic("vl@x", reset=True)
c.get_client_download_traffic("vl@x", reset=True)
t = threading.Thread(target=long_transfer)
t.start()
start = time.time()
emails = [f"churn{i}@x" for i in range(1000)]
for e in emails:
    c.add_client("vl", str(uuid.uuid4()), e, protocol="vless", level=0)
added = time.time() - start
for e in emails:
    c.remove_client("vl", e)
t.join(120)
if not result.get("ok"):
    fail(f"the running transfer broke during the churn: {result}")
up = c.get_client_upload_traffic("vl@x")
down = c.get_client_download_traffic("vl@x")
if (up, down) != (total, total):
    fail(f"vl@x counters after the churn: {up}/{down}, want {total}")
print(f"OK: 1000 users added in {added:.2f}s, removed in {time.time() - start - added:.2f}s", flush=True)
