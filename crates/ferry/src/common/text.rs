//! Text encodings of share links, subscriptions and request paths: percent-encoding (RFC 3986
//! unreserved characters kept) and base64 as links write it (either alphabet, padded or not).

use base64::Engine as _;

/// Percent-encoding of everything but unreserved characters (`A-Z a-z 0-9 - . _ ~`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-decoding (`+` stays `+`, as Xray's clients write spaces as `%20`); a bad escape or
/// bytes that are not UTF-8 are an error.
pub fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
            match (hex(i + 1), hex(i + 2)) {
                (Some(h), Some(l)) => out.push((h << 4 | l) as u8),
                _ => return Err(format!("bad percent escape in {s:?}")),
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8"))
}

/// Base64 as share links carry it: the standard or the URL-safe alphabet, `=` padding or none,
/// surrounding whitespace ignored.
pub fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    let t: String = s
        .trim()
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(t.as_bytes())
        .map_err(|_| format!("{s:?} is not base64"))
}

/// URL-safe base64 without padding (SS and SSR links, REALITY keys as `xray x25519` prints them).
pub fn base64_url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// Standard base64 with `=` padding (VMess links, subscriptions).
pub fn base64_std(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_round_trips_and_refuses_bad_escapes() {
        let s = "a b/ü:%+~";
        assert_eq!(percent_encode(s), "a%20b%2F%C3%BC%3A%25%2B~");
        assert_eq!(percent_decode(&percent_encode(s)).unwrap(), s);
        assert_eq!(percent_decode("a+b").unwrap(), "a+b");
        assert!(percent_decode("%zz").is_err());
        assert!(percent_decode("%4").is_err());
        assert!(percent_decode("%ff").is_err());
    }

    #[test]
    fn base64_takes_either_alphabet_with_or_without_padding() {
        let raw = [0xfbu8, 0xff, 0xfe, 0x41];
        for s in ["+//+QQ==", "-__-QQ", "+//+QQ", " -__-QQ== "] {
            assert_eq!(base64_decode(s).unwrap(), raw, "{s}");
        }
        assert_eq!(base64_url(&raw), "-__-QQ");
        assert_eq!(base64_std(&raw), "+//+QQ==");
        assert!(base64_decode("a!b").is_err());
    }
}
