//! XHTTP server on hostile request heads: the Host, path, padding, session and sequence
//! rules never panic, whatever the method, URI, headers and placements; a request they
//! accept names a session only when its leg has one, and a packet's sequence number is the
//! decimal the request carried.
#![no_main]
use ferry::transport::xhttp::meta::{classify, Leg};
use ferry::transport::xhttp::obfs::{self, DataPlacement, PadMethod, PadPlacement};
use ferry::transport::xhttp::{Mode, Placement, XhttpSettings};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or("");
    let (m, u) = first.split_once(' ').unwrap_or(("GET", first));
    let Ok(method) = Method::from_bytes(m.as_bytes()) else {
        return;
    };
    let Ok(uri) = u.parse::<Uri>() else {
        return;
    };
    let mut headers = HeaderMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.trim().as_bytes()),
                HeaderValue::from_str(v.trim()),
            ) {
                headers.append(k, v);
            }
        }
    }
    let mut s = XhttpSettings {
        host: "h.test".into(),
        ..Default::default()
    };
    s.set_path("/xh");
    let placements = [
        (Placement::Path, Placement::Path, Mode::Auto),
        (Placement::Cookie, Placement::Header, Mode::PacketUp),
        (Placement::Query, Placement::Query, Mode::StreamUp),
        (Placement::Header, Placement::Path, Mode::StreamOne),
    ];
    for (i, (sp, qp, mode)) in placements.into_iter().enumerate() {
        s.session_placement = sp;
        s.seq_placement = qp;
        s.mode = mode;
        if i == 2 {
            s.host.clear();
        }
        // The 2026 obfuscation options: each padding placement and method in turn, and
        // packet-up's uplink data from headers and cookies.
        s.padding_obfs = i > 0;
        s.padding_placement = [
            PadPlacement::QueryInHeader,
            PadPlacement::Cookie,
            PadPlacement::Header,
            PadPlacement::Query,
        ][i];
        s.padding_method = if i % 2 == 1 {
            PadMethod::Tokenish
        } else {
            PadMethod::RepeatX
        };
        s.data_placement = [
            DataPlacement::Auto,
            DataPlacement::Cookie,
            DataPlacement::Header,
            DataPlacement::Body,
        ][i];
        s.data_key = if i == 1 {
            "x_data".into()
        } else {
            "X-Data".into()
        };
        let pad = obfs::request_padding(&s, uri.query(), &headers);
        if obfs::valid(s.padding_method, s.padding, &pad) {
            assert!(!pad.is_empty());
        }
        if let Ok(d) = obfs::request_data(&s, &headers) {
            assert!(d.len() <= data.len());
        }
        match classify(&s, &method, &uri, &headers) {
            Ok(Leg::StreamDown { session }) | Ok(Leg::StreamUp { session }) => {
                assert!(!session.is_empty())
            }
            Ok(Leg::PacketUp { session, seq }) => {
                assert!(!session.is_empty());
                assert!(seq.to_string().len() <= 20);
            }
            Ok(Leg::StreamOne) => assert!(mode != Mode::PacketUp),
            Ok(Leg::Options) => assert_eq!(method, Method::OPTIONS),
            Err(r) => assert!([400, 404, 500].contains(&r.status.as_u16())),
        }
    }
});
