//! The one fact of a certificate webpki does not tell: whether it is a CA (its basicConstraints),
//! read with a minimal DER walk. Malformed input reads as "not a CA".

/// One TLV: (tag, contents, what follows).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        // Long form: 1 to 4 length bytes (a certificate is far below 4 GiB).
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &x| (a << 8) | x as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const BOOLEAN: u8 = 0x01;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
/// tbsCertificate's `[3] EXPLICIT Extensions`.
const EXTENSIONS: u8 = 0xa3;
/// id-ce-basicConstraints, 2.5.29.19.
const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];

/// Whether the DER certificate says `cA: TRUE` in its basicConstraints (as Go's `IsCA`).
pub fn is_ca(cert: &[u8]) -> bool {
    basic_constraints_ca(cert).unwrap_or(false)
}

fn basic_constraints_ca(cert: &[u8]) -> Option<bool> {
    let (SEQUENCE, cert, _) = tlv(cert)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = tlv(cert)? else {
        return None;
    };
    let mut exts = None;
    while !tbs.is_empty() {
        let (tag, v, rest) = tlv(tbs)?;
        if tag == EXTENSIONS {
            exts = Some(v);
        }
        tbs = rest;
    }
    let (SEQUENCE, mut list, _) = tlv(exts?)? else {
        return None;
    };
    while !list.is_empty() {
        let (SEQUENCE, ext, rest) = tlv(list)? else {
            return None;
        };
        list = rest;
        let (OID, oid, mut ext) = tlv(ext)? else {
            return None;
        };
        if oid != BASIC_CONSTRAINTS {
            continue;
        }
        let (mut tag, mut value, after) = tlv(ext)?;
        if tag == BOOLEAN {
            // `critical`
            ext = after;
            (tag, value, _) = tlv(ext)?;
        }
        if tag != OCTET_STRING {
            return None;
        }
        let (SEQUENCE, bc, _) = tlv(value)? else {
            return None;
        };
        if bc.is_empty() {
            return Some(false); // cA DEFAULT FALSE
        }
        let (tag, v, _) = tlv(bc)?;
        return Some(tag == BOOLEAN && v.first().is_some_and(|&b| b != 0));
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(ca: bool) -> Vec<u8> {
        let mut p = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        if ca {
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn a_ca_is_told_from_a_leaf() {
        assert!(is_ca(&cert(true)));
        assert!(!is_ca(&cert(false)));
        let mut p = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        p.is_ca = rcgen::IsCa::ExplicitNoCa;
        let key = rcgen::KeyPair::generate().unwrap();
        assert!(!is_ca(p.self_signed(&key).unwrap().der()));
    }

    #[test]
    fn malformed_input_is_no_ca() {
        let c = cert(true);
        for n in [0, 1, 2, 10, c.len() / 2, c.len() - 1] {
            assert!(!is_ca(&c[..n]), "cut at {n}");
        }
        assert!(!is_ca(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]));
        assert!(!is_ca(&[0x30, 0x85, 0, 0, 0, 0, 1]));
    }
}
