//! The bench's outputs: a line per row while it runs, the Markdown table and the JSON.

use std::fmt::Write as _;

use super::{Measure, Opts, Row};
use crate::common::ms;

pub(super) fn row_line(r: &Row) -> String {
    format!(
        "{}: {:.0} ops/s, p50 {:.3} ms, p99 {:.3} ms; {} {}",
        r.scenario,
        r.subject.rate(),
        ms(r.subject.p50),
        ms(r.subject.p99),
        r.ratio_kind,
        r.ratio.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
    )
}

pub(super) fn table(rows: &[Row], o: &Opts) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Concurrency {} per scenario (local-hit: 2 threads). Each ratio compares the subject with a \
         baseline measured in the same run: {} alternating rounds, the round with the median ratio \
         is shown (local-hit: best of 2).\n",
        o.concurrency,
        o.rounds()
    );
    let _ = writeln!(
        t,
        "| scenario | ops/s | p50 ms | p99 ms | baseline | baseline ops/s | baseline p99 ms | ratio | target | notes |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---|---:|---:|---:|---|---|");
    for r in rows {
        let (bname, brate, bp99) = match &r.baseline {
            Some(b) => (
                r.baseline_name.clone(),
                format!("{:.0}", b.rate()),
                format!("{:.3}", ms(b.p99)),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            t,
            "| {} | {:.0} | {:.3} | {:.3} | {} | {} | {} | {} {} | {} | {} |",
            r.scenario,
            r.subject.rate(),
            ms(r.subject.p50),
            ms(r.subject.p99),
            bname,
            brate,
            bp99,
            r.ratio.map_or_else(|| "-".into(), |x| format!("{x:.3}")),
            r.ratio_kind,
            r.target,
            r.note
        );
    }
    t
}

pub(super) fn json(rows: &[Row], o: &Opts) -> serde_json::Value {
    let m = |m: &Measure| serde_json::json!({ "ops": m.ops, "secs": m.elapsed.as_secs_f64(), "ops_per_s": m.rate(), "p50_ms": ms(m.p50), "p99_ms": ms(m.p99) });
    serde_json::json!({
        "concurrency": o.concurrency,
        "quick": o.quick,
        "rows": rows.iter().map(|r| serde_json::json!({
            "scenario": r.scenario,
            "subject": m(&r.subject),
            "baseline_name": r.baseline_name,
            "baseline": r.baseline.as_ref().map(m),
            "ratio_kind": r.ratio_kind,
            "ratio": r.ratio,
            "target": r.target,
            "note": r.note,
        })).collect::<Vec<_>>(),
    })
}
