//! The padding's and the uplink data's encodings, as Xray's.

use super::*;

#[test]
fn huffman_lengths_are_rfc_7541s() {
    // 5 bits: digits 0-2 and a c e i o s t; 6: A; 8: X and Z; 13: NUL.
    for (c, bits) in [
        (b'0', 5),
        (b'a', 5),
        (b't', 5),
        (b'A', 6),
        (b'3', 6),
        (b'B', 7),
    ] {
        assert_eq!(HUFFMAN_BITS[usize::from(c)], bits, "{}", c as char);
    }
    assert_eq!(
        (
            HUFFMAN_BITS[usize::from(b'X')],
            HUFFMAN_BITS[usize::from(b'Z')]
        ),
        (8, 8)
    );
    assert_eq!(HUFFMAN_BITS[0], 13);
    assert_eq!(huffman_len(b"XXXX"), 4);
    assert_eq!(huffman_len(b"aaaaaaaa"), 5);
    assert_eq!(huffman_len(b"a"), 1);
    assert_eq!(huffman_len(b""), 0);
}

#[test]
fn tokenish_lands_within_two_huffman_bytes() {
    for target in [1usize, 2, 10, 100, 555, 1000, 4000] {
        for _ in 0..20 {
            let t = tokenish(target);
            let h = huffman_len(t.as_bytes());
            assert!(h.abs_diff(target) <= 2, "{target}: {h} ({} chars)", t.len());
            assert!(t.bytes().all(|b| b.is_ascii_alphanumeric()), "{t}");
        }
    }
    // About 1.25 characters a byte, as Xray's (1000 -> ~1247).
    let t = tokenish(1000);
    assert!((1150..1300).contains(&t.len()), "{}", t.len());
    assert!(valid(PadMethod::Tokenish, Range::new(1000, 1000), &t));
    assert!(!valid(PadMethod::RepeatX, Range::new(1000, 1000), &t));
}

#[test]
fn validity_by_method() {
    let r = Range::new(100, 1000);
    assert!(valid(PadMethod::RepeatX, r, &"X".repeat(100)));
    assert!(valid(PadMethod::RepeatX, r, &"X".repeat(1000)));
    assert!(!valid(PadMethod::RepeatX, r, &"X".repeat(99)));
    assert!(!valid(PadMethod::RepeatX, r, &"X".repeat(1001)));
    assert!(!valid(PadMethod::RepeatX, r, ""));
    // tokenish: Huffman bytes, 2 of slack each way; X is 8 bits, so Xs count as bytes.
    assert!(valid(PadMethod::Tokenish, r, &"X".repeat(98)));
    assert!(valid(PadMethod::Tokenish, r, &"X".repeat(1002)));
    assert!(!valid(PadMethod::Tokenish, r, &"X".repeat(97)));
    assert!(!valid(PadMethod::Tokenish, r, &"X".repeat(1003)));
    // 160 'a's are 100 Huffman bytes.
    assert!(valid(PadMethod::Tokenish, r, &"a".repeat(160)));
    assert!(!valid(
        PadMethod::RepeatX,
        Range::new(200, 300),
        &"a".repeat(160)
    ));
}

