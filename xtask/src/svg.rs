//! Hand-written SVG charts (no plotting dependency): a per-second timeline of latency and of
//! where loads came from, with fault windows marked; and a horizontal bar chart of ratios.

use std::fmt::Write as _;
use std::time::Duration;

use mmcache_loader::Source;

use crate::common::{Record, percentile};

/// A shaded span of the timeline (seconds since the run started).
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) from: f64,
    pub(crate) to: f64,
    pub(crate) label: String,
}

const W: f64 = 960.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP_H: f64 = 220.0;
const BOT_H: f64 = 180.0;
const GAP: f64 = 50.0;
const TOP_Y: f64 = 40.0;

const SOURCES: [(&str, &str); 5] = [
    ("shared", "#2e9e5b"),
    ("origin", "#e08a1e"),
    ("inflight", "#4a7fd4"),
    ("memory", "#9a9a9a"),
    ("failed", "#d62728"),
];

fn source_index(r: &Record) -> usize {
    match r.source {
        Some(Source::Shared) => 0,
        Some(Source::Origin) => 1,
        Some(Source::Inflight) => 2,
        Some(_) => 3,
        None => 4,
    }
}

/// Timeline: top panel latency p50/p99/max per second (log scale, ms); bottom panel loads
/// per second stacked by source; fault windows shaded over both.
pub(crate) fn timeline(
    title: &str,
    records: &[Record],
    windows: &[Window],
    total: Duration,
) -> String {
    let secs = total.as_secs_f64().ceil().max(1.0) as usize;
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); secs];
    let mut counts = vec![[0usize; 5]; secs];
    for r in records {
        let s = (r.at.as_secs_f64() as usize).min(secs - 1);
        lat[s].push(r.latency);
        counts[s][source_index(r)] += 1;
    }
    for l in &mut lat {
        l.sort();
    }
    let plot_w = W - LEFT - RIGHT;
    let x = |t: f64| LEFT + plot_w * t / secs as f64;
    let h = TOP_Y + TOP_H + GAP + BOT_H + 50.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );

    // Fault windows over both panels.
    for w in windows {
        let (x0, x1) = (x(w.from), x(w.to.max(w.from + 0.05)));
        let _ = write!(
            svg,
            r##"<rect x="{x0:.1}" y="{TOP_Y}" width="{:.1}" height="{:.1}" fill="#d62728" fill-opacity="0.10"/><text x="{:.1}" y="{:.1}" fill="#a01818">{}</text>"##,
            x1 - x0,
            TOP_H + GAP + BOT_H,
            x0 + 3.0,
            TOP_Y + 14.0,
            escape(&w.label)
        );
    }

    // Top: latency, log10 scale from 0.1 ms to 10 s.
    let (lo, hi) = (-1.0f64, 4.0f64);
    let y_lat = |d: Duration| {
        let ms = (d.as_secs_f64() * 1e3).max(0.1);
        TOP_Y + TOP_H - TOP_H * ((ms.log10() - lo) / (hi - lo)).clamp(0.0, 1.0)
    };
    for (i, label) in ["0.1 ms", "1 ms", "10 ms", "100 ms", "1 s", "10 s"]
        .iter()
        .enumerate()
    {
        let y = TOP_Y + TOP_H - TOP_H * i as f64 / (hi - lo);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0
        );
    }
    for (q, color, name) in [
        (0.5, "#4a7fd4", "p50"),
        (0.99, "#e08a1e", "p99"),
        (1.0, "#d62728", "max"),
    ] {
        let mut points = String::new();
        for (s, l) in lat.iter().enumerate() {
            if !l.is_empty() {
                let _ = write!(
                    points,
                    "{:.1},{:.1} ",
                    x(s as f64 + 0.5),
                    y_lat(percentile(l, q))
                );
            }
        }
        let _ = write!(
            svg,
            r#"<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>"#
        );
        let ly =
            TOP_Y + 20.0 + 18.0 * [0.5, 0.99, 1.0].iter().position(|v| *v == q).unwrap_or(0) as f64;
        let _ = write!(
            svg,
            r#"<line x1="{:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}">latency {name}</text>"#,
            W - RIGHT + 10.0,
            W - RIGHT + 30.0,
            W - RIGHT + 35.0,
            ly + 4.0
        );
    }

    // Bottom: loads per second by source, stacked.
    let by = TOP_Y + TOP_H + GAP;
    let max = counts
        .iter()
        .map(|c| c.iter().sum::<usize>())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let bar_w = (plot_w / secs as f64 - 1.0).max(1.0);
    for (s, c) in counts.iter().enumerate() {
        let mut y = by + BOT_H;
        for (i, (_, color)) in SOURCES.iter().enumerate() {
            let hgt = BOT_H * c[i] as f64 / max;
            if hgt > 0.0 {
                y -= hgt;
                let _ = write!(
                    svg,
                    r#"<rect x="{:.1}" y="{y:.1}" width="{bar_w:.1}" height="{hgt:.1}" fill="{color}"/>"#,
                    x(s as f64)
                );
            }
        }
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{max:.0}/s</text><text x="{:.1}" y="{:.1}" text-anchor="end">0</text>"##,
        LEFT - 6.0,
        by + 10.0,
        LEFT - 6.0,
        by + BOT_H
    );
    for (i, (name, color)) in SOURCES.iter().enumerate() {
        let ly = by + 10.0 + 18.0 * i as f64;
        let _ = write!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="14" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}">{name}</text>"#,
            W - RIGHT + 10.0,
            ly - 8.0,
            W - RIGHT + 30.0,
            ly + 1.0
        );
    }
    // Time axis.
    let step = if secs > 40 {
        10
    } else if secs > 15 {
        5
    } else {
        1
    };
    for s in (0..=secs).step_by(step) {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{s}s</text>"#,
            x(s as f64),
            by + BOT_H + 18.0
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}">loads per second by source</text>"#,
        by - 8.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// Horizontal bars of `(label, value)` with a reference line at `reference`.
pub(crate) fn bars(title: &str, rows: &[(String, f64)], reference: f64, unit: &str) -> String {
    let row_h = 26.0;
    let h = 60.0 + row_h * rows.len() as f64 + 20.0;
    // Right-aligned labels need room for the longest one (about 6.6 px a character at 12 px).
    let longest = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let label_w = (longest as f64 * 6.6 + 16.0).clamp(200.0, W * 0.6);
    let plot_w = W - label_w - 80.0;
    let max = rows.iter().map(|r| r.1).fold(reference, f64::max).max(1e-9) * 1.1;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12"><rect width="{W}" height="{h}" fill="white"/><text x="10" y="24" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    for (i, (label, v)) in rows.iter().enumerate() {
        let y = 45.0 + row_h * i as f64;
        let w = plot_w * v / max;
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect x="{label_w}" y="{y:.1}" width="{w:.1}" height="18" fill="#4a7fd4"/><text x="{:.1}" y="{:.1}">{v:.2}{unit}</text>"##,
            label_w - 8.0,
            y + 13.0,
            escape(label),
            label_w + w + 5.0,
            y + 13.0
        );
    }
    let rx = label_w + plot_w * reference / max;
    let _ = write!(
        svg,
        r##"<line x1="{rx:.1}" x2="{rx:.1}" y1="38" y2="{:.1}" stroke="#d62728" stroke-dasharray="4 3"/><text x="{rx:.1}" y="{:.1}" fill="#d62728" text-anchor="middle">baseline = {reference}{unit}</text></svg>"##,
        h - 20.0,
        h - 6.0
    );
    svg.push('\n');
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
