//! User ids as Xray reads them: hex UUIDs, or any short string mapped to a UUIDv5-style value.

use sha1::{Digest, Sha1};

/// Parses a config `id`: 32–36 chars of hex UUID (dashes optional), or a 1–30 byte string mapped
/// with `SHA1(16 zero bytes || id)` and the version/variant bits set.
pub fn parse_id(s: &str) -> Result<[u8; 16], String> {
    match s.len() {
        32..=36 => {
            let hex: String = s.chars().filter(|c| *c != '-').collect();
            if hex.len() != 32 {
                return Err(format!("invalid UUID {s:?}"));
            }
            let mut out = [0u8; 16];
            for (i, b) in out.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                    .map_err(|_| format!("invalid UUID {s:?}"))?;
            }
            Ok(out)
        }
        1..=30 => Ok(map_string(s)),
        _ => Err(format!(
            "invalid id {s:?}: a UUID or a string of 1-30 bytes"
        )),
    }
}

/// Xray's mapping of a custom string to a UUID.
pub fn map_string(s: &str) -> [u8; 16] {
    let mut h = Sha1::new();
    h.update([0u8; 16]);
    h.update(s.as_bytes());
    let d = h.finalize();
    let mut u = [0u8; 16];
    u.copy_from_slice(&d[..16]);
    u[6] = (u[6] & 0x0f) | 0x50;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// Formats 16 bytes as `8-4-4-4-12` hex.
pub fn format(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `ferry uuid -i STRING`.
pub fn from_string(s: &str) -> String {
    match parse_id(s) {
        Ok(u) => format(&u),
        Err(_) => format(&map_string(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_from_the_spec() {
        assert_eq!(
            format(&parse_id("2418d087-648d-4990-86e8-19dca1d006d3").unwrap()),
            "2418d087-648d-4990-86e8-19dca1d006d3"
        );
        assert_eq!(
            format(&parse_id("2418d087648d499086e819dca1d006d3").unwrap()),
            "2418d087-648d-4990-86e8-19dca1d006d3"
        );
        assert_eq!(
            format(&parse_id("example").unwrap()),
            "feb54431-301b-52bb-a6dd-e1e93e81bb9e"
        );
        assert_eq!(
            format(&parse_id("我爱🍉老师1314").unwrap()),
            "5783a3e7-e373-51cd-8642-c83782b807c5"
        );
        assert!(parse_id("").is_err());
        assert!(parse_id(&"a".repeat(31)).is_err());
        assert!(parse_id("zz18d087-648d-4990-86e8-19dca1d006d3").is_err());
    }
}
