//! `ferry geodata`: a geoip.dat / geosite.dat file's tags, or the tags that hold an IP or a domain.

use std::process::ExitCode;

use anyhow::{anyhow, Result};

pub(crate) fn geodata_cmd(file: &str, query: Option<&str>) -> Result<ExitCode> {
    use ferry::app::router::{geodata, Assets};
    let path = if std::path::Path::new(file).is_file() {
        std::path::PathBuf::from(file)
    } else {
        Assets::from_env().find(file).map_err(|e| anyhow!("{e}"))?
    };
    match query {
        None => {
            let tags = geodata::list(&path).map_err(|e| anyhow!("{e}"))?;
            for t in &tags {
                if t.attrs.is_empty() {
                    println!("{}\t{}", t.code, t.items);
                } else {
                    println!("{}\t{}\t@{}", t.code, t.items, t.attrs.join(" @"));
                }
            }
            eprintln!("{}: {} tags", path.display(), tags.len());
            Ok(ExitCode::SUCCESS)
        }
        Some(q) => {
            let hits = ferry::matchers::lookup::lookup(&path, q).map_err(|e| anyhow!("{e}"))?;
            for h in &hits {
                println!("{h}");
            }
            Ok(if hits.is_empty() {
                eprintln!("{q}: in no tag of {}", path.display());
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
