//! Writing a full run's table into docs/benchmarks.md, between two marker comments.

use std::path::Path;

use crate::report::Report;

const BEGIN: &str = "<!-- bench/run: table begin -->";
const END: &str = "<!-- bench/run: table end -->";

/// Replace what lies between the markers of `path` with the report's table.
pub fn write_table(path: &Path, report: &Report) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let updated = replace_between(&text, &report.table())
        .ok_or_else(|| format!("{}: no {BEGIN} ... {END} markers", path.display()))?;
    std::fs::write(path, updated).map_err(|e| format!("{}: {e}", path.display()))
}

fn replace_between(text: &str, table: &str) -> Option<String> {
    let start = text.find(BEGIN)? + BEGIN.len();
    let end = start + text[start..].find(END)?;
    Some(format!(
        "{}\n{}\n{}",
        &text[..start],
        table.trim_end(),
        &text[end..]
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_marked_part_changes() {
        let text = format!(
            "# T\nbefore\n{}\nold\ntable\n{}\nafter\n",
            super::BEGIN,
            super::END
        );
        let out = super::replace_between(&text, "| new |\n").unwrap();
        assert_eq!(
            out,
            format!(
                "# T\nbefore\n{}\n| new |\n{}\nafter\n",
                super::BEGIN,
                super::END
            )
        );
        assert_eq!(super::replace_between("no markers", "x"), None);
    }
}
