//! WireGuard's receive path: any datagram (a handshake initiation or response, a cookie reply,
//! transport data, garbage of any length) from a stranger or as if from a configured peer is
//! looked up and opened without a panic; a stranger is owed at most a cookie reply.
#![no_main]
use std::sync::{Arc, OnceLock};

use ferry::netstack::{Config, Stack};
use ferry::proxy::wireguard::config::{parse_key, PeerSettings, Prefix};
use ferry::proxy::wireguard::device::{Device, Link};

fn device() -> &'static (tokio::runtime::Runtime, Arc<Device>) {
    static D: OnceLock<(tokio::runtime::Runtime, Arc<Device>)> = OnceLock::new();
    D.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dev = rt.block_on(async {
            let (out, rx) = tokio::sync::mpsc::channel(16);
            std::mem::forget(rx);
            let (stack, _) = Stack::new(
                &Config { addrs: vec!["10.66.0.1".parse().unwrap()], mtu: 1420, promiscuous: true },
                out,
                None,
            );
            let key = parse_key("UG+dU5EFwwVt6jsZ3f4AT06YDBWDqfBYqTjfk/jn+WE=").unwrap();
            let dev = Device::new(key, stack, None);
            let sock = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
            let peer = PeerSettings {
                public_key: parse_key("F5W7kWjx06QvHqNDmu8M+NZP0LDG6lcOcOOcG8x3Yww=").unwrap(),
                preshared_key: None,
                endpoint: None,
                keep_alive: 0,
                allowed: vec![Prefix { addr: "10.66.0.2".parse().unwrap(), len: 32 }],
                email: String::new(),
                level: 0,
            };
            dev.add_peer(&peer, Link::Socket(sock), None);
            dev
        });
        (rt, dev)
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (rt, dev) = device();
    let _g = rt.enter();
    dev.fuzz_one(data);
});
