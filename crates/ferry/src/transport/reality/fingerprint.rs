//! Browser ClientHello templates (`fingerprint`), kept as data so a newer browser is a data
//! change: cipher suites, extensions in the browser's order, groups, signature algorithms,
//! ALPN, and where GREASE goes. Sources: uTLS as Xray v26 pins it (`u_parrots.go`:
//! Chrome 133, Firefox 148, Safari 26.3, iOS 14, Edge 85).

/// `realitySettings.fingerprint` (and `tlsSettings.fingerprint`), understood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fingerprint {
    Chrome,
    Firefox,
    Safari,
    Ios,
    Edge,
    /// Chrome's template with its extensions in a fresh random order per connection and
    /// random GREASE (`randomized`).
    Randomized,
}

impl Fingerprint {
    /// Reads a fingerprint name as Xray does (`""` is chrome; `random` picks one template for
    /// the life of the process).
    pub fn parse(name: &str) -> Result<Fingerprint, String> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "" | "chrome" | "hellochrome_auto" => Fingerprint::Chrome,
            "firefox" | "hellofirefox_auto" => Fingerprint::Firefox,
            "safari" | "hellosafari_auto" => Fingerprint::Safari,
            "ios" | "helloios_auto" => Fingerprint::Ios,
            "edge" | "helloedge_auto" => Fingerprint::Edge,
            "random" => {
                let all = [
                    Fingerprint::Chrome,
                    Fingerprint::Firefox,
                    Fingerprint::Safari,
                    Fingerprint::Ios,
                    Fingerprint::Edge,
                ];
                let mut b = [0u8; 1];
                crate::common::rand::fill(&mut b);
                all[b[0] as usize % all.len()]
            }
            "randomized" | "randomizednoalpn" => Fingerprint::Randomized,
            "unsafe" | "hellogolang" => {
                return Err(format!(
                    "fingerprint {name:?} is refused: REALITY needs a browser fingerprint"
                ))
            }
            other => {
                return Err(format!(
                    "unknown fingerprint {other:?} (chrome, firefox, safari, ios, edge, random, randomized)"
                ))
            }
        })
    }
}

/// A GREASE placeholder in a template: replaced by the connection's GREASE value.
pub const G: u16 = 0x0a0a;

