//! The server name of a TLS ClientHello, read as Xray reads it (routing.md §3.3): one record,
//! one ClientHello, the first `host_name` of the `server_name` extension. Sans-IO.

use super::Outcome;

fn be16(b: &[u8], i: usize) -> usize {
    usize::from(b[i]) << 8 | usize::from(b[i + 1])
}

/// Sniffs the first TLS record of a connection: `NoClue` until the whole record is there.
pub fn sniff(b: &[u8]) -> Outcome {
    if b.len() < 5 {
        return Outcome::NoClue;
    }
    if b[0] != 0x16 || b[1] != 3 {
        return Outcome::Not;
    }
    let len = be16(b, 3);
    let Some(record) = b.get(5..5 + len) else {
        return Outcome::NoClue;
    };
    match client_hello_sni(record) {
        Outcome::Found(mut s) => {
            s.protocol = "tls";
            Outcome::Found(s)
        }
        other => other,
    }
}

/// The SNI of a ClientHello body (from the `client_version` field, without the handshake
/// header's interpretation: Xray skips the type and length by offset). Also used on the CRYPTO
/// stream of a QUIC Initial. `NeedMore` when the name holds bytes <= 0x20 (a gap in
/// reassembled QUIC crypto data).
pub fn client_hello_sni(data: &[u8]) -> Outcome {
    if data.len() < 42 {
        return Outcome::NoClue;
    }
    let sid = usize::from(data[38]);
    if sid > 32 || data.len() < 39 + sid {
        return Outcome::NoClue;
    }
    let mut d = &data[39 + sid..];
    if d.len() < 2 {
        return Outcome::NoClue;
    }
    let cs = be16(d, 0);
    if cs % 2 == 1 || d.len() < 2 + cs {
        return Outcome::Not;
    }
    d = &d[2 + cs..];
    if d.is_empty() {
        return Outcome::NoClue;
    }
    let cm = usize::from(d[0]);
    if d.len() < 1 + cm {
        return Outcome::NoClue;
    }
    d = &d[1 + cm..];
    if d.len() < 2 {
        return Outcome::Not;
    }
    let ext_len = be16(d, 0);
    d = &d[2..];
    if ext_len != d.len() {
        return Outcome::Not;
    }
    while !d.is_empty() {
        if d.len() < 4 {
            return Outcome::Not;
        }
        let (ext, len) = (be16(d, 0), be16(d, 2));
        d = &d[4..];
        if d.len() < len {
            return Outcome::Not;
        }
        if ext == 0 {
            let mut names = &d[..len];
            if names.len() < 2 {
                return Outcome::Not;
            }
            let list = be16(names, 0);
            names = &names[2..];
            if names.len() != list {
                return Outcome::Not;
            }
            while !names.is_empty() {
                if names.len() < 3 {
                    return Outcome::Not;
                }
                let (kind, n) = (names[0], be16(names, 1));
                names = &names[3..];
                if names.len() < n {
                    return Outcome::Not;
                }
                if kind == 0 {
                    let name = &names[..n];
                    if name.iter().any(|&c| c <= b' ') {
                        return Outcome::NeedMore;
                    }
                    if name.last() == Some(&b'.') {
                        return Outcome::Not;
                    }
                    return Outcome::found("tls", String::from_utf8_lossy(name).into_owned());
                }
                names = &names[n..];
            }
        }
        d = &d[len..];
    }
    // No SNI: not TLS as far as routing goes (no protocol either).
    Outcome::Not
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ClientHello record for `sni` (TLS 1.2 framing, a few ciphers, SNI and ALPN).
    pub(crate) fn client_hello(sni: &str) -> Vec<u8> {
        let mut ext = Vec::new();
        // server_name
        let n = sni.len();
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&((n + 5) as u16).to_be_bytes());
        ext.extend_from_slice(&((n + 3) as u16).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&(n as u16).to_be_bytes());
        ext.extend_from_slice(sni.as_bytes());
        // ALPN h2
        ext.extend_from_slice(&[0, 16, 0, 5, 0, 3, 2, b'h', b'2']);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]);
        body.push(32);
        body.extend_from_slice(&[9u8; 32]);
        body.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn sni_verbatim_and_every_cut_waits() {
        let ch = client_hello("Example.COM");
        match sniff(&ch) {
            Outcome::Found(s) => {
                assert_eq!((s.protocol, s.domain.as_str()), ("tls", "Example.COM"))
            }
            other => panic!("{other:?}"),
        }
        for cut in 0..ch.len() {
            assert_eq!(sniff(&ch[..cut]), Outcome::NoClue, "cut at {cut}");
        }
        // Trailing bytes after the record do not matter.
        let mut more = ch.clone();
        more.extend_from_slice(b"\x17\x03\x03");
        assert!(matches!(sniff(&more), Outcome::Found(_)));
    }

    #[test]
    fn not_tls_cases() {
        assert_eq!(sniff(b"GET / HTTP/1.1\r\n"), Outcome::Not);
        assert_eq!(sniff(&[0x16, 2, 0, 0, 0]), Outcome::Not);
        assert_eq!(sniff(&client_hello("trailing.dot.")), Outcome::Not);
        assert_eq!(sniff(&client_hello("sp ace")), Outcome::NeedMore);
        // No SNI extension at all.
        let mut ch = client_hello("x");
        // Remove the server_name extension: rebuild without it.
        let body_start = 5 + 4;
        let ext_at = body_start + 2 + 32 + 1 + 32 + 2 + 4 + 2;
        let ext_len = be16(&ch, ext_at);
        let sni_ext = 4 + be16(&ch, ext_at + 4);
        ch.drain(ext_at + 2..ext_at + 2 + sni_ext);
        let new_ext = (ext_len - sni_ext) as u16;
        ch[ext_at..ext_at + 2].copy_from_slice(&new_ext.to_be_bytes());
        let hs_len = ch.len() - 9;
        ch[6..9].copy_from_slice(&(hs_len as u32).to_be_bytes()[1..]);
        let rec_len = (ch.len() - 5) as u16;
        ch[3..5].copy_from_slice(&rec_len.to_be_bytes());
        assert_eq!(sniff(&ch), Outcome::Not);
    }
}
