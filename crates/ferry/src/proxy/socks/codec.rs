//! SOCKS5 (RFC 1928/1929) and SOCKS4/4a wire formats, sans-IO.
//!
//! Every parser takes the bytes received so far and returns `Ok(None)` when it needs more,
//! `Ok(Some((value, used)))` when a whole message is there, or an error for bytes that can
//! never become a valid message. A message cut off by EOF is the caller's "truncated" error.

use std::net::{IpAddr, Ipv4Addr};

use bytes::BufMut;

use crate::common::addr::{self, AddrError};
use crate::common::{Address, Destination};

/// SOCKS5 version byte.
pub const VER5: u8 = 5;
/// SOCKS4 version byte.
pub const VER4: u8 = 4;

/// Method: no authentication.
pub const METHOD_NONE: u8 = 0x00;
/// Method: username/password (RFC 1929).
pub const METHOD_PASSWORD: u8 = 0x02;
/// Method: no acceptable method.
pub const METHOD_REJECT: u8 = 0xff;

/// Request commands.
pub const CMD_CONNECT: u8 = 0x01;
pub const CMD_BIND: u8 = 0x02;
pub const CMD_UDP: u8 = 0x03;
/// Tor extensions, treated as CONNECT (as Xray does).
pub const CMD_TOR_RESOLVE: u8 = 0xf0;
pub const CMD_TOR_RESOLVE_PTR: u8 = 0xf1;

/// Reply codes.
pub const REP_OK: u8 = 0x00;
pub const REP_FAILURE: u8 = 0x01;
pub const REP_CMD_UNSUPPORTED: u8 = 0x07;
pub const REP_ATYP_UNSUPPORTED: u8 = 0x08;

/// SOCKS4 reply codes.
pub const SOCKS4_GRANTED: u8 = 0x5a;
pub const SOCKS4_REJECTED: u8 = 0x5b;

/// Longest SOCKS4 user id or 4a host name Ferry accepts (the messages are otherwise unbounded).
pub const SOCKS4_MAX_FIELD: usize = 255;

/// Why bytes are not a valid SOCKS message.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("not SOCKS version {expected}: first byte {got:#04x}")]
    Version { expected: u8, got: u8 },
    #[error("greeting offers no methods")]
    NoMethods,
    #[error("empty username or password")]
    EmptyCredential,
    #[error("bad address: {0}")]
    Addr(#[from] AddrError),
    #[error("SOCKS4 {0} longer than 255 bytes or missing its NUL")]
    Socks4Field(&'static str),
    #[error("SOCKS4a host name is not UTF-8 or empty")]
    Socks4Host,
    #[error("UDP datagram too short")]
    ShortDatagram,
    #[error("UDP datagram is a fragment ({0})")]
    Fragment(u8),
    #[error("server chose method {0:#04x}")]
    Method(u8),
    #[error("server refused: reply {0:#04x}")]
    Refused(u8),
    #[error("message is truncated")]
    Truncated,
    #[error("a {0}-byte name does not fit (255 at most)")]
    NameTooLong(usize),
}

/// A name longer than a SOCKS message can carry is an error, not a shorter name.
fn fits(dest: &Destination) -> Result<(), Error> {
    match &dest.addr {
        crate::common::Address::Domain(d) if d.len() > 255 => Err(Error::NameTooLong(d.len())),
        _ => Ok(()),
    }
}

/// Parser output: `Ok(None)` = need more bytes; `Ok(Some((value, bytes used)))`.
pub type Parsed<T> = Result<Option<(T, usize)>, Error>;

/// Turns "need more" into [`Error::Truncated`], for a buffer that will not grow (EOF, datagram).
pub fn complete<T>(p: Parsed<T>) -> Result<(T, usize), Error> {
    p?.ok_or(Error::Truncated)
}

// ------------------------------------------------------------------ server side (SOCKS5)

/// `VER NMETHODS METHODS…` -> the offered methods.
pub fn parse_greeting(buf: &[u8]) -> Parsed<&[u8]> {
    let [ver, n, ..] = buf else { return Ok(None) };
    if *ver != VER5 {
        return Err(Error::Version {
            expected: VER5,
            got: *ver,
        });
    }
    let n = *n as usize;
    if n == 0 {
        return Err(Error::NoMethods);
    }
    match buf.get(2..2 + n) {
        Some(m) => Ok(Some((m, 2 + n))),
        None => Ok(None),
    }
}

/// RFC 1929 `VER ULEN UNAME PLEN PASSWD` -> (user, password). Like Xray, the VER byte is not
/// checked.
pub fn parse_userpass(buf: &[u8]) -> Parsed<(&[u8], &[u8])> {
    let Some(&ulen) = buf.get(1) else {
        return Ok(None);
    };
    let ulen = ulen as usize;
    let Some(&plen) = buf.get(2 + ulen) else {
        return Ok(None);
    };
    let plen = plen as usize;
    let end = 3 + ulen + plen;
    if buf.len() < end {
        return Ok(None);
    }
    if ulen == 0 {
        return Err(Error::EmptyCredential);
    }
    Ok(Some(((&buf[2..2 + ulen], &buf[3 + ulen..end]), end)))
}

/// A SOCKS5 request: command and destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub cmd: u8,
    pub dest: Destination,
}

