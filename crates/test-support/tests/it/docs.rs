//! The workspace's Markdown pages: every relative link and every path they name in backticks
//! lies inside the repository and exists; every page with a Rust example has it compiled (the
//! root README and docs/*.md by this crate's doctests, `doc_examples`; each crate README by its
//! crate), never `ignore`d where `no_run` serves.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every `*.md` of the repository, build outputs and fuzz corpora left out.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    walk(&path, out);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out.sort();
    assert!(out.len() > 10, "found only {out:?}");
    out
}

/// The page's text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Relative targets of Markdown links (`](target)`), anchors dropped, and backticked relative
/// paths that leave their folder (`` `../x` ``).
fn targets(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in prose.match_indices("](") {
        let rest = &prose[i + 2..];
        let Some(end) = rest.find(')') else { continue };
        let target = rest[..end].split('#').next().unwrap_or("").trim();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_owned());
        }
    }
    for quoted in prose.split('`').skip(1).step_by(2) {
        if quoted.starts_with("../") && !quoted.contains(' ') {
            out.push(quoted.to_owned());
        }
    }
    out
}

#[test]
fn every_relative_link_resolves_inside_the_repository() {
    let root = root();
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in targets(&prose(&text)) {
            let path = page.parent().unwrap().join(&target);
            match path.canonicalize() {
                Ok(p) if p.starts_with(&root) => {}
                Ok(p) => broken.push(format!(
                    "{}: {target} is outside the repository ({})",
                    page.display(),
                    p.display()
                )),
                Err(_) => broken.push(format!("{}: {target} does not exist", page.display())),
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_sees_what_it_checks() {
    let found = targets(&prose(
        "see [a](docs/a.md#x), [b](https://x.org/b), `../shared/SPEC.md`\n```\n[c](no.md)\n```\n",
    ));
    assert_eq!(found, ["docs/a.md", "../shared/SPEC.md"]);
}

#[test]
fn every_rust_example_is_compiled() {
    let root = root();
    let lib = std::fs::read_to_string(root.join("crates/test-support/src/lib.rs")).unwrap();
    let mut missing = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let rel = page
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for fence in text
            .lines()
            .filter(|l| l.trim_start().starts_with("```rust"))
        {
            assert!(
                !fence.contains("ignore"),
                "{rel}: `{fence}`: an example compiles (`no_run` when it needs a network)"
            );
        }
        if !text.contains("```rust") {
            continue;
        }
        // A crate README is its own crate's doctest (`#[doc = include_str!("../README.md")]`).
        let own_crate = rel.starts_with("crates/") && rel.ends_with("/README.md");
        let included = if own_crate {
            let crate_dir = page.parent().unwrap();
            let lib_rs = std::fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap_or_default();
            lib_rs.contains("include_str!(\"../README.md\")")
        } else {
            lib.contains(&format!("include_str!(\"../../../{rel}\")"))
        };
        if !included {
            missing.push(rel);
        }
    }
    assert!(
        missing.is_empty(),
        "pages whose Rust examples no doctest compiles (list them in test-support's \
         `doc_examples`): {missing:?}"
    );
}
