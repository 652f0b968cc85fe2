//! The decode crate's metric names live in `mmcache_decode::metrics` only: docs/metrics.md
//! lists each of them, and no other source file of the crate spells one out.

use std::path::Path;

use anyhow::Context;

#[test]
fn every_metric_is_listed_in_docs_metrics_md() -> anyhow::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md");
    let doc = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    for name in mmcache_decode::metrics::ALL.iter().map(|m| m.name) {
        let row = format!("| `{name}` |");
        assert!(doc.contains(&row), "docs/metrics.md has no row {row}");
    }
    Ok(())
}

#[test]
fn metric_names_are_spelled_in_metrics_rs_only() -> anyhow::Result<()> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = 0;
    for entry in std::fs::read_dir(&src)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("metrics.rs") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path)?;
        for name in mmcache_decode::metrics::ALL.iter().map(|m| m.name) {
            assert!(
                !text.contains(name),
                "{} spells out {name}: use mmcache_decode::metrics",
                path.display()
            );
        }
    }
    assert!(files > 10, "only {files} source files found under {src:?}");
    Ok(())
}
