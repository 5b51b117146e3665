//! Small text helpers for error messages.

use std::path::Path;

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last `n` lines of a text file (empty when it cannot be read), for
/// errors that point at a log.
pub fn file_tail(path: &Path, n: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    last_lines(&String::from_utf8_lossy(&bytes), n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_last_lines_keeps_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(last_lines("a", 5), "a");
        assert_eq!(last_lines("", 3), "");
    }
}
