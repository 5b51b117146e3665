//! The conventions users of other CLIs expect, checked on the built binary:
//! completion scripts and man pages come from the same definitions as
//! `--help` (every verb `--help` lists has a page carrying its text, and
//! every completion script names it), and `--color`/`NO_COLOR` decide
//! whether clap's output carries colour codes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn labctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_labctl"))
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("labctl runs")
}

fn stdout_of(args: &[&str]) -> String {
    let out = labctl(args);
    assert!(
        out.status.success(),
        "labctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The subcommands a `--help` text lists under `Commands:`, with their
/// about text (clap's own `help` entry left out: it has no page).
fn commands_in_help(help: &str) -> Vec<(String, String)> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (name, about) = l.trim().split_once(char::is_whitespace)?;
            Some((name.to_string(), about.trim().to_string()))
        })
        .filter(|(name, _)| name != "help")
        .collect()
}

/// Every verb and sub-verb as `--help` shows it: (path of names, about).
fn every_command() -> Vec<(Vec<String>, String)> {
    let mut found = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.extend(["--help", "--color", "never"]);
        for (name, about) in commands_in_help(&stdout_of(&args)) {
            let mut sub = path.clone();
            sub.push(name);
            todo.push(sub.clone());
            found.push((sub, about));
        }
    }
    found
}

/// A man page as it reads: roff's escapes for `-`, quotes and backslash
/// undone, so it can be searched for the text `--help` prints.
fn man_text(roff: &str) -> String {
    roff.replace("\\-", "-")
        .replace("\\(aq", "'")
        .replace("\\*(Aq", "'")
        .replace("\\(ga", "`")
        .replace("\\(dq", "\"")
        .replace("\\e", "\\")
        .replace("\\\\", "\\")
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("labctl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn test_man_pages_come_from_the_help_definitions() {
    let commands = every_command();
    let verbs: Vec<&str> = commands
        .iter()
        .filter(|(path, _)| path.len() == 1)
        .map(|(path, _)| path[0].as_str())
        .collect();
    for expected in ["up", "run", "report", "completion", "man"] {
        assert!(verbs.contains(&expected), "`labctl --help` lists {verbs:?}");
    }
    let dir = temp_dir("man");
    let listed = stdout_of(&["man", "--dir", dir.to_str().unwrap()]);

    let top = man_text(&std::fs::read_to_string(dir.join("labctl.1")).expect("labctl.1 written"));
    for (path, about) in &commands {
        let name = format!("labctl-{}", path.join("-"));
        let file = dir.join(format!("{name}.1"));
        assert!(
            listed.lines().any(|l| l == file.to_str().unwrap()),
            "{name}.1 not listed:\n{listed}"
        );
        let page = man_text(&std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())));
        assert!(page.contains(about.as_str()), "{name}.1 lacks `{about}`:\n{page}");
        // The title line names the page (after roff's preamble).
        let title = format!(".TH {name} 1 ");
        assert!(page.lines().any(|l| l.starts_with(&title)), "{name}.1's title:\n{page}");
        if path.len() == 1 {
            assert!(top.contains(about.as_str()), "labctl.1 lacks `{about}`");
        }
    }
    // Exactly the pages above, labctl.1 and nothing for hidden commands.
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    written.sort();
    let mut expected: Vec<String> = commands
        .iter()
        .map(|(path, _)| format!("labctl-{}.1", path.join("-")))
        .chain(["labctl.1".to_string()])
        .collect();
    expected.sort();
    assert_eq!(written, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn test_completion_scripts_name_every_verb() {
    let commands = every_command();
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout_of(&["completion", shell]);
        let words: std::collections::HashSet<&str> = script
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .collect();
        for (path, _) in &commands {
            let name = path.last().unwrap();
            assert!(
                words.contains(name.as_str()),
                "`labctl completion {shell}` does not name `{name}`"
            );
        }
        // Global flags come from the same definitions (fish spells a long flag `-l color`).
        assert!(
            script.contains("--color") || script.contains("-l color"),
            "{shell}: no --color"
        );
        assert!(
            !script.contains("__supervise"),
            "{shell}: names the internal supervisor"
        );
    }
    let bash = stdout_of(&["completion", "bash"]);
    assert!(bash.contains("complete -F _labctl"), "{}", &bash[..bash.len().min(400)]);
}

#[test]
fn test_color_flag_and_no_color_decide_clap_output() {
    let esc = |b: &[u8]| b.contains(&0x1b);
    // Piped, auto: plain.
    assert!(!esc(&labctl(&["--help"]).stdout));
    // --color always colours even when piped, and wins over NO_COLOR.
    assert!(esc(&labctl(&["--color", "always", "--help"]).stdout));
    let forced = Command::new(env!("CARGO_BIN_EXE_labctl"))
        .args(["--color=always", "status", "--help"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(esc(&forced.stdout), "--color=always with NO_COLOR=1");
    assert!(!esc(&labctl(&["--color", "never", "--help"]).stdout));
    // clap's usage errors follow it as well, and exit 2.
    let bad = labctl(&["--color", "always", "no-such-verb"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(esc(&bad.stderr));
    let bad = labctl(&["--color", "never", "no-such-verb"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(!esc(&bad.stderr));
    // A value --color does not take is a usage error naming the choices.
    let out = labctl(&["--color", "sometimes", "status"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("auto") && stderr.contains("always") && stderr.contains("never"),
        "{stderr}"
    );
}
