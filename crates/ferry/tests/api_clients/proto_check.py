"""Compiles Ferry's own proto/ files (grpcio-tools) and drives the API with the messages they
define, in the current layouts (ReceiverConfig since v25.10.15, VLESS inbound since v25.9.5):
an inbound with TLS and a user is added, its user read back, GetUsersStats and TestRoute
answered. Shows that the .proto files and the hand-written prost structs agree.

Usage: proto_check.py PROTO_DIR OUT_DIR API_PORT TLS_PORT CERT_FILE KEY_FILE"""

import glob
import os
import socket
import ssl
import sys
import time

from grpc_tools import protoc

PROTO, OUT, API, PORT, CERT, KEY = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
files = [os.path.relpath(p, PROTO) for p in glob.glob(os.path.join(PROTO, "**/*.proto"), recursive=True)]
desc = os.path.join(OUT, "ferry.desc")
if protoc.main(["protoc", f"-I{PROTO}", f"--descriptor_set_out={desc}", "--include_imports"] + files) != 0:
    print("FAIL: proto/ does not compile", flush=True)
    sys.exit(1)

import grpc  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

pool = descriptor_pool.DescriptorPool()
fds = descriptor_pb2.FileDescriptorSet.FromString(open(desc, "rb").read())
for f in fds.file:
    pool.Add(f)


class Pkg:
    """Message classes of one proto package, by short name."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, short):
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{self.name}.{short}"))


core_pb2 = Pkg("xray.core")
proxyman_pb2 = Pkg("xray.app.proxyman")
command_pb2 = Pkg("xray.app.proxyman.command")
router_pb2 = Pkg("xray.app.router.command")
stats_pb2 = Pkg("xray.app.stats.command")
net_pb2 = Pkg("xray.common.net")
protocol_pb2 = Pkg("xray.common.protocol")
serial_pb2 = Pkg("xray.common.serial")
vless_pb2 = Pkg("xray.proxy.vless")
inbound_pb2 = Pkg("xray.proxy.vless.inbound")
internet_pb2 = Pkg("xray.transport.internet")
tls_pb2 = Pkg("xray.transport.internet.tls")


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def typed(m):
    return serial_pb2.TypedMessage(type=m.DESCRIPTOR.full_name, value=m.SerializeToString())


ch = grpc.insecure_channel(f"127.0.0.1:{API}")


def call(path, req, resp):
    f = ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=resp.FromString)
    return f(req, timeout=5)


user = protocol_pb2.User(email="p@x", level=0, account=typed(vless_pb2.Account(id="5f1c2a4e-0000-4000-8000-00000000000a")))
tls = tls_pb2.Config(certificate=[tls_pb2.Certificate(certificate=open(CERT, "rb").read(), key=open(KEY, "rb").read())])
stream = internet_pb2.StreamConfig(protocol_name="tcp", security_type="xray.transport.internet.tls.Config",
                                   security_settings=[typed(tls)])
receiver = proxyman_pb2.ReceiverConfig(port_list=net_pb2.PortList(range=[net_pb2.PortRange(From=PORT, To=PORT)]),
                                       listen=net_pb2.IPOrDomain(ip=bytes([127, 0, 0, 1])), stream_settings=stream)
inbound = core_pb2.InboundHandlerConfig(tag="new-tls", receiver_settings=typed(receiver), proxy_settings=typed(
    inbound_pb2.Config(users=[user], decryption="none", fallbacks=[inbound_pb2.Fallback(dest="127.0.0.1:9")])))
call("/xray.app.proxyman.command.HandlerService/AddInbound", command_pb2.AddInboundRequest(inbound=inbound),
     command_pb2.AddInboundResponse)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
for _ in range(50):
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=3) as s, ctx.wrap_socket(s) as t:
            if t.version() is None:
                fail("no TLS")
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
else:
    fail("the inbound never listened")
users = call("/xray.app.proxyman.command.HandlerService/GetInboundUsers",
             command_pb2.GetInboundUserRequest(tag="new-tls"), command_pb2.GetInboundUserResponse).users
acc = vless_pb2.Account.FromString(users[0].account.value) if users else None
if len(users) != 1 or users[0].email != "p@x" or acc.id != "5f1c2a4e-0000-4000-8000-00000000000a":
    fail(f"GetInboundUsers: {users}")
# Nobody is online: GetUsersStats answers with no users (3x-ui polls it every 5 s).
r = call("/xray.app.stats.command.StatsService/GetUsersStats", stats_pb2.GetUsersStatsRequest(include_traffic=True),
         stats_pb2.GetUsersStatsResponse)
if list(r.users):
    fail(f"GetUsersStats: {r}")
# TestRoute: the API inbound's rule; no rule for another inbound is Xray's "not enough information".
ctx_api = router_pb2.RoutingContext(InboundTag="api-in", TargetDomain="example.com", TargetPort=443)
r = call("/xray.app.router.command.RoutingService/TestRoute", router_pb2.TestRouteRequest(RoutingContext=ctx_api),
         router_pb2.RoutingContext)
if r.OutboundTag != "api":
    fail(f"TestRoute: {r}")
try:
    call("/xray.app.router.command.RoutingService/TestRoute",
         router_pb2.TestRouteRequest(RoutingContext=router_pb2.RoutingContext(InboundTag="vm", TargetPort=80)),
         router_pb2.RoutingContext)
    fail("TestRoute without a matching rule succeeded")
except grpc.RpcError as e:
    if "not enough information for making a decision" not in e.details():
        fail(f"TestRoute without a rule: {e.details()}")
rules = call("/xray.app.router.command.RoutingService/ListRule", router_pb2.ListRuleRequest(), router_pb2.ListRuleResponse)
if [r.tag for r in rules.rules] != ["api"]:
    fail(f"ListRule: {rules}")
print("OK", flush=True)
