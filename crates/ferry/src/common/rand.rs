//! Random bytes from the system's cryptographic generator.

/// Fills `buf` with cryptographically secure random bytes.
///
/// Panics if the system generator fails. The bytes are salts, keys, nonces and padding: returning
/// with `buf` untouched (zeros, or a previous value) would silently reuse keys and nonces, a
/// security bug, and a system RNG that fails is not something a proxy can recover from, so
/// stopping is the only safe outcome.
pub fn fill(buf: &mut [u8]) {
    if aws_lc_rs::rand::fill(buf).is_err() {
        panic!(
            "the system random number generator failed; refusing to continue without randomness"
        );
    }
}

/// A random `u64`.
pub fn u64() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn fills_with_fresh_bytes_each_time() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        fill(&mut a);
        fill(&mut b);
        assert_ne!(a, [0u8; 32]);
        assert_ne!(b, [0u8; 32]);
        assert_ne!(a, b);
        // An empty buffer is fine too.
        fill(&mut []);
    }
}
