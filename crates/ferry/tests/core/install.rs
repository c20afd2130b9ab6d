//! `scripts/install.sh` puts Ferry where Xray's installer puts Xray and writes a service unit
//! that systemd reads: installed into a scratch root (`--root`), the stripped binary runs, the
//! `xray` link runs it, the empty config passes `ferry test`, the units name those paths and
//! `systemd-analyze verify` finds no unknown or bad setting; `--uninstall` removes the binary,
//! the link and the units and keeps the config.

use std::path::Path;
use std::process::Command;

use crate::common::tempdir;

fn sh(args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new("bash")
        .arg(root.join("scripts/install.sh"))
        .args(args)
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "install.sh {args:?}: {out}");
    out
}

fn run(bin: &Path, args: &[&str]) -> String {
    let o = Command::new(bin).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{} {args:?}: {}",
        bin.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn the_installer_lays_out_ferry_as_xray_s_does_and_its_unit_verifies() {
    let dir = tempdir::Dir::new("install");
    let root = dir.path().to_str().unwrap().to_string();
    let built = env!("CARGO_BIN_EXE_ferry");
    sh(&["--root", &root, "--binary", built, "--as-xray"]);
    let r = dir.path();
    let bin = r.join("usr/local/bin/ferry");
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert!(
        size(&bin) < size(Path::new(built)),
        "the installed binary is stripped"
    );
    assert!(
        run(&bin, &["version"]).contains("Ferry"),
        "the stripped binary runs"
    );
    assert!(run(&r.join("usr/local/bin/xray"), &["version"]).contains("Ferry"));
    let config = r.join("usr/local/etc/ferry/config.json");
    assert!(run(&bin, &["test", "-c", config.to_str().unwrap()]).contains("Configuration OK"));
    assert!(r.join("usr/local/share/ferry").is_dir());
    let unit = std::fs::read_to_string(r.join("etc/systemd/system/ferry.service")).unwrap();
    assert!(
        unit.contains("\nExecStart=/usr/local/bin/ferry run -c /usr/local/etc/ferry/config.json\n"),
        "{unit}"
    );
    let templ = std::fs::read_to_string(r.join("etc/systemd/system/ferry@.service")).unwrap();
    assert!(templ.contains("/usr/local/etc/ferry/%i.json"), "{templ}");
    for u in ["ferry.service", "ferry@.service"] {
        let o = Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={root}"))
            .arg(format!("/etc/systemd/system/{u}"))
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
        for bad in [
            "Unknown",
            "nvalid",
            "bin/ferry is not executable",
            "Failed to parse",
        ] {
            assert!(!text.contains(bad), "{u}: {text}");
        }
    }
    // A second install keeps the config a user wrote.
    std::fs::write(&config, r#"{"log": {"loglevel": "info"}}"#).unwrap();
    assert!(sh(&["--root", &root, "--binary", built]).contains("kept"));
    assert!(std::fs::read_to_string(&config).unwrap().contains("info"));
    sh(&["--uninstall", "--root", &root]);
    assert!(!bin.exists() && !r.join("usr/local/bin/xray").exists());
    assert!(!r.join("etc/systemd/system/ferry.service").exists());
    assert!(config.exists(), "the config is kept");
}
