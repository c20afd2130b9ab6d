//! http_simple / http_post (shadowsocksr.md §5.1): the first client write as a URL-encoded
//! HTTP request, the first server write behind an HTTP response head.

use super::super::util::{rand_u8, random_bytes, Error, Result};
use super::{pick, Info};

const USER_AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 6.3; WOW64; rv:40.0) Gecko/20100101 Firefox/40.0",
    "Mozilla/5.0 (Windows NT 6.3; WOW64; rv:40.0) Gecko/20100101 Firefox/44.0",
    "Mozilla/5.0 (Windows NT 6.1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/41.0.2228.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/535.11 (KHTML, like Gecko) Ubuntu/11.10 Chromium/27.0.1453.93 Chrome/27.0.1453.93 Safari/537.36",
    "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:35.0) Gecko/20100101 Firefox/35.0",
    "Mozilla/5.0 (compatible; WOW64; MSIE 10.0; Windows NT 6.2)",
    "Mozilla/5.0 (Windows; U; Windows NT 6.1; en-US) AppleWebKit/533.20.25 (KHTML, like Gecko) Version/5.0.4 Safari/533.20.27",
    "Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.3; Trident/7.0; .NET4.0E; .NET4.0C)",
    "Mozilla/5.0 (Windows NT 6.3; Trident/7.0; rv:11.0) like Gecko",
    "Mozilla/5.0 (Linux; Android 4.4; Nexus 5 Build/BuildID) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/30.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (iPad; CPU OS 5_0 like Mac OS X) AppleWebKit/534.46 (KHTML, like Gecko) Version/5.1 Mobile/9A334 Safari/7534.48.3",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 5_0 like Mac OS X) AppleWebKit/534.46 (KHTML, like Gecko) Version/5.1 Mobile/9A334 Safari/7534.48.3",
];

/// Largest request head a server buffers before giving up.
const HTTP_MAX_HEAD: usize = 65536;

pub struct Http {
    post: bool,
    info: Info,
    sent: bool,
    recv_done: bool,
    recv: Vec<u8>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Http {
    pub(super) fn new(post: bool, info: Info) -> Http {
        Http {
            post,
            info,
            sent: false,
            recv_done: false,
            recv: Vec::new(),
        }
    }

    pub(super) fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.sent {
            out.extend_from_slice(data);
            return;
        }
        self.sent = true;
        let head = self.info.head_size;
        let n = if data.len() > head + 64 {
            head + (rand_u8() as usize % 65)
        } else {
            data.len()
        };
        let (url, rest) = data.split_at(n);
        let param = if self.info.param.is_empty() {
            self.info.host.clone()
        } else {
            self.info.param.clone()
        };
        let (hosts, custom) = match param.split_once('#') {
            Some((h, c)) => (h.to_string(), Some(c.to_string())),
            None => (param, None),
        };
        let hosts: Vec<&str> = hosts.split(',').collect();
        let host = pick(&hosts);
        let mut h = String::with_capacity(512 + 3 * url.len());
        h.push_str(if self.post { "POST /" } else { "GET /" });
        for b in url {
            h.push_str(&format!("%{b:02x}"));
        }
        h.push_str(" HTTP/1.1\r\nHost: ");
        h.push_str(host);
        if self.info.port != 80 {
            h.push_str(&format!(":{}", self.info.port));
        }
        h.push_str("\r\n");
        match custom {
            Some(c) => {
                let c = c.replace("\\n", "\r\n");
                let c = if self.post {
                    c
                } else {
                    c.replace("\r\n", "\n").replace('\n', "\r\n")
                };
                h.push_str(&c);
                h.push_str("\r\n\r\n");
            }
            None => {
                h.push_str("User-Agent: ");
                h.push_str(pick(USER_AGENTS));
                h.push_str("\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.8\r\nAccept-Encoding: gzip, deflate\r\n");
                if self.post {
                    const ALNUM: &[u8] =
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
                    let b: String = random_bytes(32)
                        .iter()
                        .map(|x| ALNUM[*x as usize % ALNUM.len()] as char)
                        .collect();
                    h.push_str("Content-Type: multipart/form-data; boundary=");
                    h.push_str(&b);
                    h.push_str("\r\n");
                }
                h.push_str("DNT: 1\r\nConnection: keep-alive\r\n\r\n");
            }
        }
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(rest);
    }