/// `VER CMD RSV ATYP ADDR PORT`.
pub fn parse_request(buf: &[u8]) -> Parsed<Request> {
    let [ver, cmd, _rsv, rest @ ..] = buf else {
        return Ok(None);
    };
    if *ver != VER5 {
        return Err(Error::Version {
            expected: VER5,
            got: *ver,
        });
    }
    // The reserved byte is not checked: Xray ignores it too.
    Ok(addr::socks::decode(rest)?.map(|(dest, n)| (Request { cmd: *cmd, dest }, 3 + n)))
}

/// `VER REP RSV ATYP BND.ADDR BND.PORT`.
pub fn encode_reply(rep: u8, bound: &Destination, out: &mut impl BufMut) {
    out.put_slice(&[VER5, rep, 0]);
    addr::socks::encode(bound, out);
}

// ------------------------------------------------------------------ UDP (both sides)

/// Bytes of the UDP header for `dest`.
pub fn udp_header_len(dest: &Destination) -> usize {
    3 + addr::socks::encoded_len(dest)
}

/// `RSV(2) FRAG(1) ATYP ADDR PORT` (FRAG = 0).
pub fn encode_udp_header(dest: &Destination, out: &mut impl BufMut) -> Result<(), Error> {
    fits(dest)?;
    out.put_slice(&[0, 0, 0]);
    addr::socks::encode(dest, out);
    Ok(())
}

/// Parses the header of one whole datagram -> (destination, header length). Fragments are
/// refused (Xray drops them too).
pub fn parse_udp(datagram: &[u8]) -> Result<(Destination, usize), Error> {
    let [_, _, frag, rest @ ..] = datagram else {
        return Err(Error::ShortDatagram);
    };
    if *frag != 0 {
        return Err(Error::Fragment(*frag));
    }
    match addr::socks::decode(rest)? {
        Some((d, n)) => Ok((d, 3 + n)),
        None => Err(Error::ShortDatagram),
    }
}

// ------------------------------------------------------------------ SOCKS4 / 4a

/// A SOCKS4 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socks4Request {
    pub cmd: u8,
    pub dest: Destination,
    pub user_id: Vec<u8>,
}

/// Reads a NUL-terminated field of at most [`SOCKS4_MAX_FIELD`] bytes -> (field, bytes incl. NUL).
pub fn read_cstr<'a>(buf: &'a [u8], what: &'static str) -> Parsed<&'a [u8]> {
    match buf.iter().take(SOCKS4_MAX_FIELD + 1).position(|&b| b == 0) {
        Some(i) => Ok(Some((&buf[..i], i + 1))),
        None if buf.len() > SOCKS4_MAX_FIELD => Err(Error::Socks4Field(what)),
        None => Ok(None),
    }
}

/// `VN=4 CD DSTPORT DSTIP USERID 00 [HOST 00]`. A DSTIP of `0.x.x.x` means SOCKS4a (as Xray).
pub fn parse_socks4(buf: &[u8]) -> Parsed<Socks4Request> {
    let Some(&ver) = buf.first() else {
        return Ok(None);
    };
    if ver != VER4 {
        return Err(Error::Version {
            expected: VER4,
            got: ver,
        });
    }
    let Some(head) = buf.get(..8) else {
        return Ok(None);
    };
    let cmd = head[1];
    let port = u16::from_be_bytes([head[2], head[3]]);
    let ip = Ipv4Addr::new(head[4], head[5], head[6], head[7]);
    let Some((user, n)) = read_cstr(&buf[8..], "user id")? else {
        return Ok(None);
    };
    let mut used = 8 + n;
    let addr = if head[4] == 0 {
        let Some((host, m)) = read_cstr(&buf[used..], "host name")? else {
            return Ok(None);
        };
        used += m;
        let host = std::str::from_utf8(host).map_err(|_| Error::Socks4Host)?;
        if host.is_empty() {
            return Err(Error::Socks4Host);
        }
        Address::parse(host)
    } else {
        Address::Ip(IpAddr::V4(ip))
    };
    Ok(Some((
        Socks4Request {
            cmd,
            dest: Destination::new(addr, port),
            user_id: user.to_vec(),
        },
        used,
    )))
}

