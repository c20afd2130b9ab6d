//! The reports' cases: what each report measures, and in which conditions.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::impair::Impair;
use crate::plan::{Test, TestbedPlan};
use crate::scenario;

use super::opts::{Case, REPORTS};

const G: u64 = 1 << 30;
const M: u64 = 1 << 20;

/// The cases of report `id`.
pub fn cases(id: &str, quick: bool, scenario_dir: &Path) -> Result<Vec<Case>> {
    Ok(match id {
        "000" => report_000(quick, scenario_dir),
        "001" => report_001(quick),
        "002" => report_002(quick),
        "003" => report_003(quick, scenario_dir),
        "004" => report_004(quick),
        _ => bail!(
            "no report {id:?}; the reports are {}",
            REPORTS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// A throughput case with no testbed, inner TLS or latency settings of its own.
fn case(label: String, scenario: &str, streams: &[usize], amount: u64) -> Case {
    Case {
        label,
        scenario: scenario.to_string(),
        tests: vec![Test::Throughput],
        streams: streams.to_vec(),
        amount,
        testbed: None,
        record: None,
        ttfb_count: 200,
        rr_count: 2000,
    }
}

/// VMess and the Shadowsocks/ShadowsocksR ciphers on loopback.
fn report_000(quick: bool, scenario_dir: &Path) -> Vec<Case> {
    let mut v = Vec::new();
    let mut scns: Vec<String> = ["vmess-aes-128-gcm", "vmess-chacha20-poly1305", "vmess-none"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    scns.extend(cipher_scenarios(scenario_dir));
    let (streams, amount): (&[usize], u64) = if quick {
        (&[1, 4], 128 * M)
    } else {
        (&[1, 2, 4], G)
    };
    for s in scns {
        v.push(case(s.clone(), &s, streams, amount));
    }
    v
}

/// The A -> B -> C -> D chains, node B capped.
fn report_001(quick: bool) -> Vec<Case> {
    let mut v = Vec::new();
    let caps: &[u32] = if quick {
        &[20, 100]
    } else {
        &[5, 10, 20, 50, 100]
    };
    // A capped measurement must outlast many cgroup periods (20 ms).
    let (streams, amount): (&[usize], u64) = if quick { (&[1], 256 * M) } else { (&[1, 4], G) };
    for s in [
        "vless-tcp",
        "vless-tls",
        "vless-vision",
        "vmess-tls",
        "vmess-ws-tls",
        "vmess-ws-tls-nginx",
        "trojan-tls",
    ] {
        for &cap in caps {
            let mut c = case(format!("{s}, B at {cap}%"), s, streams, amount);
            c.testbed = Some(TestbedPlan {
                cap: Some(("b".into(), cap)),
                ..TestbedPlan::default()
            });
            c.record = Some(16 * 1024);
            v.push(c);
        }
    }
    v
}

/// Vision against plain TLS per inner record size and CPU cap of node C.
fn report_002(quick: bool) -> Vec<Case> {
    let mut v = Vec::new();
    let caps: &[u32] = if quick {
        &[10, 100]
    } else {
        &[5, 10, 20, 30, 50, 100]
    };
    let records: &[usize] = if quick {
        &[1024, 16384]
    } else {
        &[1024, 2048, 4096, 8192, 16384]
    };
    let amount = if quick { 256 * M } else { G };
    for &rec in records {
        for s in ["vless-tls", "vless-vision"] {
            for &cap in caps {
                let mut c = case(
                    format!("{s}, {}K records, C at {cap}%", rec / 1024),
                    s,
                    &[1],
                    amount,
                );
                c.testbed = Some(TestbedPlan {
                    cap: Some(("c".into(), cap)),
                    ..TestbedPlan::default()
                });
                c.record = Some(rec);
                v.push(c);
            }
        }
    }
    v
}

/// The ciphers on a clean link and on a 50 ms round trip with 1% loss.
fn report_003(quick: bool, scenario_dir: &Path) -> Vec<Case> {
    let mut v = Vec::new();
    let scns = cipher_scenarios(scenario_dir);
    let lossy = Impair {
        delay: Duration::from_millis(25),
        loss_pct: 1.0,
        seed: 3,
        ..Impair::default()
    };
    for s in &scns {
        for (link, impair) in [("clean", None), ("50 ms RTT, 1% loss", Some(lossy))] {
            let amount = match (impair.is_some(), quick) {
                (false, false) => 512 * M,
                (false, true) => 64 * M,
                (true, false) => 16 * M,
                (true, true) => 2 * M,
            };
            let mut c = case(format!("{s}, {link}"), s, &[1], amount);
            c.tests = vec![Test::Throughput, Test::Latency];
            c.testbed = Some(TestbedPlan {
                impair,
                congestion: Some("cubic".into()),
                ..TestbedPlan::default()
            });
            if impair.is_some() {
                (c.ttfb_count, c.rr_count) = if quick { (10, 40) } else { (50, 300) };
            } else if quick {
                (c.ttfb_count, c.rr_count) = (50, 300);
            }
            v.push(c);
        }
    }
    v
}

/// Fallbacks and nginx in front, on loopback.
fn report_004(quick: bool) -> Vec<Case> {
    let mut v = Vec::new();
    let (streams, amount): (&[usize], u64) = if quick {
        (&[1, 4], 128 * M)
    } else {
        (&[1, 4], G)
    };
    for s in [
        "fallback-tcp",
        "fallback-unix",
        "fallback-abstract",
        "fallback-padded",
        "vless-tls",
        "nginx-stream-tcp",
        "nginx-stream-unix",
        "nginx-stream-pp",
        "vless-tcp",
    ] {
        v.push(case(s.to_string(), s, streams, amount));
    }
    v
}

/// The Shadowsocks AEAD/2022 scenarios and the ShadowsocksR stream-cipher rows (the
/// `ssr-ciphers` group without its AEAD rows, which run through Shadowsocks above): the cipher
/// rows of 000 and 003.
fn cipher_scenarios(scenario_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = [
        "ss-aes-128-gcm",
        "ss-aes-256-gcm",
        "ss-chacha20-ietf-poly1305",
        "ss-2022-blake3-aes-128-gcm",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(
        scenario::expand(scenario_dir, &["ssr-ciphers".to_string()])
            .into_iter()
            .filter(|s| !s.contains("-aead-")),
    );
    v
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_report_has_cases_on_shipped_scenarios() {
        let dir = crate::scenario::default_dir();
        let all = crate::scenario::list(&dir).unwrap();
        for (id, _) in REPORTS {
            for quick in [true, false] {
                let cs = cases(id, quick, &dir).unwrap();
                assert!(!cs.is_empty(), "{id}");
                for c in &cs {
                    assert!(
                        all.contains(&c.scenario),
                        "{id}: {} is not shipped",
                        c.scenario
                    );
                }
                let labels: std::collections::BTreeSet<&String> =
                    cs.iter().map(|c| &c.label).collect();
                assert_eq!(labels.len(), cs.len(), "{id}: case labels repeat");
            }
        }
        assert!(cases("005", true, &dir).is_err());
        // The shapes the issue names.
        let c002 = cases("002", false, &dir).unwrap();
        assert_eq!(
            c002.len(),
            5 * 2 * 6,
            "5 record sizes x TLS/Vision x 6 caps"
        );
        let c003 = cases("003", true, &dir).unwrap();
        assert!(c003.iter().any(|c| c
            .testbed
            .as_ref()
            .and_then(|t| t.impair)
            .is_some_and(|i| i.loss_pct == 1.0 && i.delay == Duration::from_millis(25))));
    }
}
