//! The stream ciphers SSR deployments use (shadowsocksr.md §2.1). The ones Shadowsocks has too
//! (AES-CFB/CTR, ChaCha20-IETF, RC4-MD5, none) are the Shadowsocks [`StreamCrypt`]; the rest
//! (`table`, `rc4`, `rc4-md5-6`, original ChaCha20, Salsa20, XChaCha20, Camellia-CFB) are added
//! here around it. Keys: `EVP_BytesToKey(password, key_len)` as Shadowsocks, 16 bytes for the
//! methods without a key of their own (`none`, `table`, `rc4`), which the plugins still use.

use aes::cipher::{KeyIvInit, StreamCipher};
use md5::Digest;

use crate::proxy::shadowsocks::cipher::{evp_bytes_to_key, Method as SsMethod};
use crate::proxy::shadowsocks::stream_cipher::StreamCrypt;

/// A configured SSR stream method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    None,
    Table,
    Rc4,
    Rc4Md5,
    Rc4Md5_6,
    Aes128Cfb,
    Aes192Cfb,
    Aes256Cfb,
    Aes128Ctr,
    Aes192Ctr,
    Aes256Ctr,
    Camellia128Cfb,
    Camellia192Cfb,
    Camellia256Cfb,
    Aes128Ofb,
    Aes192Ofb,
    Aes256Ofb,
    Aes128Cfb8,
    Aes192Cfb8,
    Aes256Cfb8,
    BfCfb,
    Cast5Cfb,
    DesCfb,
    Rc2Cfb,
    Chacha20,
    Chacha20Ietf,
    Salsa20,
    XChacha20,
    XSalsa20,
}

