//! Cipher suite order, as Go's TLS has it: a server answers the same ClientHello with the same
//! suite as Xray, sing-box and trojan-go (all Go), or the suite alone would tell Ferry apart.
//! Go's server ignores the client's order: on AES-GCM hardware it prefers AES-128-GCM, then
//! AES-256-GCM, then ChaCha20-Poly1305, unless the first suite it knows in the client's list
//! is not AES-GCM (a client without AES hardware), when ChaCha20 comes first.

use std::sync::{Arc, OnceLock};

use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::crypto::CryptoProvider;
use rustls::SupportedCipherSuite;

/// Go's order on AES-GCM hardware (crypto/tls `cipherSuitesPreferenceOrder` and
/// `defaultCipherSuitesTLS13`), the suites Ferry implements.
pub(super) fn aes_first() -> Vec<SupportedCipherSuite> {
    vec![
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ]
}

/// Go's order otherwise (`...NoAES`): ChaCha20 first.
fn chacha_first() -> Vec<SupportedCipherSuite> {
    vec![
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ]
}

/// The provider a server uses with a client that prefers AES-GCM (`aes`) or not.
pub(super) fn server_provider(aes: bool) -> Arc<CryptoProvider> {
    static P: OnceLock<[Arc<CryptoProvider>; 2]> = OnceLock::new();
    let [a, c] = P.get_or_init(|| {
        let with = |suites| {
            let mut p = rustls::crypto::aws_lc_rs::default_provider();
            p.cipher_suites = suites;
            Arc::new(p)
        };
        [with(aes_first()), with(chacha_first())]
    });
    if aes {
        a.clone()
    } else {
        c.clone()
    }
}

/// Go's `hasAESGCMHardwareSupport`.
pub fn aes_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1")
            && std::arch::is_x86_feature_detected!("ssse3")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The suites Go's TLS knows (TLS 1.2 with its insecure ones, and TLS 1.3), which decide
/// whether a client prefers AES-GCM; and of them, the AES-GCM ones it counts.
const GO_KNOWN: &[u16] = &[
    0x0005, 0x000a, 0x002f, 0x0035, 0x003c, 0x009c, 0x009d, 0xc007, 0xc009, 0xc00a, 0xc011, 0xc012,
    0xc013, 0xc014, 0xc023, 0xc027, 0xc02b, 0xc02c, 0xc02f, 0xc030, 0xcca8, 0xcca9, 0x1301, 0x1302,
    0x1303,
];
const GO_AES_GCM: &[u16] = &[0xc02b, 0xc02c, 0xc02f, 0xc030, 0x1301, 0x1302];

/// From the first bytes a client sent: whether it prefers AES-GCM (Go's `aesgcmPreferred`).
/// `None`: more bytes are needed to know. Bytes that are not a ClientHello read as
/// preferring AES (rustls refuses them anyway).
pub(super) fn prefers_aes(b: &[u8]) -> Option<bool> {
    const HEADER: usize = 5;
    if b.len() < HEADER {
        return if b.first().is_some_and(|&t| t != 22) {
            Some(true)
        } else {
            None
        };
    }
    if b[0] != 22 {
        return Some(true);
    }
    let record_end = HEADER + u16::from_be_bytes([b[3], b[4]]) as usize;
    // Handshake header (4), legacy version (2), random (32), then the session id.
    let sid_at = HEADER + 4 + 2 + 32;
    let need = |end: usize| -> Option<Option<bool>> {
        if end > record_end {
            Some(Some(true)) // not in the first record: not a ClientHello as clients send it
        } else if end > b.len() {
            Some(None)
        } else {
            None
        }
    };
    if let Some(r) = need(sid_at + 1) {
        return r;
    }
    if b[HEADER] != 1 {
        return Some(true);
    }
    let list_at = sid_at + 1 + b[sid_at] as usize + 2;
    if let Some(r) = need(list_at) {
        return r;
    }
    let list_len = u16::from_be_bytes([b[list_at - 2], b[list_at - 1]]) as usize;
    if let Some(r) = need(list_at + list_len) {
        return r;
    }
    let first_known = b[list_at..list_at + list_len]
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .find(|s| GO_KNOWN.contains(s));
    Some(first_known.is_some_and(|s| GO_AES_GCM.contains(&s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record offering `suites`, cut to `cut` bytes.
    fn hello(suites: &[u16]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(32);
        body.extend([9u8; 32]);
        body.extend(((suites.len() * 2) as u16).to_be_bytes());
        for s in suites {
            body.extend(s.to_be_bytes());
        }
        body.extend([1, 0, 0, 0]); // compression, no extensions
        let mut hs = vec![1, 0];
        hs.extend((body.len() as u16).to_be_bytes());
        hs.extend(body);
        let mut rec = vec![22, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn the_first_suite_go_knows_decides() {
        // GREASE and unknown suites are passed over.
        assert_eq!(prefers_aes(&hello(&[0x0a0a, 0x1301, 0x1303])), Some(true));
        assert_eq!(prefers_aes(&hello(&[0x1302, 0x1301])), Some(true));
        assert_eq!(prefers_aes(&hello(&[0x0a0a, 0x1303, 0x1301])), Some(false));
        assert_eq!(prefers_aes(&hello(&[0xcca9, 0xc02b])), Some(false));
        // AES-CBC is known and not AES-GCM.
        assert_eq!(prefers_aes(&hello(&[0xc013, 0xc02b])), Some(false));
        assert_eq!(prefers_aes(&hello(&[0x00ff])), Some(false));
    }

    #[test]
    fn a_cut_hello_waits_for_the_suites() {
        let h = hello(&[0x1303, 0x1301]);
        let list_end = 5 + 4 + 2 + 32 + 1 + 32 + 2 + 4;
        for n in 0..list_end {
            assert_eq!(prefers_aes(&h[..n]), None, "{n} bytes");
        }
        assert_eq!(prefers_aes(&h[..list_end]), Some(false));
        assert_eq!(prefers_aes(b"GET / HTTP/1.1\r\n"), Some(true));
        assert_eq!(prefers_aes(b"G"), Some(true));
        // A first record too short to hold the suites is decided at once.
        let mut short = h.clone();
        short[3..5].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(prefers_aes(&short), Some(true));
    }
}
