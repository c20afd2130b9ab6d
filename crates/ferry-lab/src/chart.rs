//! PNG bar charts: throughput by implementation, one bar per connection count. Text uses
//! DejaVu Sans from Debian's fonts-dejavu-core when present; without it the charts are drawn
//! without text and the Markdown report carries the legend.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::plan::Test;
use crate::results::{aggregate, FlatRow, Row, Status};

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

const PALETTE: [RGBColor; 5] = [
    RGBColor(0x2b, 0x6c, 0xb0),
    RGBColor(0xe0, 0x7b, 0x22),
    RGBColor(0x3a, 0x9a, 0x4a),
    RGBColor(0xb8, 0x3b, 0x5e),
    RGBColor(0x7a, 0x5c, 0xa8),
];

/// Registers the font once; whether text can be drawn.
fn have_font() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Writes one chart per (scenario, direction) that has throughput rows; returns
/// (file name, legend) pairs.
pub fn write_charts(
    out: &Path,
    rows: &[Row],
    impls: &[String],
    order: &[String],
) -> Result<Vec<(String, String)>> {
    let aggs = aggregate(rows);
    let mut made = Vec::new();
    let mut scenarios: Vec<String> = order.to_vec();
    for r in rows {
        if !scenarios.contains(&r.scenario) {
            scenarios.push(r.scenario.clone());
        }
    }
    for test in Test::BULK {
        for s in &scenarios {
            let mine: Vec<_> = aggs
                .iter()
                .filter(|(k, a)| k.0 == *s && k.2 == test.name() && a.status != Status::Skipped)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let names: Vec<&String> = impls
                .iter()
                .filter(|i| mine.iter().any(|(k, _)| k.1 == **i))
                .collect();
            let mut streams: Vec<usize> = mine.iter().map(|(k, _)| k.3).collect();
            streams.sort();
            streams.dedup();
            // values[impl][stream] = MB/s, or why there is no bar
            let values: Vec<Vec<Result<f64, &str>>> = names
                .iter()
                .map(|i| {
                    streams
                        .iter()
                        .map(
                            |st| match mine.iter().find(|(k, _)| k.1 == **i && k.3 == *st) {
                                Some((_, a)) if a.status == Status::Ok => Ok(a.mb_per_s),
                                Some((_, a)) if a.status == Status::NotYet => Err("not yet"),
                                Some(_) => Err("error"),
                                None => Err("–"),
                            },
                        )
                        .collect()
                })
                .collect();
            let suffix = match test {
                Test::Throughput => String::new(),
                t => format!("-{}", t.name()),
            };
            let file = format!("chart-{s}{suffix}.png");
            let title = match test {
                Test::Throughput => format!("{s}: throughput, MB/s"),
                t => format!("{s} ({}): throughput, MB/s", t.heading().0),
            };
            draw(&out.join(&file), &title, &names, &streams, &values)?;
            let legend = format!(
                "{title}. Groups left to right: {}. Bars in each group: {} connection(s){}.",
                names
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                streams
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if names
                    .iter()
                    .zip(&values)
                    .any(|(_, v)| v.iter().any(|x| x.is_err()))
                {
                    "; a missing bar is not yet supported or failed (see the tables)"
                } else {
                    ""
                }
            );
            made.push((file, legend));
        }
    }
    Ok(made)
}

