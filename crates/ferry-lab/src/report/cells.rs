//! The cells the report's tables share: statuses, ranges, ratios and sizes.

use crate::results::{Agg, AggKey, Row, Status};

/// A message's first line, cut to fit a table cell.
pub(super) fn short(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or("").replace('|', "/");
    if first.chars().count() > 140 {
        let s: String = first.chars().take(140).collect();
        format!("{s}…")
    } else {
        first
    }
}

/// The cell of a measurement that did not end ok (None when it did).
pub(super) fn status_cell(a: &Agg) -> Option<String> {
    match a.status {
        Status::Ok => None,
        Status::NotYet => Some("not yet".into()),
        Status::Skipped => Some("n/a".into()),
        Status::Error => Some(format!(
            "**error**: {}",
            short(a.message.as_deref().unwrap_or(""))
        )),
    }
}

/// "min–max" of the values, `prec` decimals ("–" when there are none).
pub(super) fn range(v: impl Iterator<Item = f64>, prec: usize) -> String {
    let v: Vec<f64> = v.collect();
    if v.is_empty() {
        return "–".into();
    }
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.prec$}–{hi:.prec$}")
}

pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// 1073741824 -> "1 GiB".
pub fn human_bytes(n: u64) -> String {
    const U: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < 3 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Every row of one test, with its aggregation key.
pub(super) fn rows_of<'a>(aggs: &'a [(AggKey, Agg)], test: &str) -> Vec<(&'a AggKey, &'a Row)> {
    aggs.iter()
        .filter(|(k, _)| k.2 == test)
        .flat_map(|(k, a)| a.rows.iter().map(move |r| (k, r)))
        .collect()
}
