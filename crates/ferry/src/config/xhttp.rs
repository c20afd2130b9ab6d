//! `xhttpSettings` / `splithttpSettings`, with Xray's checks (`infra/conf/transport_internet.go`
//! `SplitHTTPConfig.Build`) and its `extra` object, the 2026 obfuscation options included.
//! What Ferry does not do yet (HTTP/3) is an error naming it.

use std::sync::Arc;

use serde_json::Value;

use crate::common::{Address, Destination};
use crate::config::reader::{int32_range as range_of, ConfigError, Obj, Result};
use crate::transport::chain::Network;
use crate::transport::xhttp::obfs::{DataPlacement, PadMethod, PadPlacement};
use crate::transport::xhttp::{Download, DownloadLeg, Mode, Placement, Range, XhttpSettings, Xmux};

fn range(o: &Obj<'_>, key: &str) -> Result<Option<(i64, i64)>> {
    o.get(key).map(|(p, v)| range_of(v, &p)).transpose()
}

/// A range of non-negative values; `(0, 0)` (unset) gives `default`.
fn positive(o: &Obj<'_>, key: &str, default: Range) -> Result<Range> {
    match range(o, key)? {
        None | Some((_, 0)) => Ok(default),
        Some((a, b)) if a < 0 => Err(ConfigError::new(
            o.key_path(key),
            format!("must not be negative ({a}-{b})"),
        )),
        Some((a, b)) => Ok(Range::new(a as u32, b as u32)),
    }
}

/// Reads `xhttpSettings` (`o` absent: every default). `security_reality`: the stream's
/// security, for the checks that depend on it.
/// Reads a stream settings object (the download leg's): handed in by `stream`, which reads
/// XHTTP's settings in turn.
pub type StreamParser = fn(&Obj<'_>, bool, &[&str]) -> Result<crate::transport::StreamSettings>;

pub fn parse(o: Option<Obj<'_>>, outbound: bool, stream: StreamParser) -> Result<XhttpSettings> {
    let mut x = XhttpSettings::default();
    let Some(o) = o else {
        return Ok(x);
    };
    x.host = o.str("host")?.unwrap_or_default();
    x.set_path(&o.str("path")?.unwrap_or_default());
    let mode = o.str("mode")?.unwrap_or_default();
    x.mode = Mode::parse(&mode).ok_or_else(|| {
        ConfigError::new(
            o.key_path("mode"),
            format!("unsupported mode {mode:?} (auto, packet-up, stream-up or stream-one)"),
        )
    })?;
    // `extra`: every other field, as a share link carries them (host, path and mode stay).
    match o.get("extra") {
        Some((p, v)) => {
            let parsed;
            let v = match v {
                Value::String(s) => {
                    parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                        ConfigError::new(p.clone(), format!("not a JSON object: {e}"))
                    })?;
                    &parsed
                }
                v => v,
            };
            let e = Obj::new(v, p, o.diag())?;
            e.ignore(&["host", "path", "mode"]);
            fields(&e, &mut x, outbound, stream)?;
            e.finish();
            // The fields beside `extra` are Xray's to ignore: it reads only extra's.
            o.ignore(FIELDS);
        }
        None => fields(&o, &mut x, outbound, stream)?,
    }
    o.finish();
    Ok(x)
}

const FIELDS: &[&str] = &[
    "headers",
    "xPaddingBytes",
    "noGRPCHeader",
    "noSSEHeader",
    "scMaxEachPostBytes",
    "scMinPostsIntervalMs",
    "scMaxBufferedPosts",
    "scStreamUpServerSecs",
    "serverMaxHeaderBytes",
    "xmux",
    "downloadSettings",
    "xPaddingObfsMode",
    "xPaddingKey",
    "xPaddingHeader",
    "xPaddingPlacement",
    "xPaddingMethod",
    "uplinkHTTPMethod",
    "sessionPlacement",
    "sessionKey",
    "sessionIDPlacement",
    "sessionIDKey",
    "sessionIDTable",
    "sessionIDLength",
    "seqPlacement",
    "seqKey",
    "uplinkDataPlacement",
    "uplinkDataKey",
    "uplinkChunkSize",
    "noGRPCHeader",
];

