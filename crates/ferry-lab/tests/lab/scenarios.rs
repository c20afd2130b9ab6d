//! Every shipped scenario parses, and every implementation's templates render to valid configs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::Path;

use ferry_lab::runner::ALL_IMPLS;
use ferry_lab::scenario::{self, Entry};

const MUST_SHIP: &[&str] = &[
    "bare",
    "relay",
    "vmess-aes-128-gcm",
    "vmess-chacha20-poly1305",
    "vmess-none",
    "vmess-zero",
    "vless-tcp",
    "vless-tls",
    "vless-vision",
    "trojan-tls",
    "ss-aes-128-gcm",
    "ss-aes-256-gcm",
    "ss-chacha20-ietf-poly1305",
    "ss-2022-blake3-aes-128-gcm",
    "ss-aes-128-cfb",
    "vmess-ws-tls-nginx",
    "vmess-tls",
    "vless-reality",
    "vless-vision-reality",
    "ssr-ciphers-rc4-md5-auth_aes128_md5-tls",
    "ssr-ciphers-aes-256-cfb-origin-plain",
    "ssr-ciphers-aead-aes-128-gcm",
    "vless-xhttp-packet-up-tls",
    "vless-xhttp-stream-up-tls",
    "vless-xhttp-stream-one-tls",
    "vless-xhttp-reality",
    "tun",
    "tproxy",
];

/// `ssr-ciphers` (issue 16's cipher report) names a group: its six SSR rows and two AEAD rows.
#[test]
fn groups_expand_to_their_scenarios() {
    let dir = scenario::default_dir();
    let v = scenario::expand(&dir, &["ssr-ciphers".to_string(), "relay".to_string()]);
    assert_eq!(v.len(), 9, "{v:?}");
    assert!(v[..8].iter().all(|n| n.starts_with("ssr-ciphers-")));
    // A scenario's own name is never a group, even when others extend it.
    assert_eq!(v[8], "relay");
    assert_eq!(scenario::expand(&dir, &["nope".to_string()]), ["nope"]);
}

#[test]
fn every_scenario_parses_and_renders() {
    let dir = scenario::default_dir();
    let names = scenario::list(&dir).unwrap();
    for m in MUST_SHIP {
        assert!(names.iter().any(|n| n == m), "scenario {m} missing");
    }
    for name in &names {
        let s = scenario::load(&dir, name).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert!(!s.description.is_empty());
        if s.entry == Entry::Direct {
            continue;
        }
        for imp in s.impls.keys() {
            assert!(
                ALL_IMPLS.contains(&imp.as_str()),
                "{name}: unknown impl {imp}"
            );
            let procs = s.processes(imp).unwrap();
            let mut vars = ferry_lab::runner::base_vars(
                &s,
                Path::new("/tmp/x"),
                Some((Path::new("/tmp/c.pem"), Path::new("/tmp/k.pem"), "00ff")),
            );
            vars.insert("config".into(), "/tmp/x/c.json".into());
            let mut texts: Vec<String> = Vec::new();
            for p in &procs {
                texts.extend(p.args.clone());
                texts.extend(p.setup.iter().flatten().cloned());
                if let Some(t) = s.template_text(&dir, p).unwrap() {
                    texts.push(t);
                }
            }
            let mut n = 20000;
            for t in &texts {
                for ph in scenario::placeholders(t) {
                    if ph.ends_with("_port") && !vars.contains_key(&ph) {
                        n += 1;
                        vars.insert(ph, n.to_string());
                    }
                }
            }
            // A transparent chain has no entry: loadgen talks to the receiver's address.
            assert!(
                s.entry == Entry::Transparent || vars.contains_key("entry_port"),
                "{name}/{imp}: no {{{{entry_port}}}}"
            );
            if s.entry == Entry::Transparent {
                assert!(
                    procs.iter().any(|p| !p.setup.is_empty()),
                    "{name}/{imp}: a transparent chain with no setup takes nothing"
                );
            }
            for p in &procs {
                for ln in &p.listen {
                    assert!(
                        vars.contains_key(ln),
                        "{name}/{imp}/{}: listen {ln} unused",
                        p.name
                    );
                }
                for a in p.args.iter().chain(p.setup.iter().flatten()) {
                    let out = scenario::render(a, &vars)
                        .unwrap_or_else(|e| panic!("{name}/{imp}: {e:#}"));
                    assert!(
                        !out.contains("{{"),
                        "{name}/{imp}: placeholder left in {a:?}"
                    );
                }
                let Some(t) = s.template_text(&dir, p).unwrap() else {
                    continue;
                };
                let out = scenario::render(&t, &vars)
                    .unwrap_or_else(|e| panic!("{name}/{imp}/{}: {e:#}", p.name));
                assert!(
                    !out.contains("{{"),
                    "{name}/{imp}/{}: placeholder left",
                    p.name
                );
                if p.config_ext() == "json" {
                    serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| {
                        panic!("{name}/{imp}/{}: invalid JSON: {e}\n{out}", p.name)
                    });
                }
            }
        }
    }
}

#[test]
fn unknown_scenario_is_a_clear_error() {
    let e = scenario::load(&scenario::default_dir(), "no-such-thing").unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("unknown scenario \"no-such-thing\""), "{msg}");
    assert!(msg.contains("relay"), "should list known names: {msg}");
}

#[test]
fn render_rejects_unknown_placeholders() {
    let vars = BTreeMap::new();
    assert!(scenario::render("{{typo_here}}", &vars).is_err());
}
