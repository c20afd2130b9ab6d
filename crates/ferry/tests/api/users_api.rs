//! Every user-bearing inbound starts with nobody, gets a user through the management API
//! (HandlerService.AlterInbound with an AddUserOperation, over gRPC, the messages panels send),
//! and carries bytes for that user: VMess, VLESS, Trojan, Shadowsocks (per-user method),
//! Shadowsocks 2022 multi-user, SOCKS, HTTP, mixed, ShadowsocksR. The user's own counters
//! (StatsService.GetStats) show the bytes; a removed user's next connection is refused.
//! In process: a Ferry server with the API and a Ferry client instance.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::{echo_server_async, free_port, pattern, start_instance};

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes};
use ferry::app::api::pb;
use prost::Message;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const VM: &str = "6fd4b5a2-0c3e-4a8e-9d6c-1b2a3c4d5e6f";
const VL: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
/// 16-byte keys (base64) for 2022-blake3-aes-128-gcm: the server's and the user's.
const PSK: &str = "MDEyMzQ1Njc4OWFiY2RlZg==";
const UPSK: &str = "ZmVkY2JhOTg3NjU0MzIxMA==";

/// `data` through `port` and back (written while the echo is read); None when the
/// connection ends or stalls for `wait` before everything came back.
async fn through(port: u16, data: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let (mut r, mut w) = s.into_split();
    let d = data.to_vec();
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&d).await;
        w
    });
    let mut got = vec![0u8; data.len()];
    let ok = matches!(
        tokio::time::timeout(wait, r.read_exact(&mut got)).await,
        Ok(Ok(_))
    );
    drop(writer.await);
    ok.then_some(got)
}

