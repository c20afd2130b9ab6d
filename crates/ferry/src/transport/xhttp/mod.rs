//! XHTTP (`network: "xhttp"`, alias `splithttp`): VLESS (or VMess/Trojan) carried over plain
//! HTTP requests, so that a CDN or a reverse proxy that passes nothing but HTTP can sit in
//! front of the server. Byte-compatible with Xray's `splithttp` package:
//!
//! * **packet-up**: the uplink is a run of `POST <path><session>/<seq>` requests, each with a
//!   chunk of the stream as its body; the downlink is one long `GET <path><session>`.
//! * **stream-up**: the uplink is one long streaming `POST <path><session>`; downlink a GET.
//! * **stream-one**: one `POST <path>` whose request body is the uplink and whose response body
//!   is the downlink.
//!
//! Every request carries padding (`Referer: …?x_padding=XXX…`), every response `X-Padding`.
//! The server ([`server::XhttpServer`]) answers HTTP/1.1 and HTTP/2 (TLS ALPN, or h2c prior
//! knowledge) on one port and joins the requests of a session by its id, whatever connection
//! each arrives on. The client ([`client::XhttpDialer`]) keeps HTTP/2 connections for reuse
//! under XMUX's limits. HTTP is hyper's; the XHTTP rules ([`meta`]) are ours, sans-IO.

mod budget;
pub mod client;
pub mod meta;
pub mod obfs;
pub mod pipe;
pub mod server;

use std::sync::Arc;

use crate::common::Destination;

/// An inclusive range of Xray's `"from-to"` settings; a value is drawn from it each time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    pub from: u32,
    pub to: u32,
}

impl Range {
    pub const fn new(from: u32, to: u32) -> Range {
        Range { from, to }
    }

    /// A value drawn uniformly from the range.
    pub fn rand(&self) -> u32 {
        if self.to <= self.from {
            return self.from;
        }
        let mut b = [0u8; 4];
        crate::common::rand::fill(&mut b);
        self.from + u32::from_le_bytes(b) % (self.to - self.from + 1)
    }

    pub fn contains(&self, v: u32) -> bool {
        v >= self.from && v <= self.to
    }
}

/// `mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// A client picks by its security (REALITY: stream-one, else packet-up); a server takes
    /// every mode.
    #[default]
    Auto,
    PacketUp,
    StreamUp,
    StreamOne,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "" | "auto" => Mode::Auto,
            "packet-up" => Mode::PacketUp,
            "stream-up" => Mode::StreamUp,
            "stream-one" => Mode::StreamOne,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::PacketUp => "packet-up",
            Mode::StreamUp => "stream-up",
            Mode::StreamOne => "stream-one",
        }
    }
}

/// Where the session id or the sequence number travel (`sessionPlacement`, `seqPlacement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    #[default]
    Path,
    Query,
    Header,
    Cookie,
}

impl Placement {
    pub fn parse(s: &str) -> Option<Placement> {
        Some(match s {
            "" | "path" => Placement::Path,
            "query" => Placement::Query,
            "header" => Placement::Header,
            "cookie" => Placement::Cookie,
            _ => return None,
        })
    }
}

/// `xmux`: how a client shares its HTTP/2 connections among tunnels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xmux {
    /// Tunnels per connection at most (0: no limit).
    pub max_concurrency: Range,
    /// Connections at most (0: no limit); not with `max_concurrency`.
    pub max_connections: Range,
    /// Tunnels a connection carries in its life at most (0: no limit).
    pub c_max_reuse_times: Range,
    /// HTTP requests a connection carries at most (0: no limit).
    pub h_max_request_times: Range,
    /// Seconds a connection is used for new tunnels at most (0: no limit).
    pub h_max_reusable_secs: Range,
    /// HTTP/2 PING period in seconds (0: Chrome's 45 s, negative: none).
    pub h_keep_alive_period: i64,
}

impl Default for Xmux {
    /// What Xray uses when `xmux` is absent (v26.7.28: three connections, each used for up to
    /// 600-900 requests and 30-50 minutes; three parallel handshakes is also where Russian
    /// users report blocking, so no more).
    fn default() -> Self {
        Xmux {
            max_concurrency: Range::default(),
            max_connections: Range::new(3, 3),
            c_max_reuse_times: Range::default(),
            h_max_request_times: Range::new(600, 900),
            h_max_reusable_secs: Range::new(1800, 3000),
            h_keep_alive_period: 0,
        }
    }
}

/// `downloadSettings`: the GET leg of a client goes to another server address, through
/// stream settings of its own.
#[derive(Clone)]
pub struct DownloadLeg {
    pub server: Destination,
    /// Builds the leg's client (its socket, TLS or REALITY, and HTTP) each time an outbound's
    /// dialer is built: handed in by whoever read the leg's stream settings, so these types need
    /// not name the chain's.
    pub leg: Arc<dyn Fn() -> Arc<client::LegClient> + Send + Sync>,
}

impl std::fmt::Debug for DownloadLeg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DownloadLeg")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// Compared by identity (stream settings hold built TLS configs).
#[derive(Clone, Debug)]
pub struct Download(pub Arc<DownloadLeg>);

