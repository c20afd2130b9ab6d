//! The test that keeps the table the one place protocols are named: a protocol's name or
//! alias, as a string literal (`"vless"`), appears only in its own folder (or file) under
//! `proxy/` and in the table, outside `#[cfg(test)]` code and comments, save the exceptions
//! listed with their reasons.

use std::path::{Path, PathBuf};

use super::PROTOCOLS;

/// (file under `src/`, literal, why it may be there): words that name a protocol and
/// something else too.
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    ("app/api/decode/stream.rs", "http", "a raw TCP header type"),
    ("config/stream.rs", "http", "a raw TCP header type"),
    (
        "config/stream.rs",
        "hysteria",
        "the hysteria network (Xray's transport of the same name)",
    ),
    (
        "proxy/vless/link.rs",
        "http",
        "a share link's raw TCP header type",
    ),
    (
        "proxy/vmess/link.rs",
        "http",
        "a share link's raw TCP header type",
    ),
    (
        "proxy/blackhole/mod.rs",
        "http",
        "blackhole's response type",
    ),
    (
        "proxy/blackhole/api.rs",
        "http",
        "blackhole's response type",
    ),
    ("app/sniff/mod.rs", "http", "a sniffed protocol"),
    ("sniffing.rs", "http", "a sniffed protocol (destOverride)"),
    ("common/http1.rs", "http", "a URL scheme"),
    (
        "config/quic.rs",
        "http",
        "a URL scheme (Hysteria's masquerade proxy)",
    ),
    ("app/router/webhook.rs", "http", "a URL scheme"),
    ("transport/grpc/mod.rs", "http", "a URL scheme"),
    ("transport/xhttp/client/request.rs", "http", "a URL scheme"),
    ("config/mod.rs", "dns", "the config's dns object"),
    ("proxy/tun/mod.rs", "dns", "a later Xray TUN setting's key"),
    ("app/dns/resolve.rs", "dns", "a config path in a message"),
    (
        "app/dispatcher/services.rs",
        "dns",
        "the protocol of the DNS client's own queries",
    ),
    ("proxy/dns/rules.rs", "direct", "a DNS rule's action"),
    ("proxy/freedom/rules.rs", "block", "a freedom rule's action"),
    (
        "proxy/vless/link.rs",
        "trojan",
        "VLESS and Trojan share one share-link format, kept with VLESS (Trojan's entry takes it)",
    ),
];

/// `src` with comments blanked (strings and chars kept).
fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map(|e| e + 2).unwrap_or(rest.len());
            out.extend(rest[..end].chars().filter(|c| *c == '\n'));
            i += end;
        } else if let Some(n) = string_len(rest) {
            out.push_str(&rest[..n]);
            i += n;
        } else if rest.starts_with('\'') {
            // A char literal ('"', '\'', '\u{..}') or a lifetime.
            let n = char_len(rest).unwrap_or(1);
            out.push_str(&rest[..n]);
            i += n;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of the string literal `s` starts with (`"…"`, `b"…"`, `r#"…"#`), if any.
fn string_len(s: &str) -> Option<usize> {
    let pre = if s.starts_with("br") || s.starts_with("rb") {
        2
    } else if s.starts_with('r') || s.starts_with('b') {
        1
    } else {
        0
    };
    let raw = s[..pre].contains('r');
    let hashes = s[pre..].chars().take_while(|c| *c == '#').count();
    if !raw && hashes > 0 {
        return None;
    }
    let open = pre + hashes;
    if !s[open..].starts_with('"') {
        return None;
    }
    if raw {
        let close = format!("\"{}", "#".repeat(hashes));
        return s[open + 1..]
            .find(&close)
            .map(|e| open + 1 + e + close.len());
    }
    let b = s.as_bytes();
    let mut i = open + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    Some(b.len())
}

fn char_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.get(1) == Some(&b'\\') {
        return s[2..].find('\'').map(|e| e + 3);
    }
    let c = s[1..].chars().next()?;
    let after = 1 + c.len_utf8();
    (b.get(after) == Some(&b'\'')).then_some(after + 1)
}

/// `src` (comments stripped) without the items under `#[cfg(test)]`; the files of
/// `#[cfg(test)] mod name;` go to `test_mods`.
fn strip_tests(src: &str, test_mods: &mut Vec<String>) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let mut depth = 0usize;
        let mut end = item.len();
        let mut i = 0;
        while i < item.len() {
            let r = &item[i..];
            if let Some(n) = string_len(r) {
                i += n;
                continue;
            }
            match r.as_bytes()[0] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    let decl = item[..i].split_whitespace().collect::<Vec<_>>();
                    if let [.., "mod", name] = decl.as_slice() {
                        test_mods.push(name.to_string());
                    }
                    end = i + 1;
                    break;
                }
                _ => {}
            }
            i += r.chars().next().map_or(1, char::len_utf8);
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The contents of the string literals in `src`.
fn literals(src: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < src.len() {
        let r = &src[i..];
        let prev = src[..i].chars().last();
        if !prev.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            if let Some(n) = string_len(r) {
                let open = r.find('"').unwrap_or(0) + 1;
                let close = r[..n].rfind('"').unwrap_or(n);
                out.push(&r[open..close.max(open)]);
                i += n;
                continue;
            }
        }
        if r.starts_with('\'') {
            i += char_len(r).unwrap_or(1);
            continue;
        }
        i += r.chars().next().map_or(1, char::len_utf8);
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A protocol's home under `src/`: `proxy/vless` for `ferry::proxy::vless`.
fn home(module: &str) -> String {
    module.split("::").skip(1).collect::<Vec<_>>().join("/")
}

#[test]
fn protocol_names_are_only_in_their_folders_and_the_table() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut stripped = Vec::new();
    let mut test_files = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let mut mods = Vec::new();
        let text = strip_tests(
            &strip_comments(&std::fs::read_to_string(f).unwrap()),
            &mut mods,
        );
        let dir = match rel.rsplit_once('/') {
            Some((d, "mod.rs")) => format!("{d}/"),
            Some((d, file)) => format!("{d}/{}/", file.trim_end_matches(".rs")),
            None if rel == "lib.rs" || rel == "main.rs" => String::new(),
            None => format!("{}/", rel.trim_end_matches(".rs")),
        };
        for m in mods {
            test_files.push(format!("{dir}{m}.rs"));
            test_files.push(format!("{dir}{m}/mod.rs"));
        }
        stripped.push((rel, text));
    }
    let table = [
        "proxy/table.rs",
        "proxy/table_names.rs",
        "proxy/protocol.rs",
    ];
    let mut found = Vec::new();
    for (rel, text) in &stripped {
        if test_files.contains(rel) || table.contains(&rel.as_str()) {
            continue;
        }
        for lit in literals(text) {
            for p in PROTOCOLS {
                let named = p.names.iter().chain(p.inbound_aliases).any(|n| *n == lit);
                let h = home(p.module);
                let at_home = rel == &format!("{h}.rs") || rel.starts_with(&format!("{h}/"));
                let excused = EXCEPTIONS.iter().any(|(f, l, _)| f == rel && *l == lit);
                if named && !at_home && !excused {
                    found.push(format!("{rel}: \"{lit}\""));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    assert!(
        found.is_empty(),
        "protocol names outside their folders and the table (ask proxy::table, or list an exception with its reason):\n{}",
        found.join("\n")
    );
}