/// One extension of a template, in the browser's order.
#[derive(Clone, Copy, Debug)]
pub enum Ext {
    /// GREASE extension with no data (BoringSSL's first).
    Grease,
    /// GREASE extension with one zero byte (BoringSSL's last, a different value than the first).
    GreaseOne,
    /// server_name with the connection's SNI (left out when there is none).
    Sni,
    /// An extension whose data is fixed.
    Raw(u16, &'static [u8]),
    /// supported_groups.
    Groups(&'static [u16]),
    /// signature_algorithms.
    SigAlgs(&'static [u16]),
    /// ALPN with the template's protocols.
    Alpn,
    /// application_settings (ALPS) with this code point, for h2.
    Alps(u16),
    /// key_share: one share per group (a GREASE group gets one zero byte).
    KeyShares(&'static [u16]),
    /// supported_versions.
    Versions(&'static [u16]),
    /// A GREASE encrypted_client_hello: outer, HKDF-SHA256, one of `aeads`, a random config
    /// id, an X25519 `enc`, and a random payload of one of `payloads` bytes.
    EchGrease {
        aeads: &'static [u16],
        payloads: &'static [usize],
    },
    /// BoringSSL's padding to 512 bytes when the hello is between 256 and 511 bytes.
    Padding,
}

/// How a browser orders its extensions per connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Fixed,
    /// Chrome ≥ 106: every extension but GREASE and padding in a random order.
    ChromeShuffle,
}

/// A browser's ClientHello.
#[derive(Debug)]
pub struct Template {
    pub record_version: u16,
    pub suites: &'static [u16],
    pub extensions: &'static [Ext],
    pub alpn: &'static [&'static str],
    pub order: Order,
    /// The X25519 share reuses the hybrid share's X25519 key (Firefox) instead of its own.
    pub reuse_hybrid_x25519: bool,
}

const CHROME_SUITES: &[u16] = &[
    G, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014,
    0x009c, 0x009d, 0x002f, 0x0035,
];
const CHROME_SIGALGS: &[u16] = &[
    0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
];
const H2_ALPN: &[&str] = &["h2", "http/1.1"];

/// Chrome 133 (uTLS `HelloChrome_Auto` as Xray v26 pins it).
pub static CHROME: Template = Template {
    record_version: 0x0301,
    suites: CHROME_SUITES,
    extensions: &[
        Ext::Grease,
        Ext::Sni,
        Ext::Raw(0x0017, &[]),
        Ext::Raw(0xff01, &[0]),
        Ext::Groups(&[G, 0x11ec, 0x001d, 0x0017, 0x0018]),
        Ext::Raw(0x000b, &[1, 0]),
        Ext::Raw(0x0023, &[]),
        Ext::Alpn,
        Ext::Raw(0x0005, &[1, 0, 0, 0, 0]),
        Ext::SigAlgs(CHROME_SIGALGS),
        Ext::Raw(0x0012, &[]),
        Ext::KeyShares(&[G, 0x11ec, 0x001d]),
        Ext::Raw(0x002d, &[1, 1]),
        Ext::Versions(&[G, 0x0304, 0x0303]),
        Ext::Raw(0x001b, &[2, 0, 2]),
        Ext::Alps(0x44cd),
        Ext::EchGrease {
            aeads: &[0x0001],
            payloads: &[144, 176, 208, 240],
        },
        Ext::GreaseOne,
    ],
    alpn: H2_ALPN,
    order: Order::ChromeShuffle,
    reuse_hybrid_x25519: false,
};

/// Edge 85 (uTLS `HelloEdge_Auto`): the Chromium of its time, X25519 only.
pub static EDGE: Template = Template {
    record_version: 0x0301,
    suites: CHROME_SUITES,
    extensions: &[
        Ext::Grease,
        Ext::Sni,
        Ext::Raw(0x0017, &[]),
        Ext::Raw(0xff01, &[0]),
        Ext::Groups(&[G, 0x001d, 0x0017, 0x0018]),
        Ext::Raw(0x000b, &[1, 0]),
        Ext::Raw(0x0023, &[]),
        Ext::Alpn,
        Ext::Raw(0x0005, &[1, 0, 0, 0, 0]),
        Ext::SigAlgs(CHROME_SIGALGS),
        Ext::Raw(0x0012, &[]),
        Ext::KeyShares(&[G, 0x001d]),
        Ext::Raw(0x002d, &[1, 1]),
        Ext::Versions(&[G, 0x0304, 0x0303, 0x0302, 0x0301]),
        Ext::Raw(0x001b, &[2, 0, 2]),
        Ext::GreaseOne,
        Ext::Padding,
    ],
    alpn: H2_ALPN,
    order: Order::Fixed,
    reuse_hybrid_x25519: false,
};

/// Firefox 148 (uTLS `HelloFirefox_Auto`): no GREASE; its X25519 share is the hybrid's key.
pub static FIREFOX: Template = Template {
    record_version: 0x0301,
    suites: &[
        0x1301, 0x1303, 0x1302, 0xc02b, 0xc02f, 0xcca9, 0xcca8, 0xc02c, 0xc030, 0xc00a, 0xc009,
        0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035,
    ],
    extensions: &[
        Ext::Sni,
        Ext::Raw(0x0017, &[]),
        Ext::Raw(0xff01, &[0]),
        Ext::Groups(&[0x11ec, 0x001d, 0x0017, 0x0018, 0x0019, 0x0100, 0x0101]),
        Ext::Raw(0x000b, &[1, 0]),
        Ext::Alpn,
        Ext::Raw(0x0005, &[1, 0, 0, 0, 0]),
        Ext::Raw(0x0022, &[0, 8, 4, 3, 5, 3, 6, 3, 2, 3]),
        Ext::Raw(0x0012, &[]),
        Ext::KeyShares(&[0x11ec, 0x001d, 0x0017]),
        Ext::Versions(&[0x0304, 0x0303]),
        Ext::SigAlgs(&[
            0x0403, 0x0503, 0x0603, 0x0804, 0x0805, 0x0806, 0x0401, 0x0501, 0x0601, 0x0203, 0x0201,
        ]),
        Ext::Raw(0x001c, &[0x40, 0x01]),
        Ext::Raw(0x001b, &[6, 0, 1, 0, 2, 0, 3]),
        Ext::EchGrease {
            aeads: &[0x0001, 0x0003],
            payloads: &[239],
        },
    ],
    alpn: H2_ALPN,
    order: Order::Fixed,
    reuse_hybrid_x25519: true,
};

/// Safari 26.3 (uTLS `HelloSafari_Auto`).
pub static SAFARI: Template = Template {
    record_version: 0x0301,
    suites: &[
        G, 0x1302, 0x1303, 0x1301, 0xc02c, 0xc02b, 0xcca9, 0xc030, 0xc02f, 0xcca8, 0xc00a, 0xc009,
        0xc014, 0xc013, 0x009d, 0x009c, 0x0035, 0x002f, 0xc008, 0xc012, 0x000a,
    ],
    extensions: &[
        Ext::Grease,
        Ext::Sni,
        Ext::Raw(0x0017, &[]),
        Ext::Raw(0xff01, &[0]),
        Ext::Groups(&[G, 0x11ec, 0x001d, 0x0017, 0x0018, 0x0019]),
        Ext::Raw(0x000b, &[1, 0]),
        Ext::Alpn,
        Ext::Raw(0x0005, &[1, 0, 0, 0, 0]),
        Ext::SigAlgs(&[
            0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0805, 0x0501, 0x0806, 0x0601, 0x0201,
        ]),
        Ext::Raw(0x0012, &[]),
        Ext::KeyShares(&[G, 0x11ec, 0x001d]),
        Ext::Raw(0x002d, &[1, 1]),
        Ext::Versions(&[G, 0x0304, 0x0303]),
        Ext::Raw(0x001b, &[2, 0, 1]),
        Ext::GreaseOne,
    ],
    alpn: H2_ALPN,
    order: Order::Fixed,
    reuse_hybrid_x25519: false,
};

/// iOS 14 (uTLS `HelloIOS_Auto`): X25519 only, padded.
pub static IOS: Template = Template {
    record_version: 0x0301,
    suites: &[
        G, 0x1301, 0x1302, 0x1303, 0xc02c, 0xc02b, 0xcca9, 0xc030, 0xc02f, 0xcca8, 0xc024, 0xc023,
        0xc00a, 0xc009, 0xc028, 0xc027, 0xc014, 0xc013, 0x009d, 0x009c, 0x003d, 0x003c, 0x0035,
        0x002f, 0xc008, 0xc012, 0x000a,
    ],
    extensions: &[
        Ext::Grease,
        Ext::Sni,
        Ext::Raw(0x0017, &[]),
        Ext::Raw(0xff01, &[0]),
        Ext::Groups(&[G, 0x001d, 0x0017, 0x0018, 0x0019]),
        Ext::Raw(0x000b, &[1, 0]),
        Ext::Alpn,
        Ext::Raw(0x0005, &[1, 0, 0, 0, 0]),
        Ext::SigAlgs(&[
            0x0403, 0x0804, 0x0401, 0x0503, 0x0203, 0x0805, 0x0805, 0x0501, 0x0806, 0x0601, 0x0201,
        ]),
        Ext::Raw(0x0012, &[]),
        Ext::KeyShares(&[G, 0x001d]),
        Ext::Raw(0x002d, &[1, 1]),
        Ext::Versions(&[G, 0x0304, 0x0303, 0x0302, 0x0301]),
        Ext::GreaseOne,
        Ext::Padding,
    ],
    alpn: H2_ALPN,
    order: Order::Fixed,
    reuse_hybrid_x25519: false,
};

impl Fingerprint {
    /// The template this fingerprint sends.
    pub fn template(self) -> &'static Template {
        match self {
            Fingerprint::Chrome | Fingerprint::Randomized => &CHROME,
            Fingerprint::Firefox => &FIREFOX,
            Fingerprint::Safari => &SAFARI,
            Fingerprint::Ios => &IOS,
            Fingerprint::Edge => &EDGE,
        }
    }
}
