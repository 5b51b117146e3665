//! The one style of every human table labctl prints: plain text, no borders,
//! two spaces between columns, each column as wide as its widest cell (so a
//! long node or lab name shifts the columns instead of running into the next).

use comfy_table::{presets::NOTHING, CellAlignment, ContentArrangement};

/// How a column's cells (its header included) line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table of rows of text, built row by row and printed or rendered once.
pub struct Table {
    inner: comfy_table::Table,
    indent: &'static str,
    aligns: Vec<Align>,
}

/// Between two columns.
const GAP: u16 = 2;

impl Table {
    /// A table with a header row: `columns` are (header, alignment); every
    /// line starts with `indent`.
    pub fn new(indent: &'static str, columns: &[(&str, Align)]) -> Table {
        let mut table = Table::headless(indent, &columns.iter().map(|c| c.1).collect::<Vec<_>>());
        table.inner.set_header(columns.iter().map(|c| c.0).collect::<Vec<_>>());
        table
    }

    /// A table without a header row (a list whose columns line up).
    pub fn headless(indent: &'static str, aligns: &[Align]) -> Table {
        let mut inner = comfy_table::Table::new();
        inner.load_style(NOTHING);
        // Never wrapped or cut to a terminal's width: a pipe gets the same text.
        inner.set_content_arrangement(ContentArrangement::Disabled);
        Table {
            inner,
            indent,
            aligns: aligns.to_vec(),
        }
    }

    /// Adds a row; its cells in column order.
    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Table {
        self.inner
            .add_row(cells.into_iter().map(|c| c.to_string()).collect::<Vec<_>>());
        self
    }

    /// The lines: the header first (if any), then one per row.
    pub fn lines(&self) -> Vec<String> {
        if self.inner.header().is_none() && self.inner.is_empty() {
            return Vec::new();
        }
        let mut table = self.inner.clone();
        let last = self.aligns.len().saturating_sub(1);
        for (i, column) in table.column_iter_mut().enumerate() {
            column.set_padding((0, if i == last { 0 } else { GAP }));
            let align = self.aligns.get(i).copied().unwrap_or(Align::Left);
            column.set_cell_alignment(match align {
                Align::Left => CellAlignment::Left,
                Align::Right => CellAlignment::Right,
            });
        }
        table
            .lines()
            .map(|line| format!("{}{}", self.indent, line.trim_end()))
            .collect()
    }

    /// Prints the lines to stdout.
    pub fn print(&self) {
        for line in self.lines() {
            println!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_columns_are_as_wide_as_their_widest_cell_and_two_spaces_apart() {
        let mut t = Table::new(
            "  ",
            &[("NODE", Align::Left), ("VM", Align::Left), ("MTU", Align::Right)],
        );
        t.row(["server", "running", "1024"]).row(["c", "stopped", "-"]);
        assert_eq!(
            t.lines(),
            [
                "  NODE    VM        MTU",
                "  server  running  1024",
                "  c       stopped     -",
            ]
        );
    }

    #[test]
    fn test_a_31_character_name_keeps_the_columns_aligned() {
        let long = "n".repeat(31);
        let mut t = Table::new("", &[("NODE", Align::Left), ("VM", Align::Left), ("GID", Align::Left)]);
        t.row([long.as_str(), "running", "1"]).row(["server", "stopped", "-"]);
        let lines = t.lines();
        // Every line has its second column at the same offset, two spaces
        // past the long name, and the name is whole.
        let at = long.len() + 2;
        for line in &lines {
            assert_eq!(&line[at - 2..at], "  ", "{lines:#?}");
            assert_ne!(&line[at..at + 1], " ", "{lines:#?}");
        }
        assert!(lines[1].starts_with(&format!("{long}  running  1")), "{lines:#?}");
        assert_eq!(lines[0], format!("NODE{}VM{}GID", " ".repeat(at - 4), " ".repeat(7)));
        assert_eq!(lines[2], format!("server{}stopped  -", " ".repeat(at - 6)));
    }

    #[test]
    fn test_headless_rows_line_up_and_carry_no_trailing_spaces() {
        let mut t = Table::headless("  ", &[Align::Right, Align::Left]);
        t.row(["7", "RC Acknowledge"]).row(["12", "RC SEND Only"]);
        assert_eq!(t.lines(), ["   7  RC Acknowledge", "  12  RC SEND Only"]);
        assert!(Table::headless("  ", &[Align::Left]).lines().is_empty());
    }
}