/// `VN=0 CD PORT(0) IP(0)`: Xray always answers with 0.0.0.0:0.
pub fn socks4_reply(code: u8) -> [u8; 8] {
    [0, code, 0, 0, 0, 0, 0, 0]
}

// ------------------------------------------------------------------ client side (SOCKS5)

/// The greeting a client sends: one method, password when it has credentials.
pub fn client_greeting(with_password: bool) -> [u8; 3] {
    [
        VER5,
        1,
        if with_password {
            METHOD_PASSWORD
        } else {
            METHOD_NONE
        },
    ]
}

/// `01 ULEN UNAME PLEN PASSWD` (each at most 255 bytes; longer ones are cut, config checks that).
pub fn encode_userpass(user: &[u8], pass: &[u8], out: &mut impl BufMut) {
    let u = &user[..user.len().min(255)];
    let p = &pass[..pass.len().min(255)];
    out.put_u8(1);
    out.put_u8(u.len() as u8);
    out.put_slice(u);
    out.put_u8(p.len() as u8);
    out.put_slice(p);
}

/// `05 CMD 00 ATYP ADDR PORT`.
pub fn encode_request(cmd: u8, dest: &Destination, out: &mut impl BufMut) -> Result<(), Error> {
    fits(dest)?;
    out.put_slice(&[VER5, cmd, 0]);
    addr::socks::encode(dest, out);
    Ok(())
}

/// The server's 2-byte method choice (or RFC 1929 status) -> the second byte.
pub fn parse_two(buf: &[u8], ver: u8) -> Parsed<u8> {
    let [v, b, ..] = buf else { return Ok(None) };
    if *v != ver {
        return Err(Error::Version {
            expected: ver,
            got: *v,
        });
    }
    Ok(Some((*b, 2)))
}