    pub(super) fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_done {
            out.extend_from_slice(data);
            return Ok(false);
        }
        self.recv.extend_from_slice(data);
        if let Some(p) = find(&self.recv, b"\r\n\r\n") {
            out.extend_from_slice(&self.recv[p + 4..]);
            self.recv = Vec::new();
            self.recv_done = true;
        } else if self.recv.len() > HTTP_MAX_HEAD {
            return Err(Error::Obfs);
        }
        Ok(false)
    }

    pub(super) fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if !self.sent {
            self.sent = true;
            out.extend_from_slice(
                format!(
                    "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Encoding: gzip\r\nContent-Type: text/html\r\nDate: {}\r\nServer: nginx\r\nVary: Accept-Encoding\r\n\r\n",
                    http_date(std::time::SystemTime::now())
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(data);
    }

    pub(super) fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_done {
            out.extend_from_slice(data);
            return Ok(false);
        }
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        let n = b.len().min(5);
        if !(b"GET "[..n.min(4)] == b[..n.min(4)] || b"POST "[..n] == b[..n]) {
            return Err(Error::Obfs);
        }
        let Some(end) = find(b, b"\r\n\r\n") else {
            if b.len() > HTTP_MAX_HEAD {
                return Err(Error::Obfs);
            }
            return Ok(false);
        };
        let head = &b[..end];
        let first = head.split(|&c| c == b'\r').next().unwrap_or_default();
        let mut got = Vec::new();
        for item in first.split(|&c| c == b'%').skip(1) {
            let hex = |h: &[u8]| -> Result<u8> {
                let s = std::str::from_utf8(h).map_err(|_| Error::Obfs)?;
                u8::from_str_radix(s, 16).map_err(|_| Error::Obfs)
            };
            match item.len() {
                0 => return Err(Error::Obfs),
                1 => {
                    got.push(hex(item)?);
                    break;
                }
                2 => got.push(hex(item)?),
                _ => {
                    got.push(hex(&item[..2])?);
                    break;
                }
            }
        }
        if !self.info.param.is_empty() {
            let hosts: Vec<&str> = self
                .info
                .param
                .split('#')
                .next()
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .collect();
            let host = head
                .split(|&c| c == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .find_map(|l| l.strip_prefix(b"Host: "))
                .map(|h| String::from_utf8_lossy(h).to_string());
            if let Some(h) = host {
                let h = match h.rsplit_once(':') {
                    Some((a, p)) if p.bytes().all(|c| c.is_ascii_digit()) => a.to_string(),
                    _ => h,
                };
                if !hosts.iter().any(|x| *x == h) {
                    return Err(Error::Obfs);
                }
            }
        }
        if got.len() < 4 {
            return Err(Error::Obfs);
        }
        got.extend_from_slice(&b[end + 4..]);
        if got.len() < 13 {
            return Err(Error::Obfs);
        }
        out.extend_from_slice(&got);
        self.recv = Vec::new();
        self.recv_done = true;
        Ok(false)
    }
}

/// `%a, %d %b %Y %H:%M:%S GMT`.
fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        WD[days.rem_euclid(7) as usize],
        d,
        MON[(m - 1) as usize],
        y,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::info;
    use super::super::{Kind, Obfs, Side};
    use super::*;

    #[test]
    fn http_simple_refuses_a_foreign_host_and_short_url() {
        let mut s = Obfs::new(
            Kind::HttpSimple,
            info("only.example"),
            Side::Server(Default::default()),
        );
        let mut out = Vec::new();
        let req = b"GET /%00%01%02%03%04%05%06%07%08%09%0a%0b%0c%0d HTTP/1.1\r\nHost: www.example.com\r\n\r\n";
        assert_eq!(s.server_decode(req, &mut out), Err(Error::Obfs));
        let mut s = Obfs::new(Kind::HttpSimple, info(""), Side::Server(Default::default()));
        assert_eq!(
            s.server_decode(b"GET /%00%01 HTTP/1.1\r\nHost: a\r\n\r\n", &mut out),
            Err(Error::Obfs)
        );
        let mut s = Obfs::new(Kind::HttpSimple, info(""), Side::Server(Default::default()));
        assert_eq!(s.server_decode(b"\x16\x03\x01", &mut out), Err(Error::Obfs));
    }

    #[test]
    fn http_date_format() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1700000000);
        assert_eq!(http_date(t), "Tue, 14 Nov 2023 22:13:20 GMT");
    }
}
