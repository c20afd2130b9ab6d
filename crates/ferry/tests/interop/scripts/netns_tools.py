"""Small network tools the namespace tests run inside a namespace (the test process cannot
reach a namespace's own loopback): echo servers, and a SOCKS5 client that moves a pattern
through a proxy and checks every byte comes back.

  netns_tools.py echo HOSTS TCP_PORT UDP_PORT      TCP and UDP echo servers on each of HOSTS
                                                   (comma-separated, IPv4 or IPv6)
  netns_tools.py tcp PROXY_PORT HOST PORT BYTES    TCP through SOCKS5, echoed byte-exact
  netns_tools.py udp PROXY_PORT HOST PORT COUNT    UDP through SOCKS5 UDP ASSOCIATE
  netns_tools.py http HOST PORT NAME               an HTTP request for NAME, echoed whole
  netns_tools.py resolve DNS NAME                  an A query for NAME to DNS:53 over UDP
  netns_tools.py named DNS NAME PORT BYTES         NAME resolved at DNS, then `tcp` to it
  netns_tools.py ping HOST                         an ICMP (ICMPv6) echo answered by HOST
A PROXY_PORT of 0 means no proxy: straight to HOST:PORT (a route may send it into a tunnel).
Prints "ok ..." and exits 0 on success; anything else is a failure.
"""
import hashlib
import socket
import socketserver
import struct
import sys
import threading


def pattern(n, seed=7):
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def echo(hosts, tcp_port, udp_port):
    class T(socketserver.BaseRequestHandler):
        def handle(self):
            while True:
                d = self.request.recv(65536)
                if not d:
                    break
                self.request.sendall(d)
            self.request.shutdown(socket.SHUT_WR)

    def udp_echo(u, u2):
        while True:
            d, a = u.recvfrom(65536)
            u.sendto(d, a)
            if d.startswith(b"cone"):
                u2.sendto(b"from-other-port", a)

    for host in hosts.split(","):
        class S(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True
            address_family = family(host)

        srv = S((host, tcp_port), T)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        u = socket.socket(family(host), socket.SOCK_DGRAM)
        u.bind((host, udp_port))
        # A second socket answers from another port: replies from anywhere (full cone).
        u2 = socket.socket(family(host), socket.SOCK_DGRAM)
        u2.bind((host, udp_port + 1))
        threading.Thread(target=udp_echo, args=(u, u2), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def socks_connect(proxy_port, host, port):
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=30)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(host) + struct.pack(">H", port))
    r = b""
    while len(r) < 10:
        c = s.recv(10 - len(r))
        assert c, "proxy closed during CONNECT"
        r += c
    assert r[1] == 0, "CONNECT refused: %r" % r
    return s


def tcp(proxy_port, host, port, n):
    data = pattern(n)
    if proxy_port == 0:
        s = socket.create_connection((host, port), timeout=30)
    else:
        s = socks_connect(proxy_port, host, port)

    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=send)
    t.start()
    got = bytearray()
    while True:
        c = s.recv(1 << 16)
        if not c:
            break
        got += c
    t.join()
    if bytes(got) != data:
        print("mismatch: %d of %d bytes back" % (len(got), n))
        sys.exit(1)
    print("ok tcp %d" % n)


def udp_direct(host, port, count):
    u = socket.socket(family(host), socket.SOCK_DGRAM)
    u.settimeout(3)
    ok = 0
    for i in range(count):
        msg = b"dgram-%d-" % i + pattern(1000, i)
        for _ in range(5):
            u.sendto(msg, (host, port))
            try:
                d, a = u.recvfrom(65536)
            except socket.timeout:
                continue
            # The echo must come from where the datagram went (a transparent proxy forges it).
            if d == msg and a[:2] == (host, port):
                ok += 1
                break
            if d == msg:
                print("echo from %r, not %r" % (a, (host, port)))
                sys.exit(1)
    if ok != count:
        print("only %d of %d datagrams echoed" % (ok, count))
        sys.exit(1)
    cone = False
    u.sendto(b"cone", (host, port))
    try:
        for _ in range(4):
            d, a = u.recvfrom(65536)
            if d == b"from-other-port" and a[1] == port + 1:
                cone = True
                break
    except socket.timeout:
        pass
    print("ok udp %d cone=%s" % (ok, cone))


def http(host, port, name):
    """Sends an HTTP request whose Host is NAME (what sniffing reads) to the echo server."""
    req = b"GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: netns-tools\r\n\r\n" % name.encode()
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(req)
    got = b""
    try:
        while len(got) < len(req):
            c = s.recv(4096)
            if not c:
                break
            got += c
    except (socket.timeout, ConnectionResetError):
        pass
    if got != req:
        print("not echoed: %d of %d bytes back" % (len(got), len(req)))
        sys.exit(1)
    print("ok http %s" % name)