fn fields(o: &Obj<'_>, x: &mut XhttpSettings, outbound: bool, stream: StreamParser) -> Result<()> {
    for (k, v) in super::headers::headers(o)? {
        if k.eq_ignore_ascii_case("host") {
            return Err(ConfigError::new(
                o.key_path("headers"),
                "\"headers\" can't contain \"host\" (use \"host\")",
            ));
        }
        x.headers.push((k, v));
    }
    if let Some((a, b)) = range(o, "xPaddingBytes")? {
        if (a, b) != (0, 0) && (a <= 0 || b <= 0) {
            return Err(ConfigError::new(
                o.key_path("xPaddingBytes"),
                "xPaddingBytes cannot be disabled",
            ));
        }
        if b > 0 {
            x.padding = Range::new(a as u32, b as u32);
        }
    }
    x.no_grpc_header = o.bool("noGRPCHeader")?.unwrap_or(false);
    x.no_sse_header = o.bool("noSSEHeader")?.unwrap_or(false);
    x.max_each_post = positive(o, "scMaxEachPostBytes", x.max_each_post)?;
    if x.max_each_post.from == 0 {
        return Err(ConfigError::new(
            o.key_path("scMaxEachPostBytes"),
            "must be above 0",
        ));
    }
    x.min_posts_interval_ms = positive(o, "scMinPostsIntervalMs", x.min_posts_interval_ms)?;
    if let Some(n) = o.i64("scMaxBufferedPosts")? {
        if n > 0 {
            x.max_buffered_posts = n as usize;
        }
    }
    match range(o, "scStreamUpServerSecs")? {
        None | Some((_, 0)) => {}
        Some((_, b)) if b < 0 => x.stream_up_server_secs = None,
        Some((a, b)) => x.stream_up_server_secs = Some(Range::new(a.max(0) as u32, b as u32)),
    }
    if let Some(n) = o.i64("serverMaxHeaderBytes")? {
        if n < 0 {
            return Err(ConfigError::new(
                o.key_path("serverMaxHeaderBytes"),
                "invalid negative value of maxHeaderBytes",
            ));
        }
        if n > 0 {
            x.server_max_header_bytes = n as usize;
        }
    }
    // The 2026 obfuscation options (Xray v26.3.27 `SplitHTTPConfig.Build`).
    x.padding_obfs = o.bool("xPaddingObfsMode")?.unwrap_or(false);
    for (key, field, default) in [
        ("xPaddingKey", &mut x.padding_key, "x_padding"),
        ("xPaddingHeader", &mut x.padding_header, "X-Padding"),
    ] {
        let v = o.str(key)?.unwrap_or_default();
        *field = if v.is_empty() { default.into() } else { v };
    }
    if http::HeaderName::from_bytes(x.padding_header.as_bytes()).is_err() {
        return Err(ConfigError::new(
            o.key_path("xPaddingHeader"),
            "not an HTTP header name",
        ));
    }
    if let Some(v) = o.str("xPaddingPlacement")? {
        x.padding_placement = PadPlacement::parse(&v).ok_or_else(|| {
            ConfigError::new(
                o.key_path("xPaddingPlacement"),
                format!("unsupported padding placement: {v}"),
            )
        })?;
    }
    if let Some(v) = o.str("xPaddingMethod")? {
        x.padding_method = PadMethod::parse(&v).ok_or_else(|| {
            ConfigError::new(
                o.key_path("xPaddingMethod"),
                format!("unsupported padding method: {v}"),
            )
        })?;
    }
    if let Some(v) = o.str("uplinkDataPlacement")? {
        let p = DataPlacement::parse(&v).ok_or_else(|| {
            ConfigError::new(
                o.key_path("uplinkDataPlacement"),
                format!("unsupported uplink data placement: {v}"),
            )
        })?;
        if matches!(p, DataPlacement::Header | DataPlacement::Cookie) && x.mode != Mode::PacketUp {
            return Err(ConfigError::new(
                o.key_path("uplinkDataPlacement"),
                format!("UplinkDataPlacement can be {v} only in packet-up mode"),
            ));
        }
        x.data_placement = p;
    }
    x.data_key = match o.str("uplinkDataKey")?.unwrap_or_default() {
        k if !k.is_empty() => k,
        _ if x.data_placement == DataPlacement::Cookie => "x_data".into(),
        _ => "X-Data".into(),
    };
    let chunk = positive(o, "uplinkChunkSize", Range::default())?;
    x.chunk_size = if chunk.to == 0 {
        match x.data_placement {
            DataPlacement::Cookie => Range::new(2048, 3072),
            DataPlacement::Header => Range::new(3000, 4000),
            _ => x.max_each_post,
        }
    } else if chunk.from < 64 {
        Range::new(64, chunk.to.max(64))
    } else {
        chunk
    };
    let method = o
        .str("uplinkHTTPMethod")?
        .unwrap_or_default()
        .to_ascii_uppercase();
    x.uplink_method = if method.is_empty() {
        "POST".into()
    } else {
        method
    };
    if http::Method::from_bytes(x.uplink_method.as_bytes()).is_err() {
        return Err(ConfigError::new(
            o.key_path("uplinkHTTPMethod"),
            "not an HTTP method",
        ));
    }
    if x.uplink_method == "GET" && x.mode != Mode::PacketUp {
        return Err(ConfigError::new(
            o.key_path("uplinkHTTPMethod"),
            "uplinkHTTPMethod can be GET only in packet-up mode",
        ));
    }
    // Xray v26.6.22 renamed sessionPlacement/sessionKey to sessionIDPlacement/sessionIDKey
    // (3x-ui writes the new names); the new ones take precedence.
    for (keys, place) in [
        (
            &["sessionIDPlacement", "sessionPlacement"][..],
            &mut x.session_placement,
        ),
        (&["seqPlacement"][..], &mut x.seq_placement),
    ] {
        if let Some((p, v)) = o.get_alias(keys) {
            let v = super::reader::as_str(v, &p)?;
            *place = Placement::parse(v).ok_or_else(|| {
                ConfigError::new(
                    p,
                    format!("unsupported placement {v:?} (path, query, header or cookie)"),
                )
            })?;
        } else {
            *place = Placement::Path;
        }
    }
    x.session_key = o
        .str_alias(&["sessionIDKey", "sessionKey"])?
        .unwrap_or_default();
    for k in ["sessionIDTable", "sessionIDLength"] {
        if o.has(k) {
            o.diag().warn(
                &o.key_path(k),
                "not supported yet; ignored (Ferry's session IDs are UUIDs, which every server takes)",
            );
        }
    }
    x.seq_key = o.str("seqKey")?.unwrap_or_default();
    if let Some(m) = o.obj("xmux")? {
        x.xmux = xmux(&m)?;
        m.finish();
    }
    if let Some(d) = o.obj("downloadSettings")? {
        if !outbound {
            o.diag().warn(
                &o.key_path("downloadSettings"),
                "applies to clients only; ignored",
            );
        } else {
            if x.mode == Mode::StreamOne {
                return Err(ConfigError::new(
                    o.key_path("downloadSettings"),
                    "can not be used in stream-one mode",
                ));
            }
            x.download = Some(download(d, stream)?);
        }
    }
    Ok(())
}

