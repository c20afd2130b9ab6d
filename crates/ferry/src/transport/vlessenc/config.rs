//! The `decryption` (server) and `encryption` (client) strings, read as Xray v26.3.27 reads
//! them: `mlkem768x25519plus.<mode>.<tickets>.[padding blocks.]<key blocks>`.

use aws_lc_rs::kem;
use base64::Engine;
use ml_kem::ml_kem_768;

/// How the handshake and records look on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Raw X25519 keys / ML-KEM ciphertexts, records with plain TLS 1.3 headers.
    Native,
    /// The key-exchange values XORed with the server key's keystream.
    Xorpub,
    /// As `xorpub`, and every record header XORed too: the whole stream looks random.
    Random,
}

/// The padding schedule: lengths and gaps, each `[probability, min, max]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Padding {
    pub lens: Vec<[i64; 3]>,
    pub gaps: Vec<[i64; 3]>,
}

impl Padding {
    /// `100-111-1111.75-0-111.50-0-3333`, Xray's schedule when none is given.
    fn effective(&self) -> (Vec<[i64; 3]>, Vec<[i64; 3]>) {
        if self.lens.is_empty() {
            return (vec![[100, 111, 1111], [50, 0, 3333]], vec![[75, 0, 111]]);
        }
        (self.lens.clone(), self.gaps.clone())
    }

    /// Draws one handshake's padding: the total length, each piece and each gap (ms).
    pub fn draw(&self) -> (usize, Vec<usize>, Vec<u64>) {
        let (lens, gaps) = self.effective();
        let mut total = 0;
        let mut pieces = Vec::with_capacity(lens.len());
        for [p, min, max] in lens {
            let l = match p >= between(0, 100) {
                true => between(min, max).max(0) as usize,
                false => 0,
            };
            total += l;
            pieces.push(l);
        }
        let gaps = gaps
            .into_iter()
            .map(|[p, min, max]| match p >= between(0, 100) {
                true => between(min, max).max(0) as u64,
                false => 0,
            })
            .collect();
        (total, pieces, gaps)
    }
}

/// Go's `crypto.RandBetween(from, to)`: uniform in `[from, to)`, `from` when the range is empty.
pub fn between(from: i64, to: i64) -> i64 {
    if to <= from {
        return from;
    }
    let span = (to - from) as u64;
    from + (crate::common::rand::u64() % span) as i64
}

fn parse_padding(s: &str) -> Result<Padding, String> {
    let mut p = Padding::default();
    let mut max_len = 0i64;
    for (i, block) in s.split('.').enumerate() {
        let x: Vec<&str> = block.split('-').collect();
        if x.len() < 3 || x[..3].iter().any(|v| v.is_empty()) {
            return Err(format!("invalid padding lenth/gap parameter: {block}"));
        }
        let mut y = [0i64; 3];
        for (k, v) in y.iter_mut().enumerate() {
            *v = x[k]
                .parse()
                .map_err(|_| format!("invalid padding number {:?} in {block}", x[k]))?;
        }
        if i == 0 && (y[0] < 100 || y[1] < 35 || y[2] < 35) {
            return Err("first padding length must not be smaller than 35".into());
        }
        if i % 2 == 0 {
            max_len += y[1].max(y[2]);
            p.lens.push(y);
        } else {
            p.gaps.push(y);
        }
    }
    if max_len > 18 + 65535 {
        return Err("total padding length must not be larger than 65553".into());
    }
    Ok(p)
}

/// Go's `base64.RawURLEncoding`: no `=`, non-canonical trailing bits accepted.
fn b64(s: &str) -> Option<Vec<u8>> {
    const LAX: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_encode_padding(false)
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
    );
    LAX.decode(s).ok()
}

/// The parts common to both strings once Xray's shape check passed.
struct Parts {
    mode: Mode,
    tickets: String,
    padding: Option<String>,
    keys: Vec<Vec<u8>>,
}

