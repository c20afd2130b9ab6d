//! `geoip.dat` / `geosite.dat`: finding the files as Xray does, loading only the tags a config
//! names, and sharing each loaded tag between every rule (and every reload) that uses it.
//!
//! A tag is read by streaming the file once and decoding only its entry (routing.md §1.4);
//! the result is a compact table ([`DomainTable`]: string sets and regex sets; [`IpRanges`]:
//! sorted, merged ranges) kept in a process-wide cache of weak references, so the same tag in
//! routing and DNS, or across a config reload, is built once while it is in use.

pub mod wire;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use wire::{Visit, WireError};

/// The default geosite file (`geosite:TAG`).
pub const GEOSITE: &str = "geosite.dat";
/// The default geoip file (`geoip:TAG`).
pub const GEOIP: &str = "geoip.dat";

/// Why a tag could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    #[error("{0}")]
    Syntax(String),
    #[error("asset path {0:?} must stay in the asset directory (a relative path without ..)")]
    NotLocal(String),
    #[error("cannot open {file} (looked in {looked}): {err}")]
    Open {
        file: String,
        looked: String,
        err: String,
    },
    #[error("tag {code:?} is not in {path}")]
    NoTag { code: String, path: String },
    #[error("{path} is corrupt: {err}")]
    Corrupt { path: String, err: WireError },
    #[error("tag {code:?} of {path}: {err}")]
    Build {
        code: String,
        path: String,
        err: String,
    },
}

/// Where asset files are looked for (routing.md §1.3).
#[derive(Debug, Clone)]
pub struct Assets {
    /// The first place: `xray.location.asset` / `XRAY_LOCATION_ASSET` (or V2Ray's), else the
    /// directory of the running binary.
    pub base: PathBuf,
    /// Then these, in order.
    pub system: Vec<PathBuf>,
}

impl Assets {
    /// The locations from the environment, as Xray reads them (V2Ray's variables after Xray's).
    pub fn from_env() -> Assets {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let base = var("xray.location.asset")
            .or_else(|| var("XRAY_LOCATION_ASSET"))
            .or_else(|| var("v2ray.location.asset"))
            .or_else(|| var("V2RAY_LOCATION_ASSET"))
            .map(PathBuf::from)
            .or_else(|| {
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
            })
            .unwrap_or_else(|| PathBuf::from("."));
        Assets::in_dir(base)
    }

    /// `base` first, then the usual system folders.
    pub fn in_dir(base: impl Into<PathBuf>) -> Assets {
        Assets {
            base: base.into(),
            system: [
                "/usr/local/share/xray",
                "/usr/share/xray",
                "/opt/share/xray",
                "/usr/local/share/v2ray",
                "/usr/share/v2ray",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
        }
    }

    /// Only `base` (tests).
    pub fn only(base: impl Into<PathBuf>) -> Assets {
        Assets {
            base: base.into(),
            system: Vec::new(),
        }
    }

    /// The path of asset `file`: the first candidate that is a regular file.
    pub fn find(&self, file: &str) -> Result<PathBuf, GeoError> {
        let rel = Path::new(file);
        let local = !file.is_empty()
            && rel.is_relative()
            && rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !local {
            return Err(GeoError::NotLocal(file.to_string()));
        }
        let candidates: Vec<PathBuf> = std::iter::once(&self.base)
            .chain(&self.system)
            .map(|d| d.join(rel))
            .collect();
        if let Some(p) = candidates.iter().find(|p| p.is_file()) {
            return Ok(p.clone());
        }
        Err(GeoError::Open {
            file: file.to_string(),
            looked: candidates
                .iter()
                .filter_map(|p| p.parent())
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            err: "not found (set XRAY_LOCATION_ASSET or put the file next to ferry)".into(),
        })
    }
}

/// Cache key: the file (path, size, mtime), the code and the sorted attributes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    path: PathBuf,
    stamp: (u64, Option<std::time::SystemTime>),
    code: String,
    attrs: Vec<String>,
}

