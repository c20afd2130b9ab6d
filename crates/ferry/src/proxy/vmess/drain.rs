//! How much of a bad VMess request the server reads before it closes, derived from the users'
//! ids exactly as Xray derives it, so that a prober finds the same byte threshold (where the
//! close comes at once rather than at the handshake timeout) on Ferry as on Xray with the same
//! config.
//!
//! Xray: seed = CRC-64/ECMA chained over HMAC-SHA256("VMESSBSKDF", id) of each user in order;
//! Go's `math/rand` seeded with it draws `base = Intn(3266)` and `max = Intn(64) + 1`; each
//! bad connection drains `16 + 38 + base + rand(max)` bytes (the last draw is per connection).

use std::sync::OnceLock;

/// Bytes every drain covers (the auth id and the AEAD header prefix).
const FOUNDATION: usize = 16 + 38;
const MAX_BASE: i32 = 3266;
const MAX_RAND: i32 = 64;

/// The per-inbound part of the drain size: `(base, max)`; a connection drains
/// `FOUNDATION + base + uniform[0, max)` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSize {
    base: usize,
    max: usize,
}

impl DrainSize {
    /// From the users' ids in configuration order; `None` without users (Xray then draws a
    /// random seed, which [`DrainSize::random`] stands for).
    pub fn from_ids<'a>(ids: impl IntoIterator<Item = &'a [u8; 16]>) -> Option<DrainSize> {
        let k = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, b"VMESSBSKDF");
        let mut seed = 0u64;
        for id in ids {
            seed = crc64_ecma(seed, aws_lc_rs::hmac::sign(&k, id).as_ref());
        }
        (seed != 0).then(|| DrainSize::from_seed(seed as i64))
    }

    /// From a random seed.
    pub fn random() -> DrainSize {
        let mut b = [0u8; 8];
        crate::common::rand::fill(&mut b);
        DrainSize::from_seed(i64::from_le_bytes(b))
    }

    fn from_seed(seed: i64) -> DrainSize {
        let mut r = GoRand::new(seed);
        let base = r.intn(MAX_BASE) as usize;
        let max = r.intn(MAX_RAND) as usize + 1;
        DrainSize { base, max }
    }

    /// The bytes one bad connection drains (the last part drawn for it).
    pub fn draw(&self) -> usize {
        let mut r = [0u8; 2];
        crate::common::rand::fill(&mut r);
        FOUNDATION + self.base + u16::from_le_bytes(r) as usize % self.max
    }
}

/// Go's CRC-64 `Update` with the ECMA table (reflected polynomial 0xC96C5795D7870F42).
fn crc64_ecma(crc: u64, data: &[u8]) -> u64 {
    static TABLE: OnceLock<[u64; 256]> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [0u64; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0xC96C_5795_D787_0F42
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut c = !crc;
    for &b in data {
        c = t[((c as u8) ^ b) as usize] ^ (c >> 8);
    }
    !c
}

const LEN: usize = 607;
const TAP: usize = 273;

/// Go's `math/rand` source (an additive lagged Fibonacci generator), as `rand.New(rand.NewSource(seed))`.
struct GoRand {
    vec: [u64; LEN],
    tap: usize,
    feed: usize,
}

/// Park-Miller step of Go's seeding (`seedrand`).
fn seedrand(x: i32) -> i32 {
    const A: i32 = 48271;
    const Q: i32 = 44488;
    const R: i32 = 3399;
    let (hi, lo) = (x / Q, x % Q);
    let x = A * lo - R * hi;
    if x < 0 {
        x + i32::MAX
    } else {
        x
    }
}

/// Fills `vec` from a seed as Go's seeding does, with `shifts` for the three 31-bit draws.
fn seed_vec(seed: i64, shifts: (u32, u32)) -> [u64; LEN] {
    let mut s = seed % i32::MAX as i64;
    if s < 0 {
        s += i32::MAX as i64;
    }
    if s == 0 {
        s = 89_482_311;
    }
    let mut x = s as i32;
    let mut vec = [0u64; LEN];
    for i in -20i32..LEN as i32 {
        x = seedrand(x);
        if i >= 0 {
            let mut u = (x as u64) << shifts.0;
            x = seedrand(x);
            u ^= (x as u64) << shifts.1;
            x = seedrand(x);
            u ^= x as u64;
            vec[i as usize] = u;
        }
    }
    vec
}

/// Go's `rngCooked`: the state of the generator seeded with 1 (Go's generator program's own
/// seeding) after 7.8e12 steps, reached by jumping ahead (`z^n mod z^607 - z^334 - 1`).
fn cooked() -> &'static [u64; LEN] {
    static COOKED: OnceLock<[u64; LEN]> = OnceLock::new();
    COOKED.get_or_init(|| {
        const STEPS: u64 = 7_800_000_000_000;
        let init = seed_vec(1, (20, 10));
        // The value written at step k (k >= 0) is y(k) = y(k-607) + y(k-273); y(j) for
        // j in -607..0 is the initial value at the position step j+607 writes, and step k
        // writes position (LEN - TAP - 1 - k) mod LEN. Polynomial degree m stands for y(m-607).
        let pos = |j: i64| (((LEN - TAP - 1) as i64 - j).rem_euclid(LEN as i64)) as usize;
        let start: Vec<u64> = (0..LEN).map(|m| init[pos(m as i64 - LEN as i64)]).collect();
        let mut r = z_pow(STEPS);
        let mut out = [0u64; LEN];
        // y(j) for j in STEPS-607..STEPS, i.e. degrees STEPS..STEPS+607.
        for m in 0..LEN as u64 {
            let v = r
                .iter()
                .zip(&start)
                .fold(0u64, |acc, (c, y)| acc.wrapping_add(c.wrapping_mul(*y)));
            let j = (STEPS + m) as i64 - LEN as i64;
            out[pos(j)] = v;
            times_z(&mut r);
        }
        out
    })
}