/// Xray's shape check: `None` when the string is not a `mlkem768x25519plus` one (then it must
/// be `none`); `key_lens` are the key sizes a key block may decode to.
fn split(s: &str, key_lens: [usize; 2]) -> Option<Parts> {
    let b: Vec<&str> = s.split('.').collect();
    if b.len() < 4 || b[0] != "mlkem768x25519plus" {
        return None;
    }
    let mode = match b[1] {
        "native" => Mode::Native,
        "xorpub" => Mode::Xorpub,
        "random" => Mode::Random,
        _ => return None,
    };
    let mut padding = Vec::new();
    let mut keys = Vec::new();
    for r in &b[3..] {
        if r.len() < 20 {
            padding.push(*r);
            continue;
        }
        let k = b64(r).filter(|k| key_lens.contains(&k.len()))?;
        keys.push(k);
    }
    Some(Parts {
        mode,
        tickets: b[2].to_string(),
        padding: (!padding.is_empty()).then(|| padding.join(".")),
        keys,
    })
}

/// One server key of the chain.
pub enum ServerKey {
    X25519 {
        private: [u8; 32],
        public: [u8; 32],
    },
    MlKem {
        key: Box<ml_kem_768::DecapsulationKey>,
        public: Vec<u8>,
    },
}

impl ServerKey {
    pub fn public(&self) -> &[u8] {
        match self {
            ServerKey::X25519 { public, .. } => public,
            ServerKey::MlKem { public, .. } => public,
        }
    }

    /// The relay's size on the wire: an X25519 public key or an ML-KEM-768 ciphertext.
    pub fn relay_len(&self) -> usize {
        match self {
            ServerKey::X25519 { .. } => 32,
            ServerKey::MlKem { .. } => MLKEM_CT,
        }
    }
}

pub const MLKEM_EK: usize = 1184;
pub const MLKEM_CT: usize = 1088;

/// An inbound's `decryption`.
pub struct ServerConfig {
    pub mode: Mode,
    /// Ticket lifetime: `from` seconds (randomised 50-100 %) when `to` is 0, else `[from, to)`;
    /// both 0: no 0-RTT.
    pub seconds: (i64, i64),
    pub padding: Padding,
    pub keys: Vec<ServerKey>,
    /// BLAKE3 of each key's public half.
    pub hashes: Vec<[u8; 32]>,
}

impl ServerConfig {
    /// `Ok(None)` for `"none"`; errors say what Xray says.
    pub fn parse(s: &str) -> Result<Option<ServerConfig>, String> {
        let Some(p) = split(s, [32, 64]) else {
            return match s {
                "none" => Ok(None),
                "" => Err("please add/set \"decryption\":\"none\" to every settings".into()),
                _ => Err(format!("unsupported \"decryption\": {s}")),
            };
        };
        let t = p.tickets.strip_suffix('s').unwrap_or(&p.tickets);
        let bad = || format!("unsupported \"decryption\": {s}");
        let (from, to) = match t.split_once('-') {
            Some((a, b)) => (
                a.parse::<i64>().map_err(|_| bad())?,
                b.parse::<i64>().map_err(|_| bad())?,
            ),
            None => (t.parse::<i64>().map_err(|_| bad())?, 0),
        };
        let padding = match &p.padding {
            Some(x) => parse_padding(x)?,
            None => Padding::default(),
        };
        if p.keys.is_empty() {
            return Err("empty nfsSKeysBytes".into());
        }
        let mut keys = Vec::new();
        for k in p.keys {
            if k.len() == 32 {
                let mut private = [0u8; 32];
                private.copy_from_slice(&k);
                let public = crate::transport::reality::keys::x25519_public(&private);
                keys.push(ServerKey::X25519 { private, public });
            } else {
                let key = mlkem_from_seed(&k).ok_or("not an ML-KEM-768 seed")?;
                let public = mlkem_public(&key);
                keys.push(ServerKey::MlKem {
                    key: Box::new(key),
                    public,
                });
            }
        }
        let hashes = keys
            .iter()
            .map(|k| *blake3::hash(k.public()).as_bytes())
            .collect();
        Ok(Some(ServerConfig {
            mode: p.mode,
            seconds: (from, to),
            padding,
            keys,
            hashes,
        }))
    }

