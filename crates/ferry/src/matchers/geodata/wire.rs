//! The protobuf wire format of V2Ray's `geoip.dat` / `geosite.dat`, read by hand: the files are
//! a `GeoIPList` / `GeoSiteList` whose entries (field 1) are scanned one at a time, and only the
//! entries a config names are decoded (routing.md §1.1, §1.4). Sans-IO except [`scan`], which
//! streams any `Read` without holding the file.

use std::io::{self, Read};

/// What is wrong with a .dat file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("truncated")]
    Truncated,
    #[error("bad varint")]
    Varint,
    #[error("unsupported wire type {0}")]
    WireType(u8),
    #[error("{0} is not valid UTF-8")]
    Utf8(&'static str),
    #[error("bad CIDR: {0}")]
    Cidr(String),
    #[error("read error: {0}")]
    Io(String),
}

pub type Result<T> = std::result::Result<T, WireError>;

/// One field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Val<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Reads the fields of one message in order.
pub struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Fields { buf }
    }
}

fn varint(buf: &mut &[u8]) -> Result<u64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or(WireError::Truncated)?;
        *buf = rest;
        if i == 9 && b > 1 {
            return Err(WireError::Varint);
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(WireError::Varint)
}

fn take<'a>(buf: &mut &'a [u8], n: u64) -> Result<&'a [u8]> {
    let n = usize::try_from(n).map_err(|_| WireError::Truncated)?;
    if buf.len() < n {
        return Err(WireError::Truncated);
    }
    let (a, b) = buf.split_at(n);
    *buf = b;
    Ok(a)
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Val<'a>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        Some(self.field())
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u64, Val<'a>)> {
        let key = varint(&mut self.buf)?;
        let (num, wt) = (key >> 3, (key & 7) as u8);
        let v = match wt {
            0 => Val::Varint(varint(&mut self.buf)?),
            1 => {
                take(&mut self.buf, 8)?;
                Val::Fixed
            }
            2 => {
                let n = varint(&mut self.buf)?;
                Val::Bytes(take(&mut self.buf, n)?)
            }
            5 => {
                take(&mut self.buf, 4)?;
                Val::Fixed
            }
            other => {
                // An error also ends the iteration (the rest cannot be framed).
                self.buf = &[];
                return Err(WireError::WireType(other));
            }
        };
        Ok((num, v))
    }
}

fn utf8<'a>(b: &'a [u8], what: &'static str) -> Result<&'a str> {
    std::str::from_utf8(b).map_err(|_| WireError::Utf8(what))
}

/// The code (field 1) of a `GeoIP` or `GeoSite` body.
pub fn entry_code(body: &[u8]) -> Result<Option<&str>> {
    let mut code = None;
    for f in Fields::new(body) {
        if let (1, Val::Bytes(b)) = f? {
            code = Some(utf8(b, "code")?);
        }
    }
    Ok(code)
}

/// `Domain.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainType {
    Substr,
    Regex,
    Domain,
    Full,
}

/// One `Domain` of a `GeoSite`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain<'a> {
    pub kind: DomainType,
    pub value: &'a str,
    /// Attribute keys (their values are not used by matching).
    pub attrs: Vec<&'a str>,
}

