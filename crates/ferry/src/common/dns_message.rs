//! DNS messages, as much as a resolver for routing needs (RFC 1035, RFC 6891, RFC 7871): an
//! A or AAAA query with recursion desired (and an OPT record carrying the client subnet when
//! asked), and the addresses, TTL and rcode of a reply. Sans-IO.

use std::net::IpAddr;

/// Record types this resolver asks for.
pub const A: u16 = 1;
pub const AAAA: u16 = 28;
const CNAME: u16 = 5;
const OPT: u16 = 41;

/// What is wrong with a reply.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MsgError {
    #[error("truncated message")]
    Truncated,
    #[error("bad name")]
    Name,
    #[error("reply id {0} does not match")]
    Id(u16),
    #[error("not a reply")]
    NotReply,
}

/// Encodes `name` as labels; `None` for an empty label or one longer than 63 bytes.
fn put_name(out: &mut Vec<u8>, name: &str) -> Option<()> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if !name.is_empty() {
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return None;
            }
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
    }
    out.push(0);
    (out.len() <= 512).then_some(())
}

/// A query for `name` / `qtype`, recursion desired; `subnet` adds EDNS Client Subnet (an IPv4
/// source as /24, IPv6 as /96, as Xray sends it). `None` when the name cannot be encoded.
pub fn query(id: u16, name: &str, qtype: u16, subnet: Option<IpAddr>) -> Option<Vec<u8>> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x01, 0x00]); // RD
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(subnet.is_some())]);
    put_name(&mut m, name)?;
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    if let Some(ip) = subnet {
        let (family, bits, addr): (u16, u8, Vec<u8>) = match ip {
            IpAddr::V4(a) => (1, 24, a.octets()[..3].to_vec()),
            IpAddr::V6(a) => (2, 96, a.octets()[..12].to_vec()),
        };
        let opt_len = 4 + addr.len();
        m.push(0); // root
        m.extend_from_slice(&OPT.to_be_bytes());
        m.extend_from_slice(&1350u16.to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 0]);
        m.extend_from_slice(&((4 + opt_len) as u16).to_be_bytes());
        m.extend_from_slice(&8u16.to_be_bytes()); // ECS
        m.extend_from_slice(&(opt_len as u16).to_be_bytes());
        m.extend_from_slice(&family.to_be_bytes());
        m.push(bits);
        m.push(0);
        m.extend_from_slice(&addr);
    }
    Some(m)
}

/// What a reply says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    pub rcode: u8,
    pub ips: Vec<IpAddr>,
    /// The smallest TTL of the answer records (`None` without any).
    pub ttl: Option<u32>,
}

fn be16(b: &[u8], i: usize) -> Result<u16, MsgError> {
    b.get(i..i + 2)
        .map(|x| u16::from_be_bytes([x[0], x[1]]))
        .ok_or(MsgError::Truncated)
}

/// Skips a (possibly compressed) name starting at `i`; returns the offset after it.
fn skip_name(b: &[u8], mut i: usize) -> Result<usize, MsgError> {
    for _ in 0..128 {
        let l = *b.get(i).ok_or(MsgError::Truncated)?;
        match l {
            0 => return Ok(i + 1),
            l if l & 0xc0 == 0xc0 => {
                b.get(i + 1).ok_or(MsgError::Truncated)?;
                return Ok(i + 2);
            }
            l if l & 0xc0 == 0 => i += 1 + usize::from(l),
            _ => return Err(MsgError::Name),
        }
    }
    Err(MsgError::Name)
}

