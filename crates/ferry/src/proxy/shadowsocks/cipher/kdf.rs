//! Key derivation: password to key (EVP_BytesToKey, 2022 base64 PSKs), the AEAD and 2022
//! session subkeys, and the 2022 identity keys.

use md5::Digest;

/// Decodes one base64 2022 key and checks its length.
pub fn decode_psk(b64: &str, len: usize) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let t = b64.trim();
    let key = base64::engine::general_purpose::STANDARD
        .decode(t)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(t))
        .map_err(|_| format!("{t:?} is not base64"))?;
    if key.len() != len {
        return Err(format!(
            "the key must be {len} bytes (base64 of {len} random bytes, e.g. `openssl rand -base64 {len}`), found {}",
            key.len()
        ));
    }
    Ok(key)
}

/// OpenSSL's `EVP_BytesToKey` with MD5, one round, no salt (key part only).
pub fn evp_bytes_to_key(password: &[u8], key_len: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(key_len + 16);
    let mut prev: Option<[u8; 16]> = None;
    while key.len() < key_len {
        let mut h = md5::Md5::new();
        if let Some(p) = prev {
            h.update(p);
        }
        h.update(password);
        let d: [u8; 16] = h.finalize().into();
        key.extend_from_slice(&d);
        prev = Some(d);
    }
    key.truncate(key_len);
    key
}

/// HKDF-SHA1 (RFC 5869), output `len` bytes (≤ 255·20).
pub fn hkdf_sha1(ikm: &[u8], salt: &[u8], info: &[u8], out: &mut [u8]) {
    let hk = hkdf::Hkdf::<sha1::Sha1>::new(Some(salt), ikm);
    // Lengths used here (≤ 64) are far below the HKDF limit.
    let _ = hk.expand(info, out);
}

/// The AEAD-edition session subkey: HKDF-SHA1(master key, salt, "ss-subkey").
pub fn aead_subkey(master: &[u8], salt: &[u8]) -> Vec<u8> {
    let mut k = vec![0u8; master.len()];
    hkdf_sha1(master, salt, b"ss-subkey", &mut k);
    k
}

/// BLAKE3 `derive_key(context, a || b)`, first `len` (≤ 32) bytes.
pub fn blake3_derive(context: &str, a: &[u8], b: &[u8], len: usize) -> Vec<u8> {
    let mut h = blake3::Hasher::new_derive_key(context);
    h.update(a);
    h.update(b);
    let out = h.finalize();
    out.as_bytes()[..len.min(32)].to_vec()
}

/// The 2022 session subkey from a PSK and a salt (or UDP session id).
pub fn session_subkey_2022(psk: &[u8], salt: &[u8]) -> Vec<u8> {
    blake3_derive("shadowsocks 2022 session subkey", psk, salt, psk.len())
}

/// The 2022 identity subkey (EIH) from an iPSK and a salt.
pub fn identity_subkey_2022(ipsk: &[u8], salt: &[u8]) -> Vec<u8> {
    blake3_derive("shadowsocks 2022 identity subkey", ipsk, salt, ipsk.len())
}

/// First 16 bytes of BLAKE3(key): how EIH names the next key.
pub fn psk_hash16(key: &[u8]) -> [u8; 16] {
    let h = blake3::hash(key);
    let mut o = [0u8; 16];
    o.copy_from_slice(&h.as_bytes()[..16]);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

    #[test]
    fn evp_bytes_to_key_vectors() {
        assert_eq!(
            evp_bytes_to_key(b"password", 16),
            hex("5f4dcc3b5aa765d61d8327deb882cf99")
        );
        assert_eq!(
            evp_bytes_to_key(b"password", 32),
            hex("5f4dcc3b5aa765d61d8327deb882cf99 2b95990a9151374abd8ff8c5a7a0fe08")
        );
        assert_eq!(
            evp_bytes_to_key(b"12345678901234561234567890123456", 32),
            hex("9b69a546f0c55fd22d2f5b6fdce27deb55d817b5d610488cfaa88c21c8a094eb")
        );
        let k = hex("8c5ea5e7ade3b3133a479e6aff0506dd7952bf75984a26722070cd9e44a09353");
        for len in [16, 24, 32] {
            assert_eq!(
                evp_bytes_to_key("123中1文da18测)试abc!#$@(".as_bytes(), len),
                k[..len]
            );
        }
        let k = hex("4b01a2d762fada9ede4d1034a13dc69c3b528b738236b99cd3a472d2933580d6");
        assert_eq!(
            evp_bytes_to_key(b"Imakethis_LongPassPhraseFor_safety_2019_0928@_@!", 32),
            k
        );
    }

    #[test]
    fn hkdf_sha1_vectors() {
        let mut okm = [0u8; 42];
        hkdf_sha1(
            &hex("0b0b0b0b0b0b0b0b0b0b0b"),
            &hex("000102030405060708090a0b0c"),
            &hex("f0f1f2f3f4f5f6f7f8f9"),
            &mut okm,
        );
        assert_eq!(
            okm.to_vec(),
            hex("085a01ea1b10f36933068b56efa5ad81a4f14b822f5b091568a9cdd4f155fda2c22e422478d305f3f896")
        );
        let mut k = [0u8; 16];
        hkdf_sha1(b"password", b"random-salt", b"ss-subkey", &mut k);
        assert_eq!(k.to_vec(), hex("64a301074f05220743fdfeb584aa1216"));
        let mut k = [0u8; 32];
        hkdf_sha1(b"shadowsocks", b"saltsalt", b"infoinfo", &mut k);
        assert_eq!(
            k.to_vec(),
            hex("99a88d5a2ce18ae45f1ff44aab96405fa9ea922ca0b32494399427fa1a16f879")
        );
    }

    #[test]
    fn blake3_vectors() {
        let ctx = "BLAKE3 2019-12-27 16:29:52 test vectors context";
        assert_eq!(
            blake3::hash(b"").as_bytes().to_vec(),
            hex("af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262")
        );
        assert_eq!(
            blake3::hash(&[0]).as_bytes().to_vec(),
            hex("2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213")
        );
        assert_eq!(
            blake3_derive(ctx, b"", b"", 32),
            hex("2cc39783c223154fea8dfb7c1b1660f2ac2dcbd1c1de8277b0b0dd39b7e50d7d")
        );
        // The split between the two inputs does not matter (PSK || salt).
        assert_eq!(
            blake3_derive(ctx, &[0], b"", 32),
            hex("b3e2e340a117a499c6cf2398a19ee0d29cca2bb7404c73063382693bf66cb06c")
        );
        assert_eq!(
            blake3_derive(ctx, b"", &[0], 16),
            blake3_derive(ctx, &[0], b"", 32)[..16]
        );
    }
}
