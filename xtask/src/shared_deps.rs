//! The gate's `maturin develop` reuses the dependencies `cargo test --workspace` built only when
//! both builds turn on the same features in each of them: cargo builds a crate once per feature
//! set, and a difference in tokio alone rebuilds most of the stack above it (minutes on two
//! cores). crates/python's feature `share-test-build` turns on what the tests add; this check
//! (a test of xtask's, so part of the gate) names every dependency whose features still differ:
//! a drift fails a test instead of slowing every gate.

/// The crates/python feature the gate's `maturin develop` adds.
pub(crate) const FEATURE: &str = "share-test-build";

/// The check, run as a test of xtask's (`cargo test --workspace` in the gate).
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::process::Command;

    use anyhow::{Context, bail};

    use super::FEATURE;

    /// Fails, naming each dependency and the features only the tests turn on, when the gate's
    /// build of crates/python (maturin's features and [`FEATURE`]) would build a dependency of
    /// the tests again. A package built both for build scripts and for the target is compared
    /// on the union of its features in each build (cargo tree shows both as one name): close
    /// enough to catch a drift, which is all this is for.
    fn check() -> anyhow::Result<()> {
        let tests = features(&["--workspace", "--edges", "normal,build,dev"])?;
        let python_features = crate::setup::gate_python_features()?.join(",");
        let python = features(&[
            "--package",
            "mmcache-python",
            "--features",
            &python_features,
            "--edges",
            "normal,build",
        ])?;
        // A reading that found nothing would pass: both builds hold tokio, the tests' with
        // its test clock.
        let tokio = |build: &BTreeMap<String, Features>| {
            build
                .iter()
                .find(|(name, _)| name.starts_with("tokio v"))
                .map(|(_, f)| f.set.clone())
                .unwrap_or_default()
        };
        if !tokio(&tests).contains("test-util") || tokio(&python).is_empty() {
            bail!("cargo tree's output was not read: no tokio in one of the builds");
        }
        let differing = differing(&tests, &python);
        if differing.is_empty() {
            return Ok(());
        }
        bail!(
            "the gate's maturin develop would build these again, with other features than \
             `cargo test --workspace`. A +feature (the tests' only) goes in the feature \
             {FEATURE} of crates/python/Cargo.toml; a -feature (crates/python's only) is \
             turned on for the tests too:\n{}",
            differing.join("\n")
        )
    }

    /// Each package of `python` that the test build has too, with other features: its name and
    /// the features that differ (`+f`: only the tests; `-f`: only python). Our own crates are left
    /// out: they differ on purpose (test seams, the vendored libjpeg-turbo).
    fn differing(
        tests: &BTreeMap<String, Features>,
        python: &BTreeMap<String, Features>,
    ) -> Vec<String> {
        python
            .iter()
            .filter(|(_, p)| !p.ours)
            .filter_map(|(package, p)| {
                let t = tests.get(package)?;
                let mut diff: Vec<String> =
                    t.set.difference(&p.set).map(|f| format!("+{f}")).collect();
                diff.extend(p.set.difference(&t.set).map(|f| format!("-{f}")));
                (!diff.is_empty()).then(|| format!("  {package}: {}", diff.join(" ")))
            })
            .collect()
    }

    /// A package's features in one build, and whether it is one of ours (a path dependency).
    #[derive(Debug, Default)]
    struct Features {
        set: std::collections::BTreeSet<String>,
        ours: bool,
    }

    /// `cargo tree` with `args`: every package (`name vX.Y.Z`) and the features the build turns on.
    fn features(args: &[&str]) -> anyhow::Result<BTreeMap<String, Features>> {
        let out = Command::new("cargo")
            .args(["tree", "--quiet", "--prefix", "none", "--format", "{p}|{f}"])
            .args(args)
            .output()
            .context("run cargo tree")?;
        if !out.status.success() {
            bail!(
                "cargo tree {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(parse(&String::from_utf8_lossy(&out.stdout)))
    }

    /// Parses `cargo tree --prefix none --format '{p}|{f}'`: lines like
    /// `tokio v1.54.1|bytes,rt` or `mmcache-scope v0.1.0 (/path)|test-seams`, each possibly followed
    /// by ` (*)` (already shown) and repeated; a package's features are the union of its lines.
    fn parse(text: &str) -> BTreeMap<String, Features> {
        let mut packages: BTreeMap<String, Features> = BTreeMap::new();
        for line in text.lines() {
            let Some((package, features)) = line.split_once('|') else {
                continue;
            };
            let mut words = package.split_whitespace();
            let (Some(name), Some(version)) = (words.next(), words.next()) else {
                continue;
            };
            let entry = packages.entry(format!("{name} {version}")).or_default();
            entry.ours |= package.contains(" (/");
            let features = features.trim_end_matches(" (*)").trim();
            entry.set.extend(
                features
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned),
            );
        }
        packages
    }

    #[test]
    fn the_gates_python_build_shares_the_test_builds_dependencies() {
        check().unwrap();
    }

    #[test]
    fn a_dependency_with_other_features_is_named_and_ours_are_not() {
        let tests = parse(
            "tokio v1.0.0|rt,test-util\nserde v1.0.0|std (*)\nmmcache-scope v0.1.0 (/w/crates/scope)|test-seams\nonly-tests v1.0.0|\n",
        );
        let python = parse(
            "tokio v1.0.0|rt\ntokio v1.0.0|rt (*)\nserde v1.0.0|std\nmmcache-scope v0.1.0 (/w/crates/scope)|\ncmake v0.1.0|\n",
        );
        assert_eq!(differing(&tests, &python), ["  tokio v1.0.0: +test-util"]);
        let extra = parse("serde v1.0.0|derive,std\n");
        assert_eq!(differing(&tests, &extra), ["  serde v1.0.0: -derive"]);
    }
}
