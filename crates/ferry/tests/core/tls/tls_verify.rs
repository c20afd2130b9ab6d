//! How a TLS outbound verifies its server, end to end from the config: `pinnedPeerCertSha256`
//! on a leaf or on a CA of the chain, the legacy chain and public-key pins of older Xray,
//! `verifyPeerCertByName`, and `allowInsecure` beside them. Two Ferry servers serve chains
//! made here: a leaf issued by an intermediate CA, and an attacker's self-signed leaf for the
//! same name with that (public) intermediate appended. One Ferry client has an outbound per
//! case, each reached through an inbound of its own.

use super::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    PublicKeyData,
};

const ID: &str = "27848739-7e62-4138-9fd3-098a63964b6b";

fn sha256(b: &[u8]) -> Vec<u8> {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b)
        .as_ref()
        .to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn ca(name: &str) -> CertificateParams {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

/// A VLESS+TLS Ferry server serving `chain` (PEM) with `key`.
fn server(d: &std::path::Path, name: &str, chain: &str, key: &str) -> (u16, Proc) {
    let (crt, k) = (d.join(format!("{name}.crt")), d.join(format!("{name}.key")));
    std::fs::write(&crt, chain).unwrap();
    std::fs::write(&k, key).unwrap();
    let port = free_port();
    let p = ferry(
        &format!(
            r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
              "settings":{{"clients":[{{"id":"{ID}"}}],"decryption":"none"}},
              "streamSettings":{{"security":"tls","tlsSettings":{{"certificates":[
                {{"certificateFile":"{}","keyFile":"{}"}}]}}}}}}],
              "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
            crt.display(),
            k.display()
        ),
        &[port],
    );
    (port, p)
}

fn echo_ok(entry: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", entry)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let data = pattern(4096, 3);
    let _ = s.write_all(&data);
    let mut got = vec![0u8; data.len()];
    s.read_exact(&mut got).is_ok() && got == data
}

