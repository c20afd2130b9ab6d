//! The `ferry` command's subcommands, one file each (the binary's own module; the proxy is the
//! `ferry` library).

pub(crate) mod args;
pub(crate) mod geodata;
pub(crate) mod keys;
pub(crate) mod link;
mod reload;
pub(crate) mod run;
mod source;
pub(crate) mod subscribe;

use std::process::ExitCode;

/// `ferry version`: Ferry's line, or Xray's when started under Xray's name.
pub(crate) fn version() -> ExitCode {
    if args::invoked_as_xray() {
        // Panels that run the core (3x-ui, Marzban-node, Remnawave's node) read the
        // version as the second word of a line starting "Xray ".
        println!(
            "Xray {} (Ferry {}, Xray-compatible) Rust",
            ferry::XRAY_COMPAT,
            env!("CARGO_PKG_VERSION")
        );
    } else {
        println!(
            "Ferry {} (Xray/V2Ray v4 config compatible; Xray {})",
            env!("CARGO_PKG_VERSION"),
            ferry::XRAY_COMPAT
        );
    }
    ExitCode::SUCCESS
}

/// `ferry uuid`: a random UUID, or `input` mapped to one as Xray does.
pub(crate) fn uuid(input: Option<&str>) -> ExitCode {
    match input {
        Some(s) => println!("{}", ferry::common::uuid::from_string(s)),
        None => println!("{}", uuid::Uuid::new_v4()),
    }
    ExitCode::SUCCESS
}

pub(crate) fn show_tag(t: &str) -> &str {
    if t.is_empty() {
        "(untagged)"
    } else {
        t
    }
}