fn obfs(placement: PadPlacement) -> XhttpSettings {
    XhttpSettings {
        padding_obfs: true,
        padding_key: "pk".into(),
        padding_header: "X-Pad".into(),
        padding_placement: placement,
        ..XhttpSettings::default()
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn servers_find_the_padding_where_xray_does() {
    let plain = XhttpSettings::default();
    let h = headers(&[("referer", "https://h/p/?a=1&x_padding=XXX#f")]);
    assert_eq!(request_padding(&plain, Some("x_padding=YY"), &h), "XXX");
    // A Referer without it: none, the query is not looked at.
    let h = headers(&[("referer", "https://h/p/")]);
    assert_eq!(request_padding(&plain, Some("x_padding=YY"), &h), "");
    assert_eq!(
        request_padding(&plain, Some("x_padding=YY"), &HeaderMap::new()),
        "YY"
    );
    // Obfuscated: the cookie first, whatever the placement.
    let s = obfs(PadPlacement::Query);
    let h = headers(&[("cookie", "a=b; pk=CCC"), ("x-pad", "https://h/?pk=HH")]);
    assert_eq!(request_padding(&s, Some("pk=QQ"), &h), "CCC");
    // Then the header: the query of its URL unless the placement is `header`.
    let h = headers(&[("x-pad", "https://h/?pk=H%58H")]);
    assert_eq!(request_padding(&s, Some("pk=QQ"), &h), "HXH");
    let h = headers(&[("x-pad", "raw-value")]);
    assert_eq!(request_padding(&s, Some("pk=QQ"), &h), "");
    assert_eq!(
        request_padding(&obfs(PadPlacement::Header), None, &h),
        "raw-value"
    );
    // Then the request's query.
    assert_eq!(
        request_padding(&s, Some("z=1&pk=Q%20Q"), &HeaderMap::new()),
        "Q Q"
    );
    assert_eq!(request_padding(&s, None, &HeaderMap::new()), "");
}

#[test]
fn clients_and_servers_place_padding_as_configured() {
    let url = "https://h.test/xh/";
    match for_request(&XhttpSettings::default(), url) {
        RequestPadding::Header(k, v) => {
            assert_eq!(k, "referer");
            assert!(v.starts_with("https://h.test/xh/?x_padding=XXX"), "{v}");
        }
        _ => panic!("not the Referer"),
    }
    match for_request(&obfs(PadPlacement::QueryInHeader), url) {
        RequestPadding::Header(k, v) => {
            assert_eq!(k, "X-Pad");
            assert!(v.starts_with("https://h.test/xh/?pk=X"), "{v}");
        }
        _ => panic!("not the header"),
    }
    assert!(matches!(for_request(&obfs(PadPlacement::Cookie), url),
        RequestPadding::Cookie(c) if c.starts_with("pk=X")));
    assert!(matches!(for_request(&obfs(PadPlacement::Query), url),
        RequestPadding::Query(k, _) if k == "pk"));
    // Each one is found again by the server of the same settings.
    for p in [
        PadPlacement::QueryInHeader,
        PadPlacement::Header,
        PadPlacement::Cookie,
        PadPlacement::Query,
    ] {
        for method in [PadMethod::RepeatX, PadMethod::Tokenish] {
            let s = XhttpSettings {
                padding_method: method,
                ..obfs(p)
            };
            let (mut h, mut q) = (HeaderMap::new(), None);
            match for_request(&s, url) {
                RequestPadding::Header(k, v) => {
                    h = headers(&[(k.as_str(), v.as_str())]);
                }
                RequestPadding::Cookie(c) => h = headers(&[("cookie", c.as_str())]),
                RequestPadding::Query(k, v) => q = Some(format!("{k}={v}")),
            }
            let pad = request_padding(&s, q.as_deref(), &h);
            assert!(valid(method, s.padding, &pad), "{p:?} {method:?}: {pad}");
        }
    }
    let mut h = HeaderMap::new();
    add_response_padding(&obfs(PadPlacement::Cookie), &mut h);
    let c = h.get("set-cookie").unwrap().to_str().unwrap();
    assert!(c.starts_with("pk=X") && c.ends_with("; Path=/"), "{c}");
    let mut h = HeaderMap::new();
    add_response_padding(&obfs(PadPlacement::QueryInHeader), &mut h);
    assert!(h
        .get("x-pad")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("?pk=X"));
    let mut h = HeaderMap::new();
    add_response_padding(&obfs(PadPlacement::Query), &mut h);
    assert!(h.is_empty());
    add_response_padding(&XhttpSettings::default(), &mut h);
    assert!(h
        .get("x-padding")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("XXX"));
}

#[test]
fn uplink_data_in_headers_and_cookies_round_trips() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    let chunks = data_chunks(&data, Range::new(64, 300));
    assert!(chunks.len() > 1 && chunks.iter().all(|c| !c.is_empty() && c.len() <= 300));
    assert!(chunks
        .concat()
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    let mut s = XhttpSettings {
        data_placement: DataPlacement::Header,
        data_key: "X-Data".into(),
        ..XhttpSettings::default()
    };
    let pairs: Vec<(String, String)> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("X-Data-{i}"), c.clone()))
        .collect();
    let h = headers(
        &pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
    );
    assert_eq!(request_data(&s, &h).unwrap(), data);
    // A gap ends the chunks (what follows is not read): here, a bad encoding -> 400.
    let mut h2 = h.clone();
    h2.remove("X-Data-1");
    assert!(request_data(&s, &h2).is_err() || request_data(&s, &h2).unwrap() != data);
    let bad = headers(&[("X-Data-0", "a")]);
    assert_eq!(
        request_data(&s, &bad).unwrap_err().0,
        http::StatusCode::BAD_REQUEST
    );
    // Cookies, several Cookie fields as h2 sends them.
    s.data_placement = DataPlacement::Cookie;
    s.data_key = "x_data".into();
    let cookies: Vec<String> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| format!("x_data_{i}={c}"))
        .collect();
    let mut h = HeaderMap::new();
    for c in &cookies {
        h.append(http::header::COOKIE, HeaderValue::from_str(c).unwrap());
    }
    assert_eq!(request_data(&s, &h).unwrap(), data);
    // Body placement reads neither.
    s.data_placement = DataPlacement::Body;
    assert!(request_data(&s, &h).unwrap().is_empty());
    assert!(data_chunks(&[], Range::new(64, 64)).is_empty());
}
