//! Minimal blocking SOCKS5/SOCKS4/HTTP proxy clients and a tiny HTTP origin server for the
//! socks/http scenario tests.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A destination as a SOCKS5 client names it.
pub enum Target<'a> {
    Addr(SocketAddr),
    Host(&'a str, u16),
}

fn encode_target(t: &Target<'_>, out: &mut Vec<u8>) {
    match t {
        Target::Addr(SocketAddr::V4(a)) => {
            out.push(1);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        Target::Addr(SocketAddr::V6(a)) => {
            out.push(4);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        Target::Host(h, p) => {
            out.push(3);
            out.push(h.len() as u8);
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Reads a SOCKS5 reply (`05 REP 00 ATYP ADDR PORT`) -> (REP, bound address).
pub fn read_reply(s: &mut TcpStream) -> io::Result<(u8, SocketAddr)> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h)?;
    assert_eq!(h[0], 5, "reply version");
    let ip: IpAddr = match h[3] {
        1 => {
            let mut a = [0u8; 4];
            s.read_exact(&mut a)?;
            a.into()
        }
        4 => {
            let mut a = [0u8; 16];
            s.read_exact(&mut a)?;
            a.into()
        }
        t => panic!("unexpected reply address type {t}"),
    };
    let mut p = [0u8; 2];
    s.read_exact(&mut p)?;
    Ok((h[1], SocketAddr::new(ip, u16::from_be_bytes(p))))
}

/// Greets and authenticates; returns the stream ready for a request, or the failure.
pub fn socks5_auth(port: u16, auth: Option<(&str, &str)>) -> io::Result<TcpStream> {
    let mut s = connect(port);
    let method = if auth.is_some() { 2 } else { 0 };
    s.write_all(&[5, 1, method])?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r)?;
    if r != [5, method] {
        return Err(io::Error::other(format!("method reply {r:02x?}")));
    }
    if let Some((u, p)) = auth {
        let mut m = vec![1, u.len() as u8];
        m.extend_from_slice(u.as_bytes());
        m.push(p.len() as u8);
        m.extend_from_slice(p.as_bytes());
        s.write_all(&m)?;
        s.read_exact(&mut r)?;
        if r[1] != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("auth reply {r:02x?}"),
            ));
        }
    }
    Ok(s)
}

/// A SOCKS5 CONNECT through the proxy on `port`.
pub fn socks5_connect(
    port: u16,
    auth: Option<(&str, &str)>,
    target: Target<'_>,
) -> io::Result<TcpStream> {
    let mut s = socks5_auth(port, auth)?;
    let mut req = vec![5, 1, 0];
    encode_target(&target, &mut req);
    s.write_all(&req)?;
    let (rep, _) = read_reply(&mut s)?;
    if rep != 0 {
        return Err(io::Error::other(format!("CONNECT reply {rep}")));
    }
    Ok(s)
}

/// Opens a UDP association: (control connection, relay address, our UDP socket).
pub fn socks5_udp(port: u16, auth: Option<(&str, &str)>) -> (TcpStream, SocketAddr, UdpSocket) {
    let mut s = socks5_auth(port, auth).unwrap();
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = vec![5, 3, 0];
    encode_target(&Target::Addr(u.local_addr().unwrap()), &mut req);
    s.write_all(&req).unwrap();
    let (rep, relay) = read_reply(&mut s).unwrap();
    assert_eq!(rep, 0, "UDP ASSOCIATE refused");
    (s, relay, u)
}

/// `RSV RSV FRAG ATYP ADDR PORT DATA`.
pub fn udp_packet(dest: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut p = vec![0, 0, 0];
    encode_target(&Target::Addr(dest), &mut p);
    p.extend_from_slice(data);
    p
}

/// A SOCKS4 (or 4a, when `host` is given) CONNECT -> the stream, or the reply code.
pub fn socks4_connect(
    port: u16,
    ip: [u8; 4],
    dport: u16,
    host: Option<&str>,
) -> Result<TcpStream, u8> {
    let mut s = connect(port);
    let mut req = vec![4, 1];
    req.extend_from_slice(&dport.to_be_bytes());
    req.extend_from_slice(&ip);
    req.extend_from_slice(b"ferry\0");
    if let Some(h) = host {
        req.extend_from_slice(h.as_bytes());
        req.push(0);
    }
    s.write_all(&req).unwrap();
    let mut r = [0u8; 8];
    s.read_exact(&mut r).map_err(|_| 0u8)?;
    assert_eq!(r[0], 0);
    if r[1] == 0x5a {
        Ok(s)
    } else {
        Err(r[1])
    }
}

/// Reads an HTTP head (up to the empty line) byte by byte.
pub fn read_head(s: &mut impl Read) -> io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
        assert!(head.len() < 1 << 20, "endless head");
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// HTTP CONNECT through the proxy on `port` -> the tunnel, or the status line.
pub fn http_connect(port: u16, dest: SocketAddr, auth: Option<&str>) -> Result<TcpStream, String> {
    let mut s = connect(port);
    let mut req = format!("CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n");
    if let Some(a) = auth {
        req.push_str(&format!("Proxy-Authorization: Basic {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let head = read_head(&mut s).map_err(|e| e.to_string())?;
    if head.starts_with("HTTP/1.1 200") {
        Ok(s)
    } else {
        Err(head)
    }
}

/// A tiny HTTP/1.1 origin: answers every request with `path=P body=B` and records each head.
pub struct Origin {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<String>>>,
}

pub fn http_origin() -> Origin {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rec = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let rec = rec.clone();
            std::thread::spawn(move || {
                let Ok(head) = read_head(&mut s) else { return };
                let len = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                let mut body = vec![0u8; len];
                if s.read_exact(&mut body).is_err() {
                    return;
                }
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                rec.lock().unwrap().push(head);
                let reply = format!("path={path} body={}", String::from_utf8_lossy(&body));
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            });
        }
    });
    Origin { addr, seen }
}

/// Reads a whole `Connection: close` response.
pub fn read_to_end(mut s: TcpStream) -> String {
    let mut v = Vec::new();
    let _ = s.read_to_end(&mut v);
    String::from_utf8_lossy(&v).into_owned()
}
