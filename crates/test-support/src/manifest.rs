//! The deploy kit's Kubernetes manifests (`deploy/kubernetes/*.yaml`), read by the tests that
//! run what they set up, so a manifest cannot drift from what the tests prove.
//!
//! Not a YAML parser: it reads the plain shapes the kit is written in (one `key: value` a line,
//! flow mappings such as `{name: X, value: "1"}`, flow sequences of double-quoted strings),
//! which yamllint keeps it to.

use std::path::PathBuf;

/// The text of `deploy/kubernetes/<name>`.
///
/// # Panics
///
/// When the file cannot be read.
pub fn read(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The document of `text` (documents separated by `---` lines) whose kind is `kind`.
///
/// # Panics
///
/// When no document, or more than one, has that kind.
pub fn document<'a>(text: &'a str, kind: &str) -> &'a str {
    let found: Vec<&str> = text
        .split("\n---\n")
        .filter(|d| d.lines().any(|l| l == format!("kind: {kind}")))
        .collect();
    match found.as_slice() {
        [d] => d,
        other => panic!("{} documents of kind {kind}", other.len()),
    }
}

/// A value as written, without quotes or a trailing comment.
fn clean(raw: &str) -> String {
    let raw = raw.split(" #").next().unwrap_or(raw).trim();
    raw.trim_matches('"').to_owned()
}

/// Every value of `key` in `doc`, in order: as a block mapping's `key: value` (not a nested
/// block) or inside a flow mapping (`{key: value, ...}`).
pub fn values(doc: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in doc.lines() {
        let body = line.trim_start().trim_start_matches("- ");
        if body.starts_with('#') {
            continue;
        }
        if let Some(v) = body.strip_prefix(&format!("{key}:")) {
            let v = clean(v);
            if !v.is_empty() && !v.starts_with('{') {
                out.push(v);
                continue;
            }
        }
        // Flow mappings on the line (nested ones included).
        for part in body.split(['{', '}', ',']) {
            if let Some(v) = part.trim().strip_prefix(&format!("{key}:")) {
                let v = clean(v);
                if !v.is_empty() {
                    out.push(v);
                }
            }
        }
    }
    out
}

/// The one value of `key` in `doc`.
///
/// # Panics
///
/// When `key` has no value or more than one.
pub fn value(doc: &str, key: &str) -> String {
    match values(doc, key).as_slice() {
        [v] => v.clone(),
        other => panic!(
            "`{key}` has {} values in the manifest: {other:?}",
            other.len()
        ),
    }
}

/// The `value` of the environment variable `name` (`- {name: NAME, value: V}`).
pub fn env(doc: &str, name: &str) -> Option<String> {
    doc.lines()
        .find(|l| l.contains(&format!("name: {name},")))
        .and_then(|l| values(l, "value").into_iter().next())
}

/// Every literal environment variable (`- {name: NAME, value: V}`), in order.
pub fn env_all(doc: &str) -> Vec<(String, String)> {
    doc.lines()
        .filter_map(|l| {
            let name = values(l, "name").into_iter().next()?;
            let value = values(l, "value").into_iter().next()?;
            Some((name, value))
        })
        .collect()
}

/// The strings of the `command: ["...", ...]` of the container named `container`.
///
/// # Panics
///
/// When the container has no command of that shape.
pub fn command(doc: &str, container: &str) -> Vec<String> {
    let start = doc
        .find(&format!("- name: {container}\n"))
        .unwrap_or_else(|| panic!("no container {container}"));
    let line = doc[start..]
        .lines()
        .find_map(|l| l.trim().strip_prefix("command:"))
        .unwrap_or_else(|| panic!("container {container} has no command"));
    let inner = line
        .trim()
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_else(|| panic!("command of {container} is not a flow sequence: {line}"));
    inner
        .split("\", \"")
        .map(|s| s.trim_matches('"').to_owned())
        .collect()
}

/// A memory quantity (`6Gi`, `512Mi`, `2500Mi`, or bytes) in bytes.
///
/// # Panics
///
/// On another suffix or a bad number.
pub fn quantity_bytes(q: &str) -> u64 {
    let (digits, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("bad quantity {q}"));
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        "Ti" => 40,
        other => panic!("unit {other} of {q}: use Ki, Mi, Gi or Ti"),
    };
    n << shift
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
spec:
  securityContext:
    runAsUser: 1000        # a comment
    fsGroup: 2000
  volumes:
    - name: v
      hostPath: {path: /var/cache/x, type: DirectoryOrCreate}
  initContainers:
    - name: init
      command: [\"sh\", \"-c\", \"chown 0:2000 /x && chmod 2770 /x\"]
      securityContext:
        runAsUser: 0
  containers:
    - name: worker
      resources:
        limits: {memory: 6Gi}
      env:
        - {name: A, value: \"1\"}
        - name: URL
          valueFrom:
            secretKeyRef: {name: s, key: url}
        - {name: B, value: /var/cache/x}
";

    #[test]
    fn picks_a_document_by_kind() {
        let text = "---\nkind: A\nx: 1\n---\nkind: B\nx: 2\n";
        assert_eq!(value(document(text, "B"), "x"), "2");
    }

    #[test]
    fn reads_the_kits_shapes() {
        assert_eq!(values(DOC, "runAsUser"), ["1000", "0"]);
        assert_eq!(value(DOC, "fsGroup"), "2000");
        assert_eq!(value(DOC, "path"), "/var/cache/x");
        assert_eq!(value(DOC, "type"), "DirectoryOrCreate");
        assert_eq!(value(DOC, "memory"), "6Gi");
        assert_eq!(env(DOC, "A").as_deref(), Some("1"));
        assert_eq!(env(DOC, "B").as_deref(), Some("/var/cache/x"));
        assert_eq!(env(DOC, "URL"), None);
        assert_eq!(
            env_all(DOC),
            [
                ("A".into(), "1".into()),
                ("B".into(), "/var/cache/x".into())
            ]
        );
        assert_eq!(
            command(DOC, "init"),
            ["sh", "-c", "chown 0:2000 /x && chmod 2770 /x"]
        );
        assert_eq!(quantity_bytes("6Gi"), 6 << 30);
        assert_eq!(quantity_bytes("2500Mi"), 2500 << 20);
    }
}
