//! SIGHUP: the configs read again and the running instance switched to them.

use ferry::app::instance::Instance;
use ferry::config::{Config, Diagnostics};

use super::show_tag;
use super::source::{read_merged, source_names};

/// The parts of a config a reload does not change (the services bound at start, the log): the
/// top-level keys whose value differs between `old` and `new`.
fn restart_only_changes(old: &serde_json::Value, new: &serde_json::Value) -> Vec<&'static str> {
    ["log", "api", "metrics", "stats"]
        .into_iter()
        .filter(|k| old.get(k) != new.get(k))
        .collect()
}

/// SIGHUP: reads the configs again and switches the running instance to them (see
/// [`Instance::reload`]); a config that does not load leaves the running one as it is.
pub(crate) async fn reload(
    sources: &[String],
    inst: &mut Instance,
    running: &mut serde_json::Value,
) {
    if sources.iter().any(|s| s == "-" || s == "stdin:") {
        tracing::warn!(
            "SIGHUP: the config came from stdin, which cannot be read again; nothing reloaded"
        );
        return;
    }
    let names = source_names(sources);
    let merged = match read_merged(sources) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!("SIGHUP: {e:#}; still running the previous config");
            return;
        }
    };
    let diag = Diagnostics::default();
    let cfg = Config::from_value_reusing(&merged, &diag, &inst.reuse());
    for w in diag.take() {
        tracing::warn!("{names}: {w}");
    }
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("SIGHUP: {names}: {e}; still running the previous config");
            return;
        }
    };
    for k in restart_only_changes(running, &merged) {
        tracing::warn!(
            "SIGHUP: {k:?} changed; it takes effect at the next start (the running {k} stays)"
        );
    }
    let r = inst.reload(cfg).await;
    for (tag, e) in &r.failed {
        tracing::error!("SIGHUP: inbound {}: {e}", show_tag(tag));
    }
    tracing::warn!(
        "reloaded {names}: {} inbound(s) kept, {} replaced, {} added, {} removed, {} failed; outbounds, routing, dns and policy switched; {} connection(s) live",
        r.kept.len(),
        r.replaced.len(),
        r.added.len(),
        r.removed.len(),
        r.failed.len(),
        inst.live.count()
    );
    *running = merged;
}