/// Reduces a polynomial of degree < 2*LEN modulo `z^607 - z^334 - 1`.
fn reduce(p: &mut Vec<u64>) {
    for d in (LEN..p.len()).rev() {
        let c = p[d];
        if c != 0 {
            p[d - LEN] = p[d - LEN].wrapping_add(c);
            p[d - TAP] = p[d - TAP].wrapping_add(c);
        }
    }
    p.truncate(LEN);
}

fn mul(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut p = vec![0u64; 2 * LEN];
    for (i, &x) in a.iter().enumerate() {
        if x == 0 {
            continue;
        }
        for (j, &y) in b.iter().enumerate() {
            p[i + j] = p[i + j].wrapping_add(x.wrapping_mul(y));
        }
    }
    reduce(&mut p);
    p
}

fn times_z(p: &mut Vec<u64>) {
    p.insert(0, 0);
    reduce(p);
}

fn z_pow(mut n: u64) -> Vec<u64> {
    let mut result = vec![0u64; LEN];
    result[0] = 1;
    let mut base = vec![0u64; LEN];
    base[1] = 1;
    while n > 0 {
        if n & 1 == 1 {
            result = mul(&result, &base);
        }
        n >>= 1;
        if n > 0 {
            base = mul(&base, &base);
        }
    }
    result
}

impl GoRand {
    fn new(seed: i64) -> GoRand {
        let mut vec = seed_vec(seed, (40, 20));
        for (v, c) in vec.iter_mut().zip(cooked()) {
            *v ^= c;
        }
        GoRand {
            vec,
            tap: 0,
            feed: LEN - TAP,
        }
    }

    fn uint64(&mut self) -> u64 {
        self.tap = (self.tap + LEN - 1) % LEN;
        self.feed = (self.feed + LEN - 1) % LEN;
        let x = self.vec[self.feed].wrapping_add(self.vec[self.tap]);
        self.vec[self.feed] = x;
        x
    }

    fn int31(&mut self) -> i32 {
        ((self.uint64() & (u64::MAX >> 1)) >> 32) as i32
    }

    /// Go's `Intn` for `0 < n < 2^31` (`Int31n`: rejection sampling, then modulo).
    fn intn(&mut self, n: i32) -> i32 {
        if n & (n - 1) == 0 {
            return self.int31() & (n - 1);
        }
        let max = (i32::MAX as u32 - (1u32 << 31) % n as u32) as i32;
        let mut v = self.int31();
        while v > max {
            v = self.int31();
        }
        v % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cooked_table_starts_as_gos() {
        // The first and last entries of Go's rngCooked.
        let c = cooked();
        assert_eq!(c[0] as i64, -4181792142133755926);
        assert_eq!(c[1] as i64, -4576982950128230565);
        assert_eq!(c[2] as i64, 1395769623340756751);
    }

    #[test]
    fn draws_as_go() {
        // rand.New(rand.NewSource(seed)).Intn(3266), .Intn(64), printed by Go 1.26.
        for (seed, a, b) in [
            (1i64, 1801, 15),
            (-7, 2249, 16),
            (123456789, 2746, 22),
            (0x7fff_ffff, 402, 18),
        ] {
            let mut r = GoRand::new(seed);
            assert_eq!((r.intn(3266), r.intn(64)), (a, b), "seed {seed}");
        }
    }

    #[test]
    fn size_from_ids_as_xray() {
        // Xray's drainer for one user b831381d-6324-4d53-ad4f-8cda48b30811: seed
        // -6861858670645681245, base 1691, max 19 (computed with Go's hash/crc64 and math/rand).
        let id = [
            0xb8, 0x31, 0x38, 0x1d, 0x63, 0x24, 0x4d, 0x53, 0xad, 0x4f, 0x8c, 0xda, 0x48, 0xb3,
            0x08, 0x11,
        ];
        let d = DrainSize::from_ids([&id]).unwrap();
        assert_eq!(
            d,
            DrainSize {
                base: 1691,
                max: 19
            }
        );
        for _ in 0..100 {
            let n = d.draw();
            assert!((54 + 1691..54 + 1691 + 19).contains(&n), "{n}");
        }
        assert_eq!(DrainSize::from_ids([]), None);
    }
}
