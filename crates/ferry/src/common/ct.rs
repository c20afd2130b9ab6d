//! Comparisons of secrets (passwords, user keys and hashes, MACs) whose time tells nothing of
//! where two values differ, so that a prober cannot learn a secret byte by byte from how long
//! a refusal takes.

/// Whether `a` and `b` are equal, in time that depends only on their lengths.
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok()
}

/// The first of `items` whose secret (`key`) equals `b`. Every item is compared, each in
/// constant time, so the time tells neither where bytes differ nor which item matched.
pub fn find<'a, T>(items: &'a [T], key: impl Fn(&T) -> &[u8], b: &[u8]) -> Option<&'a T> {
    position(items, key, b).and_then(|i| items.get(i))
}

/// The index of [`find`]'s item.
pub fn position<T>(items: &[T], key: impl Fn(&T) -> &[u8], b: &[u8]) -> Option<usize> {
    let mut found = None;
    for (i, it) in items.iter().enumerate() {
        if eq(key(it), b) && found.is_none() {
            found = Some(i);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_and_finds() {
        assert!(eq(b"secret", b"secret"));
        assert!(!eq(b"secret", b"secreT"));
        assert!(!eq(b"secret", b"secret!"));
        assert!(eq(b"", b""));
        let items = [b"aa".to_vec(), b"bb".to_vec(), b"bb".to_vec()];
        assert_eq!(position(&items, |v| v, b"bb"), Some(1));
        assert_eq!(find(&items, |v| v, b"aa"), Some(&items[0]));
        assert_eq!(find(&items, |v| v, b"cc"), None);
    }
}
