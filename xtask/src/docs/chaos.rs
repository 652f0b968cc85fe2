//! `cargo xtask chaos-docs`: docs/chaos.md's results table, generated from the recorded run in
//! docs/chaos-results.json (what `cargo xtask chaos` writes to `target/chaos/summary.json`),
//! and its two charts, copied from the same run.
//!
//! - `--results DIR`: first record DIR's run (`summary.json`, `hung-node.svg`,
//!   `new-addresses.svg`); a full run of every scenario, not `--quick`.
//! - `--note TEXT`: the `recorded` note of that run (date, command, machine, load).
//! - `--check`: fail when the table is not the recorded run's, a chart is not of that run, or
//!   the page's own text has a figure no generated block has (the gate runs this).

use std::fmt::Write as _;

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::bench_docs::{marker, splice, unsourced};

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

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let (mut check_only, mut results, mut note) = (false, None, None);
    let mut args = args.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check_only = true,
            "--results" => results = Some(args.next().context("--results needs a folder")?),
            "--note" => note = Some(args.next().context("--note needs a text")?),
            other => bail!("unknown argument `{other}` (try --results DIR, --note TEXT, --check)"),
        }
    }
    if let Some(dir) = results {
        let dir = std::path::Path::new(dir);
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
        if let Some(n) = note {
            run["recorded"] = Value::String(n.clone());
        }
        for (scenario, file) in CHARTS {
            std::fs::copy(dir.join(format!("{scenario}.svg")), file)
                .with_context(|| format!("copy {scenario}.svg from {}", dir.display()))?;
        }
        std::fs::write(RESULTS, serde_json::to_string_pretty(&run)? + "\n")?;
    }
    if check_only {
        return check();
    }
    let page = std::fs::read_to_string(PAGE)?;
    std::fs::write(PAGE, generated(&page)?)?;
    println!("{PAGE}: table regenerated from {RESULTS}");
    Ok(())
}

/// Fails when docs/chaos.md or its charts are not the recorded run's.
pub(crate) fn check() -> anyhow::Result<()> {
    println!("==> docs/chaos.md and its charts are the recorded run's");
    let page = std::fs::read_to_string(PAGE)?;
    ensure!(
        page == generated(&page)?,
        "{PAGE}: the table differs from {RESULTS}; run `cargo xtask chaos-docs`"
    );
    let run = read_run()?;
    for (scenario, file) in CHARTS {
        let svg = std::fs::read_to_string(file).with_context(|| format!("read {file}"))?;
        let title = chart_title(&run, scenario)?;
        ensure!(
            svg.contains(&title),
            "{file} is not the chart of the recorded run (its title should be `{title}`)"
        );
    }
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
    let text = std::fs::read_to_string(RESULTS).with_context(|| format!("read {RESULTS}"))?;
    serde_json::from_str(&text).with_context(|| format!("parse {RESULTS}"))
}

fn generated(page: &str) -> anyhow::Result<String> {
    splice(page, &marker("chaos-docs", RESULTS), &table(&read_run()?)?)
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
    let mut t = String::new();
    if let Some(recorded) = run["recorded"].as_str() {
        writeln!(t, "Recorded run: {recorded}.\n")?;
    }
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