impl Method {
    pub const ALL: &'static [Method] = &[
        Method::None,
        Method::Table,
        Method::Rc4,
        Method::Rc4Md5,
        Method::Rc4Md5_6,
        Method::Aes128Cfb,
        Method::Aes192Cfb,
        Method::Aes256Cfb,
        Method::Aes128Ctr,
        Method::Aes192Ctr,
        Method::Aes256Ctr,
        Method::Camellia128Cfb,
        Method::Camellia192Cfb,
        Method::Camellia256Cfb,
        Method::Aes128Ofb,
        Method::Aes192Ofb,
        Method::Aes256Ofb,
        Method::Aes128Cfb8,
        Method::Aes192Cfb8,
        Method::Aes256Cfb8,
        Method::BfCfb,
        Method::Cast5Cfb,
        Method::DesCfb,
        Method::Rc2Cfb,
        Method::Chacha20,
        Method::Chacha20Ietf,
        Method::Salsa20,
        Method::XChacha20,
        Method::XSalsa20,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::None => "none",
            Method::Table => "table",
            Method::Rc4 => "rc4",
            Method::Rc4Md5 => "rc4-md5",
            Method::Rc4Md5_6 => "rc4-md5-6",
            Method::Aes128Cfb => "aes-128-cfb",
            Method::Aes192Cfb => "aes-192-cfb",
            Method::Aes256Cfb => "aes-256-cfb",
            Method::Aes128Ctr => "aes-128-ctr",
            Method::Aes192Ctr => "aes-192-ctr",
            Method::Aes256Ctr => "aes-256-ctr",
            Method::Camellia128Cfb => "camellia-128-cfb",
            Method::Camellia192Cfb => "camellia-192-cfb",
            Method::Camellia256Cfb => "camellia-256-cfb",
            Method::Aes128Ofb => "aes-128-ofb",
            Method::Aes192Ofb => "aes-192-ofb",
            Method::Aes256Ofb => "aes-256-ofb",
            Method::Aes128Cfb8 => "aes-128-cfb8",
            Method::Aes192Cfb8 => "aes-192-cfb8",
            Method::Aes256Cfb8 => "aes-256-cfb8",
            Method::BfCfb => "bf-cfb",
            Method::Cast5Cfb => "cast5-cfb",
            Method::DesCfb => "des-cfb",
            Method::Rc2Cfb => "rc2-cfb",
            Method::Chacha20 => "chacha20",
            Method::Chacha20Ietf => "chacha20-ietf",
            Method::Salsa20 => "salsa20",
            Method::XChacha20 => "xchacha20",
            Method::XSalsa20 => "xsalsa20",
        }
    }

    pub fn parse(name: &str) -> Option<Method> {
        let n = name.to_ascii_lowercase();
        let n = if n == "plain" || n == "dummy" {
            "none".to_string()
        } else {
            n
        };
        Method::ALL.iter().copied().find(|m| m.name() == n)
    }

    /// Cipher key length (16 for the methods that have none: the plugins still use it).
    pub fn key_len(self) -> usize {
        match self {
            Method::Aes192Cfb
            | Method::Aes192Ctr
            | Method::Camellia192Cfb
            | Method::Aes192Ofb
            | Method::Aes192Cfb8 => 24,
            Method::Aes256Cfb
            | Method::Aes256Ctr
            | Method::Camellia256Cfb
            | Method::Aes256Ofb
            | Method::Aes256Cfb8
            | Method::Chacha20
            | Method::Chacha20Ietf
            | Method::Salsa20
            | Method::XChacha20
            | Method::XSalsa20 => 32,
            Method::DesCfb => 8,
            _ => 16,
        }
    }

    pub fn iv_len(self) -> usize {
        match self {
            Method::None | Method::Table | Method::Rc4 => 0,
            Method::Rc4Md5_6 => 6,
            Method::Chacha20 | Method::Salsa20 => 8,
            Method::Chacha20Ietf => 12,
            Method::XChacha20 | Method::XSalsa20 => 24,
            Method::BfCfb | Method::Cast5Cfb | Method::DesCfb | Method::Rc2Cfb => 8,
            _ => 16,
        }
    }

    /// The key for a password.
    pub fn key(self, password: &str) -> Vec<u8> {
        evp_bytes_to_key(password.as_bytes(), self.key_len())
    }

    /// The Shadowsocks method with the same construction, if there is one.
    fn shadowsocks(self) -> Option<SsMethod> {
        Some(match self {
            Method::Rc4Md5 => SsMethod::Rc4Md5,
            Method::Aes128Cfb => SsMethod::Aes128Cfb,
            Method::Aes192Cfb => SsMethod::Aes192Cfb,
            Method::Aes256Cfb => SsMethod::Aes256Cfb,
            Method::Aes128Ctr => SsMethod::Aes128Ctr,
            Method::Aes192Ctr => SsMethod::Aes192Ctr,
            Method::Aes256Ctr => SsMethod::Aes256Ctr,
            Method::Chacha20Ietf => SsMethod::Chacha20Ietf,
            _ => return None,
        })
    }
}

type CamelliaCfbE<C> = cfb_mode::BufEncryptor<C>;
type CamelliaCfbD<C> = cfb_mode::BufDecryptor<C>;

/// One direction of an SSR stream cipher, positioned in its keystream.
pub enum Crypt {
    Ss(StreamCrypt),
    /// Byte substitution (the table of the key); nothing to advance.
    Table(std::sync::Arc<[u8; 256]>),
    Rc4(Box<rc4::Rc4>),
    ChaCha(Box<chacha20::ChaCha20Legacy>),
    XChaCha(Box<chacha20::XChaCha20>),
    Salsa(Box<salsa20::Salsa20>),
    Cam128E(Box<CamelliaCfbE<camellia::Camellia128>>),
    Cam192E(Box<CamelliaCfbE<camellia::Camellia192>>),
    Cam256E(Box<CamelliaCfbE<camellia::Camellia256>>),
    Cam128D(Box<CamelliaCfbD<camellia::Camellia128>>),
    Cam192D(Box<CamelliaCfbD<camellia::Camellia192>>),
    Cam256D(Box<CamelliaCfbD<camellia::Camellia256>>),
    /// The rarer modes and block ciphers (OFB, CFB8, CFB64 of Blowfish/CAST5/DES/RC2,
    /// XSalsa20): one boxed keystream each.
    Other(Box<dyn Keystream>),
}