/// One unary gRPC call to the API: the response message, or the grpc-status and message.
async fn call(api: u16, path: &str, req: Vec<u8>) -> Result<Bytes, String> {
    let tcp = TcpStream::connect(("127.0.0.1", api)).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut c = client.ready().await.unwrap();
    let head = http::Request::post(format!("http://127.0.0.1:{api}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut send) = c.send_request(head, false).unwrap();
    let mut msg = vec![0u8];
    msg.extend_from_slice(&(req.len() as u32).to_be_bytes());
    msg.extend_from_slice(&req);
    send.send_data(msg.into(), true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .expect("the API answers")
        .unwrap();
    let (parts, mut body) = resp.into_parts();
    let mut data = Vec::new();
    while let Some(d) = body.data().await {
        let d = d.unwrap();
        let _ = body.flow_control().release_capacity(d.len());
        data.extend_from_slice(&d);
    }
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    let field = |k: &str| {
        trailers
            .get(k)
            .or_else(|| parts.headers.get(k))
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    if field("grpc-status") != "0" {
        let msg = percent_decode(&field("grpc-message"));
        return Err(format!("{} {msg}", field("grpc-status")));
    }
    let mut b = Bytes::from(data);
    assert!(b.len() >= 5, "a gRPC message");
    b.advance(5);
    Ok(b)
}

/// How long a refused connection is watched for an echo (servers hold bad handshakes open).
const REFUSED: Duration = Duration::from_millis(800);

/// grpc-message is percent-encoded (gRPC over HTTP/2).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match (b[i], s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16))) {
            (b'%', Some(Ok(v))) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

const HANDLER: &str = "/xray.app.proxyman.command.HandlerService/";

async fn alter(api: u16, tag: &str, op: pb::TypedMessage) -> Result<(), String> {
    let req = pb::AlterInboundRequest {
        tag: tag.into(),
        operation: Some(op),
    };
    call(api, &format!("{HANDLER}AlterInbound"), req.encode_to_vec())
        .await
        .map(drop)
}

async fn add_user(api: u16, tag: &str, email: &str, ty: &str, account: Vec<u8>) {
    let op = pb::AddUserOperation {
        user: Some(pb::User {
            level: 0,
            email: email.into(),
            account: Some(pb::TypedMessage {
                r#type: ty.into(),
                value: account,
            }),
        }),
    };
    let op = pb::TypedMessage::of("xray.app.proxyman.command.AddUserOperation", &op);
    alter(api, tag, op)
        .await
        .unwrap_or_else(|e| panic!("adding {email} to {tag}: {e}"));
}

async fn remove_user(api: u16, tag: &str, email: &str) -> Result<(), String> {
    let op = pb::RemoveUserOperation {
        email: email.into(),
    };
    let op = pb::TypedMessage::of("xray.app.proxyman.command.RemoveUserOperation", &op);
    alter(api, tag, op).await
}

async fn user_uplink(api: u16, email: &str) -> i64 {
    let req = pb::GetStatsRequest {
        name: format!("user>>>{email}>>>traffic>>>uplink"),
        reset: false,
    };
    let b = call(
        api,
        "/xray.app.stats.command.StatsService/GetStats",
        req.encode_to_vec(),
    )
    .await
    .unwrap_or_else(|e| panic!("stats of {email}: {e}"));
    pb::GetStatsResponse::decode(b)
        .unwrap()
        .stat
        .map_or(0, |s| s.value)
}

/// What one case needs: the server inbound (empty), the client outbound that reaches it as
/// the user, and the user as the API adds it.
struct Case {
    tag: &'static str,
    inbound: Value,
    outbound: Value,
    email: &'static str,
    account_type: &'static str,
    account: Vec<u8>,
}

fn cases(p: &dyn Fn(usize) -> u16) -> Vec<Case> {
    let srv = |i: usize| json!({"address": "127.0.0.1", "port": p(i)});
    let with = |i: usize, extra: Value| {
        let mut s = srv(i);
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let server_of = |i: usize, user: &str, pass: &str| {
        json!({"servers": [{"address": "127.0.0.1", "port": p(i),
                            "users": [{"user": user, "pass": pass}]}]})
    };
    let pw = |u: &str, pass: &str| pb::PasswordAccount {
        username: u.into(),
        password: pass.into(),
    };
    vec![
        Case {
            tag: "vmess",
            inbound: json!({"clients": []}),
            outbound: with(0, json!({"id": VM})),
            email: "vm@x",
            account_type: "xray.proxy.vmess.Account",
            account: pb::VmessAccount {
                id: VM.into(),
                security_settings: None,
            }
            .encode_to_vec(),
        },
        Case {
            tag: "vless",
            inbound: json!({"clients": [], "decryption": "none"}),
            outbound: with(1, json!({"id": VL, "encryption": "none"})),
            email: "vl@x",
            account_type: "xray.proxy.vless.Account",
            account: pb::VlessAccount {
                id: VL.into(),
                flow: String::new(),
                encryption: "none".into(),
                reverse: None,
            }
            .encode_to_vec(),
        },
        Case {
            tag: "trojan",
            inbound: json!({"clients": []}),
            outbound: with(2, json!({"password": "tr-pass"})),
            email: "tr@x",
            account_type: "xray.proxy.trojan.Account",
            account: pb::TrojanAccount {
                password: "tr-pass".into(),
            }
            .encode_to_vec(),
        },
        Case {
            // Marzban's shape: no server-level method, each user brings its own.
            tag: "shadowsocks",
            inbound: json!({"clients": [], "network": "tcp,udp"}),
            outbound: with(
                3,
                json!({"method": "chacha20-ietf-poly1305", "password": "ss-pass"}),
            ),
            email: "ss@x",
            account_type: "xray.proxy.shadowsocks.Account",
            account: pb::ShadowsocksAccount {
                password: "ss-pass".into(),
                cipher_type: 7, // CHACHA20_POLY1305
                iv_check: false,
            }
            .encode_to_vec(),
        },
        Case {
            tag: "shadowsocks",
            inbound: json!({"method": "2022-blake3-aes-128-gcm", "password": PSK, "clients": []}),
            outbound: with(
                4,
                json!({"method": "2022-blake3-aes-128-gcm", "password": format!("{PSK}:{UPSK}")}),
            ),
            email: "s22@x",
            account_type: "xray.proxy.shadowsocks_2022.Account",
            account: pb::Ss2022Account { key: UPSK.into() }.encode_to_vec(),
        },
        Case {
            tag: "socks",
            inbound: json!({"auth": "password", "accounts": []}),
            outbound: server_of(5, "so-user", "so-pass"),
            email: "so-user",
            account_type: "xray.proxy.socks.Account",
            account: pw("so-user", "so-pass").encode_to_vec(),
        },
        Case {
            // mixed: SOCKS5 and HTTP on one port; the HTTP half asks for the same accounts.
            tag: "mixed",
            inbound: json!({"auth": "password", "accounts": []}),
            outbound: server_of(6, "mx-user", "mx-pass"),
            email: "mx-user",
            account_type: "xray.proxy.socks.Account",
            account: pw("mx-user", "mx-pass").encode_to_vec(),
        },
        Case {
            tag: "shadowsocksr",
            inbound: json!({"method": "aes-256-cfb", "password": "ssr-main",
                            "protocol": "auth_aes128_md5", "obfs": "plain", "users": []}),
            outbound: with(
                7,
                json!({"method": "aes-256-cfb", "password": "ssr-main",
                       "protocol": "auth_aes128_md5", "protocolParam": "1024:ssr-user-pass",
                       "obfs": "plain"}),
            ),
            email: "ssr@x",
            account_type: "ferry.proxy.shadowsocksr.Account",
            account: pb::SsrAccount {
                uid: 1024,
                password: "ssr-user-pass".into(),
            }
            .encode_to_vec(),
        },
    ]
}

fn api_config(api: u16, inbounds: Vec<Value>) -> Value {
    json!({
        "api": {"tag": "api", "listen": format!("127.0.0.1:{api}"),
                "services": ["HandlerService", "StatsService"]},
        "stats": {},
        "policy": {"levels": {"0": {"statsUserUplink": true, "statsUserDownlink": true}}},
        "inbounds": inbounds,
        "outbounds": [{"protocol": "freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_user_bearing_inbound_starts_empty_and_serves_users_added_through_the_api() {
    let echo = echo_server_async().await;
    let api = free_port();
    let server_ports: Vec<u16> = (0..8).map(|_| free_port()).collect();
    let entries: Vec<u16> = (0..8).map(|_| free_port()).collect();
    let cases = cases(&|i| server_ports[i]);

    let inbounds = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"tag": format!("in{i}"), "listen": "127.0.0.1", "port": server_ports[i],
                   "protocol": c.tag, "settings": c.inbound})
        })
        .collect();
    let _server = start_instance(api_config(api, inbounds)).await;

    let client_in = (0..cases.len())
        .map(|i| {
            json!({"tag": format!("e{i}"), "listen": "127.0.0.1", "port": entries[i],
                   "protocol": "tunnel",
                   "settings": {"rewriteAddress": "127.0.0.1", "rewritePort": echo.port()}})
        })
        .collect::<Vec<_>>();
    let client_out = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let proto = if c.tag == "mixed" { "socks" } else { c.tag };
            json!({"tag": format!("o{i}"), "protocol": proto, "settings": c.outbound})
        })
        .collect::<Vec<_>>();
    let rules = (0..cases.len())
        .map(|i| json!({"inboundTag": [format!("e{i}")], "outboundTag": format!("o{i}")}))
        .collect::<Vec<_>>();
    let _client = start_instance(json!({
        "inbounds": client_in, "outbounds": client_out, "routing": {"rules": rules}
    }))
    .await;

    let data = pattern(1 << 20, 9);
    for (i, c) in cases.iter().enumerate() {
        let what = format!("{} ({})", c.tag, c.account_type);
        assert!(
            through(entries[i], b"nobody yet", REFUSED).await.is_none(),
            "{what}: served before it had a user"
        );
        add_user(
            api,
            &format!("in{i}"),
            c.email,
            c.account_type,
            c.account.clone(),
        )
        .await;
        let got = through(entries[i], &data, Duration::from_secs(10)).await;
        assert!(
            got.as_deref() == Some(&data[..]),
            "{what}: 1 MiB not echoed byte-exact"
        );
        let up = user_uplink(api, c.email).await;
        assert!(
            up >= data.len() as i64,
            "{what}: the user's uplink counter shows {up} bytes"
        );
    }

    // Removed through the API: the next connection is refused again.
    for i in [0, 5, 7] {
        let c = &cases[i];
        remove_user(api, &format!("in{i}"), c.email)
            .await
            .unwrap_or_else(|e| panic!("removing {}: {e}", c.email));
        assert!(
            through(entries[i], b"after removal", REFUSED)
                .await
                .is_none(),
            "{}: a removed user still served",
            c.tag
        );
    }
    let e = remove_user(api, "in5", "so-user").await.unwrap_err();
    assert!(e.contains("proxy/socks: User so-user not found."), "{e}");
}

/// A raw HTTP proxy request through `port`: the status line's code.
async fn http_status(port: u16, target: SocketAddr, creds: Option<&str>) -> u16 {
    http_connect(port, target, creds).await.0
}

/// A CONNECT through `port` with these credentials: the status code, and on 200 whether
/// 256 KiB went through the tunnel to the echo target and back byte-exact.
async fn http_connect(port: u16, target: SocketAddr, creds: Option<&str>) -> (u16, bool) {
    use base64::Engine;
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = creds.map_or(String::new(), |c| {
        format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(c)
        )
    });
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut b = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut b))
        .await
        .expect("an answer")
        .unwrap();
    let code: u16 = std::str::from_utf8(&b[9..12]).unwrap().parse().unwrap();
    if code != 200 {
        return (code, false);
    }
    // The rest of the answer's head ("Connection established\r\n\r\n").
    let mut end = [0u8; 4];
    while &end != b"\r\n\r\n" {
        let mut c = [0u8; 1];
        s.read_exact(&mut c).await.unwrap();
        end.rotate_left(1);
        end[3] = c[0];
    }
    let d = pattern(256 << 10, 4);
    let (mut r, mut w) = s.into_split();
    let d2 = d.clone();
    let writer = tokio::spawn(async move { w.write_all(&d2).await });
    let mut got = vec![0u8; d.len()];
    let ok = matches!(
        tokio::time::timeout(Duration::from_secs(10), r.read_exact(&mut got)).await,
        Ok(Ok(_))
    );
    let _ = writer.await;
    (code, ok && got == d)
}

