//! `cargo xtask docs [--check]`: every generated doc, regenerated from its sources, or with
//! `--check` compared with them (the gate runs the check):
//!
//! - docs/configuration.md's tables, from the settings' declarations
//!   ([`mmcache_loader::settings_doc_tables`]);
//! - docs/metrics.md's tables, from the metrics' declarations
//!   ([`mmcache_loader::metrics::doc_tables`]);
//! - docs/benchmarks.md's tables and docs/bench-ratios.svg, from the recorded bench runs in
//!   docs/ ([`benchmarks`], which also holds `cargo xtask bench-docs`, recording a run);
//! - docs/chaos.md's table, from the recorded chaos run ([`chaos`], with `cargo xtask
//!   chaos-docs`).
//!
//! A generated block runs from a marker naming its source to an end marker ([`generated`]);
//! the rest of a page is written by hand. The check also fails when the benchmarks and chaos
//! pages' own text has a figure no generated block has, or a chaos chart is not of the recorded
//! run: those the command cannot regenerate.

use anyhow::bail;

pub(crate) mod benchmarks;
pub(crate) mod chaos;
mod generated;

use generated::{Generated, marker, read, splice, write};

const CONFIGURATION: &str = "docs/configuration.md";
const METRICS: &str = "docs/metrics.md";

/// `cargo xtask docs`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Write nothing: fail when a generated doc differs from its sources, saying where
    #[arg(long)]
    check: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.check { check() } else { write(&all()?) }
}

/// Every generated file.
fn all() -> anyhow::Result<Vec<Generated>> {
    let mut files = vec![configuration()?, metrics()?];
    files.extend(benchmarks::generated()?);
    files.push(chaos::generated()?);
    Ok(files)
}

fn configuration() -> anyhow::Result<Generated> {
    let mut page = read(CONFIGURATION)?;
    for (name, table) in mmcache_loader::settings_doc_tables() {
        page = splice(&page, &marker(&format!("SETTINGS ({name})")), &table)?;
    }
    Ok(Generated {
        path: CONFIGURATION,
        from: "SETTINGS (crates/loader/src/config/settings/)",
        text: page,
    })
}

fn metrics() -> anyhow::Result<Generated> {
    let source = "mmcache_loader::metrics::ALL";
    let page = read(METRICS)?;
    let tables = mmcache_loader::metrics::doc_tables();
    Ok(Generated {
        path: METRICS,
        from: source,
        text: splice(&page, &marker(source), &tables)?,
    })
}

/// `cargo xtask docs --check`: fails when a generated file differs from what its sources
/// give (naming each, with its first differing line), or a page's own text is not what its
/// recorded run says.
pub(crate) fn check() -> anyhow::Result<()> {
    println!("==> cargo xtask docs --check");
    let mut stale = String::new();
    for file in all()? {
        if let Some(difference) = first_difference(&read(file.path)?, &file.text) {
            stale += &format!("\n  {} (from {}), {difference}", file.path, file.from);
        }
    }
    if !stale.is_empty() {
        bail!("generated docs differ from their sources; run `cargo xtask docs`:{stale}");
    }
    benchmarks::check_figures()?;
    chaos::check_page()?;
    println!("every generated doc is its sources'");
    Ok(())
}

/// Where `have` first differs from `want`: the line and column, and both texts from a little
/// before there (a line of an SVG or a table can be long).
fn first_difference(have: &str, want: &str) -> Option<String> {
    if have == want {
        return None;
    }
    let (mut have_lines, mut want_lines) = (have.lines(), want.lines());
    let mut line = 1;
    loop {
        match (have_lines.next(), want_lines.next()) {
            (Some(h), Some(w)) if h == w => line += 1,
            (None, None) => return Some(format!("line {line}: only the ends of line differ")),
            (h, w) => {
                let (h, w) = (h.unwrap_or_default(), w.unwrap_or_default());
                let column = h.chars().zip(w.chars()).take_while(|(a, b)| a == b).count();
                let from = column.saturating_sub(30);
                return Some(format!(
                    "line {line}, column {}:\n    committed: {}\n    generated: {}",
                    column + 1,
                    excerpt(h, from),
                    excerpt(w, from)
                ));
            }
        }
    }
}

/// Up to 100 characters of `line` from character `from`, with `…` where it was cut.
fn excerpt(line: &str, from: usize) -> String {
    const WIDTH: usize = 100;
    let text: String = line.chars().skip(from).take(WIDTH).collect();
    let head = if from > 0 { "…" } else { "" };
    let tail = if line.chars().count() > from + WIDTH {
        "…"
    } else {
        ""
    };
    if line.is_empty() {
        "(nothing)".to_owned()
    } else {
        format!("{head}{text}{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo xtask docs --check`, as the gate runs it: its runner is built without the docs'
    /// sources (the loader's declarations), and this test build has them.
    #[test]
    fn every_generated_doc_is_what_its_sources_give() {
        // Where `main` runs every command; xtask's other tests name no relative path.
        crate::enter_workspace_root().unwrap();
        if let Err(e) = check() {
            panic!("{e:#}");
        }
    }

    #[test]
    fn the_first_difference_is_named() {
        assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
        let d = first_difference("a\nbc\nd\n", "a\nbC\nd\n").unwrap();
        assert_eq!(d, "line 2, column 2:\n    committed: bc\n    generated: bC");
        let d = first_difference("a\n", "a\nb\n").unwrap();
        assert!(
            d.contains("line 2") && d.contains("committed: (nothing)"),
            "{d}"
        );
        // A long line is shown from a little before its difference.
        let long = "x".repeat(500);
        let d = first_difference(&format!("{long}1{long}"), &format!("{long}2{long}")).unwrap();
        assert!(d.starts_with("line 1, column 501:"), "{d}");
        assert!(
            d.contains(&format!(
                "committed: …{}1{}…",
                "x".repeat(30),
                "x".repeat(69)
            )),
            "{d}"
        );
    }
}