/// One direction of a rarely used cipher.
pub trait Keystream: Send {
    fn apply(&mut self, buf: &mut [u8]);
}

struct Ks<C>(C);
impl<C: StreamCipher + Send> Keystream for Ks<C> {
    fn apply(&mut self, buf: &mut [u8]) {
        self.0.apply_keystream(buf);
    }
}

struct CfbE<C: aes::cipher::BlockCipherEncrypt>(cfb_mode::BufEncryptor<C>);
impl<C: aes::cipher::BlockCipherEncrypt + Send> Keystream for CfbE<C>
where
    cfb_mode::BufEncryptor<C>: Send,
{
    fn apply(&mut self, buf: &mut [u8]) {
        self.0.encrypt(buf);
    }
}

struct CfbD<C: aes::cipher::BlockCipherEncrypt>(cfb_mode::BufDecryptor<C>);
impl<C: aes::cipher::BlockCipherEncrypt + Send> Keystream for CfbD<C>
where
    cfb_mode::BufDecryptor<C>: Send,
{
    fn apply(&mut self, buf: &mut [u8]) {
        self.0.decrypt(buf);
    }
}

/// CFB-8: one block encryption per byte (the `cfb8` crate's whole-buffer API, driven a byte
/// at a time so the state carries across calls).
struct Cfb8<C: aes::cipher::BlockCipherEncrypt + Clone> {
    cipher: C,
    reg: [u8; 16],
    encrypt: bool,
}
impl<C: aes::cipher::BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16> + Clone + Send>
    Keystream for Cfb8<C>
{
    fn apply(&mut self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            let mut blk = aes::Block::from(self.reg);
            self.cipher.encrypt_block(&mut blk);
            let c = if self.encrypt { *b ^ blk[0] } else { *b };
            *b ^= blk[0];
            self.reg.copy_within(1.., 0);
            self.reg[15] = c;
        }
    }
}

fn cfb<C>(key: &[u8], iv: &[u8], encrypt: bool) -> Option<Box<dyn Keystream>>
where
    C: aes::cipher::BlockCipherEncrypt + aes::cipher::KeyInit + Send + 'static,
    cfb_mode::BufEncryptor<C>: Send,
    cfb_mode::BufDecryptor<C>: Send,
{
    Some(if encrypt {
        Box::new(CfbE(
            cfb_mode::BufEncryptor::<C>::new_from_slices(key, iv).ok()?,
        ))
    } else {
        Box::new(CfbD(
            cfb_mode::BufDecryptor::<C>::new_from_slices(key, iv).ok()?,
        ))
    })
}

fn cfb8<C>(key: &[u8], iv: &[u8], encrypt: bool) -> Option<Box<dyn Keystream>>
where
    C: aes::cipher::BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16>
        + aes::cipher::KeyInit
        + Clone
        + Send
        + 'static,
{
    Some(Box::new(Cfb8 {
        cipher: C::new_from_slice(key).ok()?,
        reg: iv.try_into().ok()?,
        encrypt,
    }))
}

