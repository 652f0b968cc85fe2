//! docs/configuration.md's generated tables, rendered from [`SETTINGS`] and
//! [`PROCESS_VARIABLES`] (`cargo xtask docs` writes them into the page, and with `--check`
//! fails on any difference).

use super::settings::{PROCESS_VARIABLES, SETTINGS, Section};

/// docs/configuration.md's generated tables, each with the name its marker in the page gives
/// it: one per [`Section`] (named by [`Section::marker`]), the variables read outside the
/// configuration (`process`), then the Python keywords (`python-keywords`).
///
/// # Panics
///
/// When a declared text holds a `|`, which would split its table row.
pub fn settings_doc_tables() -> Vec<(&'static str, String)> {
    let mut tables: Vec<(&'static str, String)> = Section::ALL
        .iter()
        .map(|&section| (section.marker(), section_table(section)))
        .collect();
    tables.push(("process", process_table()));
    tables.push(("python-keywords", keyword_table()));
    tables
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
        // A setting that may be unset takes `None` for it, as a blank variable.
        let value = if s.default.starts_with("unset") && !s.python_value.contains("`None`") {
            cell(&format!("{}, or `None` (unset)", s.python_value))
        } else {
            cell(s.python_value)
        };
        out += &format!("| `{}` | `{}` | {value} |\n", s.python, s.name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
            .find(|s| s.name == super::super::env::DECODED_CACHE_BYTES)
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
}
