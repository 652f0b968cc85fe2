//! docs/chaos.md's results table, from the recorded run docs/chaos-results.json (what `cargo
//! xtask chaos` writes to `target/chaos/summary.json`), the check that its two charts are that
//! run's and that the page's own results text has no figure the table does not, and `cargo
//! xtask chaos-docs`, which records a run (its summary and charts) and regenerates the table.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, ensure};
use serde_json::Value;

use super::generated::{Generated, marker, read, recorded_line, splice, unsourced, write};

const PAGE: &str = "docs/chaos.md";
const RESULTS: &str = "docs/chaos-results.json";
/// The charts the page shows: (scenario, file in docs/).
const CHARTS: [(&str, &str); 2] = [
    ("hung-node", "docs/chaos-hung-node.svg"),
    ("new-addresses", "docs/chaos-new-addresses.svg"),
];
/// Where the page's results start: the text above (scenarios, settings, bounds) says what the
/// code does; from here on, every figure is the recorded run's.
const RESULTS_HEADING: &str = "## Latest full run";

/// `cargo xtask chaos-docs`'s options: the run to record.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// First record DIR's run: a full run of every scenario, not --quick
    ///
    /// Its summary.json becomes docs/chaos-results.json, its hung-node.svg and
    /// new-addresses.svg the page's charts.
    #[arg(long, value_name = "DIR")]
    results: Option<PathBuf>,
    /// The `recorded` note of that run (date, command, machine, load)
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(dir) = &args.results {
        let path = dir.join("summary.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("read {} (a run of `cargo xtask chaos`)", path.display()))?;
        let mut run: Value = serde_json::from_str(&text)?;
        ensure!(
            run["quick"] == false,
            "{}: a --quick run; record a full one",
            path.display()
        );
        let names: Vec<&str> = run["scenarios"]
            .as_array()
            .context("no scenarios")?
            .iter()
            .filter_map(|s| s["scenario"].as_str())
            .collect();
        ensure!(
            crate::chaos::SCENARIOS.iter().all(|s| names.contains(s)),
            "{}: not every scenario ran ({names:?})",
            path.display()
        );
        if let Some(n) = &args.note {
            run["recorded"] = Value::String(n.clone());
        }
        for (scenario, file) in CHARTS {
            std::fs::copy(dir.join(format!("{scenario}.svg")), file)
                .with_context(|| format!("copy {scenario}.svg from {}", dir.display()))?;
        }
        std::fs::write(RESULTS, serde_json::to_string_pretty(&run)? + "\n")?;
    }
    write(&[generated()?])
}

/// docs/chaos.md as the recorded run gives it.
pub(crate) fn generated() -> anyhow::Result<Generated> {
    let page = read(PAGE)?;
    Ok(Generated {
        path: PAGE,
        from: RESULTS,
        text: splice(&page, &marker(RESULTS), &table(&read_run()?)?)?,
    })
}

/// Fails when a chart of docs/chaos.md is not of the recorded run, or the page's results text
/// has a figure the table does not.
pub(crate) fn check_page() -> anyhow::Result<()> {
    let run = read_run()?;
    for (scenario, file) in CHARTS {
        let svg = read(file)?;
        let title = chart_title(&run, scenario)?;
        ensure!(
            svg.contains(&title),
            "{file} is not the chart of the recorded run (its title should be `{title}`)"
        );
    }
    let page = read(PAGE)?;
    let results = &page[page.find(RESULTS_HEADING).context("no results heading")?..];
    let loose = unsourced(results);
    ensure!(
        loose.is_empty(),
        "{PAGE}: figures in no generated block (write them from the recorded run): {}",
        loose.join(", ")
    );
    Ok(())
}

fn read_run() -> anyhow::Result<Value> {
    let text = read(RESULTS)?;
    serde_json::from_str(&text).with_context(|| format!("parse {RESULTS}"))
}

fn scenario<'a>(run: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    run["scenarios"]
        .as_array()
        .context("no scenarios")?
        .iter()
        .find(|s| s["scenario"] == name)
        .with_context(|| format!("{RESULTS} has no {name}"))
}

fn recovery(s: &Value) -> String {
    s["recovery_ms"]
        .as_f64()
        .map_or_else(|| "-".into(), |r| format!("{r:.0} ms"))
}

/// The title `cargo xtask chaos` gives `name`'s chart (see `write_outputs`).
fn chart_title(run: &Value, name: &str) -> anyhow::Result<String> {
    let s = scenario(run, name)?;
    Ok(format!(
        "chaos {name}: {} loads, {} failed, recovery {}",
        s["loads"],
        s["failures"],
        recovery(s)
    ))
}

fn table(run: &Value) -> anyhow::Result<String> {
    let mut t = recorded_line(run);
    writeln!(
        t,
        "| scenario | result | loads | failed | shared | origin or inflight | p50 ms | p99 ms | max ms | recovery |"
    )?;
    writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for s in run["scenarios"].as_array().context("no scenarios")? {
        let src = &s["sources"];
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let lat = |k: &str| s["latency_ms"][k].as_f64().unwrap_or(f64::NAN);
        writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {} |",
            s["scenario"].as_str().unwrap_or("?"),
            if s["pass"] == true {
                "PASS"
            } else {
                "**FAIL**"
            },
            n(&s["loads"]),
            n(&s["failures"]),
            n(&src["shared"]),
            n(&src["origin"]) + n(&src["inflight"]) + n(&src["memory"]),
            lat("p50"),
            lat("p99"),
            lat("max"),
            recovery(s),
        )?;
        for failed in s["failed_assertions"].as_array().into_iter().flatten() {
            let failed = failed.as_str().unwrap_or("?").replace('|', "/");
            writeln!(t, "| | ↳ {failed} | | | | | | | | |")?;
        }
    }
    Ok(t)
}
