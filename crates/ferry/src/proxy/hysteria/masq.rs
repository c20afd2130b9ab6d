//! What a request that is not an authentication gets (`hysteriaSettings.masquerade`), as the
//! Go server's handlers answer: Go's 404 page, a fixed answer, or a directory served as Go's
//! `http.FileServer` serves it (index.html, a listing, 301 to the slashed path, 404).

use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::io::AsyncReadExt;

pub use super::h3conn::Stream;
use crate::transport::quic::Masquerade;

fn h3e(e: h3::error::StreamError) -> io::Error {
    io::Error::other(e.to_string())
}

type Headers = Vec<(String, String)>;

fn not_found() -> (u16, Headers, Bytes) {
    (
        404,
        vec![
            ("content-type".into(), "text/plain; charset=utf-8".into()),
            ("x-content-type-options".into(), "nosniff".into()),
        ],
        Bytes::from_static(b"404 page not found\n"),
    )
}

/// Answers `req` on `stream` as the masquerade site (`tls`: the client side of TLS for an
/// `https://` proxy URL).
pub async fn answer(
    m: &Masquerade,
    tls: Option<&crate::transport::tls::TlsLayer>,
    req: &http::Request<()>,
    stream: &mut Stream,
) -> io::Result<()> {
    let (status, headers, body) = match m {
        Masquerade::Proxy {
            url, rewrite_host, ..
        } => {
            return match super::masq_proxy::forward(url, *rewrite_host, tls, req, stream).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    tracing::debug!("hysteria: masquerade proxy to {url}: {e}");
                    // As Go's ReverseProxy under Xray's handler: 502, no body.
                    send(stream, 502, &Vec::new(), Bytes::new(), true).await
                }
            };
        }
        Masquerade::NotFound => not_found(),
        Masquerade::Fixed {
            status,
            headers,
            content,
        } => (*status, headers.clone(), content.clone()),
        Masquerade::Dir(dir) => return serve_dir(dir, req, stream).await,
    };
    send(
        stream,
        status,
        &headers,
        body,
        req.method() == http::Method::HEAD,
    )
    .await
}

async fn send(
    stream: &mut Stream,
    status: u16,
    headers: &Headers,
    body: Bytes,
    head: bool,
) -> io::Result<()> {
    let mut resp = http::Response::builder().status(status);
    for (k, v) in headers {
        resp = resp.header(k.as_str(), v.as_str());
    }
    let resp = resp.body(()).map_err(io::Error::other)?;
    stream.send_response(resp).await.map_err(h3e)?;
    if !body.is_empty() && !head {
        stream.send_data(body).await.map_err(h3e)?;
    }
    stream.finish().await.map_err(h3e)
}

/// The file under `dir` that a URL path names, or `None` when the path leaves it.
fn resolve(dir: &Path, path: &str) -> Option<PathBuf> {
    let decoded = crate::common::text::percent_decode(path).ok()?;
    let mut out = dir.to_path_buf();
    for part in decoded.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p if p.contains('\0') || p.contains('\\') => return None,
            p => out.push(p),
        }
    }
    Some(out)
}

fn content_type(p: &Path) -> &'static str {
    match p
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("xml") => "text/xml; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("ico") => "image/vnd.microsoft.icon",
        Some("woff2") => "font/woff2",
        Some("wasm") => "application/wasm",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

async fn serve_dir(dir: &Path, req: &http::Request<()>, stream: &mut Stream) -> io::Result<()> {
    let head = req.method() == http::Method::HEAD;
    let path = req.uri().path();
    let Some(mut file) = resolve(dir, path) else {
        let (s, h, b) = not_found();
        return send(stream, s, &h, b, head).await;
    };
    let mut meta = tokio::fs::metadata(&file).await;
    if meta.as_ref().is_ok_and(|m| m.is_dir()) {
        if !path.ends_with('/') {
            let to = format!("{path}/");
            let h = vec![("location".to_string(), to)];
            return send(stream, 301, &h, Bytes::new(), head).await;
        }
        let index = file.join("index.html");
        if tokio::fs::metadata(&index).await.is_ok_and(|m| m.is_file()) {
            file = index;
            meta = tokio::fs::metadata(&file).await;
        } else {
            let mut names = Vec::new();
            let mut rd = tokio::fs::read_dir(&file).await?;
            while let Some(e) = rd.next_entry().await? {
                let mut n = e.file_name().to_string_lossy().into_owned();
                if e.file_type().await.is_ok_and(|t| t.is_dir()) {
                    n.push('/');
                }
                names.push(n);
            }
            names.sort();
            let mut body = String::from(
                "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
            );
            for n in names {
                let href = crate::common::text::percent_encode(&n).replace("%2F", "/");
                body.push_str(&format!(
                    "<a href=\"{}\">{}</a>\n",
                    html_escape(&href),
                    html_escape(&n)
                ));
            }
            body.push_str("</pre>\n");
            let h = vec![(
                "content-type".to_string(),
                "text/html; charset=utf-8".to_string(),
            )];
            return send(stream, 200, &h, Bytes::from(body), head).await;
        }
    }
    let Some(meta) = meta.ok().filter(|m| m.is_file()) else {
        let (s, h, b) = not_found();
        return send(stream, s, &h, b, head).await;
    };
    let mut f = match tokio::fs::File::open(&file).await {
        Ok(f) => f,
        Err(_) => {
            let (s, h, b) = not_found();
            return send(stream, s, &h, b, head).await;
        }
    };
    let resp = http::Response::builder()
        .status(200)
        .header("content-type", content_type(&file))
        .header("content-length", meta.len().to_string())
        .header("accept-ranges", "bytes")
        .body(())
        .map_err(io::Error::other)?;
    stream.send_response(resp).await.map_err(h3e)?;
    if !head {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = f.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            stream
                .send_data(Bytes::copy_from_slice(&buf[..n]))
                .await
                .map_err(h3e)?;
        }
    }
    stream.finish().await.map_err(h3e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_directory() {
        let d = Path::new("/srv/site");
        assert_eq!(resolve(d, "/a/b.html"), Some(d.join("a/b.html")));
        assert_eq!(resolve(d, "/"), Some(d.to_path_buf()));
        assert_eq!(resolve(d, "/a/%20b"), Some(d.join("a/ b")));
        assert_eq!(resolve(d, "/../etc/passwd"), None);
        assert_eq!(resolve(d, "/a/%2e%2e/%2e%2e/x"), None);
        assert_eq!(
            content_type(Path::new("x.HTML")),
            "text/html; charset=utf-8"
        );
    }
}