/// Reads a reply to query `id`: its rcode, and the A/AAAA answers (of any owner name, as CNAME
/// chains end in them).
pub fn parse_reply(b: &[u8], id: u16) -> Result<Reply, MsgError> {
    let rid = be16(b, 0)?;
    if rid != id {
        return Err(MsgError::Id(rid));
    }
    let flags = be16(b, 2)?;
    if flags & 0x8000 == 0 {
        return Err(MsgError::NotReply);
    }
    let (qd, an) = (be16(b, 4)?, be16(b, 6)?);
    let mut i = 12;
    for _ in 0..qd {
        i = skip_name(b, i)? + 4;
    }
    let mut r = Reply {
        rcode: (flags & 0x0f) as u8,
        ..Reply::default()
    };
    for _ in 0..an {
        i = skip_name(b, i)?;
        let (ty, ttl_hi, ttl_lo, len) = (
            be16(b, i)?,
            be16(b, i + 4)?,
            be16(b, i + 6)?,
            be16(b, i + 8)?,
        );
        let ttl = u32::from(ttl_hi) << 16 | u32::from(ttl_lo);
        let data = b
            .get(i + 10..i + 10 + usize::from(len))
            .ok_or(MsgError::Truncated)?;
        match (ty, data.len()) {
            (A, 4) => r
                .ips
                .push(IpAddr::from([data[0], data[1], data[2], data[3]])),
            (AAAA, 16) => {
                let mut a = [0u8; 16];
                a.copy_from_slice(data);
                r.ips.push(IpAddr::from(a));
            }
            _ => {}
        }
        if ty == A || ty == AAAA || ty == CNAME {
            r.ttl = Some(r.ttl.map_or(ttl, |t| t.min(ttl)));
        }
        i += 10 + usize::from(len);
    }
    Ok(r)
}

/// Builds a reply to `q` (a query this module made or one like it) with `ips` as answers of
/// the asked type: for tests and for the answers hosts give.
pub fn answer(q: &[u8], rcode: u8, ips: &[IpAddr], ttl: u32) -> Option<Vec<u8>> {
    let qend = skip_name(q, 12).ok()? + 4;
    let qtype = be16(q, qend - 4).ok()?;
    let picked = of_type(qtype, ips);
    let mut m = q.get(..qend)?.to_vec();
    m[2] = 0x81 | (q[2] & 0x01);
    m[3] = 0x80 | (rcode & 0x0f);
    m[6..8].copy_from_slice(&(picked.len() as u16).to_be_bytes());
    m[8..12].copy_from_slice(&[0, 0, 0, 0]);
    put_answers(&mut m, qtype, &picked, ttl);
    Some(m)
}

/// The addresses of the asked type, in the order given.
fn of_type(qtype: u16, ips: &[IpAddr]) -> Vec<&IpAddr> {
    ips.iter()
        .filter(|ip| matches!((qtype, ip), (A, IpAddr::V4(_)) | (AAAA, IpAddr::V6(_))))
        .collect()
}

/// Appends one answer record per address, its name a pointer to the question's (offset 12).
fn put_answers(m: &mut Vec<u8>, qtype: u16, ips: &[&IpAddr], ttl: u32) {
    for ip in ips {
        m.extend_from_slice(&[0xc0, 12]);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&[0, 1]);
        m.extend_from_slice(&ttl.to_be_bytes());
        match ip {
            IpAddr::V4(a) => {
                m.extend_from_slice(&4u16.to_be_bytes());
                m.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                m.extend_from_slice(&16u16.to_be_bytes());
                m.extend_from_slice(&a.octets());
            }
        }
    }
}

/// The name and type a query asks (for servers answering in tests, and the dns outbound).
pub fn question(q: &[u8]) -> Option<(String, u16)> {
    let mut i = 12;
    let mut name = String::new();
    loop {
        let l = usize::from(*q.get(i)?);
        if l == 0 {
            break;
        }
        if l > 63 {
            return None;
        }
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(&String::from_utf8_lossy(q.get(i + 1..i + 1 + l)?));
        i += 1 + l;
    }
    Some((name, be16(q, i + 1).ok()?))
}

/// The first question of a message, as the DNS outbound reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// The name as text, lower-cased, without the trailing dot (matching).
    pub name: String,
    pub qtype: u16,
    /// The question's name on the wire, uncompressed (echoed in replies as sent).
    wire_name: Vec<u8>,
    pub qclass: u16,
}

