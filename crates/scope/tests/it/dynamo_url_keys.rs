//! The cache key of a URL is the one ai-dynamo 1.6.1 gives it, so a mixed fleet shares entries.
//!
//! `dynamo_url_keys.tsv` holds URLs and the key Dynamo's own `_normalize_http_url_key` gives
//! each, written by `tests/dynamo/make_url_keys.py` from the ai-dynamo 1.6.1 wheel. With the
//! wheel present (`cargo xtask test` downloads it to target/dynamo-wheel), the table is
//! regenerated and compared, and seeded random URLs are keyed by both; without it those two
//! tests skip outside CI (saying so) and fail in CI.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mmcache_scope::{CacheIdentity, Scope};

const TABLE: &str = include_str!("../dynamo_url_keys.tsv");
const WHEEL: &str = "ai_dynamo-1.6.1-py3-none-any.whl";

struct Row {
    name: String,
    url: String,
    /// `Err(message)` where Python raised (Dynamo refuses the URL before keying it).
    key: Result<String, String>,
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('n') => out.push('\n'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(char::from(u8::from_str_radix(&hex, 16).expect("\\xHH")));
            }
            other => panic!("bad escape \\{other:?} in {s:?}"),
        }
    }
    out
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    if out.ends_with(' ') {
        out.pop();
        out.push_str("\\x20");
    }
    out
}

fn key_field(field: &str) -> Result<String, String> {
    match field.strip_prefix('!') {
        Some(message) => Err(message.to_owned()),
        None => Ok(unescape(field)),
    }
}

/// The data rows of a table (comment lines start with `#`).
fn rows(table: &str) -> Vec<Row> {
    table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "row {l:?}");
            Row {
                name: f[0].to_owned(),
                url: unescape(f[1]),
                key: key_field(f[2]),
            }
        })
        .collect()
}

/// Rows whose key differs from Dynamo's on purpose, with ours. `backslash`: `urlsplit` reads
/// `Example.com\A.png` as the host (which Dynamo cannot fetch, so it never caches it) and
/// lowercases it; our downloader reads `\` as `/`, and `\A.png` and `\a.png` are two images.
const DELIBERATE: [(&str, &str); 1] = [("backslash", "https://example.com\\A.png")];

#[test]
fn our_keys_are_dynamo_s() {
    let rows = rows(TABLE);
    assert!(rows.len() >= 60, "{} rows", rows.len());
    let scope = Scope::new("session-a").unwrap();
    let digest = scope.digest();
    let mut wrong = Vec::new();
    for row in &rows {
        let ours = CacheIdentity::unscoped(&row.url);
        let scoped = CacheIdentity::scoped(&scope, &row.url);
        let deliberate = DELIBERATE.iter().find(|(name, _)| *name == row.name);
        let key = match (deliberate, &row.key) {
            (Some((_, ours)), Ok(_)) => Ok(ours.to_string()),
            (Some(_), Err(e)) => panic!("{}: Dynamo no longer keys it ({e})", row.name),
            (None, key) => key.clone(),
        };
        match &key {
            Ok(key) => {
                if ours.as_str() != key {
                    wrong.push(format!(
                        "{}: {:?} -> ours {:?}, expected {:?}",
                        row.name,
                        row.url,
                        ours.as_str(),
                        key
                    ));
                } else if scoped.as_str() != format!("{digest}:{key}") {
                    wrong.push(format!("{} (scoped): {:?}", row.name, scoped.as_str()));
                }
            }
            // Dynamo refuses these unkeyed; ours must still be a key, and the scoped one too.
            Err(_) => assert!(scoped.as_str().ends_with(ours.as_str()), "{}", row.name),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} keys differ from Dynamo's:\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n")
    );
}

#[test]
fn design_vectors_hold() {
    // docs/DESIGN: the unscoped key digest and the scoped one of https://example.com/img.png.
    let url = "https://example.com/img.png";
    assert_eq!(
        CacheIdentity::unscoped(url).sha256_hex(),
        "48af8a9eb0210270d41f09ff164d1314c0e3f35027d980ac92abb4320c80f2a0"
    );
    let scoped = CacheIdentity::scoped(&Scope::new("session-a").unwrap(), url);
    assert_eq!(
        scoped.sha256_hex(),
        "0895b8e0928cf6a3a67afb3c3b31407b6ff56e8130ad550729782f8465e15fc0"
    );
    // Spellings Dynamo keys alike share those digests.
    for same in [
        "HTTPS://Example.COM/img.png",
        "https://example.com/img.png#top",
        "https://example.com/img.png?#",
    ] {
        assert_eq!(
            CacheIdentity::unscoped(same).sha256_hex(),
            "48af8a9eb0210270d41f09ff164d1314c0e3f35027d980ac92abb4320c80f2a0",
            "{same}"
        );
    }
}

#[test]
fn any_string_gives_a_key() {
    // Seeded random strings over URL syntax, bytes of every class and multi-byte characters:
    // a key for each, never a panic.
    let mut next = rng(0x51ed_2701_a3b4_c5d6);
    for _ in 0..20_000 {
        let url = random_url(&mut next);
        let id = CacheIdentity::unscoped(&url);
        assert!(id.as_str().len() <= url.len() * 3 + 8, "{url:?}");
    }
}

// --- Against the wheel ---------------------------------------------------------------------

