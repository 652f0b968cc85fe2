//! docs/configuration.md's tables of settings are generated from [`SETTINGS`]: this test
//! regenerates them and fails on any difference (`MMCACHE_BLESS=1` writes them instead).

use super::settings::{PROCESS_VARIABLES, SETTINGS, Section};

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
const END: &str = "<!-- end of generated table -->";

fn marker(name: &str) -> String {
    format!(
        "<!-- generated from SETTINGS ({name}); MMCACHE_BLESS=1 cargo test -p mmcache-loader --lib config regenerates it -->"
    )
}

/// A table cell: a `|` inside it would split the row.
fn cell(text: &str) -> String {
    assert!(!text.contains('|'), "a `|` in a table cell: {text}");
    text.to_owned()
}

const VARIABLE_HEAD: &str = "| variable | default | rule |\n|---|---|---|\n";

fn variable_row(name: &str, default: &str, rule: &str, doc: &str) -> String {
    let rule = cell(&format!("{rule}{doc}"));
    format!("| `{name}` | {} | {rule} |\n", cell(default))
}

fn section_table(section: Section) -> String {
    let mut out = String::from(VARIABLE_HEAD);
    for s in SETTINGS.iter().filter(|s| s.section == section) {
        out += &variable_row(s.name, s.default, s.rule, &s.doc_text());
    }
    out
}

fn process_table() -> String {
    let mut out = String::from(VARIABLE_HEAD);
    for v in &PROCESS_VARIABLES {
        out += &variable_row(v.name, v.default, v.rule, v.doc);
    }
    out
}

fn keyword_table() -> String {
    let mut out = String::from("| keyword | variable | value |\n|---|---|---|\n");
    for s in &SETTINGS {
        let value = cell(s.python_value);
        out += &format!("| `{}` | `{}` | {value} |\n", s.python, s.name);
    }
    out
}

/// `doc` with the table after `marker(name)` replaced by `table`.
fn replace_table(doc: &str, name: &str, table: &str) -> String {
    let start = marker(name);
    let Some(at) = doc.find(&start) else {
        panic!("docs/configuration.md has no line {start}");
    };
    let body = at + start.len() + 1;
    let Some(len) = doc[body..].find(END) else {
        panic!("docs/configuration.md: no {END} after {start}");
    };
    format!("{}{table}{}", &doc[..body], &doc[body + len..])
}

fn generated(doc: &str) -> String {
    let mut doc = doc.to_owned();
    for section in Section::ALL {
        doc = replace_table(&doc, section.marker(), &section_table(section));
    }
    doc = replace_table(&doc, "process", &process_table());
    replace_table(&doc, "python-keywords", &keyword_table())
}

#[test]
fn the_docs_tables_are_generated_from_the_settings() {
    let doc = std::fs::read_to_string(DOC).expect("docs/configuration.md");
    let want = generated(&doc);
    if want == doc {
        return;
    }
    if std::env::var_os("MMCACHE_BLESS").is_some() {
        std::fs::write(DOC, &want).expect("write docs/configuration.md");
        return;
    }
    let first = doc
        .lines()
        .zip(want.lines())
        .find(|(have, want)| have != want)
        .map_or_else(String::new, |(have, want)| {
            format!("\nfirst difference:\n  doc:      {have}\n  declared: {want}")
        });
    panic!(
        "docs/configuration.md's tables differ from SETTINGS \
         (crates/loader/src/config/settings/); run MMCACHE_BLESS=1 cargo test -p mmcache-loader --lib config{first}"
    );
}

#[test]
fn no_placeholder_is_left_in_the_docs() {
    for s in &SETTINGS {
        let text = s.doc_text();
        let left = text
            .split('{')
            .skip(1)
            .find(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()));
        assert!(
            left.is_none(),
            "{}: a placeholder left: {{{}",
            s.name,
            left.unwrap_or("")
        );
    }
    let entry = SETTINGS
        .iter()
        .find(|s| s.name == super::env::DECODED_CACHE_BYTES)
        .unwrap();
    let per_entry = format!("{} bytes per entry", mmcache_decode::ENTRY_OVERHEAD_BYTES);
    assert!(
        entry.doc_text().contains(&per_entry),
        "{}",
        entry.doc_text()
    );
}

#[test]
fn every_section_has_a_setting() {
    for section in Section::ALL {
        assert!(SETTINGS.iter().any(|s| s.section == section), "{section:?}");
    }
}