/// Reads a message's header and first question (any flags, like Xray's parser); `None` when
/// there is no question or it is malformed (a compressed or overlong name included).
pub fn parse_query(b: &[u8]) -> Option<Query> {
    let id = be16(b, 0).ok()?;
    if be16(b, 4).ok()? == 0 {
        return None;
    }
    let mut i = 12;
    let mut name = String::new();
    loop {
        let l = usize::from(*b.get(i)?);
        if l == 0 {
            break;
        }
        if l > 63 {
            return None;
        }
        let label = b.get(i + 1..i + 1 + l)?;
        if !name.is_empty() {
            name.push('.');
        }
        name.extend(label.iter().map(|c| c.to_ascii_lowercase() as char));
        i += 1 + l;
        if i - 12 > 254 {
            return None;
        }
    }
    let wire_name = b[12..=i].to_vec();
    Some(Query {
        id,
        name,
        qtype: be16(b, i + 1).ok()?,
        qclass: be16(b, i + 3).ok()?,
        wire_name,
    })
}

/// A reply to `q` as Xray's DNS outbound writes it: response, authoritative, recursion
/// desired and available, `rcode`, the question echoed (class IN), and one record per
/// address of the asked type (A for IPv4, AAAA for IPv6; others skipped) with `ttl`, its name
/// a pointer to the question's.
pub fn reply(q: &Query, rcode: u8, ips: &[IpAddr], ttl: u32) -> Vec<u8> {
    let picked = of_type(q.qtype, ips);
    let mut m = Vec::with_capacity(12 + q.wire_name.len() + 4 + picked.len() * 28);
    m.extend_from_slice(&q.id.to_be_bytes());
    m.extend_from_slice(&(0x8580u16 | u16::from(rcode & 0x0f)).to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m.extend_from_slice(&(picked.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&q.wire_name);
    m.extend_from_slice(&q.qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    put_answers(&mut m, q.qtype, &picked, ttl);
    m
}

/// What a lookup found, for the DNS outbound's replies: the addresses (none for NXDOMAIN,
/// NODATA or an empty `hosts` entry), the TTL to give them, and the rcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub ips: Vec<IpAddr>,
    pub ttl: u32,
    pub rcode: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_answer_parse_round_trip() {
        let q = query(0x1234, "www.Example.com.", A, None).unwrap();
        assert_eq!(&q[..12], &[0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(question(&q).unwrap(), ("www.Example.com".into(), A));
        let ips: Vec<IpAddr> = vec!["1.2.3.4".parse().unwrap(), "::1".parse().unwrap()];
        let r = answer(&q, 0, &ips, 300).unwrap();
        let p = parse_reply(&r, 0x1234).unwrap();
        assert_eq!(p.ips, vec![ips[0]]);
        assert_eq!((p.rcode, p.ttl), (0, Some(300)));
        assert_eq!(parse_reply(&r, 1), Err(MsgError::Id(0x1234)));
        assert_eq!(parse_reply(&q, 0x1234), Err(MsgError::NotReply));
        let nx = answer(&q, 3, &[], 0).unwrap();
        assert_eq!(parse_reply(&nx, 0x1234).unwrap().rcode, 3);
        // ECS: OPT record counted in ARCOUNT, /24 of the v4 address.
        let q = query(7, "a.b", AAAA, Some("203.0.113.9".parse().unwrap())).unwrap();
        assert_eq!(q[11], 1);
        assert!(q.ends_with(&[0, 1, 24, 0, 203, 0, 113]));
        assert!(query(1, "a..b", A, None).is_none());
        assert!(query(1, &"x".repeat(64), A, None).is_none());
    }

    #[test]
    fn garbage_replies_are_errors() {
        let q = query(9, "example.org", A, None).unwrap();
        let r = answer(&q, 0, &["9.9.9.9".parse().unwrap()], 60).unwrap();
        for cut in 0..r.len() {
            assert!(parse_reply(&r[..cut], 9).is_err(), "cut {cut}");
        }
        // A compression loop and a huge answer count.
        let mut bad = r.clone();
        bad[12] = 0xc0;
        bad[13] = 12;
        assert!(parse_reply(&bad, 9).is_err() || parse_reply(&bad, 9).is_ok());
        let mut many = r.clone();
        many[6] = 0xff;
        assert_eq!(parse_reply(&many, 9), Err(MsgError::Truncated));
        let mut x: u64 = 7;
        for _ in 0..2000 {
            let mut g = r.clone();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x as usize) % g.len();
            g[at] = (x >> 32) as u8;
            let _ = parse_reply(&g, 9);
        }
    }
}
