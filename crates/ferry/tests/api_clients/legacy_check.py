"""The API reached the older way, as Marzban-node and Remnawave's node configure it: through
a dokodemo-door inbound routed to api.tag that wraps it in TLS (Marzban-node), and one that
listens on an abstract unix socket (Remnawave). One QueryStats call over each.

Usage: legacy_check.py TLS_PORT CERT_FILE ABSTRACT_NAME"""

import sys

import grpc
from xtlsapi.xray_api.app.stats.command import command_pb2

PORT, CERT, NAME = int(sys.argv[1]), sys.argv[2], sys.argv[3]
creds = grpc.ssl_channel_credentials(root_certificates=open(CERT, "rb").read())
channels = {
    "tls": grpc.secure_channel(f"127.0.0.1:{PORT}", creds, options=[("grpc.ssl_target_name_override", "test.local")]),
    "abstract unix": grpc.insecure_channel(f"unix-abstract:{NAME}"),
}
for what, ch in channels.items():
    f = ch.unary_unary("/xray.app.stats.command.StatsService/QueryStats",
                       request_serializer=lambda m: m.SerializeToString(),
                       response_deserializer=command_pb2.QueryStatsResponse.FromString)
    try:
        r = f(command_pb2.QueryStatsRequest(pattern="inbound>>>api-"), timeout=5)
    except grpc.RpcError as e:
        print(f"FAIL: {what}: {e.code()} {e.details()}", flush=True)
        sys.exit(1)
    names = sorted(s.name for s in r.stat)
    if "inbound>>>api-tls>>>traffic>>>uplink" not in names:
        print(f"FAIL: {what}: {names}", flush=True)
        sys.exit(1)
print("OK", flush=True)