    /// `16 + relays`: what the server reads first.
    pub fn relays_len(&self) -> usize {
        self.keys.iter().map(|k| k.relay_len() + 32).sum::<usize>() - 32
    }
}

/// One server public key of the chain, as the client holds it.
pub enum ClientKey {
    X25519([u8; 32]),
    MlKem(Box<kem::EncapsulationKey<kem::AlgorithmId>>, Vec<u8>),
}

impl ClientKey {
    pub fn bytes(&self) -> &[u8] {
        match self {
            ClientKey::X25519(k) => k,
            ClientKey::MlKem(_, b) => b,
        }
    }
    pub fn relay_len(&self) -> usize {
        match self {
            ClientKey::X25519(_) => 32,
            ClientKey::MlKem(..) => MLKEM_CT,
        }
    }
}

/// An outbound user's `encryption`.
pub struct ClientConfig {
    pub mode: Mode,
    /// `0rtt`: resume with a ticket when one is held.
    pub zero_rtt: bool,
    pub padding: Padding,
    pub keys: Vec<ClientKey>,
    pub hashes: Vec<[u8; 32]>,
}

impl ClientConfig {
    /// `Ok(None)` for `"none"`; errors say what Xray says.
    pub fn parse(s: &str) -> Result<Option<ClientConfig>, String> {
        let bad = || format!("unsupported \"encryption\": {s}");
        let Some(p) = split(s, [32, MLKEM_EK]) else {
            return match s {
                "none" => Ok(None),
                "" => Err("please add/set \"encryption\":\"none\" for every user".into()),
                _ => Err(bad()),
            };
        };
        let zero_rtt = match p.tickets.as_str() {
            "1rtt" => false,
            "0rtt" => true,
            _ => return Err(bad()),
        };
        let padding = match &p.padding {
            Some(x) => parse_padding(x)?,
            None => Padding::default(),
        };
        if p.keys.is_empty() {
            return Err("empty nfsPKeysBytes".into());
        }
        let mut keys = Vec::new();
        for k in p.keys {
            if k.len() == 32 {
                let mut public = [0u8; 32];
                public.copy_from_slice(&k);
                keys.push(ClientKey::X25519(public));
            } else {
                let ek = kem::EncapsulationKey::new(&kem::ML_KEM_768, &k)
                    .map_err(|_| "not an ML-KEM-768 encapsulation key".to_string())?;
                keys.push(ClientKey::MlKem(Box::new(ek), k));
            }
        }
        let hashes = keys
            .iter()
            .map(|k| *blake3::hash(k.bytes()).as_bytes())
            .collect();
        Ok(Some(ClientConfig {
            mode: p.mode,
            zero_rtt,
            padding,
            keys,
            hashes,
        }))
    }

    pub fn relays_len(&self) -> usize {
        self.keys.iter().map(|k| k.relay_len() + 32).sum::<usize>() - 32
    }
}

/// ML-KEM-768's key from its 64-byte seed `d || z` (FIPS 203 KeyGen).
pub fn mlkem_from_seed(seed: &[u8]) -> Option<ml_kem_768::DecapsulationKey> {
    let seed = ml_kem::Seed::try_from(seed).ok()?;
    Some(ml_kem_768::DecapsulationKey::from_seed(seed))
}

/// The 1184-byte encapsulation key of `key`.
pub fn mlkem_public(key: &ml_kem_768::DecapsulationKey) -> Vec<u8> {
    use ml_kem::KeyExport;
    key.encapsulation_key().to_bytes().to_vec()
}

/// Decapsulates a 1088-byte ciphertext.
pub fn mlkem_decapsulate(key: &ml_kem_768::DecapsulationKey, ct: &[u8]) -> Option<[u8; 32]> {
    use ml_kem::Decapsulate;
    let ct = ml_kem_768::Ciphertext::try_from(ct).ok()?;
    let k = key.decapsulate(&ct);
    let mut out = [0u8; 32];
    out.copy_from_slice(&k);
    Some(out)
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("mode", &self.mode)
            .field("seconds", &self.seconds)
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("mode", &self.mode)
            .field("zero_rtt", &self.zero_rtt)
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}