def udp(proxy_port, host, port, count):
    if proxy_port == 0:
        return udp_direct(host, port, count)
    c = socket.create_connection(("127.0.0.1", proxy_port), timeout=30)
    c.sendall(b"\x05\x01\x00")
    assert c.recv(2) == b"\x05\x00"
    c.sendall(b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00")
    r = c.recv(10)
    assert r[1] == 0, "UDP ASSOCIATE refused"
    relay = (socket.inet_ntoa(r[4:8]), struct.unpack(">H", r[8:10])[0])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    head = b"\x00\x00\x00\x01" + socket.inet_aton(host) + struct.pack(">H", port)
    ok = 0
    for i in range(count):
        msg = b"dgram-%d-" % i + pattern(1000, i)
        for _ in range(5):
            u.sendto(head + msg, relay)
            try:
                d, _ = u.recvfrom(65536)
            except socket.timeout:
                continue
            if d[10:] == msg:
                ok += 1
                break
    cone = False
    u.sendto(head + b"cone", relay)
    try:
        for _ in range(4):
            d, _ = u.recvfrom(65536)
            if d[10:] == b"from-other-port" and struct.unpack(">H", d[8:10])[0] == port + 1:
                cone = True
                break
    except socket.timeout:
        pass
    if ok != count:
        print("only %d of %d datagrams echoed" % (ok, count))
        sys.exit(1)
    print("ok udp %d cone=%s" % (ok, cone))


def resolve(dns, name):
    """The first A record of NAME from the DNS server at DNS:53 (UDP)."""
    qid = 0x4652
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", 1, 1)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    for _ in range(5):
        u.sendto(q, (dns, 53))
        try:
            r, _ = u.recvfrom(4096)
        except socket.timeout:
            continue
        if struct.unpack(">H", r[:2])[0] != qid:
            continue
        ancount = struct.unpack(">H", r[6:8])[0]
        at = len(q)
        for _ in range(ancount):
            # A name (a pointer or labels), type, class, TTL, length, data.
            if r[at] & 0xC0 == 0xC0:
                at += 2
            else:
                while r[at] != 0:
                    at += 1 + r[at]
                at += 1
            rtype, _, _, rdlen = struct.unpack(">HHIH", r[at:at + 10])
            at += 10
            if rtype == 1 and rdlen == 4:
                return socket.inet_ntoa(r[at:at + 4])
            at += rdlen
        print("no A record for %s in %d answers" % (name, ancount))
        sys.exit(1)
    print("no DNS answer for %s" % name)
    sys.exit(1)


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ping(host):
    """One echo request (raw socket: root in the namespace), answered with the same id, sequence
    and payload from HOST."""
    v6 = ":" in host
    if v6:
        u = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        req_type, rep_type = 128, 129
    else:
        u = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        req_type, rep_type = 8, 0
    u.settimeout(3)
    ident, payload = 0x4652, b"ferry-ping-" + pattern(32)
    for seq in range(1, 4):
        head = struct.pack("!BBHHH", req_type, 0, 0, ident, seq)
        # The kernel fills in ICMPv6's checksum (it covers a pseudo-header); ICMP's is ours.
        csum = 0 if v6 else checksum(head + payload)
        u.sendto(struct.pack("!BBHHH", req_type, 0, csum, ident, seq) + payload, (host, 0))
        try:
            while True:
                d, a = u.recvfrom(4096)
                if not v6:
                    d = d[(d[0] & 0x0F) * 4:]  # a raw IPv4 socket gives the IP header too
                if a[0] != host or len(d) < 8:
                    continue
                t, _, _, i, q = struct.unpack("!BBHHH", d[:8])
                if t == rep_type and i == ident and q == seq and d[8:] == payload:
                    print("ok ping %s" % host)
                    return
        except socket.timeout:
            continue
    print("no echo reply from %s" % host)
    sys.exit(1)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "echo":
        echo(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "tcp":
        tcp(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "udp":
        udp(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "http":
        http(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif cmd == "resolve":
        print("ok resolve %s" % resolve(sys.argv[2], sys.argv[3]))
    elif cmd == "ping":
        ping(sys.argv[2])
    elif cmd == "named":
        ip = resolve(sys.argv[2], sys.argv[3])
        print("resolved %s" % ip)
        tcp(0, ip, int(sys.argv[4]), int(sys.argv[5]))