impl Crypt {
    /// Keys one direction (`encrypt` picks the CFB direction). `None` when lengths do not fit.
    pub fn new(m: Method, key: &[u8], iv: &[u8], encrypt: bool) -> Option<Crypt> {
        if let Some(sm) = m.shadowsocks() {
            return StreamCrypt::new(sm, key, iv, encrypt).map(Crypt::Ss);
        }
        Some(match m {
            Method::None => Crypt::Ss(StreamCrypt::None),
            Method::Table => {
                let t = table_for(key);
                Crypt::Table(if encrypt { t.0 } else { t.1 })
            }
            Method::Rc4 => Crypt::Rc4(Box::new(rc4_new(key)?)),
            Method::Rc4Md5_6 => {
                let mut h = md5::Md5::new();
                h.update(key);
                h.update(iv);
                Crypt::Rc4(Box::new(rc4_new(&h.finalize())?))
            }
            Method::Chacha20 => Crypt::ChaCha(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?)),
            Method::XChacha20 => {
                Crypt::XChaCha(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            Method::Salsa20 => Crypt::Salsa(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?)),
            Method::Camellia128Cfb if encrypt => {
                Crypt::Cam128E(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            Method::Camellia192Cfb if encrypt => {
                Crypt::Cam192E(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            Method::Camellia256Cfb if encrypt => {
                Crypt::Cam256E(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            Method::Camellia128Cfb => {
                Crypt::Cam128D(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            Method::Camellia192Cfb => {
                Crypt::Cam192D(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            Method::Camellia256Cfb => {
                Crypt::Cam256D(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            Method::Aes128Ofb => Crypt::Other(Box::new(Ks(
                ofb::Ofb::<aes::Aes128>::new_from_slices(key, iv).ok()?,
            ))),
            Method::Aes192Ofb => Crypt::Other(Box::new(Ks(
                ofb::Ofb::<aes::Aes192>::new_from_slices(key, iv).ok()?,
            ))),
            Method::Aes256Ofb => Crypt::Other(Box::new(Ks(
                ofb::Ofb::<aes::Aes256>::new_from_slices(key, iv).ok()?,
            ))),
            Method::Aes128Cfb8 => Crypt::Other(cfb8::<aes::Aes128>(key, iv, encrypt)?),
            Method::Aes192Cfb8 => Crypt::Other(cfb8::<aes::Aes192>(key, iv, encrypt)?),
            Method::Aes256Cfb8 => Crypt::Other(cfb8::<aes::Aes256>(key, iv, encrypt)?),
            Method::BfCfb => Crypt::Other(cfb::<blowfish::Blowfish>(key, iv, encrypt)?),
            Method::Cast5Cfb => Crypt::Other(cfb::<cast5::Cast5>(key, iv, encrypt)?),
            Method::DesCfb => Crypt::Other(cfb::<des::Des>(key, iv, encrypt)?),
            Method::Rc2Cfb => Crypt::Other(cfb::<rc2::Rc2>(key, iv, encrypt)?),
            Method::XSalsa20 => Crypt::Other(Box::new(Ks(
                <salsa20::XSalsa20 as KeyIvInit>::new_from_slices(key, iv).ok()?,
            ))),
            _ => return None,
        })
    }

    /// Encrypts or decrypts `src` into `dst[..src.len()]` (`dst` at least as long; longer by
    /// [`CFB_SLACK`](crate::proxy::shadowsocks::stream_cipher::CFB_SLACK) spares AES-CFB a copy).
    pub fn apply_to(&mut self, src: &[u8], dst: &mut [u8]) {
        if let Crypt::Ss(c) = self {
            return c.apply_to(src, dst);
        }
        if let Some(d) = dst.get_mut(..src.len()) {
            d.copy_from_slice(src);
            self.apply(d);
        }
    }

    /// Encrypts or decrypts `buf` in place, advancing the keystream.
    pub fn apply(&mut self, buf: &mut [u8]) {
        match self {
            Crypt::Ss(c) => c.apply(buf),
            Crypt::Table(t) => {
                for b in buf.iter_mut() {
                    *b = t[*b as usize];
                }
            }
            Crypt::Rc4(c) => c.apply_keystream(buf),
            Crypt::ChaCha(c) => c.apply_keystream(buf),
            Crypt::XChaCha(c) => c.apply_keystream(buf),
            Crypt::Salsa(c) => c.apply_keystream(buf),
            Crypt::Cam128E(c) => c.encrypt(buf),
            Crypt::Cam192E(c) => c.encrypt(buf),
            Crypt::Cam256E(c) => c.encrypt(buf),
            Crypt::Cam128D(c) => c.decrypt(buf),
            Crypt::Cam192D(c) => c.decrypt(buf),
            Crypt::Cam256D(c) => c.decrypt(buf),
            Crypt::Other(k) => k.apply(buf),
        }
    }
}

/// RC4 keyed with a 16-byte key (what every SSR use of RC4 has).
pub fn rc4_new(key: &[u8]) -> Option<rc4::Rc4> {
    use aes::cipher::KeyInit;
    rc4::Rc4::new_from_slice(key).ok()
}

type Tables = (std::sync::Arc<[u8; 256]>, std::sync::Arc<[u8; 256]>);

/// The `table` method's encrypt and decrypt tables for `key` (built once per key: 1023 sorts).
fn table_for(key: &[u8]) -> Tables {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<Vec<u8>, Tables>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
        return t.clone();
    }
    let enc = get_table(key);
    let mut dec = [0u8; 256];
    for (i, &e) in enc.iter().enumerate() {
        dec[e as usize] = i as u8;
    }
    let t = (Arc::new(enc), Arc::new(dec));
    let mut g = cache.lock().unwrap_or_else(|e| e.into_inner());
    if g.len() > 64 {
        g.clear();
    }
    g.insert(key.to_vec(), t.clone());
    t
}

/// The classic Shadowsocks table: `a` = LE64(MD5(key)[..8]); stably sort 0..=255 by
/// `a mod (x + i)` for i in 1..1024.
pub fn get_table(key: &[u8]) -> [u8; 256] {
    let d = md5::Md5::digest(key);
    let a = u64::from_le_bytes(crate::common::array(&d[..8]));
    let mut t: Vec<u8> = (0..=255u8).collect();
    for i in 1..1024u64 {
        t.sort_by_key(|&x| a % (x as u64 + i));
    }
    let mut out = [0u8; 256];
    out.copy_from_slice(&t);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

    #[test]
    fn table_vectors() {
        // crypto/table.py's test: get_table("foobar!") starts like this.
        let t = get_table(b"foobar!");
        assert_eq!(
            &t[..16],
            &[60, 53, 84, 138, 217, 94, 88, 23, 39, 242, 219, 35, 12, 157, 165, 181]
        );
        // §8 #5: SSR seeds the table from MD5(key) = MD5(MD5(password)).
        let key = Method::Table.key("password");
        let mut e = Crypt::new(Method::Table, &key, &[], true).unwrap();
        let mut b = b"hello".to_vec();
        e.apply(&mut b);
        assert_eq!(b, hex("85985656ed"));
        let mut d = Crypt::new(Method::Table, &key, &[], false).unwrap();
        d.apply(&mut b);
        assert_eq!(b, b"hello");
    }

    #[test]
    fn every_method_round_trips_in_pieces() {
        for &m in Method::ALL {
            let key = m.key("pw");
            assert_eq!(key.len(), m.key_len());
            let iv = vec![7u8; m.iv_len()];
            let mut e = Crypt::new(m, &key, &iv, true).unwrap_or_else(|| panic!("{m:?}"));
            let mut d = Crypt::new(m, &key, &iv, false).unwrap();
            let pt: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
            let mut b = pt.clone();
            for c in b.chunks_mut(37) {
                e.apply(c);
            }
            if m != Method::None {
                assert_ne!(b, pt, "{m:?}");
            }
            for c in b.chunks_mut(101) {
                d.apply(c);
            }
            assert_eq!(b, pt, "{m:?}");
        }
    }

    #[test]
    fn original_chacha20_has_an_8_byte_nonce_and_64_bit_counter() {
        // draft-agl-tls-chacha20poly1305 test vector 1: zero key and nonce.
        let mut c = Crypt::new(Method::Chacha20, &[0; 32], &[0; 8], true).unwrap();
        let mut b = [0u8; 16];
        c.apply(&mut b);
        assert_eq!(b.to_vec(), hex("76b8e0ada0f13d90405d6ae55386bd28"));
    }
}