impl PartialEq for Download {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for Download {}

/// `xhttpSettings` / `splithttpSettings`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XhttpSettings {
    /// Server: the Host a request must name (empty: any). Client: the Host it sends (empty:
    /// the TLS/REALITY server name, else the address).
    pub host: String,
    /// Normalised: starts and ends with `/`.
    pub path: String,
    /// The `?query` part of `path`, sent with every request.
    pub query: String,
    pub mode: Mode,
    /// Extra request headers (client).
    pub headers: Vec<(String, String)>,
    /// `xPaddingBytes`.
    pub padding: Range,
    /// `noGRPCHeader` (client): no `Content-Type: application/grpc` on stream-up/one.
    pub no_grpc_header: bool,
    /// `noSSEHeader` (server): no `Content-Type: text/event-stream` on downloads.
    pub no_sse_header: bool,
    /// `scMaxEachPostBytes`: packet-up body limit (client: a POST carries a value drawn
    /// from it at most; server: `to` at most, else 413).
    pub max_each_post: Range,
    /// `scMinPostsIntervalMs` (client pacing of packet-up POSTs).
    pub min_posts_interval_ms: Range,
    /// `scMaxBufferedPosts` (server reorder buffer).
    pub max_buffered_posts: usize,
    /// `scStreamUpServerSecs` (server padding on stream-up responses; `to` 0 = none... as
    /// Xray, a negative range turns it off).
    pub stream_up_server_secs: Option<Range>,
    /// `serverMaxHeaderBytes`.
    pub server_max_header_bytes: usize,
    pub session_placement: Placement,
    pub session_key: String,
    pub seq_placement: Placement,
    pub seq_key: String,
    /// `uplinkHTTPMethod` (client; GET only in packet-up).
    pub uplink_method: String,
    /// `xPaddingObfsMode` and the options it enables (see [`obfs`]).
    pub padding_obfs: bool,
    pub padding_key: String,
    pub padding_header: String,
    pub padding_placement: obfs::PadPlacement,
    /// How padding is made; the server checks lengths by it even without `padding_obfs`.
    pub padding_method: obfs::PadMethod,
    /// `uplinkDataPlacement`, its key (defaults resolved) and `uplinkChunkSize` (client).
    pub data_placement: obfs::DataPlacement,
    pub data_key: String,
    pub chunk_size: Range,
    pub xmux: Xmux,
    pub download: Option<Download>,
}

impl Default for XhttpSettings {
    fn default() -> Self {
        XhttpSettings {
            host: String::new(),
            path: "/".into(),
            query: String::new(),
            mode: Mode::Auto,
            headers: Vec::new(),
            padding: Range::new(100, 1000),
            no_grpc_header: false,
            no_sse_header: false,
            max_each_post: Range::new(1_000_000, 1_000_000),
            min_posts_interval_ms: Range::new(30, 30),
            max_buffered_posts: 30,
            stream_up_server_secs: Some(Range::new(20, 80)),
            server_max_header_bytes: 8192,
            session_placement: Placement::Path,
            session_key: String::new(),
            seq_placement: Placement::Path,
            seq_key: String::new(),
            uplink_method: "POST".into(),
            padding_obfs: false,
            padding_key: "x_padding".into(),
            padding_header: "X-Padding".into(),
            padding_placement: obfs::PadPlacement::QueryInHeader,
            padding_method: obfs::PadMethod::RepeatX,
            data_placement: obfs::DataPlacement::Auto,
            data_key: "X-Data".into(),
            chunk_size: Range::new(1_000_000, 1_000_000),
            xmux: Xmux::default(),
            download: None,
        }
    }
}

impl XhttpSettings {
    /// Sets `path` as Xray normalises it: `""` is `/`, a leading and a trailing `/` are
    /// added; a `?query` part is kept apart.
    pub fn set_path(&mut self, raw: &str) {
        let (p, q) = raw.split_once('?').unwrap_or((raw, ""));
        let mut p = p.to_string();
        if !p.starts_with('/') {
            p.insert(0, '/');
        }
        if !p.ends_with('/') {
            p.push('/');
        }
        self.path = p;
        self.query = q.to_string();
    }

    /// The key a placement other than the path uses, by Xray's defaults.
    pub fn session_key(&self) -> &str {
        if !self.session_key.is_empty() {
            return &self.session_key;
        }
        match self.session_placement {
            Placement::Header => "X-Session",
            Placement::Cookie | Placement::Query => "x_session",
            Placement::Path => "",
        }
    }

    pub fn seq_key(&self) -> &str {
        if !self.seq_key.is_empty() {
            return &self.seq_key;
        }
        match self.seq_placement {
            Placement::Header => "X-Seq",
            Placement::Cookie | Placement::Query => "x_seq",
            Placement::Path => "",
        }
    }
}

/// `X` repeated: the padding Xray sends (`X` has an 8-bit Huffman code in HPACK and QPACK, so
/// the size on the wire is the length).
pub fn padding(len: u32) -> String {
    "X".repeat(len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_as_xray() {
        let mut s = XhttpSettings::default();
        for (raw, path, query) in [
            ("", "/", ""),
            ("/", "/", ""),
            ("xh", "/xh/", ""),
            ("/xh", "/xh/", ""),
            ("/a/b/?ed=2048&x=1", "/a/b/", "ed=2048&x=1"),
            ("/a?", "/a/", ""),
        ] {
            s.set_path(raw);
            assert_eq!((s.path.as_str(), s.query.as_str()), (path, query), "{raw}");
        }
    }

    #[test]
    fn ranges_draw_inside() {
        let r = Range::new(100, 1000);
        for _ in 0..1000 {
            let v = r.rand();
            assert!(r.contains(v), "{v}");
        }
        assert_eq!(Range::new(7, 7).rand(), 7);
        assert_eq!(Range::new(9, 3).rand(), 9);
    }

    #[test]
    fn keys_default_by_placement() {
        let mut s = XhttpSettings {
            session_placement: Placement::Header,
            seq_placement: Placement::Cookie,
            ..Default::default()
        };
        assert_eq!((s.session_key(), s.seq_key()), ("X-Session", "x_seq"));
        s.session_key = "Sid".into();
        assert_eq!(s.session_key(), "Sid");
    }
}
