//! docs/metrics.md's generated tables, rendered from [`ALL`] (`cargo xtask docs` writes them
//! into the page, and with `--check` fails on any difference).

use mmcache_metrics::metric::{Kind, Label, Metric, Unit};

use super::ALL;

/// docs/metrics.md's generated text: for each section of [`ALL`], a heading and the table of
/// its metrics (name, type with a histogram's buckets, labels with their values, meaning).
pub fn doc_tables() -> String {
    let mut out = String::new();
    for (section, metrics) in ALL {
        out.push_str(&format!(
            "### {section}\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n"
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
        out.push('\n');
    }
    out
}

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
    let one = |l: &Label| {
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

#[cfg(test)]
mod tests {
    use super::super::all;
    use super::*;

    #[test]
    fn each_metric_is_declared_once() {
        let mut names: Vec<&str> = all().map(|m| m.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a metric is declared twice");
        for m in all() {
            assert_eq!(
                m.kind == Kind::Histogram,
                !m.buckets.is_empty(),
                "{}: buckets are for histograms, and every histogram has them",
                m.name
            );
        }
    }
}
