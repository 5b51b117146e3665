//! The labs labctl uses when there is no labs.yaml: the repository's own
//! labs.yaml (two QEMU nodes `server` and `client` in lab `local`, and the
//! four-node `quad`), compiled in. `labctl init` writes it out.

use std::path::Path;

use crate::labs::LabsFile;

/// The built-in labs.yaml, as shipped (commented for learners).
pub const BUILTIN_LABS_YAML: &str = include_str!("../../../labs.yaml");

/// How messages name the built-in file.
pub const BUILTIN_NAME: &str = "built-in labs.yaml";

impl LabsFile {
    /// The built-in labs, parsed.
    pub fn builtin() -> LabsFile {
        LabsFile::parse(Path::new(BUILTIN_NAME), BUILTIN_LABS_YAML).expect("the built-in labs.yaml is valid (tested)")
    }
}

/// The built-in labs.yaml as `labctl init` writes it into a directory of the
/// user's: the editor schema line points at `labs.schema.json` beside it
/// (`labctl schema > labs.schema.json` writes that file).
pub fn init_text() -> String {
    BUILTIN_LABS_YAML.replacen(
        "# yaml-language-server: $schema=docs/labs.schema.json\n",
        "# yaml-language-server: $schema=labs.schema.json\n# (for editor completion: labctl schema > labs.schema.json)\n",
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_builtin_labs_parse_and_start_with_the_two_node_lab() {
        let file = LabsFile::builtin();
        let first = &file.labs[0];
        assert_eq!(first.name, "local");
        let nodes: Vec<&str> = first.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(nodes, ["server", "client"]);
    }

    #[test]
    fn test_init_text_parses_to_the_same_labs_and_points_at_a_local_schema() {
        let text = init_text();
        assert!(
            text.starts_with("# yaml-language-server: $schema=labs.schema.json\n"),
            "{text}"
        );
        let written = LabsFile::parse(Path::new("labs.yaml"), &text).unwrap();
        assert_eq!(written.labs, LabsFile::builtin().labs);
    }
}