/// An `http` inbound with no accounts is an open proxy, as in Xray; once an account is added
/// through the API it asks for credentials, and keeps asking after the last one is removed.
/// A `mixed` inbound with `auth: "password"` and no accounts refuses HTTP requests too (Xray
/// lets them through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_accounts_through_the_api() {
    let echo = echo_server_async().await;
    let (api, hport, mport) = (free_port(), free_port(), free_port());
    let _server = start_instance(api_config(
        api,
        vec![
            json!({"tag": "h", "listen": "127.0.0.1", "port": hport, "protocol": "http",
                   "settings": {}}),
            json!({"tag": "m", "listen": "127.0.0.1", "port": mport, "protocol": "mixed",
                   "settings": {"auth": "password", "accounts": []}}),
        ],
    ))
    .await;
    assert_eq!(http_status(hport, echo, None).await, 200, "open at first");
    assert_eq!(http_status(mport, echo, None).await, 407);
    assert_eq!(http_status(mport, echo, Some("a:b")).await, 407);

    let acc = |u: &str, p: &str| {
        pb::PasswordAccount {
            username: u.into(),
            password: p.into(),
        }
        .encode_to_vec()
    };
    add_user(api, "h", "", "xray.proxy.http.Account", acc("hu", "hp")).await;
    assert_eq!(http_status(hport, echo, None).await, 407);
    assert_eq!(http_status(hport, echo, Some("hu:wrong")).await, 407);
    assert_eq!(http_connect(hport, echo, Some("hu:hp")).await, (200, true));
    add_user(api, "m", "mu", "xray.proxy.socks.Account", acc("mu", "mp")).await;
    assert_eq!(http_connect(mport, echo, Some("mu:mp")).await, (200, true));

    // The account of another protocol, an email that is not the user name: refused.
    let e = alter(
        api,
        "h",
        pb::TypedMessage::of(
            "xray.app.proxyman.command.AddUserOperation",
            &pb::AddUserOperation {
                user: Some(pb::User {
                    level: 0,
                    email: "x".into(),
                    account: Some(pb::TypedMessage {
                        r#type: "xray.proxy.socks.Account".into(),
                        value: acc("x", "y"),
                    }),
                }),
            },
        ),
    )
    .await
    .unwrap_err();
    assert!(e.contains("is not an account of a http inbound"), "{e}");
    let op = pb::TypedMessage::of(
        "xray.app.proxyman.command.AddUserOperation",
        &pb::AddUserOperation {
            user: Some(pb::User {
                level: 0,
                email: "someone@x".into(),
                account: Some(pb::TypedMessage {
                    r#type: "xray.proxy.http.Account".into(),
                    value: acc("hv", "p"),
                }),
            }),
        },
    );
    let e = alter(api, "h", op).await.unwrap_err();
    assert!(e.contains("email is its user name"), "{e}");

    remove_user(api, "h", "hu").await.unwrap();
    assert_eq!(http_status(hport, echo, Some("hu:hp")).await, 407);
    assert_eq!(
        http_status(hport, echo, None).await,
        407,
        "no account left: still closed, not open again"
    );
}

