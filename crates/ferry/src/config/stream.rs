//! `streamSettings`: the transport and security below a protocol, read into the one typed
//! [`StreamSettings`] that builds both the acceptor and the dialer chain.

use crate::config::reader::{ConfigError, Obj, Result};
pub use crate::transport::chain::{Security, StreamSettings};

/// Reads `streamSettings` objects.
pub trait ParseStream: Sized {
    /// Reads `parent.streamSettings` (absent = raw TCP without security).
    fn parse(parent: &Obj<'_>, outbound: bool) -> Result<Self>;
}

impl ParseStream for StreamSettings {
    fn parse(parent: &Obj<'_>, outbound: bool) -> Result<StreamSettings> {
        let Some(s) = parent.obj("streamSettings")? else {
            return Ok(StreamSettings::default());
        };
        let mut out = StreamSettings::default();
        if let Some(n) = s.str_alias(&["network", "method"])? {
            match n.to_ascii_lowercase().as_str() {
                "tcp" | "raw" => {}
                _ => {
                    let p = s
                        .get_alias(&["network", "method"])
                        .map(|(p, _)| p)
                        .unwrap_or_default();
                    return Err(ConfigError::new(p, format!("{n:?} is not supported")));
                }
            }
        }
        if let Some(sec) = s.str("security")? {
            match sec.to_ascii_lowercase().as_str() {
                "" | "none" => {}
                "tls" => {
                    let t = s.obj("tlsSettings")?;
                    out.security = Security::Tls(super::tls::parse(t, s.path(), outbound)?);
                }
                _ => {
                    return Err(ConfigError::new(
                        s.key_path("security"),
                        format!("{sec:?} is not supported yet"),
                    ))
                }
            }
        }
        for k in ["tlsSettings", "xtlsSettings", "realitySettings"] {
            // Present but unused (security is none): accepted, as Xray does.
            s.ignore(&[k]);
        }
        for key in [["tcpSettings", "rawSettings"]] {
            if let Some((p, v)) = s.get_alias(&key) {
                let t = Obj::new(v, p, parent.diag())?;
                if t.bool("acceptProxyProtocol")?.unwrap_or(false) {
                    accept_pp(&mut out, &t, outbound);
                }
                if let Some(h) = t.obj("header")? {
                    let ty = h.str("type")?.unwrap_or_else(|| "none".into());
                    if !ty.eq_ignore_ascii_case("none") {
                        return Err(ConfigError::new(
                            h.key_path("type"),
                            format!("header type {ty:?} is not supported"),
                        ));
                    }
                    h.finish();
                }
                t.finish();
            }
        }
        for k in [
            "wsSettings",
            "httpupgradeSettings",
            "grpcSettings",
            "kcpSettings",
            "xhttpSettings",
            "splithttpSettings",
            "quicSettings",
            "httpSettings",
            "dsSettings",
        ] {
            s.ignore(&[k]);
        }
        if let Some(so) = s.obj("sockopt")? {
            out.sockopt.mark = so.u64("mark")?.unwrap_or(0) as u32;
            out.sockopt.keepalive_idle = so.u64("tcpKeepAliveIdle")?.unwrap_or(0) as u32;
            out.sockopt.keepalive_interval = so.u64("tcpKeepAliveInterval")?.unwrap_or(0) as u32;
            out.sockopt.interface = so.str("interface")?.filter(|s| !s.is_empty());
            if so.bool("acceptProxyProtocol")?.unwrap_or(false) {
                accept_pp(&mut out, &so, outbound);
            }
            if let Some(t) = so.str("tproxy")? {
                if !t.eq_ignore_ascii_case("off") {
                    return Err(ConfigError::new(
                        so.key_path("tproxy"),
                        format!("tproxy {t:?} is not supported yet"),
                    ));
                }
            }
            if let Some(d) = so.str("dialerProxy")?.filter(|d| !d.is_empty()) {
                if outbound {
                    out.dialer_proxy = Some(d);
                } else {
                    parent.diag().warn(
                        &so.key_path("dialerProxy"),
                        "applies to outbounds only; ignored",
                    );
                }
            }
            for k in [
                "tcpFastOpen",
                "domainStrategy",
                "tcpCongestion",
                "v6only",
                "tcpMptcp",
                "trustedXForwardedFor",
                "tcpUserTimeout",
                "tcpMaxSeg",
                "tcpWindowClamp",
                "penetrate",
                "addressPortStrategy",
                "happyEyeballs",
                "customSockopt",
            ] {
                if so.has(k) {
                    parent
                        .diag()
                        .warn(&so.key_path(k), "not applied by Ferry yet");
                }
            }
            so.finish();
        }
        s.finish();
        Ok(out)
    }
}

/// `acceptProxyProtocol: true` (inbounds; outbounds ignore it, as Xray does).
fn accept_pp(out: &mut StreamSettings, o: &Obj<'_>, outbound: bool) {
    if outbound {
        o.diag().warn(
            &o.key_path("acceptProxyProtocol"),
            "applies to inbounds only; ignored",
        );
    } else {
        out.accept_proxy_protocol = true;
    }
}
