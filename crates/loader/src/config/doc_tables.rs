//! docs/configuration.md's generated tables, rendered from [`SETTINGS`] (`cargo xtask docs`
//! writes them into the page, and with `--check` fails on any difference).

use super::settings::{SETTINGS, Section};

/// docs/configuration.md's generated tables, each with the name its marker in the page gives
/// it: one per [`Section`] (named by [`Section::marker`]), then the Python keywords
/// (`python-keywords`).
///
/// # Panics
///
/// When a declared text holds a `|`, which would split its table row.
pub fn settings_doc_tables() -> Vec<(&'static str, String)> {
    let mut tables: Vec<(&'static str, String)> = Section::ALL
        .iter()
        .map(|&section| (section.marker(), section_table(section)))
        .collect();
    tables.push(("python-keywords", keyword_table()));
    tables
}

/// A table cell: a `|` inside it would split the row.
fn cell(text: &str) -> String {
    assert!(!text.contains('|'), "a `|` in a table cell: {text}");
    text.to_owned()
}

fn section_table(section: Section) -> String {
    let mut out = String::from("| variable | default | rule |\n|---|---|---|\n");
    for s in SETTINGS.iter().filter(|s| s.section == section) {
        let rule = cell(&format!("{}{}", s.rule, s.doc_text()));
        out += &format!("| `{}` | {} | {rule} |\n", s.name, cell(s.default));
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
            .find(|s| s.name == crate::config::env::DECODED_CACHE_BYTES)
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