/// True when running under CI (`CI` set to anything but `0`/`false`/empty), as
/// mmcache-test-support's `in_ci` (not a dependency of this crate).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Skips outside CI (saying so); fails in CI.
fn unavailable(what: &str) {
    assert!(
        !in_ci(),
        "dynamo url keys: {what} (CI must have it: run `cargo xtask test`)"
    );
    eprintln!("SKIPPED dynamo url keys outside CI: {what}");
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `make_url_keys.py WHEEL [--stdin]` with the interpreter `cargo xtask test` set up.
fn run_generator(stdin: Option<&str>) -> Option<String> {
    let wheel = std::env::var_os("MMCACHE_DYNAMO_WHEEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/dynamo-wheel").join(WHEEL));
    if !wheel.is_file() {
        unavailable(&format!(
            "no {} (`pip download --no-deps ai-dynamo==1.6.1 -d target/dynamo-wheel`)",
            wheel.display()
        ));
        return None;
    }
    let python = std::env::var("MMCACHE_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = Command::new(&python);
    cmd.env("PYTHONUTF8", "1").env("PYTHONIOENCODING", "utf-8");
    cmd.arg(repo().join("tests/dynamo/make_url_keys.py"))
        .arg(&wheel);
    if stdin.is_some() {
        cmd.arg("--stdin");
    }
    let mut child = match cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            unavailable(&format!("cannot run {python}: {e}"));
            return None;
        }
    };
    let input = stdin.unwrap_or_default().to_owned();
    let mut pipe = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait for make_url_keys.py");
    writer.join().expect("writer").expect("write stdin");
    // The wheel is there: a failing generator is a failure, never a skip.
    assert!(
        out.status.success(),
        "make_url_keys.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).expect("UTF-8 output"))
}

#[test]
fn the_table_is_what_the_wheel_says() {
    let Some(fresh) = run_generator(None) else {
        return;
    };
    let (fresh, committed) = (rows(&fresh), rows(TABLE));
    let show = |r: &Row| format!("{}\t{:?}\t{:?}", r.name, r.url, r.key);
    let fresh: Vec<String> = fresh.iter().map(show).collect();
    let committed: Vec<String> = committed.iter().map(show).collect();
    let changed: Vec<String> = fresh
        .iter()
        .filter(|r| !committed.contains(r))
        .cloned()
        .collect();
    assert!(
        changed.is_empty() && fresh.len() == committed.len(),
        "crates/scope/tests/dynamo_url_keys.tsv is stale; regenerate it with \
         tests/dynamo/make_url_keys.py. Rows that differ:\n{}",
        changed.join("\n")
    );
}

#[test]
fn random_urls_key_as_dynamo_does() {
    let mut next = rng(0x2545_f491_4f6c_dd1d);
    let urls: Vec<String> = (0..5_000).map(|_| random_url(&mut next)).collect();
    // Lines are split on LF only: escaped URLs hold none.
    let input: String = urls.iter().map(|u| escape(u) + "\n").collect();
    let Some(out) = run_generator(Some(&input)) else {
        return;
    };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), urls.len(), "one key per URL");
    let (mut compared, mut wrong) = (0, Vec::new());
    for (url, line) in urls.iter().zip(lines) {
        let (echo, key) = line.split_once('\t').expect("url\\tkey");
        assert_eq!(&unescape(echo), url, "the generator read the URL back");
        let Ok(key) = key_field(key) else {
            continue; // Python raised: Dynamo refuses the URL, nothing to share
        };
        if url.contains('\\') {
            continue; // may be the deliberate difference (see DELIBERATE); the table covers it
        }
        compared += 1;
        let ours = CacheIdentity::unscoped(url);
        if ours.as_str() != key {
            wrong.push(format!(
                "{url:?}: ours {:?}, Dynamo's {key:?}",
                ours.as_str()
            ));
        }
    }
    assert!(compared >= 2_500, "only {compared} URLs keyed by Python");
    assert!(
        wrong.is_empty(),
        "{} of {compared} keys differ from Dynamo's:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
}

// --- Random URLs ---------------------------------------------------------------------------

fn rng(mut state: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    }
}

/// A URL-like string: mostly a scheme and authority, then random pieces of URL syntax.
fn random_url(next: &mut impl FnMut(usize) -> usize) -> String {
    const SCHEMES: [&str; 8] = [
        "https://", "HTTPS://", "HtTp://", "http:", "ftp://", "//", "", "1x://",
    ];
    const PIECES: [&str; 48] = [
        "Example",
        "COM",
        ".",
        "..",
        "/",
        "//",
        "?",
        "#",
        "@",
        ":",
        "[",
        "]",
        "%",
        "%25",
        "25",
        "::",
        "1",
        "80",
        ":443",
        "fe80",
        "FE80::1",
        "Eth0",
        "v1.",
        "A+b",
        " ",
        "\t",
        "\n",
        "\r",
        "\u{1}",
        "\u{1f}",
        "\u{7f}",
        "\\",
        "&",
        "=",
        "x=Y",
        "\u{dc}",
        "\u{3a3}",
        "\u{130}",
        "\u{212a}",
        "\u{2100}",
        "\u{ff0f}",
        "\u{1f600}",
        "a",
        "Z",
        "-",
        "_",
        "~",
        "127.0.0.1",
    ];
    let mut url = String::new();
    if next(8) == 0 {
        url.push(if next(2) == 0 { ' ' } else { '\u{1}' });
    }
    url.push_str(SCHEMES[next(SCHEMES.len())]);
    for _ in 0..next(14) {
        url.push_str(PIECES[next(PIECES.len())]);
    }
    url
}