fn draw(
    path: &Path,
    title: &str,
    names: &[&String],
    streams: &[usize],
    values: &[Vec<Result<f64, &str>>],
) -> Result<()> {
    let text = have_font();
    let root = BitMapBackend::new(path, (960, 520)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let ymax = values
        .iter()
        .flatten()
        .filter_map(|v| v.as_ref().ok())
        .fold(0.0f64, |a, b| a.max(*b))
        .max(1.0)
        * 1.15;
    let n = names.len().max(1) as f64;
    let mut b = ChartBuilder::on(&root);
    b.margin(16)
        .x_label_area_size(if text { 40 } else { 10 })
        .y_label_area_size(if text { 70 } else { 10 });
    if text {
        b.caption(title, ("sans-serif", 24));
    }
    let mut chart = b
        .build_cartesian_2d(0f64..n, 0f64..ymax)
        .map_err(|x| anyhow!("{x:?}"))?;
    {
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh().x_labels(0);
        if text {
            mesh.y_desc("MB/s").label_style(("sans-serif", 15));
        } else {
            mesh.y_labels(0);
        }
        mesh.draw().map_err(|x| anyhow!("{x:?}"))?;
    }
    let k = streams.len().max(1) as f64;
    let group_w = 0.8;
    let bar_w = group_w / k;
    for (si, st) in streams.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = values
            .iter()
            .enumerate()
            .filter_map(|(ii, v)| {
                let y = *v.get(si)?.as_ref().ok()?;
                let x0 = ii as f64 + 0.1 + si as f64 * bar_w;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + bar_w * 0.92, y)],
                    color.filled(),
                ))
            })
            .collect();
        let series = chart.draw_series(bars).map_err(|x| anyhow!("{x:?}"))?;
        if text {
            let label = if *st == 1 {
                "1 connection".to_string()
            } else {
                format!("{st} connections")
            };
            series.label(label).legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
            });
        }
    }
    if text {
        // Value labels above bars and implementation names under each group.
        for (ii, v) in values.iter().enumerate() {
            for (si, y) in v.iter().enumerate() {
                let x = ii as f64 + 0.1 + (si as f64 + 0.46) * bar_w;
                let (px, py) = chart.backend_coord(&(x, *y.as_ref().unwrap_or(&0.0)));
                let label = match y {
                    Ok(y) => format!("{y:.0}"),
                    Err(why) => why.to_string(),
                };
                root.draw(&Text::new(
                    label,
                    (px, py - 4),
                    ("sans-serif", 13)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                ))
                .map_err(e)?;
            }
            let (px, py) = chart.backend_coord(&(ii as f64 + 0.5, 0.0));
            root.draw(&Text::new(
                names[ii].to_string(),
                (px, py + 8),
                ("sans-serif", 17)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(e)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(|x| anyhow!("{x:?}"))?;
    }
    root.present().map_err(e)?;
    Ok(())
}

/// One line chart per scenario with soak rows: the RSS of each implementation's chain over
/// time; returns (file name, legend) pairs.
pub fn write_soak_charts(
    out: &Path,
    rows: &[Row],
    impls: &[String],
) -> Result<Vec<(String, String)>> {
    let mut made = Vec::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.soak.is_some()) {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    for s in scenarios {
        // (implementation, [(seconds, MiB)])
        let lines: Vec<(&String, Vec<(f64, f64)>)> = impls
            .iter()
            .filter_map(|i| {
                let r = rows
                    .iter()
                    .find(|r| r.scenario == s && &r.implementation == i && r.soak.is_some())?;
                let soak = r.soak.as_ref()?;
                Some((
                    i,
                    soak.samples
                        .iter()
                        .map(|x| (x.secs, x.total_mib()))
                        .collect(),
                ))
            })
            .collect();
        if lines.is_empty() {
            continue;
        }
        let file = format!("chart-{s}-soak.png");
        let title = format!("{s}: soak, RSS of the chain (MiB) over time (s)");
        draw_lines(&out.join(&file), &title, ("seconds", "MiB"), &lines)?;
        let legend = format!(
            "{title}. Lines: {}.",
            lines
                .iter()
                .enumerate()
                .map(|(i, (n, _))| format!("{n} ({})", COLOR_NAMES[i % COLOR_NAMES.len()]))
                .collect::<Vec<_>>()
                .join(", ")
        );
        made.push((file, legend));
    }
    Ok(made)
}

/// Names of [`PALETTE`]'s colours, for legends without text in the chart.
const COLOR_NAMES: [&str; 5] = ["blue", "orange", "green", "red", "purple"];

fn draw_lines(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    lines: &[(&String, Vec<(f64, f64)>)],
) -> Result<()> {
    let text = have_font();
    let root = BitMapBackend::new(path, (960, 520)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let points = lines.iter().flat_map(|(_, v)| v.iter());
    let (xmax, ymax) = points.fold((1.0f64, 1.0f64), |(x, y), (a, b)| (x.max(*a), y.max(*b)));
    let mut b = ChartBuilder::on(&root);
    b.margin(16)
        .x_label_area_size(if text { 40 } else { 10 })
        .y_label_area_size(if text { 70 } else { 10 });
    if text {
        b.caption(title, ("sans-serif", 22));
    }
    let mut chart = b
        .build_cartesian_2d(0f64..xmax * 1.02, 0f64..ymax * 1.15)
        .map_err(|x| anyhow!("{x:?}"))?;
    {
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc(x_desc)
                .y_desc(y_desc)
                .label_style(("sans-serif", 15));
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(|x| anyhow!("{x:?}"))?;
    }
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if pts.len() <= 40 {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|x| anyhow!("{x:?}"))?;
        }
        let series = chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|x| anyhow!("{x:?}"))?;
        if text {
            series.label(name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        }
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(|x| anyhow!("{x:?}"))?;
    }
    root.present().map_err(e)?;
    Ok(())
}

/// `ferry-lab report`'s charts: throughput against the CPU cap, one line per implementation
/// (001: a chart per scenario; 002: per scenario and record size), and for 003 the round-trip
/// percentiles per case on each link; returns (file name, legend) pairs.
pub fn write_report_charts(
    out: &Path,
    id: &str,
    rows: &[FlatRow],
) -> Result<Vec<(String, String)>> {
    let ok: Vec<&FlatRow> = rows.iter().filter(|r| r.status == "ok").collect();
    match id {
        "001" | "002" => cap_charts(out, id, &ok),
        "003" => latency_charts(out, &ok),
        _ => Ok(Vec::new()),
    }
}

/// A chart's legend: its title and each line's colour.
fn legend_of(title: &str, names: &[String]) -> String {
    format!(
        "{title}. Lines: {}.",
        names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} ({})", COLOR_NAMES[i % COLOR_NAMES.len()]))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// 001 and 002: throughput against the CPU cap, a chart per scenario, record size and
/// connection count.
fn cap_charts(out: &Path, id: &str, ok: &[&FlatRow]) -> Result<Vec<(String, String)>> {
    let mut made = Vec::new();
    let mut groups: Vec<(String, Option<usize>, usize)> = Vec::new();
    for r in ok {
        let g = (r.scenario.clone(), r.record_size, r.conns);
        if r.test == "throughput" && r.cpu_cap_pct.is_some() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    for (scn, rec, conns) in groups {
        let mut names: Vec<String> = Vec::new();
        let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for r in ok.iter().filter(|r| {
            r.scenario == scn && r.record_size == rec && r.conns == conns && r.test == "throughput"
        }) {
            if !names.contains(&r.implementation) {
                names.push(r.implementation.clone());
                lines.push((r.implementation.clone(), Vec::new()));
            }
        }
        for (imp, pts) in &mut lines {
            let mut caps: Vec<u32> = ok
                .iter()
                .filter(|r| {
                    r.scenario == scn
                        && r.record_size == rec
                        && r.conns == conns
                        && &r.implementation == imp
                })
                .filter_map(|r| r.cpu_cap_pct)
                .collect();
            caps.sort();
            caps.dedup();
            for cap in caps {
                let v: Vec<f64> = ok
                    .iter()
                    .filter(|r| {
                        r.scenario == scn
                            && r.record_size == rec
                            && r.conns == conns
                            && &r.implementation == imp
                            && r.cpu_cap_pct == Some(cap)
                            && r.test == "throughput"
                    })
                    .map(|r| r.gbps)
                    .collect();
                if !v.is_empty() {
                    pts.push((cap as f64, v.iter().sum::<f64>() / v.len() as f64));
                }
            }
        }
        let rec_s = rec.map(|r| format!("-{}k", r / 1024)).unwrap_or_default();
        let file = format!("chart-{id}-{scn}{rec_s}-x{conns}.png");
        let title = format!(
            "{scn}{}, {conns} conn: Gbit/s against CPU cap (%)",
            rec.map(|r| format!(", {}K records", r / 1024))
                .unwrap_or_default()
        );
        let refs: Vec<(&String, Vec<(f64, f64)>)> =
            lines.iter().map(|(n, p)| (n, p.clone())).collect();
        draw_lines(
            &out.join(&file),
            &title,
            ("CPU cap, % of one CPU", "Gbit/s"),
            &refs,
        )?;
        made.push((file, legend_of(&title, &names)));
    }
    Ok(made)
}

/// 003: the round trips' p50 and p99 per case, a chart per link.
fn latency_charts(out: &Path, ok: &[&FlatRow]) -> Result<Vec<(String, String)>> {
    let mut made = Vec::new();
    let mut links: Vec<bool> = Vec::new();
    for r in ok {
        let lossy = r.loss_pct.is_some();
        if r.test == "latency" && !links.contains(&lossy) {
            links.push(lossy);
        }
    }
    for lossy in links {
        let lat: Vec<&&FlatRow> = ok
            .iter()
            .filter(|r| r.test == "latency" && r.loss_pct.is_some() == lossy)
            .collect();
        let mut scns: Vec<String> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for r in &lat {
            if !scns.contains(&r.scenario) {
                scns.push(r.scenario.clone());
            }
            if !names.contains(&r.implementation) {
                names.push(r.implementation.clone());
            }
        }
        let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut labels = Vec::new();
        for imp in &names {
            for (q, f) in [("p50", 0usize), ("p99", 1usize)] {
                let pts: Vec<(f64, f64)> = scns
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| {
                        let r = lat
                            .iter()
                            .find(|r| &r.scenario == s && &r.implementation == imp)?;
                        let v = if f == 0 {
                            r.latency_p50_ms
                        } else {
                            r.latency_p99_ms
                        }?;
                        Some(((i + 1) as f64, v))
                    })
                    .collect();
                labels.push(format!("{imp} {q}"));
                lines.push((format!("{imp} {q}"), pts));
            }
        }
        let link = if lossy { "lossy" } else { "clean" };
        let file = format!("chart-003-latency-{link}.png");
        let title = format!(
            "round trips, {} link: p50 and p99 ms by case ({})",
            link,
            scns.iter()
                .enumerate()
                .map(|(i, s)| format!("{} = {s}", i + 1))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let refs: Vec<(&String, Vec<(f64, f64)>)> =
            lines.iter().map(|(n, p)| (n, p.clone())).collect();
        draw_lines(
            &out.join(&file),
            &format!("003 round trips, {link} link (ms)"),
            ("case", "ms"),
            &refs,
        )?;
        made.push((file, legend_of(&title, &labels)));
    }
    Ok(made)
}
