//! The Host of an HTTP/1 request, read as Xray reads it (routing.md §3.4): a known method,
//! header lines up to the first empty one, `host` lower-cased without its port. The headers
//! (and `:method`, `:path`) become the attributes `attrs` rules match. Sans-IO.

use super::{Outcome, Sniffed};

const METHODS: [&[u8]; 7] = [
    b"get", b"post", b"head", b"put", b"delete", b"options", b"connect",
];

/// Strips a port from `host` (`a.com:8080`, `[::1]:80`); a bare IPv6 address is kept.
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

pub fn sniff(b: &[u8]) -> Outcome {
    let mut known = false;
    for m in METHODS {
        if b.len() >= m.len() && b[..m.len()].eq_ignore_ascii_case(m) {
            known = true;
            break;
        }
        if b.len() < m.len() {
            return Outcome::NoClue;
        }
    }
    if !known {
        return Outcome::Not;
    }
    let mut lines = b.split(|&c| c == b'\n');
    let first = lines.next().unwrap_or(&[]);
    let mut s = Sniffed {
        protocol: "http1",
        ..Default::default()
    };
    for line in lines {
        if line.is_empty() {
            break;
        }
        let Some(i) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        let key = String::from_utf8_lossy(&line[..i]).to_lowercase();
        let value = String::from_utf8_lossy(&line[i + 1..]).trim().to_string();
        if key == "host" {
            s.domain = strip_port(&value.to_lowercase()).to_string();
        }
        s.attrs.push((key, value));
    }
    let parts: Vec<&[u8]> = first.split(|&c| c == b' ').collect();
    if let [method, path, _] = parts[..] {
        s.attrs.push((
            ":method".into(),
            String::from_utf8_lossy(method).into_owned(),
        ));
        s.attrs
            .push((":path".into(), String::from_utf8_lossy(path).into_owned()));
    }
    if s.domain.is_empty() {
        return Outcome::NoClue;
    }
    Outcome::Found(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lowercased_port_stripped_attrs_kept() {
        let req =
            b"GET /x?y HTTP/1.1\r\nHost: WWW.Example.com:8080\r\nUser-Agent: t\r\n\r\nbody: no\r\n";
        let Outcome::Found(s) = sniff(req) else {
            panic!()
        };
        assert_eq!(s.protocol, "http1");
        assert_eq!(s.domain, "www.example.com");
        assert!(s.attrs.contains(&("user-agent".into(), "t".into())));
        assert!(s.attrs.contains(&(":method".into(), "GET".into())));
        assert!(s.attrs.contains(&(":path".into(), "/x?y".into())));
        // As in Xray: lines split on \n only, so "\r" is not the empty line that ends the
        // headers of a CRLF request, and a body line that looks like a header counts.
        assert!(s.attrs.iter().any(|(k, _)| k == "body"));
        let Outcome::Found(s) = sniff(b"GET / HTTP/1.1\nHost: a\n\nbody: no\n") else {
            panic!()
        };
        assert!(!s.attrs.iter().any(|(k, _)| k == "body"));
        assert_eq!(sniff(b"GE"), Outcome::NoClue);
        assert_eq!(sniff(b"GET / HTTP/1.1\r\n"), Outcome::NoClue, "no Host yet");
        assert_eq!(sniff(b"XYZW / HTTP/1.1\r\n"), Outcome::Not);
        assert_eq!(sniff(b"\x16\x03\x01\x00\x05hello"), Outcome::Not);
        let Outcome::Found(s) = sniff(b"post / HTTP/1.0\nhost: [::1]:80\n\n") else {
            panic!()
        };
        assert_eq!(s.domain, "::1");
    }
}
