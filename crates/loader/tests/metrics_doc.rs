//! docs/metrics.md's tables are generated from the metric declarations
//! (`mmcache_loader::metrics::ALL`): this test renders them and fails on any difference,
//! printing the text to paste between the markers. With `MMCACHE_UPDATE_DOCS=1` it writes that
//! text into the file instead (after adding or changing a declaration).

use std::path::Path;

use anyhow::Context;
use mmcache_metrics::metric::{Kind, Metric, Unit};

const BEGIN: &str = "<!-- metrics table: generated from mmcache_loader::metrics::ALL by \
                     crates/loader/tests/metrics_doc.rs; do not edit -->";
const END: &str = "<!-- end of metrics table -->";

fn seconds(v: f64) -> String {
    if v < 1.0 {
        format!("{} ms", v * 1000.0)
    } else {
        format!("{v} s")
    }
}

fn kind(m: &Metric) -> String {
    match (m.kind, m.buckets) {
        (Kind::Histogram, [first, .., last]) => format!(
            "histogram, {} … {} ({} buckets)",
            seconds(*first),
            seconds(*last),
            m.buckets.len()
        ),
        (k, _) => k.as_str().to_owned(),
    }
}

fn labels(m: &Metric) -> String {
    if m.labels.is_empty() {
        return "—".to_owned();
    }
    let one = |l: &mmcache_metrics::metric::Label| {
        if l.values.is_empty() {
            format!("`{}`", l.name)
        } else {
            let values: Vec<String> = l.values.iter().map(|v| format!("`{v}`")).collect();
            format!("`{}` = {}", l.name, values.join(" \\| "))
        }
    };
    m.labels.iter().map(one).collect::<Vec<_>>().join("; ")
}

fn meaning(m: &Metric) -> String {
    let unit = match m.unit {
        Some(Unit::Seconds) => " (seconds)",
        Some(Unit::Bytes) => " (bytes)",
        None => "",
    };
    if m.note.is_empty() {
        format!("{}{unit}", m.help)
    } else {
        format!("{}{unit}; {}", m.help, m.note)
    }
}

/// The generated text between the markers.
fn render() -> String {
    let mut out = String::new();
    for (section, metrics) in mmcache_loader::metrics::ALL {
        out.push_str(&format!(
            "\n### {section}\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n"
        ));
        for m in *metrics {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                m.name,
                kind(m),
                labels(m),
                meaning(m)
            ));
        }
    }
    out.push('\n');
    out
}

#[test]
fn docs_metrics_md_tables_match_the_declarations() -> anyhow::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md");
    let doc = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let expected = render();
    let parts = doc
        .split_once(BEGIN)
        .and_then(|(head, rest)| Some((head, rest.split_once(END)?)));
    let found = parts.map(|(_, (table, _))| table);
    if std::env::var_os("MMCACHE_UPDATE_DOCS").is_some_and(|v| v == "1") && found != Some(&expected)
    {
        let (head, (_, tail)) = parts.context("docs/metrics.md has no markers")?;
        std::fs::write(&path, format!("{head}{BEGIN}{expected}{END}{tail}"))?;
        return Ok(());
    }
    assert!(
        found == Some(expected.as_str()),
        "docs/metrics.md differs from the declarations; between\n{BEGIN}\nand\n{END}\nit \
         should read:\n{expected}"
    );
    Ok(())
}

#[test]
fn each_metric_is_declared_once() {
    let mut names: Vec<&str> = mmcache_loader::metrics::all().map(|m| m.name).collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count, "a metric is declared twice");
    for m in mmcache_loader::metrics::all() {
        assert_eq!(
            m.kind == Kind::Histogram,
            !m.buckets.is_empty(),
            "{}: buckets are for histograms, and every histogram has them",
            m.name
        );
    }
}
