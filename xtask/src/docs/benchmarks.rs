//! docs/benchmarks.md's generated figures, from the recorded runs in docs/ (the formats
//! `cargo xtask bench` writes to `target/bench/`), and `cargo xtask bench-docs`, which records a
//! run there and then regenerates them:
//!
//! - the table, from docs/bench-results.json, and the chart docs/bench-ratios.svg from the same
//!   rows (what the bench draws as `ratios.svg`);
//! - the Python comparison, from docs/bench-python.md (the table the comparison printed) beside
//!   its docs/bench-python.json, or a line saying no run is recorded;
//! - the slow master's history, from the recorded partial runs docs/bench-outage-hung-*.json.
//!
//! The check also fails when a figure of the page's own text (a number with decimals) is in
//! none of the generated blocks.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, ensure};
use serde_json::Value;

use super::generated::{Generated, marker, read, recorded_line, splice, unsourced, write};

const PAGE: &str = "docs/benchmarks.md";
const RESULTS: &str = "docs/bench-results.json";
const CHART: &str = "docs/bench-ratios.svg";
const PYTHON_JSON: &str = "docs/bench-python.json";
const PYTHON_MD: &str = "docs/bench-python.md";
/// Recorded partial runs the page shows as they are, beside the full run (the slow master's
/// history), in this order.
const HISTORY: [&str; 4] = [
    "docs/bench-outage-hung-before.json",
    "docs/bench-outage-hung-after.json",
    "docs/bench-outage-hung-ceiling.json",
    "docs/bench-outage-hung-routed.json",
];
const HISTORY_SOURCE: &str = "docs/bench-outage-hung-*.json";

/// The chart's title (the bench's `ratios.svg` has the same).
pub(crate) const CHART_TITLE: &str =
    "mmcache bench: cost relative to the same-run baseline (lower is better)";

/// `cargo xtask bench-docs`'s options: the run to record.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// First replace docs/bench-results.json with FILE (a new full run)
    #[arg(long, value_name = "FILE", conflicts_with = "merge")]
    results: Option<PathBuf>,
    /// First replace only the rows of FILE's scenarios (a partial re-run)
    ///
    /// A re-run of some scenarios, e.g. `--scenario outage-hung`; those rows keep FILE's
    /// `recorded` note, which the table shows.
    #[arg(long, value_name = "FILE")]
    merge: Option<PathBuf>,
    /// The `recorded` note of that run (date, command, machine)
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
    /// First record DIR's python.json and python.md (the Python comparison)
    ///
    /// From `cargo xtask bench --scenario python --out DIR`: kept as docs/bench-python.json and
    /// docs/bench-python.md with the note, and the JSON's rows (one per case, the drop-in
    /// against Dynamo) merged into docs/bench-results.json.
    #[arg(long, value_name = "DIR")]
    python: Option<PathBuf>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let recorded = |mut v: Value| {
        if let Some(n) = &args.note {
            v["recorded"] = Value::String(n.clone());
        }
        v
    };
    if let Some(file) = args.results.as_ref().or(args.merge.as_ref()) {
        let new = recorded(read_json(file)?);
        let merged = if args.merge.is_some() {
            merge_rows(read_json(RESULTS)?, new)?
        } else {
            new
        };
        std::fs::write(RESULTS, serde_json::to_string_pretty(&merged)? + "\n")?;
    }
    if let Some(dir) = &args.python {
        let json = recorded(read_json(dir.join("python.json"))?);
        let table = std::fs::read_to_string(dir.join("python.md"))
            .with_context(|| format!("read {}/python.md", dir.display()))?;
        std::fs::write(PYTHON_JSON, serde_json::to_string_pretty(&json)? + "\n")?;
        let head = recorded_line(&json);
        std::fs::write(PYTHON_MD, format!("{head}{}\n", table.trim_end()))?;
        // Its rows (the drop-in against Dynamo, case by case) join the main table.
        let merged = merge_rows(read_json(RESULTS)?, json)?;
        std::fs::write(RESULTS, serde_json::to_string_pretty(&merged)? + "\n")?;
    }
    write(&generated()?)
}

/// docs/benchmarks.md and its chart as the recorded runs give them.
pub(crate) fn generated() -> anyhow::Result<[Generated; 2]> {
    let page = read(PAGE)?;
    Ok([
        Generated {
            path: PAGE,
            from: "the recorded runs (docs/bench-results.json, bench-python.md, bench-outage-hung-*.json)",
            text: page_text(&page)?,
        },
        Generated {
            path: CHART,
            from: RESULTS,
            text: chart(&read_json(RESULTS)?)?,
        },
    ])
}

/// Fails when docs/benchmarks.md's own text has a figure no generated block has.
pub(crate) fn check_figures() -> anyhow::Result<()> {
    let page = read(PAGE)?;
    let loose = unsourced(&page);
    ensure!(
        loose.is_empty(),
        "{PAGE}: figures in no generated block (write them from the recorded files): {}",
        loose.join(", ")
    );
    Ok(())
}

