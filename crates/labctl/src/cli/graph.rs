//! `labctl graph`: the lab's topology (nodes, data network and addresses,
//! RDMA devices, GIDs, agents) as Mermaid, DOT or SVG, or its model as JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args as ClapArgs, ValueEnum};
use lab_results::topology::{self, Source};

use super::global::{open_lab, GlobalArgs};

/// Options of `graph`.
#[derive(Debug, ClapArgs)]
pub struct GraphArgs {
    /// mermaid, dot or svg [default: from -o's extension (.mmd/.md, .dot/.gv,
    /// .svg), else mermaid].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Write to FILE instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print the topology model as JSON (with a schema version) instead.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

/// How the graph is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A Mermaid flowchart (Markdown on GitHub and most doc sites draws it).
    Mermaid,
    /// Graphviz DOT.
    Dot,
    /// SVG, laid out in labctl (no Graphviz needed).
    Svg,
}

/// `-o FILE` whose extension names no format, without `--format` (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot tell the graph format from the extension\n  fix: name the file .mmd, .md, .dot, .gv or .svg, or pass --format mermaid|dot|svg", path.display())]
pub struct UnknownExtension {
    /// The file.
    pub path: PathBuf,
}

/// The format: `--format`, else `-o`'s extension, else Mermaid.
fn format_of(format: Option<Format>, output: Option<&Path>) -> Result<Format, UnknownExtension> {
    if let Some(f) = format {
        return Ok(f);
    }
    let Some(path) = output else {
        return Ok(Format::Mermaid);
    };
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("mmd" | "mermaid" | "md") => Ok(Format::Mermaid),
        Some("dot" | "gv") => Ok(Format::Dot),
        Some("svg") => Ok(Format::Svg),
        _ => Err(UnknownExtension {
            path: path.to_path_buf(),
        }),
    }
}

pub async fn run(args: &GlobalArgs, graph: &GraphArgs) -> anyhow::Result<ExitCode> {
    // Bad input before any node is asked anything.
    let format = if graph.json {
        None
    } else {
        Some(format_of(graph.format, graph.output.as_deref())?)
    };
    let lab = open_lab(args)?;
    let model = lab.topology().await?;
    if model.source == Source::Planned {
        if let Some(note) = &model.note {
            eprintln!("labctl: {note}");
        }
    }
    let text = match format {
        None => serde_json::to_string_pretty(&model)? + "\n",
        Some(Format::Mermaid) => topology::to_mermaid(&model),
        Some(Format::Dot) => topology::to_dot(&model),
        Some(Format::Svg) => topology::to_svg(&model)?,
    };
    match &graph.output {
        Some(path) => {
            lab_state::write_atomic(path, text.as_bytes(), 0o644)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            println!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_format_from_flag_then_extension_then_mermaid() {
        let f = |format, out: Option<&str>| format_of(format, out.map(Path::new)).map_err(|e| e.to_string());
        assert_eq!(f(None, None), Ok(Format::Mermaid));
        assert_eq!(f(None, Some("lab.svg")), Ok(Format::Svg));
        assert_eq!(f(None, Some("docs/lab.GV")), Ok(Format::Dot));
        assert_eq!(f(None, Some("lab.md")), Ok(Format::Mermaid));
        assert_eq!(f(Some(Format::Dot), Some("lab.txt")), Ok(Format::Dot));
        let err = f(None, Some("lab.png")).unwrap_err();
        assert!(
            err.starts_with("lab.png: cannot tell") && err.contains("--format mermaid|dot|svg"),
            "{err}"
        );
    }
}