/// One `Domain`; `None` for a type this reader does not know (nothing can match it).
fn domain(body: &[u8]) -> Result<Option<Domain<'_>>> {
    let mut d = Domain {
        kind: DomainType::Substr,
        value: "",
        attrs: Vec::new(),
    };
    let mut known = true;
    for f in Fields::new(body) {
        match f? {
            (1, Val::Varint(t)) => {
                known = t <= 3;
                d.kind = match t {
                    1 => DomainType::Regex,
                    2 => DomainType::Domain,
                    3 => DomainType::Full,
                    _ => DomainType::Substr,
                };
            }
            (2, Val::Bytes(b)) => d.value = utf8(b, "domain")?,
            (3, Val::Bytes(b)) => {
                for a in Fields::new(b) {
                    if let (1, Val::Bytes(k)) = a? {
                        d.attrs.push(utf8(k, "attribute key")?);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(known.then_some(d))
}

/// The domains of a `GeoSite` body, in file order.
pub fn geosite_domains(body: &[u8]) -> Result<Vec<Domain<'_>>> {
    let mut out = Vec::new();
    for f in Fields::new(body) {
        if let (2, Val::Bytes(b)) = f? {
            out.extend(domain(b)?);
        }
    }
    Ok(out)
}

/// One CIDR as an address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cidr {
    V4(u32, u8),
    V6(u128, u8),
}

fn cidr(body: &[u8]) -> Result<Cidr> {
    let (mut ip, mut prefix) = (&[][..], 0u64);
    for f in Fields::new(body) {
        match f? {
            (1, Val::Bytes(b)) => ip = b,
            (2, Val::Varint(p)) => prefix = p,
            _ => {}
        }
    }
    match ip.len() {
        4 if prefix <= 32 => {
            let a: [u8; 4] = ip.try_into().map_err(|_| WireError::Truncated)?;
            Ok(Cidr::V4(u32::from_be_bytes(a), prefix as u8))
        }
        16 if prefix <= 128 => {
            let a: [u8; 16] = ip.try_into().map_err(|_| WireError::Truncated)?;
            Ok(Cidr::V6(u128::from_be_bytes(a), prefix as u8))
        }
        n => Err(WireError::Cidr(format!(
            "{n}-byte address with prefix {prefix}"
        ))),
    }
}

/// The CIDRs of a `GeoIP` body, in file order.
pub fn geoip_cidrs(body: &[u8]) -> Result<Vec<Cidr>> {
    let mut out = Vec::new();
    for f in Fields::new(body) {
        if let (2, Val::Bytes(b)) = f? {
            out.push(cidr(b)?);
        }
    }
    Ok(out)
}

// ------------------------------------------------------------------ streaming

fn io_err(e: io::Error) -> WireError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        WireError::Truncated
    } else {
        WireError::Io(e.to_string())
    }
}

/// Reads a varint from a stream; `Ok(None)` at a clean end of file.
fn read_varint(r: &mut impl Read) -> Result<Option<u64>> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let mut b = [0u8; 1];
        match r.read(&mut b) {
            Ok(0) if i == 0 => return Ok(None),
            Ok(0) => return Err(WireError::Truncated),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(e)),
        }
        if i == 9 && b[0] > 1 {
            return Err(WireError::Varint);
        }
        v |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Err(WireError::Varint)
}

fn read_exact_vec(r: &mut impl Read, n: u64) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    // Grows as bytes arrive: a corrupt length cannot make one large allocation.
    let got = r.take(n).read_to_end(&mut v).map_err(io_err)?;
    if (got as u64) < n {
        return Err(WireError::Truncated);
    }
    Ok(v)
}

fn skip(r: &mut impl Read, n: u64) -> Result<()> {
    let got = io::copy(&mut r.take(n), &mut io::sink()).map_err(io_err)?;
    if got < n {
        return Err(WireError::Truncated);
    }
    Ok(())
}

/// What [`scan`] asks of each top-level entry.
pub enum Visit {
    /// Skip this entry's body.
    Skip,
    /// Hand the whole body over.
    Body,
}

