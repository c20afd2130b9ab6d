//! A compact, immutable set of byte strings: every string in one arena (a two-byte length, then
//! the bytes) and an open-addressing table of arena offsets. About `len + 10` bytes a string,
//! against 60–80 for a `HashSet<String>`; one hash and usually one comparison per lookup.

/// An immutable set of strings (at most 64 KiB each).
#[derive(Debug, Clone, Default)]
pub struct StrSet {
    arena: Vec<u8>,
    /// `offset + 1` into `arena`; 0 is an empty slot. Length a power of two (or 0).
    slots: Box<[u32]>,
    len: usize,
}

#[inline]
fn hash(s: &[u8]) -> u64 {
    // FxHash-style word mixing with a final avalanche; not DoS-resistant, which a set built
    // from the config (never from the network) does not need.
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h: u64 = (s.len() as u64).wrapping_mul(K);
    let mut it = s.chunks_exact(8);
    for c in &mut it {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = it.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    h ^ (h >> 29)
}

impl StrSet {
    /// Builds the set (duplicates kept once; strings longer than 65535 bytes are dropped).
    pub fn new<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> StrSet {
        let items: Vec<&[u8]> = items.into_iter().filter(|s| s.len() <= 0xffff).collect();
        if items.is_empty() {
            return StrSet::default();
        }
        let cap = (items.len() * 2).next_power_of_two().max(8);
        let mut set = StrSet {
            arena: Vec::new(),
            slots: vec![0u32; cap].into_boxed_slice(),
            len: 0,
        };
        for s in items {
            set.insert(s);
        }
        set.arena.shrink_to_fit();
        set
    }

    fn at(&self, off: usize) -> &[u8] {
        let n = usize::from(u16::from_le_bytes([self.arena[off], self.arena[off + 1]]));
        &self.arena[off + 2..off + 2 + n]
    }

    fn insert(&mut self, s: &[u8]) {
        let mask = self.slots.len() - 1;
        let mut i = hash(s) as usize & mask;
        loop {
            match self.slots[i] {
                0 => break,
                o if self.at(o as usize - 1) == s => return,
                _ => i = (i + 1) & mask,
            }
        }
        let off = self.arena.len();
        self.arena
            .extend_from_slice(&(s.len() as u16).to_le_bytes());
        self.arena.extend_from_slice(s);
        self.slots[i] = off as u32 + 1;
        self.len += 1;
    }

    /// Whether `s` is in the set.
    #[inline]
    pub fn contains(&self, s: &[u8]) -> bool {
        if self.len == 0 {
            return false;
        }
        let mask = self.slots.len() - 1;
        let mut i = hash(s) as usize & mask;
        loop {
            match self.slots[i] {
                0 => return false,
                o if self.at(o as usize - 1) == s => return true,
                _ => i = (i + 1) & mask,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.slots.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_what_was_inserted_only() {
        let words: Vec<String> = (0..5000).map(|i| format!("host{i}.example")).collect();
        let s = StrSet::new(
            words
                .iter()
                .map(|w| w.as_bytes())
                .chain([&b"host1.example"[..]]),
        );
        assert_eq!(s.len(), 5000);
        for w in &words {
            assert!(s.contains(w.as_bytes()), "{w}");
        }
        for i in 5000..6000 {
            assert!(!s.contains(format!("host{i}.example").as_bytes()));
        }
        assert!(!s.contains(b""));
        assert!(StrSet::new([&b""[..]]).contains(b""));
        assert!(!StrSet::default().contains(b"x"));
        assert!(s.heap_bytes() < 5000 * 40, "{}", s.heap_bytes());
    }
}
