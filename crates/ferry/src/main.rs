//! The `ferry` command: run, test, version, uuid.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::args::{normalize_args, Cli, Cmd, TlsCmd};

fn main() -> ExitCode {
    let cli = Cli::parse_from(normalize_args());
    let res = match cli.cmd {
        None => cli::run::run(Vec::new(), false, 5),
        Some(Cmd::Run {
            config,
            test,
            grace,
        }) => cli::run::run(config, test, grace),
        Some(Cmd::Test { config }) => cli::run::run(config, true, 0),
        Some(Cmd::Version) => Ok(cli::version()),
        Some(Cmd::Link {
            link,
            config,
            host,
            sub,
            balancer,
        }) => match sub {
            Some(file) if !file.is_empty() => {
                if config.is_empty() && link.is_none() {
                    cli::subscribe::import(&file, balancer)
                } else {
                    Err(anyhow::anyhow!(
                        "--sub {file} reads a subscription: give it alone (with -c, --sub takes no file)"
                    ))
                }
            }
            _ if balancer => Err(anyhow::anyhow!("--balancer goes with --sub FILE")),
            sub => cli::link::link_cmd(link, config, host, sub.is_some()),
        },
        Some(Cmd::Tls {
            cmd: TlsCmd::Cert { domain, file, days },
        }) => cli::keys::tls_cert(&domain, file.as_deref(), days),
        Some(Cmd::Geodata { file, query }) => cli::geodata::geodata_cmd(&file, query.as_deref()),
        Some(Cmd::X25519 {
            input,
            std_encoding,
        }) => cli::keys::x25519_cmd(input.as_deref(), std_encoding),
        Some(Cmd::Mldsa65 { input }) => cli::keys::mldsa65_cmd(input.as_deref()),
        Some(Cmd::Vlessenc) => Ok(cli::keys::vlessenc_cmd()),
        Some(Cmd::Mlkem768 { input }) => cli::keys::mlkem768_cmd(input.as_deref()),
        Some(Cmd::Uuid { input }) => Ok(cli::uuid(input.as_deref())),
    };
    match res {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