#[test]
fn pins_names_and_allow_insecure_verify_as_xray() {
    let d = tempdir::Dir::new("tls-verify");
    let root = CertifiedIssuer::self_signed(ca("root"), KeyPair::generate().unwrap()).unwrap();
    let inter =
        CertifiedIssuer::signed_by(ca("inter"), KeyPair::generate().unwrap(), &root).unwrap();
    let leaf_params = CertificateParams::new(vec!["ferry.test".to_string()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &inter).unwrap();
    let forged_key = KeyPair::generate().unwrap();
    let forged = leaf_params.self_signed(&forged_key).unwrap();
    let (good, _g) = server(
        d.path(),
        "good",
        &format!("{}{}", leaf.pem(), inter.pem()),
        &leaf_key.serialize_pem(),
    );
    let (bad, _b) = server(
        d.path(),
        "forged",
        &format!("{}{}", forged.pem(), inter.pem()),
        &forged_key.serialize_pem(),
    );
    std::fs::write(d.path().join("root.crt"), root.pem()).unwrap();
    let root_file = d.path().join("root.crt");
    let with_root = format!(
        r#""disableSystemRoot":true,"certificates":[{{"usage":"verify","certificateFile":"{}"}}]"#,
        root_file.display()
    );

    let pin_inter = hex(&sha256(inter.der()));
    let pin_leaf = hex(&sha256(leaf.der()));
    // Older Xray's chain hash: SHA-256 of the leaf, then of (that, the next one's SHA-256).
    let mut two = sha256(leaf.der());
    two.extend(sha256(inter.der()));
    let chain_pin = b64(&sha256(&two));
    let root_key = b64(&sha256(&root.key().subject_public_key_info()));
    let other_key = b64(&sha256(&forged_key.subject_public_key_info()));

    // (case, server, tlsSettings, passes)
    let cases: Vec<(&str, u16, String, bool)> = vec![
        (
            "pinned CA + forged leaf",
            bad,
            format!(r#""serverName":"ferry.test","pinnedPeerCertSha256":"{pin_inter}""#),
            false,
        ),
        (
            "pinned CA + issued leaf",
            good,
            format!(r#""serverName":"ferry.test","pinnedPeerCertSha256":"{pin_inter}""#),
            true,
        ),
        (
            "pinned CA + issued leaf, wrong name",
            good,
            format!(r#""serverName":"other.test","pinnedPeerCertSha256":"{pin_inter}""#),
            false,
        ),
        (
            "pinned leaf, any name",
            good,
            format!(r#""serverName":"other.test","pinnedPeerCertSha256":"{pin_leaf}""#),
            true,
        ),
        (
            "chain pin + allowInsecure",
            good,
            format!(
                r#""serverName":"other.test","allowInsecure":true,"pinnedPeerCertificateChainSha256":["{chain_pin}"]"#
            ),
            true,
        ),
        (
            "chain pin + allowInsecure, other chain",
            bad,
            format!(
                r#""serverName":"ferry.test","allowInsecure":true,"pinnedPeerCertificateChainSha256":["{chain_pin}"]"#
            ),
            false,
        ),
        (
            "public key pin on the root",
            good,
            format!(
                r#""serverName":"ferry.test",{with_root},"pinnedPeerCertificatePublicKeySha256":["{root_key}"]"#
            ),
            true,
        ),
        (
            "public key pin, other key",
            good,
            format!(
                r#""serverName":"ferry.test",{with_root},"pinnedPeerCertificatePublicKeySha256":["{other_key}"]"#
            ),
            false,
        ),
        (
            "verifyPeerCertByName",
            good,
            format!(
                r#""serverName":"cdn.example",{with_root},"verifyPeerCertByName":"nope.test,ferry.test""#
            ),
            true,
        ),
        (
            "verifyPeerCertInNames, wrong names",
            good,
            format!(
                r#""serverName":"ferry.test",{with_root},"verifyPeerCertInNames":["nope.test"]"#
            ),
            false,
        ),
        (
            "verifyPeerCertByName, forged leaf",
            bad,
            format!(
                r#""serverName":"cdn.example",{with_root},"verifyPeerCertByName":"ferry.test""#
            ),
            false,
        ),
    ];
    let echo = echo_server();
    let mut inbounds = Vec::new();
    let mut outbounds = Vec::new();
    let mut rules = Vec::new();
    let mut entries = Vec::new();
    for (i, (_, port, tls, _)) in cases.iter().enumerate() {
        let entry = free_port();
        entries.push(entry);
        inbounds.push(format!(
            r#"{{"tag":"in{i}","listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}"#,
            echo.port()
        ));
        outbounds.push(format!(
            r#"{{"tag":"out{i}","protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
              "port":{port},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
              "streamSettings":{{"security":"tls","tlsSettings":{{{tls}}}}}}}"#
        ));
        rules.push(format!(
            r#"{{"inboundTag":["in{i}"],"outboundTag":"out{i}"}}"#
        ));
    }
    let client = ferry(
        &format!(
            r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{}],"outbounds":[{}],
              "routing":{{"rules":[{}]}}}}"#,
            inbounds.join(","),
            outbounds.join(","),
            rules.join(",")
        ),
        &entries,
    );
    let mut wrong = Vec::new();
    for ((name, _, _, passes), entry) in cases.iter().zip(&entries) {
        if echo_ok(*entry) != *passes {
            wrong.push(format!("{name}: expected passes={passes}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", client.output());
    // allowInsecure is warned about at start, with the outbound it is in.
    let out = client.output();
    assert!(
        out.contains(
            "outbounds[4].streamSettings.tlsSettings.allowInsecure: only its pins are checked"
        ),
        "{out}"
    );
    assert!(
        out.contains("matches no pinnedPeerCertSha256")
            || out.contains("UnknownIssuer")
            || out.contains("invalid peer certificate"),
        "{out}"
    );
}