/// Streams the entries (field 1) of a `GeoIPList` / `GeoSiteList`. For each entry `want`
/// sees its code (read from the leading code field when the entry starts with one, as every
/// generator writes it) and says whether the body is needed; `got` receives the bodies asked
/// for and returns `false` to stop. Other top-level fields are skipped.
pub fn scan(
    r: &mut impl Read,
    mut want: impl FnMut(&str) -> Visit,
    mut got: impl FnMut(&str, Vec<u8>) -> Result<bool>,
) -> Result<()> {
    while let Some(key) = read_varint(r)? {
        let (num, wt) = (key >> 3, (key & 7) as u8);
        match wt {
            0 => {
                read_varint(r)?.ok_or(WireError::Truncated)?;
                continue;
            }
            1 => {
                skip(r, 8)?;
                continue;
            }
            5 => {
                skip(r, 4)?;
                continue;
            }
            2 => {}
            other => return Err(WireError::WireType(other)),
        }
        let len = read_varint(r)?.ok_or(WireError::Truncated)?;
        if num != 1 {
            skip(r, len)?;
            continue;
        }
        // The usual layout: 0x0a, a one-byte length, the code.
        let mut head = [0u8; 2];
        if len >= 2 {
            r.read_exact(&mut head).map_err(io_err)?;
        }
        let short = len >= 2 && head[0] == 0x0a && head[1] < 0x80 && u64::from(head[1]) <= len - 2;
        if short {
            let code = read_exact_vec(r, u64::from(head[1]))?;
            let code = utf8(&code, "code")?.to_string();
            let rest = len - 2 - u64::from(head[1]);
            match want(&code) {
                Visit::Skip => skip(r, rest)?,
                Visit::Body => {
                    let mut body = Vec::with_capacity(2 + code.len());
                    body.extend_from_slice(&head);
                    body.extend_from_slice(code.as_bytes());
                    body.extend(read_exact_vec(r, rest)?);
                    if !got(&code, body)? {
                        return Ok(());
                    }
                }
            }
        } else {
            // Anything else: read the entry whole and find its code.
            let mut body = Vec::new();
            if len >= 2 {
                body.extend_from_slice(&head);
            }
            body.extend(read_exact_vec(r, len.saturating_sub(body.len() as u64))?);
            let code = entry_code(&body)?.unwrap_or("").to_string();
            if let Visit::Body = want(&code) {
                if !got(&code, body)? {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ writing (tests, tools)

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_uint(out: &mut Vec<u8>, field: u64, v: u64) {
    put_varint(out, field << 3);
    put_varint(out, v);
}

/// Encodes a `GeoIPList` (codes as given; real files use upper case): for tests and tools.
pub fn encode_geoip(entries: &[(&str, &[Cidr])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (code, cidrs) in entries {
        let mut e = Vec::new();
        put_bytes(&mut e, 1, code.as_bytes());
        for c in cidrs.iter() {
            let mut m = Vec::new();
            match *c {
                Cidr::V4(a, p) => {
                    put_bytes(&mut m, 1, &a.to_be_bytes());
                    put_uint(&mut m, 2, u64::from(p));
                }
                Cidr::V6(a, p) => {
                    put_bytes(&mut m, 1, &a.to_be_bytes());
                    put_uint(&mut m, 2, u64::from(p));
                }
            }
            put_bytes(&mut e, 2, &m);
        }
        put_bytes(&mut out, 1, &e);
    }
    out
}

/// Encodes a `GeoSiteList` (every attribute as `bool_value = true`): for tests and tools.
pub fn encode_geosite(entries: &[(&str, &[Domain<'_>])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (code, domains) in entries {
        let mut e = Vec::new();
        put_bytes(&mut e, 1, code.as_bytes());
        for d in domains.iter() {
            let mut m = Vec::new();
            let t = match d.kind {
                DomainType::Substr => 0,
                DomainType::Regex => 1,
                DomainType::Domain => 2,
                DomainType::Full => 3,
            };
            if t != 0 {
                put_uint(&mut m, 1, t);
            }
            put_bytes(&mut m, 2, d.value.as_bytes());
            for a in &d.attrs {
                let mut am = Vec::new();
                put_bytes(&mut am, 1, a.as_bytes());
                put_uint(&mut am, 2, 1);
                put_bytes(&mut m, 3, &am);
            }
            put_bytes(&mut e, 2, &m);
        }
        put_bytes(&mut out, 1, &e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// routing.md §1.6: `CN` with 1.0.1.0/24, 16 bytes.
    pub const GEOIP_CN: [u8; 16] = [
        0x0a, 0x0e, 0x0a, 0x02, 0x43, 0x4e, 0x12, 0x08, 0x0a, 0x04, 0x01, 0x00, 0x01, 0x00, 0x10,
        0x18,
    ];

    fn geosite_google() -> Vec<u8> {
        let mut v = vec![0x0a, 0x35, 0x0a, 0x06];
        v.extend_from_slice(b"GOOGLE");
        v.extend_from_slice(&[0x12, 0x0e, 0x08, 0x02, 0x12, 0x0a]);
        v.extend_from_slice(b"google.com");
        v.extend_from_slice(&[0x12, 0x1b, 0x08, 0x03, 0x12, 0x0e]);
        v.extend_from_slice(b"ads.google.com");
        v.extend_from_slice(&[0x1a, 0x07, 0x0a, 0x03]);
        v.extend_from_slice(b"ads");
        v.extend_from_slice(&[0x10, 0x01]);
        v
    }

    fn all(data: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
        let mut out = Vec::new();
        scan(
            &mut &data[..],
            |_| Visit::Body,
            |c, b| {
                out.push((c.to_string(), b));
                Ok(true)
            },
        )?;
        Ok(out)
    }

    #[test]
    fn spec_vectors_decode_and_encode_byte_exact() {
        let e = all(&GEOIP_CN).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0, "CN");
        assert_eq!(
            geoip_cidrs(&e[0].1).unwrap(),
            vec![Cidr::V4(0x01000100, 24)]
        );
        assert_eq!(
            encode_geoip(&[("CN", &[Cidr::V4(0x01000100, 24)])]),
            GEOIP_CN
        );

        let g = geosite_google();
        assert_eq!(g.len(), 55);
        let e = all(&g).unwrap();
        assert_eq!(e[0].0, "GOOGLE");
        let d = geosite_domains(&e[0].1).unwrap();
        let want = vec![
            Domain {
                kind: DomainType::Domain,
                value: "google.com",
                attrs: vec![],
            },
            Domain {
                kind: DomainType::Full,
                value: "ads.google.com",
                attrs: vec!["ads"],
            },
        ];
        assert_eq!(d, want);
        assert_eq!(encode_geosite(&[("GOOGLE", &want)]), g);
    }

    #[test]
    fn substr_type_defaults_when_absent_and_v6_cidrs() {
        let d = [Domain {
            kind: DomainType::Substr,
            value: "goo",
            attrs: vec![],
        }];
        let f = encode_geosite(&[("X", &d)]);
        let e = all(&f).unwrap();
        assert_eq!(
            geosite_domains(&e[0].1).unwrap()[0].kind,
            DomainType::Substr
        );
        let v6 = Cidr::V6(0x2001_0db8 << 96, 32);
        let f = encode_geoip(&[("V6", &[v6])]);
        // 0a 10 <16 bytes> 10 20, as routing.md §1.6 writes it.
        assert!(f.windows(4).any(|w| w == [0x0a, 0x10, 0x20, 0x01]));
        assert!(f.ends_with(&[0x10, 0x20]));
        let e = all(&f).unwrap();
        assert_eq!(geoip_cidrs(&e[0].1).unwrap(), vec![v6]);
    }

    #[test]
    fn truncated_at_every_offset_is_an_error_or_fewer_entries() {
        let mut f = geosite_google();
        f.extend(GEOIP_CN);
        for cut in 0..f.len() {
            let part = &f[..cut];
            if let Ok(es) = all(part) {
                for (_, b) in es {
                    let _ = geosite_domains(&b);
                    let _ = geoip_cidrs(&b);
                }
            }
        }
        assert_eq!(all(&GEOIP_CN[..10]).unwrap_err(), WireError::Truncated);
        // Huge lengths and bad wire types are errors, not allocations or panics.
        let huge = [0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x0a];
        assert!(all(&huge).is_err());
        assert!(all(&[0x0b]).is_err());
        assert!(geoip_cidrs(&[0x12, 0x03, 0x0a, 0x01, 0x01]).is_err());
    }

    #[test]
    fn code_not_first_is_found() {
        // GeoIP with the CIDR before the code.
        let mut e = Vec::new();
        put_bytes(&mut e, 2, &[0x0a, 0x04, 10, 0, 0, 0, 0x10, 8]);
        put_bytes(&mut e, 1, b"LATE");
        let mut f = Vec::new();
        put_bytes(&mut f, 1, &e);
        let es = all(&f).unwrap();
        assert_eq!(es[0].0, "LATE");
        assert_eq!(
            geoip_cidrs(&es[0].1).unwrap(),
            vec![Cidr::V4(0x0a000000, 8)]
        );
    }
}