fn xmux(m: &Obj<'_>) -> Result<Xmux> {
    let keys = [
        "maxConcurrency",
        "maxConnections",
        "cMaxReuseTimes",
        "hMaxRequestTimes",
        "hMaxReusableSecs",
    ];
    let mut r = [Range::default(); 5];
    let mut any = false;
    for (i, k) in keys.iter().enumerate() {
        if let Some((a, b)) = range(m, k)? {
            if a < 0 {
                return Err(ConfigError::new(
                    m.key_path(k),
                    format!("must not be negative ({a}-{b})"),
                ));
            }
            r[i] = Range::new(a as u32, b as u32);
            any |= b > 0;
        }
    }
    let keep = m.i64("hKeepAlivePeriod")?.unwrap_or(0);
    if r[0].to > 0 && r[1].to > 0 {
        return Err(ConfigError::new(
            m.key_path("maxConnections"),
            "maxConnections cannot be specified together with maxConcurrency",
        ));
    }
    if !any && keep == 0 {
        // An empty object is Xray's "no xmux": its defaults.
        return Ok(Xmux::default());
    }
    Ok(Xmux {
        max_concurrency: r[0],
        max_connections: r[1],
        c_max_reuse_times: r[2],
        h_max_request_times: r[3],
        h_max_reusable_secs: r[4],
        h_keep_alive_period: keep,
    })
}

/// `downloadSettings`: `address`, `port`, and a stream settings object whose network is XHTTP.
fn download(d: Obj<'_>, parse_stream: StreamParser) -> Result<Download> {
    let addr = d.req_str("address")?;
    let port = d
        .port("port")?
        .ok_or_else(|| ConfigError::new(d.key_path("port"), "is required"))?;
    let stream = parse_stream(&d, true, &["address", "port"])?;
    let Network::Xhttp(settings) = &stream.network else {
        return Err(ConfigError::new(
            d.key_path("network"),
            "the download leg's network must be xhttp",
        ));
    };
    d.finish();
    let settings = settings.clone();
    Ok(Download(Arc::new(DownloadLeg {
        server: Destination::new(Address::parse(&addr), port),
        leg: Arc::new(move || stream.xhttp_leg(&settings, None)),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_xray_reads_them() {
        for (v, r) in [
            (serde_json::json!(5), (5, 5)),
            (serde_json::json!("100-1000"), (100, 1000)),
            (serde_json::json!("1000-100"), (100, 1000)),
            (serde_json::json!("-1"), (-1, -1)),
            (serde_json::json!("-5-10"), (-5, 10)),
            (serde_json::json!(""), (0, 0)),
        ] {
            assert_eq!(range_of(&v, "p").unwrap(), r, "{v}");
        }
        assert!(range_of(&serde_json::json!("a-b"), "p").is_err());
        assert!(range_of(&serde_json::json!(true), "p").is_err());
    }
}
