//! Key and certificate helpers: `ferry x25519`, `ferry mldsa65` and `ferry tls cert`.

use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};

/// `ferry x25519`: the key pair with the private half clamped, the public half (REALITY's
/// `password`) and its BLAKE3 hash, in `xray x25519`'s three lines.
pub(crate) fn x25519_cmd(input: Option<&str>, std_encoding: bool) -> anyhow::Result<ExitCode> {
    use base64::Engine;
    let mut private = match input {
        Some(k) => ferry::config::reality::key32(k)
            .or_else(|| {
                let b = base64::engine::general_purpose::STANDARD
                    .decode(k.trim())
                    .ok()?;
                b.try_into().ok()
            })
            .ok_or_else(|| {
                anyhow::anyhow!("{k:?} is not a base64 X25519 private key of 32 bytes")
            })?,
        None => ferry::transport::reality::generate_x25519().0,
    };
    private[0] &= 248;
    private[31] &= 127;
    private[31] |= 64;
    let public = ferry::transport::reality::keys::x25519_public(&private);
    let enc = |b: &[u8]| match std_encoding {
        true => base64::engine::general_purpose::STANDARD.encode(b),
        false => ferry::config::reality::b64(b),
    };
    println!("PrivateKey: {}", enc(&private));
    println!("Password (PublicKey): {}", enc(&public));
    println!("Hash32: {}", enc(blake3::hash(&public).as_bytes()));
    Ok(ExitCode::SUCCESS)
}

/// `ferry mldsa65`: a seed (REALITY's `mldsa65Seed`) and its ML-DSA-65 public key
/// (`mldsa65Verify`), in `xray mldsa65`'s two lines.
pub(crate) fn mldsa65_cmd(input: Option<&str>) -> anyhow::Result<ExitCode> {
    let seed = match input {
        Some(k) => ferry::config::reality::key32(k)
            .ok_or_else(|| anyhow::anyhow!("{k:?} is not a base64url seed of 32 bytes"))?,
        None => {
            let mut s = [0u8; 32];
            ferry::common::rand::fill(&mut s);
            s
        }
    };
    let public = ferry::transport::reality::cert::mldsa65_public(&seed)
        .ok_or_else(|| anyhow::anyhow!("not a valid ML-DSA-65 seed"))?;
    println!("Seed: {}", ferry::config::reality::b64(&seed));
    println!("Verify: {}", ferry::config::reality::b64(&public));
    Ok(ExitCode::SUCCESS)
}

/// `ferry vlessenc`: an X25519 pair and an ML-KEM-768 pair as the strings of VLESS
/// Encryption, in `xray vlessenc`'s layout.
pub(crate) fn vlessenc_cmd() -> ExitCode {
    println!(
        "Choose one Authentication to use, do not mix them. Ephemeral key exchange is \
         Post-Quantum safe anyway."
    );
    for (label, dec, enc) in ferry::transport::vlessenc::generate() {
        println!();
        println!("Authentication: {label}");
        println!("\"decryption\": \"{dec}\"");
        println!("\"encryption\": \"{enc}\"");
    }
    ExitCode::SUCCESS
}

/// `ferry mlkem768`: a seed (VLESS Encryption's server key), its encapsulation key (the
/// client's) and that key's BLAKE3 hash, in `xray mlkem768`'s three lines.
pub(crate) fn mlkem768_cmd(input: Option<&str>) -> anyhow::Result<ExitCode> {
    use base64::Engine;
    use ferry::transport::vlessenc::config;
    let seed = match input {
        Some(k) => base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(k.trim())
            .ok()
            .filter(|b| b.len() == 64)
            .ok_or_else(|| anyhow::anyhow!("{k:?} is not a base64url seed of 64 bytes"))?,
        None => {
            let mut s = vec![0u8; 64];
            ferry::common::rand::fill(&mut s);
            s
        }
    };
    let key = config::mlkem_from_seed(&seed)
        .ok_or_else(|| anyhow::anyhow!("not a valid ML-KEM-768 seed"))?;
    let public = config::mlkem_public(&key);
    let b64 = ferry::config::reality::b64;
    println!("Seed: {}", b64(&seed));
    println!("Client: {}", b64(&public));
    println!("Hash32: {}", b64(blake3::hash(&public).as_bytes()));
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn tls_cert(domains: &[String], file: Option<&str>, days: u32) -> Result<ExitCode> {
    use ferry::transport::tls;
    let c = tls::generate_self_signed(domains, days).map_err(|e| anyhow!("{e}"))?;
    let pin = tls::hex(&c.pin);
    match file {
        Some(prefix) => {
            let (crt, key) = (format!("{prefix}.crt"), format!("{prefix}.key"));
            std::fs::write(&crt, &c.cert_pem).with_context(|| format!("writing {crt}"))?;
            write_private(&key, &c.key_pem).with_context(|| format!("writing {key}"))?;
            eprintln!("wrote {crt} and {key}");
            println!("{pin}");
        }
        None => {
            let lines = |p: &str| -> Vec<serde_json::Value> {
                p.lines().map(serde_json::Value::from).collect()
            };
            let v =
                serde_json::json!({"certificate": lines(&c.cert_pem), "key": lines(&c.key_pem)});
            println!("{}", serde_json::to_string_pretty(&v)?);
            eprintln!("pinnedPeerCertSha256: {pin}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a file only its owner can read.
fn write_private(path: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}
