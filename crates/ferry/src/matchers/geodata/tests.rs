//! Geodata loading and matching against small files written by the tests (routing.md §1.6).

use super::wire::{encode_geoip, encode_geosite, Cidr, Domain, DomainType};
use super::*;
use crate::app::router::{DomainSet, IpSet};
use crate::matchers::domain::geosite;
use crate::matchers::lookup::lookup;

/// A fresh folder holding `geoip.dat`, `geosite.dat` and `ext/custom.dat`.
pub(crate) fn fixture() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ferry-geo-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(dir.join("ext")).unwrap();
    write_files(&dir);
    dir
}

fn d(kind: DomainType, value: &'static str, attrs: &[&'static str]) -> Domain<'static> {
    Domain {
        kind,
        value,
        attrs: attrs.to_vec(),
    }
}

/// The files the unit tests and `tests/routing/geodata.rs` share.
pub(crate) fn write_files(dir: &Path) {
    use DomainType::*;
    let geoip = encode_geoip(&[
        ("CN", &[Cidr::V4(0x01000100, 24)]),
        (
            "PRIVATE",
            &[
                Cidr::V4(0x0a000000, 8),
                Cidr::V4(0xc0a80000, 16),
                Cidr::V4(0x7f000000, 8),
                Cidr::V6(0xfc00 << 112, 7),
            ],
        ),
        (
            "US",
            &[Cidr::V4(0x08080800, 24), Cidr::V6(0x2001_0db8 << 96, 32)],
        ),
    ]);
    std::fs::write(dir.join("geoip.dat"), geoip).unwrap();
    let google = [
        d(Domain, "google.com", &[]),
        d(Full, "ads.google.com", &["ads"]),
        d(Domain, "doubleclick.net", &["ads", "cn"]),
        d(Regex, "^gg[0-9]+\\.example$", &[]),
    ];
    let cn = [
        d(Domain, "cn", &[]),
        d(Substr, "baidu", &[]),
        d(Full, "qq.com", &["!cn"]),
    ];
    let site = encode_geosite(&[("CN", &cn), ("GOOGLE", &google)]);
    std::fs::write(dir.join("geosite.dat"), site).unwrap();
    let office = encode_geoip(&[("OFFICE", &[Cidr::V4(0xac100000, 12)])]);
    let mut custom = office;
    custom.extend(encode_geosite(&[(
        "WORK",
        &[d(Full, "intra.example", &[])],
    )]));
    std::fs::write(dir.join("ext/custom.dat"), custom).unwrap();
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn doms(dir: &Path, v: &[&str]) -> std::result::Result<DomainSet, crate::config::ConfigError> {
    DomainSet::parse_with(&s(v), "d", DomainType::Substr, &Assets::only(dir))
}

fn ipset(dir: &Path, v: &[&str]) -> std::result::Result<IpSet, crate::config::ConfigError> {
    IpSet::parse_with(&s(v), "ip", &Assets::only(dir))
}

fn ip(x: &str) -> std::net::IpAddr {
    x.parse().unwrap()
}

#[test]
fn geoip_cn_as_xray_matches_it() {
    let dir = fixture();
    let cn = ipset(&dir, &["geoip:cn"]).unwrap();
    assert!(cn.contains(ip("1.0.1.5")));
    assert!(cn.contains(ip("::ffff:1.0.1.5")));
    assert!(!cn.contains(ip("1.0.2.1")));
    assert!(!cn.contains(ip("2001::1")));
    // Negated: every address outside it, IPv6 too though CN has no IPv6 (as Xray v26.3.27).
    for spelling in ["geoip:!cn", "!geoip:cn", "ext:geoip.dat:!cn", "geoip:!!!cn"] {
        let not = ipset(&dir, &[spelling]).unwrap();
        assert!(not.contains(ip("1.0.2.1")), "{spelling}");
        assert!(!not.contains(ip("1.0.1.5")), "{spelling}");
        assert!(not.contains(ip("2001::1")), "{spelling}");
    }
    assert!(ipset(&dir, &["geoip:!!cn"])
        .unwrap()
        .contains(ip("1.0.1.5")));
    assert!(ipset(&dir, &["GEOIP:Cn"]).unwrap().contains(ip("1.0.1.9")));
}

#[test]
fn negations_are_unions_then_complements() {
    let dir = fixture();
    // In neither CN nor US.
    let s = ipset(&dir, &["geoip:!cn", "geoip:!us"]).unwrap();
    assert!(!s.contains(ip("1.0.1.1")));
    assert!(!s.contains(ip("8.8.8.8")));
    assert!(s.contains(ip("9.9.9.9")));
    // US has IPv6, so v6 addresses outside it match.
    assert!(s.contains(ip("2002::1")));
    assert!(!s.contains(ip("2001:db8::1")));
    // Kinds are OR-ed: not CN, or not 8.8.8.0/24.
    let s = ipset(&dir, &["geoip:!cn", "!8.8.8.0/24"]).unwrap();
    assert!(s.contains(ip("8.8.8.8")), "not CN");
    assert!(s.contains(ip("1.0.1.1")), "not 8.8.8/24");
    // A negated tag of IPv4 ranges only matches every IPv6 address (as Xray v26.3.27).
    assert!(s.contains(ip("2001::1")), "not CN, of another family");
    let s = ipset(&dir, &["!10.0.0.0/8"]).unwrap();
    assert!(s.contains(ip("11.0.0.1")));
    assert!(!s.contains(ip("10.0.0.1")));
    assert!(!s.contains(ip("::1")));
    // Mixed positive and negated.
    let s = ipset(
        &dir,
        &["geoip:private", "ext:ext/custom.dat:office", "1.2.3.4"],
    )
    .unwrap();
    for a in [
        "10.1.1.1",
        "192.168.3.3",
        "127.0.0.1",
        "fd00::1",
        "172.20.0.1",
        "1.2.3.4",
    ] {
        assert!(s.contains(ip(a)), "{a}");
    }
    assert!(!s.contains(ip("1.2.3.5")));
}

#[test]
fn geosite_types_attrs_and_ext() {
    let dir = fixture();
    let g = doms(&dir, &["geosite:google"]).unwrap();
    for yes in [
        "google.com",
        "www.google.com",
        "ads.google.com",
        "x.ads.google.com",
        "GOOGLE.com",
        "gg12.example",
        "a.doubleclick.net",
    ] {
        assert!(g.matches(yes), "{yes}");
    }
    for no in ["xgoogle.com", "google.com.", "gg.example", "google.co"] {
        assert!(!g.matches(no), "{no}");
    }
    for spelling in [
        "geosite:GOOGLE@ADS",
        "ext:geosite.dat:google@ads",
        "ext-domain:geosite.dat:Google@ads",
        "ext-site:geosite.dat:google@ads",
    ] {
        let a = doms(&dir, &[spelling]).unwrap();
        assert!(a.matches("ads.google.com"), "{spelling}");
        assert!(a.matches("doubleclick.net"), "{spelling}");
        assert!(!a.matches("x.ads.google.com"), "{spelling}: full");
        assert!(!a.matches("google.com"), "{spelling}");
    }
    // Attributes AND; `@!cn` is the literal key "!cn".
    let both = doms(&dir, &["geosite:google@ads@cn"]).unwrap();
    assert!(both.matches("doubleclick.net"));
    assert!(!both.matches("ads.google.com"));
    let notcn = doms(&dir, &["geosite:cn@!cn"]).unwrap();
    assert!(notcn.matches("qq.com"));
    assert!(!notcn.matches("a.cn"));
    let cn = doms(&dir, &["geosite:cn", "full:extra.org"]).unwrap();
    assert!(cn.matches("www.baidu.com.hk"));
    assert!(cn.matches("x.y.cn"));
    assert!(cn.matches("extra.org"));
    assert!(!cn.matches("cn.org"));
    let work = doms(&dir, &["ext:ext/custom.dat:work"]).unwrap();
    assert!(work.matches("intra.example"));
    // The same tag is loaded once and shared.
    let a = geosite(&Assets::only(&dir), "geosite.dat", "google").unwrap();
    let b = geosite(&Assets::only(&dir), "geosite.dat", "GOOGLE").unwrap();
    assert!(Arc::ptr_eq(&a, &b));
}

#[test]
fn errors_name_the_entry_and_the_tag() {
    let dir = fixture();
    let e = doms(&dir, &["full:a", "geosite:nope"]).unwrap_err();
    assert_eq!(e.path, "d[1]");
    assert!(
        e.msg.contains("\"NOPE\"") && e.msg.contains("geosite.dat"),
        "{e}"
    );
    let e = ipset(&dir, &["geoip:xx"]).unwrap_err();
    assert!(e.msg.contains("\"XX\""), "{e}");
    let e = ipset(&dir, &["ext:missing.dat:cn"]).unwrap_err();
    assert!(
        e.msg.contains("missing.dat") && e.msg.contains("XRAY_LOCATION_ASSET"),
        "{e}"
    );
    for bad in [
        "geosite:google@",
        "geosite:google@@ads",
        "geosite:",
        "ext::x",
        "ext:geosite.dat",
    ] {
        assert!(doms(&dir, &[bad]).is_err(), "{bad}");
    }
    for bad in ["ext:/etc/geoip.dat:cn", "ext:../geoip.dat:cn"] {
        let e = ipset(&dir, &[bad]).unwrap_err();
        assert!(e.msg.contains("asset directory"), "{bad}: {e}");
    }
    assert!(ipset(&dir, &["geoip:"]).is_err());
    assert!(ipset(&dir, &["example.com"]).is_err());
    // A corrupt file is an error naming the file.
    let bad = dir.join("bad.dat");
    std::fs::write(&bad, [0x0a, 0x20, 0x0a, 0x02, b'C', b'N']).unwrap();
    let e = ipset(&dir, &["ext:bad.dat:cn"]).unwrap_err();
    assert!(
        e.msg.contains("corrupt") && e.msg.contains("truncated"),
        "{e}"
    );
}

#[test]
fn assets_are_found_in_order() {
    let a = fixture();
    let b = fixture();
    std::fs::write(b.join("only-b.dat"), []).unwrap();
    let assets = Assets {
        base: a.clone(),
        system: vec![b.clone()],
    };
    assert_eq!(assets.find("geoip.dat").unwrap(), a.join("geoip.dat"));
    assert_eq!(assets.find("only-b.dat").unwrap(), b.join("only-b.dat"));
    assert!(assets.find("none.dat").is_err());
    assert!(assets.find("ext").is_err(), "a folder is not a file");
}

#[test]
fn list_and_lookup_for_the_cli() {
    let dir = fixture();
    let tags = list(&dir.join("geosite.dat")).unwrap();
    let names: Vec<_> = tags.iter().map(|t| (t.code.as_str(), t.items)).collect();
    assert_eq!(names, vec![("CN", 3), ("GOOGLE", 4)]);
    assert_eq!(tags[1].attrs, vec!["ads", "cn"]);
    let tags = list(&dir.join("geoip.dat")).unwrap();
    assert_eq!(
        tags.iter().map(|t| t.items).collect::<Vec<_>>(),
        vec![1, 4, 2]
    );
    assert_eq!(
        lookup(&dir.join("geoip.dat"), "10.2.3.4").unwrap(),
        vec!["PRIVATE"]
    );
    assert_eq!(
        lookup(&dir.join("geosite.dat"), "x.doubleclick.net").unwrap(),
        vec!["GOOGLE", "GOOGLE@ads", "GOOGLE@cn"]
    );
}