/// `05 REP 00 ATYP BND.ADDR BND.PORT` -> the bound address; a non-zero REP is an error.
pub fn parse_reply(buf: &[u8]) -> Parsed<Destination> {
    let [ver, rep, _rsv, rest @ ..] = buf else {
        return Ok(None);
    };
    if *ver != VER5 {
        return Err(Error::Version {
            expected: VER5,
            got: *ver,
        });
    }
    if *rep != REP_OK {
        return Err(Error::Refused(*rep));
    }
    Ok(addr::socks::decode(rest)?.map(|(d, n)| (d, 3 + n)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;
    use bytes::BytesMut;

    #[test]
    fn userpass_vectors_from_xray() {
        // Xray protocol_test.go: the first byte is ignored.
        let v = hex("05 01 61 02 62 63");
        let ((u, p), n) = parse_userpass(&v).unwrap().unwrap();
        assert_eq!((u, p, n), (&b"a"[..], &b"bc"[..], 6));
        // RFC 1929 example of the spec.
        assert_eq!(
            parse_userpass(&hex("01 01 61 02 6263")).unwrap().unwrap().0,
            (&b"a"[..], &b"bc"[..])
        );
        // ULEN 24 exceeds the input: more needed while streaming, an error once complete.
        let short = hex("05 18 61 02 62 63");
        assert_eq!(parse_userpass(&short), Ok(None));
        assert_eq!(complete(parse_userpass(&short)), Err(Error::Truncated));
        for cut in 0..6 {
            assert_eq!(parse_userpass(&v[..cut]), Ok(None), "cut {cut}");
        }
    }

    #[test]
    fn cstr_vectors_from_xray() {
        assert_eq!(read_cstr(b"ab\0", "x"), Ok(Some((&b"ab"[..], 3))));
        assert_eq!(complete(read_cstr(b"a", "x")), Err(Error::Truncated));
        let long = vec![b'a'; 300];
        assert_eq!(read_cstr(&long, "x"), Err(Error::Socks4Field("x")));
    }

    #[test]
    fn greeting_and_request() {
        assert_eq!(
            parse_greeting(&hex("05 01 00")),
            Ok(Some((&[METHOD_NONE][..], 3)))
        );
        assert_eq!(parse_greeting(&hex("05 02 00")), Ok(None));
        assert_eq!(
            parse_greeting(&hex("04 01 00")),
            Err(Error::Version {
                expected: 5,
                got: 4
            })
        );
        assert_eq!(parse_greeting(&hex("05 00")), Err(Error::NoMethods));
        let req = hex("05 01 00 03 0b 6578616d706c652e636f6d 01bb");
        let (r, n) = parse_request(&req).unwrap().unwrap();
        assert_eq!(n, req.len());
        assert_eq!(r.cmd, CMD_CONNECT);
        assert_eq!(r.dest, Destination::parse("example.com:443").unwrap());
        for cut in 0..req.len() {
            assert_eq!(parse_request(&req[..cut]), Ok(None), "cut {cut}");
        }
        assert!(matches!(
            parse_request(&hex("05 01 00 09 00")),
            Err(Error::Addr(AddrError::BadType(9)))
        ));
    }

    #[test]
    fn reply_encoding() {
        let mut b = BytesMut::new();
        encode_reply(
            REP_OK,
            &"0.0.0.0:0".parse::<std::net::SocketAddr>().unwrap().into(),
            &mut b,
        );
        assert_eq!(&b[..], &hex("05 00 00 01 00000000 0000")[..]);
        assert_eq!(
            parse_reply(&b),
            Ok(Some((Destination::parse("0.0.0.0:0").unwrap(), 10)))
        );
        assert_eq!(
            parse_reply(&hex("05 05 00 01 00000000 0000")),
            Err(Error::Refused(5))
        );
    }

    #[test]
    fn udp_vectors() {
        let mut b = BytesMut::new();
        encode_udp_header(&Destination::parse("8.8.8.8:53").unwrap(), &mut b).unwrap();
        b.put_u8(b'x');
        assert_eq!(&b[..], &hex("0000 00 01 08080808 0035 78")[..]);
        // Xray TestUDPEncoding.
        let v = hex("000000 04 01020304050607080900010203040506 0400 61");
        let (d, n) = parse_udp(&v).unwrap();
        assert_eq!(
            d,
            Destination::parse("[102:304:506:708:900:102:304:506]:1024").unwrap()
        );
        assert_eq!(&v[n..], b"a");
        assert_eq!(udp_header_len(&d), n);
        let mut e = BytesMut::new();
        encode_udp_header(&d, &mut e).unwrap();
        assert_eq!(&e[..], &v[..n]);
        assert_eq!(
            parse_udp(&hex("0000 01 01 08080808 0035")),
            Err(Error::Fragment(1))
        );
        assert_eq!(
            parse_udp(&hex("0000 00 01 0808")),
            Err(Error::ShortDatagram)
        );
        assert_eq!(parse_udp(&hex("00")), Err(Error::ShortDatagram));
    }

    #[test]
    fn socks4_and_4a() {
        let v4 = hex("04 01 0050 7f000001 6162 00");
        let (r, n) = parse_socks4(&v4).unwrap().unwrap();
        assert_eq!(n, v4.len());
        assert_eq!(r.dest, Destination::parse("127.0.0.1:80").unwrap());
        assert_eq!(r.user_id, b"ab");
        let mut v4a = hex("04 01 01bb 00000001 00");
        v4a.extend_from_slice(b"example.com\0");
        let (r, n) = parse_socks4(&v4a).unwrap().unwrap();
        assert_eq!(n, v4a.len());
        assert_eq!(r.dest, Destination::parse("example.com:443").unwrap());
        for cut in 0..v4a.len() {
            assert_eq!(parse_socks4(&v4a[..cut]), Ok(None), "cut {cut}");
        }
        assert_eq!(
            parse_socks4(&hex("04 01 0050 00000001 00 00")),
            Err(Error::Socks4Host)
        );
        assert_eq!(socks4_reply(SOCKS4_GRANTED), [0, 0x5a, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn client_messages() {
        assert_eq!(client_greeting(false), [5, 1, 0]);
        assert_eq!(client_greeting(true), [5, 1, 2]);
        let mut b = BytesMut::new();
        encode_userpass(b"a", b"bc", &mut b);
        assert_eq!(&b[..], &hex("01 01 61 02 6263")[..]);
        let mut b = BytesMut::new();
        encode_request(CMD_UDP, &Destination::parse("0.0.0.0:0").unwrap(), &mut b).unwrap();
        assert_eq!(&b[..], &hex("05 03 00 01 00000000 0000")[..]);
        assert_eq!(parse_two(&[5, 2], 5), Ok(Some((2, 2))));
        assert_eq!(parse_two(&[1], 1), Ok(None));
    }

    #[test]
    fn names_over_255_bytes_are_not_sent() {
        let long = Destination::new(crate::common::Address::Domain("a".repeat(256)), 80);
        let mut b = BytesMut::new();
        assert_eq!(
            encode_request(CMD_CONNECT, &long, &mut b),
            Err(Error::NameTooLong(256))
        );
        assert_eq!(
            encode_udp_header(&long, &mut b),
            Err(Error::NameTooLong(256))
        );
        assert!(b.is_empty());
        let most = Destination::new(crate::common::Address::Domain("a".repeat(255)), 80);
        encode_request(CMD_CONNECT, &most, &mut b).unwrap();
        assert_eq!(b.len(), 3 + 1 + 1 + 255 + 2);
        assert_eq!(complete(parse_request(&b)).unwrap().0.dest, most);
    }
}
