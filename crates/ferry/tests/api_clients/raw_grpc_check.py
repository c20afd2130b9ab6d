"""Bad and old-style requests to Ferry's API with grpcio and the generated messages xtlsapi
3.3.0 ships (from an Xray before v25.10.15: its ReceiverConfig has the old field layout).
Checks the gRPC status codes and texts Xray answers with, that nothing crashes the server,
and that an old-layout inbound keeps its TLS stream settings.

Usage: raw_grpc_check.py API_PORT TLS_PORT CERT_FILE KEY_FILE   (exits non-zero on a mismatch)"""

import socket
import ssl
import sys
import time

import grpc
from xtlsapi.ext import utils
from xtlsapi.xray_api.app.proxyman import config_pb2 as proxyman_pb2
from xtlsapi.xray_api.app.proxyman.command import command_pb2
from xtlsapi.xray_api.app.stats.command import command_pb2 as stats_pb2
from xtlsapi.xray_api.common.net import address_pb2, port_pb2
from xtlsapi.xray_api.common.protocol import user_pb2
from xtlsapi.xray_api.core import config_pb2 as core_pb2
from xtlsapi.xray_api.proxy.trojan import config_pb2 as trojan_pb2
from xtlsapi.xray_api.proxy.vless import account_pb2 as vless_account_pb2
from xtlsapi.xray_api.proxy.vless.inbound import config_pb2 as vless_in_pb2
from xtlsapi.xray_api.transport.internet import config_pb2 as internet_pb2
from xtlsapi.xray_api.transport.internet.tls import config_pb2 as tls_pb2

