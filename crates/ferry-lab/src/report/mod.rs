//! The report of a run: results.md (tables shaped like the benchmark reports') and the charts,
//! from the rows in [`crate::results`].

mod cells;
mod conns;
mod markdown;
mod transfer;

use std::path::Path;

use anyhow::Result;

use crate::plan::RunOpts;
use crate::results::{impl_order, write_json};

pub use crate::results::{Row, Status};
pub use cells::human_bytes;
pub use markdown::markdown;

/// Runs the plan, then writes results.json, results.md and the charts; returns the rows.
pub fn run_and_report(o: &RunOpts) -> Result<Vec<Row>> {
    let rows = crate::runner::run(o)?;
    write_all(&o.out, o, &rows)?;
    Ok(rows)
}

/// Writes results.json, results.md and the charts.
pub fn write_all(out: &Path, o: &RunOpts, rows: &[Row]) -> Result<()> {
    write_json(out, o, rows)?;
    let mut charts = Vec::new();
    if o.charts {
        charts = crate::chart::write_charts(out, rows, &impl_order(rows), &o.scenarios)?;
        charts.extend(crate::chart::write_soak_charts(
            out,
            rows,
            &impl_order(rows),
        )?);
    }
    let md = markdown(o, rows, &charts);
    std::fs::write(out.join("results.md"), md)?;
    Ok(())
}
