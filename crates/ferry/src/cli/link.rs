//! `ferry link`: share links turned into outbounds, and a config's users turned into links.

use std::process::ExitCode;

use anyhow::{anyhow, Result};

use ferry::config;

use super::source::read_source;

/// `ferry link`: a `ss://`, `ssr://`, `vmess://`, `vless://`, `trojan://`, `hysteria2://` or
/// `wireguard://` link becomes an outbound JSON object; with `-c`, prints links for the users
/// of the config's shadowsocks, shadowsocksr, VMess, VLESS, Trojan and Hysteria inbounds
/// (REALITY or TLS included) and for its VMess and WireGuard outbounds; with `--sub`, all of
/// them as one base64 subscription.
pub(crate) fn link_cmd(
    link: Option<String>,
    config: Vec<String>,
    host: Option<String>,
    subscription: bool,
) -> Result<ExitCode> {
    use ferry::proxy::table;
    if let Some(l) = link {
        let out = table::parse_link(&l).map_err(|e| anyhow!("{e}"))?;
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    if config.is_empty() {
        return Err(anyhow!(
            "give an ss://, ssr://, vmess://, vless://, trojan://, hysteria2:// or wireguard:// link, or -c CONFIG to print links"
        ));
    }
    let mut docs = Vec::new();
    for src in &config {
        let (name, text) = read_source(src)?;
        docs.push(config::json::parse(&text).map_err(|e| anyhow!("{name}: {e}"))?);
    }
    let merged = config::merge(docs);
    // (who, link): who is the user's email for an inbound's user, None for an outbound.
    let mut links: Vec<(Option<String>, String)> = Vec::new();
    for ib in merged
        .get("inbounds")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
    {
        let proto = ib.get("protocol").and_then(|v| v.as_str()).unwrap_or("");
        let Some(links_for) = table::inbound(proto).and_then(|p| p.links.inbound) else {
            continue;
        };
        let port = ib
            .get("port")
            .and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| anyhow!("a {proto} inbound has no single port"))?;
        let listen = ib
            .get("listen")
            .and_then(|v| v.as_str())
            .unwrap_or("0.0.0.0");
        let h = host.clone().unwrap_or_else(|| listen.to_string());
        for (email, l) in links_for(ib, &h, port).map_err(|e| anyhow!("{e}"))? {
            links.push((Some(email), l));
        }
    }
    for outbound_links in table::PROTOCOLS.iter().filter_map(|p| p.links.outbounds) {
        links.extend(outbound_links(&merged).into_iter().map(|l| (None, l)));
    }
    if links.is_empty() {
        return Err(anyhow!(
            "no shadowsocks/shadowsocksr/vmess/vless/trojan/hysteria inbound users or vmess/wireguard outbounds in the config"
        ));
    }
    if subscription {
        // A subscription is the links one per line, in standard base64 (v2rayN's form, which
        // every client app imports).
        let all: Vec<&str> = links.iter().map(|(_, l)| l.as_str()).collect();
        println!(
            "{}",
            ferry::common::text::base64_std(all.join("\n").as_bytes())
        );
        return Ok(ExitCode::SUCCESS);
    }
    for (who, l) in links {
        match who {
            Some(e) if e.is_empty() => println!("(no email)\t{l}"),
            Some(e) => println!("{e}\t{l}"),
            None => println!("{l}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