pub(super) fn key(path: &Path, code: &str, attrs: Vec<String>) -> Key {
    let stamp = std::fs::metadata(path)
        .map(|m| (m.len(), m.modified().ok()))
        .unwrap_or((0, None));
    Key {
        path: path.to_path_buf(),
        stamp,
        code: code.to_string(),
        attrs,
    }
}

pub(super) type Cache<T> = Mutex<HashMap<Key, Weak<T>>>;

pub(super) fn cached<T>(
    cache: &Cache<T>,
    k: Key,
    build: impl FnOnce() -> Result<T, GeoError>,
) -> Result<Arc<T>, GeoError> {
    if let Some(t) = cache
        .lock()
        .ok()
        .and_then(|m| m.get(&k).and_then(Weak::upgrade))
    {
        return Ok(t);
    }
    let t = Arc::new(build()?);
    if let Ok(mut m) = cache.lock() {
        m.retain(|_, w| w.strong_count() > 0);
        m.insert(k, Arc::downgrade(&t));
    }
    Ok(t)
}

/// Reads the body of entry `code` (compared ASCII-case-insensitively) from `path`.
pub fn read_entry(path: &Path, code: &str) -> Result<Vec<u8>, GeoError> {
    let f = std::fs::File::open(path).map_err(|e| GeoError::Open {
        file: path.display().to_string(),
        looked: path.display().to_string(),
        err: e.to_string(),
    })?;
    let mut r = std::io::BufReader::with_capacity(64 * 1024, f);
    let mut found = None;
    wire::scan(
        &mut r,
        |c| {
            if c.eq_ignore_ascii_case(code) {
                Visit::Body
            } else {
                Visit::Skip
            }
        },
        |_, body| {
            found = Some(body);
            Ok(false)
        },
    )
    .map_err(|err| GeoError::Corrupt {
        path: path.display().to_string(),
        err,
    })?;
    found.ok_or_else(|| GeoError::NoTag {
        code: code.to_string(),
        path: path.display().to_string(),
    })
}

/// Strips leading `!`s; each toggles negation.
pub fn cut_not(s: &str) -> (&str, bool) {
    let t = s.trim_start_matches('!');
    (t, (s.len() - t.len()) % 2 == 1)
}

/// One entry of a file, for `ferry geodata`.
#[derive(Debug)]
pub struct TagInfo {
    pub code: String,
    /// CIDRs (geoip) or domains (geosite).
    pub items: usize,
    /// Attribute keys used in the entry (geosite).
    pub attrs: Vec<String>,
}

/// Every tag of a file with its size (each entry decoded in turn, one at a time).
pub fn list(path: &Path) -> Result<Vec<TagInfo>, GeoError> {
    let mut out = Vec::new();
    each_entry(path, |code, body| {
        // A GeoIP's field-2 messages are addresses; a GeoSite's never decode as one.
        let (items, attrs) = match wire::geoip_cidrs(body) {
            Ok(c) if !c.is_empty() => (c.len(), vec![]),
            _ => {
                let d = wire::geosite_domains(body).unwrap_or_default();
                let mut a: Vec<String> = d
                    .iter()
                    .flat_map(|d| d.attrs.iter().map(|s| s.to_string()))
                    .collect();
                a.sort();
                a.dedup();
                (d.len(), a)
            }
        };
        out.push(TagInfo {
            code: code.to_string(),
            items,
            attrs,
        });
        Ok(())
    })?;
    Ok(out)
}

pub(super) fn each_entry(
    path: &Path,
    mut f: impl FnMut(&str, &[u8]) -> Result<(), GeoError>,
) -> Result<(), GeoError> {
    let file = std::fs::File::open(path).map_err(|e| GeoError::Open {
        file: path.display().to_string(),
        looked: path.display().to_string(),
        err: e.to_string(),
    })?;
    let mut r = std::io::BufReader::with_capacity(64 * 1024, file);
    let mut failed = None;
    wire::scan(
        &mut r,
        |_| Visit::Body,
        |code, body| match f(code, &body) {
            Ok(()) => Ok(true),
            Err(e) => {
                failed = Some(e);
                Ok(false)
            }
        },
    )
    .map_err(|err| GeoError::Corrupt {
        path: path.display().to_string(),
        err,
    })?;
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
pub(crate) mod tests;