fn page_text(page: &str) -> anyhow::Result<String> {
    let page = splice(page, &marker(RESULTS), &table(&read_json(RESULTS)?)?)?;
    let python = match std::fs::read_to_string(PYTHON_MD) {
        Ok(text) => text,
        Err(_) => "No run of this comparison is recorded in docs/ yet: record one with the \
                   commands above.\n"
            .to_owned(),
    };
    let page = splice(&page, &marker(PYTHON_MD), &python)?;
    let mut history = String::new();
    for file in HISTORY {
        let name = file.trim_start_matches("docs/");
        writeln!(history, "[{name}]({name}):\n")?;
        history.push_str(&table(&read_json(file)?)?);
        history.push('\n');
    }
    splice(&page, &marker(HISTORY_SOURCE), &history)
}

fn read_json(path: impl AsRef<std::path::Path>) -> anyhow::Result<Value> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

/// `base` with the rows of `new` in place of those of the same scenario (new ones appended).
fn merge_rows(mut base: Value, new: Value) -> anyhow::Result<Value> {
    let recorded = new.get("recorded").cloned().unwrap_or(Value::Null);
    let new_rows = new["rows"]
        .as_array()
        .context("no rows in the new results")?;
    let rows = base["rows"]
        .as_array_mut()
        .context("no rows in the recorded results")?;
    for row in new_rows {
        let mut row = row.clone();
        if !recorded.is_null() {
            row["recorded"] = recorded.clone();
        }
        match rows.iter_mut().find(|r| r["scenario"] == row["scenario"]) {
            Some(old) => *old = row,
            None => rows.push(row),
        }
    }
    Ok(base)
}

/// The ratio chart of the recorded rows: one bar per row with a cost ratio (the Python rows'
/// `x loads/s`, where higher is better, are left out).
fn chart(results: &Value) -> anyhow::Result<String> {
    let rows = results["rows"].as_array().context("no rows")?;
    let bars: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| !r["ratio_kind"].as_str().unwrap_or("").starts_with("x "))
        .filter_map(|r| {
            let label = format!(
                "{} ({})",
                r["scenario"].as_str()?,
                r["ratio_kind"].as_str().unwrap_or("")
            );
            Some((label, r["ratio"].as_f64()?))
        })
        .collect();
    Ok(crate::svg::bars(CHART_TITLE, &bars, 1.0, "x"))
}

fn table(results: &Value) -> anyhow::Result<String> {
    let mut t = recorded_line(results);
    writeln!(
        t,
        "| scenario | ops/s | p50 ms | p99 ms | baseline | baseline ops/s | baseline p99 ms | ratio | target | met | notes |"
    )?;
    writeln!(t, "|---|---:|---:|---:|---|---:|---:|---:|---|---|---|")?;
    let rows = results["rows"].as_array().context("no rows")?;
    for r in rows {
        let subject = &r["subject"];
        let baseline = &r["baseline"];
        let ratio = r["ratio"].as_f64();
        let target = r["target"].as_str().unwrap_or("-");
        let mut note = r["note"].as_str().unwrap_or("").to_owned();
        if let Some(run) = r["recorded"].as_str() {
            write!(note, " (re-run: {run})")?;
        }
        writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r["scenario"].as_str().unwrap_or("?"),
            num(&subject["ops_per_s"], 0),
            num(&subject["p50_ms"], 3),
            num(&subject["p99_ms"], 3),
            if baseline.is_null() {
                "-"
            } else {
                r["baseline_name"].as_str().unwrap_or("-")
            },
            num(&baseline["ops_per_s"], 0),
            num(&baseline["p99_ms"], 3),
            ratio.map_or_else(
                || "-".to_owned(),
                |x| format!("{x:.3} {}", r["ratio_kind"].as_str().unwrap_or(""))
            ),
            target,
            match r["met"].as_bool() {
                // A row that says whether it met its target (the Python rows) is taken at its word.
                Some(ok) => word(ok),
                None => met(target, ratio, subject["ops_per_s"].as_f64()),
            },
            note.trim(),
        )?;
    }
    Ok(t)
}

fn num(v: &Value, decimals: usize) -> String {
    v.as_f64()
        .map_or_else(|| "-".to_owned(), |x| format!("{x:.decimals$}"))
}

fn word(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

/// Whether a row meets its target: `<= X` and `= X` compare the ratio, `>= NM loads/s` the
/// subject's rate; "-" when the row has no target.
fn met(target: &str, ratio: Option<f64>, rate: Option<f64>) -> &'static str {
    let first_number = |s: &str| -> Option<f64> {
        let s = s.trim_start();
        let end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        s[..end].parse().ok()
    };
    if let Some(rest) = target.strip_prefix("<=") {
        if let (Some(limit), Some(r)) = (first_number(rest), ratio) {
            return word(r <= limit);
        }
    } else if let Some(rest) = target.strip_prefix(">=") {
        // A rate target such as ">= 5M loads/s".
        let rest = rest.trim_start();
        if let (Some(n), Some(rate)) = (first_number(rest), rate) {
            let scale = if rest
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .starts_with('M')
            {
                1e6
            } else {
                1.0
            };
            return word(rate >= n * scale);
        }
    } else if let Some(rest) = target.strip_prefix('=')
        && let (Some(want), Some(r)) = (first_number(rest), ratio)
    {
        return word((r - want).abs() < 1e-9);
    }
    "-"
}