API, TLS_PORT, CERT, KEY = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
ch = grpc.insecure_channel(f"127.0.0.1:{API}")
HANDLER = "/xray.app.proxyman.command.HandlerService/"


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def call(path, body):
    """A raw unary call: (code, details) of the error, or (OK, response bytes)."""
    f = ch.unary_unary(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    try:
        return grpc.StatusCode.OK, f(body, timeout=5)
    except grpc.RpcError as e:
        return e.code(), e.details()


def expect(what, got, code, text):
    if got[0] != code or (text is not None and text not in str(got[1])):
        fail(f"{what}: got {got}, want {code} with {text!r}")


def alter(tag, op):
    return call(HANDLER + "AlterInbound", command_pb2.AlterInboundRequest(tag=tag, operation=op).SerializeToString())


vless_user = user_pb2.User(email="a@x", account=utils.to_typed_message(
    vless_account_pb2.Account(id="5f1c2a4e-0000-4000-8000-000000000001", encryption="none")))
trojan_user = user_pb2.User(email="t@x", account=utils.to_typed_message(trojan_pb2.Account(password="p")))

# An inbound in the old ReceiverConfig layout, with TLS: the stream settings must survive.
tls = tls_pb2.Config(certificate=[tls_pb2.Certificate(
    certificate=open(CERT, "rb").read(), key=open(KEY, "rb").read())])
stream = internet_pb2.StreamConfig(protocol_name="tcp", security_type="xray.transport.internet.tls.Config",
                                   security_settings=[utils.to_typed_message(tls)])
receiver = proxyman_pb2.ReceiverConfig(
    port_list=port_pb2.PortList(range=[port_pb2.PortRange(From=TLS_PORT, To=TLS_PORT)]),
    listen=address_pb2.IPOrDomain(ip=bytes([127, 0, 0, 1])), stream_settings=stream)
inbound = core_pb2.InboundHandlerConfig(
    tag="old-tls", receiver_settings=utils.to_typed_message(receiver),
    proxy_settings=utils.to_typed_message(vless_in_pb2.Config(clients=[vless_user], decryption="none")))
expect("AddInbound (old layout, TLS)",
       call(HANDLER + "AddInbound", command_pb2.AddInboundRequest(inbound=inbound).SerializeToString()),
       grpc.StatusCode.OK, None)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
for _ in range(50):
    try:
        with socket.create_connection(("127.0.0.1", TLS_PORT), timeout=3) as s:
            with ctx.wrap_socket(s, server_hostname="test.local") as t:
                if t.version() is None:
                    fail("no TLS on the old-layout inbound")
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
    except ssl.SSLError as e:
        fail(f"the old-layout inbound does not speak TLS (stream settings dropped?): {e}")
else:
    fail("the old-layout inbound never listened")

# Malformed bytes, unknown and wrong types, absent parts: errors, never a crash.
expect("malformed request", call(HANDLER + "AlterInbound", b"\xff\xff\xff\xff"),
       grpc.StatusCode.INTERNAL, "grpc: error unmarshalling request")
expect("no operation", alter("old-tls", None), grpc.StatusCode.UNKNOWN, "app/proxyman/command")
expect("unknown operation type", alter("old-tls", utils.to_typed_message(vless_user).__class__(type="x.y.Z", value=b"")),
       grpc.StatusCode.UNKNOWN, "app/proxyman/command: unknown operation > proto: not found")
expect("not an operation", alter("old-tls", utils.to_typed_message(command_pb2.RemoveInboundRequest(tag="x"))),
       grpc.StatusCode.UNKNOWN, "app/proxyman/command: not an inbound operation")
expect("undecodable operation", alter("old-tls", utils.to_typed_message(command_pb2.AddUserOperation()).__class__(
    type="xray.app.proxyman.command.AddUserOperation", value=b"\xff\xff")),
       grpc.StatusCode.UNKNOWN, "unknown operation > proto: cannot parse invalid wire-format data")
expect("another protocol's account", alter("old-tls", utils.to_typed_message(command_pb2.AddUserOperation(user=trojan_user))),
       grpc.StatusCode.UNKNOWN, "app/proxyman/command: failed to parse user >")
expect("no account", alter("old-tls", utils.to_typed_message(command_pb2.AddUserOperation(user=user_pb2.User(email="n@x")))),
       grpc.StatusCode.UNKNOWN, "failed to parse user > common/protocol: Account is missing")
bad_id = user_pb2.User(email="b@x", account=utils.to_typed_message(vless_account_pb2.Account(id="not-a-uuid")))
expect("bad id", alter("old-tls", utils.to_typed_message(command_pb2.AddUserOperation(user=bad_id))),
       grpc.StatusCode.UNKNOWN, "proxy/vless: failed to parse ID > common/uuid: invalid UUID: not-a-uuid")
expect("existing user", alter("old-tls", utils.to_typed_message(command_pb2.AddUserOperation(user=vless_user))),
       grpc.StatusCode.UNKNOWN, "proxy/vless: User a@x already exists.")
expect("empty email", alter("old-tls", utils.to_typed_message(command_pb2.RemoveUserOperation(email=""))),
       grpc.StatusCode.UNKNOWN, "proxy/vless: Email must not be empty.")
expect("no receiver settings",
       call(HANDLER + "AddInbound", command_pb2.AddInboundRequest(inbound=core_pb2.InboundHandlerConfig(
           tag="broken", proxy_settings=inbound.proxy_settings)).SerializeToString()),
       grpc.StatusCode.UNKNOWN, "app/proxyman/inbound")
expect("unknown proxy type",
       call(HANDLER + "AddInbound", command_pb2.AddInboundRequest(inbound=core_pb2.InboundHandlerConfig(
           tag="broken", receiver_settings=inbound.receiver_settings,
           proxy_settings=inbound.proxy_settings.__class__(type="xray.proxy.nothing.Config"))).SerializeToString()),
       grpc.StatusCode.UNKNOWN, "proto: not found")
expect("unknown method", call(HANDLER + "Nope", b""), grpc.StatusCode.UNIMPLEMENTED,
       "unknown method Nope for service xray.app.proxyman.command.HandlerService")
expect("service not enabled", call("/xray.app.log.command.LoggerService/RestartLogger", b""),
       grpc.StatusCode.UNIMPLEMENTED, "unknown service xray.app.log.command.LoggerService")
expect("online of an unknown user",
       call("/xray.app.stats.command.StatsService/GetStatsOnline",
            stats_pb2.GetStatsRequest(name="user>>>ghost>>>online").SerializeToString()),
       grpc.StatusCode.NOT_FOUND, "user>>>ghost>>>online not found.")
# The old v2ray.core names answer too; the server is alive after all of the above, with the
# old-layout inbound and its one user in place.
code, body = call("/v2ray.core.app.proxyman.command.HandlerService/GetInboundUsersCount",
                  command_pb2.GetInboundUserRequest(tag="old-tls").SerializeToString())
if code != grpc.StatusCode.OK or command_pb2.GetInboundUsersCountResponse.FromString(body).count != 1:
    fail(f"GetInboundUsersCount through the v2ray.core name: {code} {body}")
print("OK", flush=True)