/// A 2022 inbound written with `"clients": []`: Xray serves it as a single-key inbound (the
/// server password alone), and so does Ferry while it has no user; once the API adds a user,
/// identity headers choose users and the server key alone no longer gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ss2022_with_empty_clients_takes_the_server_key_until_users_come() {
    let echo = echo_server_async().await;
    let (api, port, single, user) = (free_port(), free_port(), free_port(), free_port());
    let _server = start_instance(api_config(
        api,
        vec![
            json!({"tag": "s", "listen": "127.0.0.1", "port": port, "protocol": "shadowsocks",
                    "settings": {"method": "2022-blake3-aes-128-gcm", "password": PSK,
                                 "clients": []}}),
        ],
    ))
    .await;
    let entry = |tag: &str, p: u16| {
        json!({"tag": tag, "listen": "127.0.0.1", "port": p, "protocol": "tunnel",
               "settings": {"rewriteAddress": "127.0.0.1", "rewritePort": echo.port()}})
    };
    let out = |tag: &str, pw: String| {
        json!({"tag": tag, "protocol": "shadowsocks",
               "settings": {"address": "127.0.0.1", "port": port,
                            "method": "2022-blake3-aes-128-gcm", "password": pw}})
    };
    let _client = start_instance(json!({
        "inbounds": [entry("a", single), entry("b", user)],
        "outbounds": [out("a", PSK.to_string()), out("b", format!("{PSK}:{UPSK}"))],
        "routing": {"rules": [{"inboundTag": ["a"], "outboundTag": "a"},
                              {"inboundTag": ["b"], "outboundTag": "b"}]}
    }))
    .await;
    let d = pattern(64 << 10, 3);
    let wait = Duration::from_secs(10);
    assert!(through(single, &d, wait).await.as_deref() == Some(&d[..]));
    assert!(through(user, b"not yet", REFUSED).await.is_none());
    add_user(
        api,
        "s",
        "u@x",
        "xray.proxy.shadowsocks_2022.Account",
        pb::Ss2022Account { key: UPSK.into() }.encode_to_vec(),
    )
    .await;
    assert!(through(user, &d, wait).await.as_deref() == Some(&d[..]));
    assert!(
        through(single, b"key alone", REFUSED).await.is_none(),
        "the server key alone still gets in beside users"
    );
}
