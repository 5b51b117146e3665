//! Command lines for a node's shell, built from words: the one place in
//! labctl that quotes for a remote shell.
//!
//! SSH runs a command as one string, which the node's shell splits again, so
//! every value that reaches a node (a path, an interface name, a filter, an
//! address) must be quoted exactly once. Nothing else in labctl formats such
//! strings: it builds a [`RemoteCommand`] from
//! - argv words ([`RemoteCommand::new`] + [`arg`](RemoteCommand::arg)), each
//!   quoted with `shlex`;
//! - a constant script of ours ([`RemoteCommand::script`]: `&'static str`,
//!   so no value can be spliced into it), optionally with values passed as
//!   positional parameters ([`RemoteCommand::script_with`]: `sh -c SCRIPT sh
//!   ARG...`, the script reads `"$1"`);
//! - a line a user typed for their node's shell ([`RemoteCommand::user_line`],
//!   `labctl exec`), passed as it is;
//!
//! and combines those with `&&`, `||`, `;`, redirections, and a wrapper that
//! runs the whole line as root.

use std::fmt;

/// A command line for a POSIX shell on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCommand {
    line: String,
    /// The words, while the command is a plain argv (no operator yet).
    argv: Option<Vec<String>>,
}

/// Quotes one word for a POSIX shell. A NUL byte cannot be passed in a
/// command line at all; it is dropped rather than silently truncating the
/// word on the node.
pub fn quote(word: &str) -> String {
    let clean: std::borrow::Cow<'_, str> = if word.contains('\0') {
        word.replace('\0', "").into()
    } else {
        word.into()
    };
    shlex::try_quote(&clean)
        .expect("a word without NUL bytes always quotes")
        .into_owned()
}

impl RemoteCommand {
    /// `program`, to which words are added with [`arg`](Self::arg).
    pub fn new(program: impl AsRef<str>) -> RemoteCommand {
        RemoteCommand {
            line: quote(program.as_ref()),
            argv: Some(vec![program.as_ref().to_string()]),
        }
    }

    /// One of our own shell scripts, used as it is. It is `'static` so that
    /// no runtime value can be formatted into it; pass values with
    /// [`script_with`](Self::script_with).
    pub fn script(script: &'static str) -> RemoteCommand {
        RemoteCommand {
            line: script.to_string(),
            argv: None,
        }
    }

    /// `sh -c SCRIPT sh ARGS...`: the script sees the values as `"$1"`,
    /// `"$2"`, ... (and `"$@"`), never as shell text.
    pub fn script_with<I, S>(script: &'static str, args: I) -> RemoteCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RemoteCommand::new("sh").arg("-c").arg(script).arg("sh").args(args)
    }

    /// A command line a user wrote for their node's shell (`labctl exec`):
    /// the user's own shell text, run as ssh would run it.
    pub fn user_line(line: impl Into<String>) -> RemoteCommand {
        RemoteCommand {
            line: line.into(),
            argv: None,
        }
    }

    /// Adds one word.
    pub fn arg(mut self, word: impl AsRef<str>) -> RemoteCommand {
        self.line.push(' ');
        self.line.push_str(&quote(word.as_ref()));
        if let Some(argv) = &mut self.argv {
            argv.push(word.as_ref().to_string());
        }
        self
    }

    /// Adds words.
    pub fn args<I, S>(self, words: I) -> RemoteCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        words.into_iter().fold(self, |cmd, w| cmd.arg(w))
    }

    /// The words of a plain command (before any operator or redirection).
    pub fn argv(&self) -> Option<&[String]> {
        self.argv.as_deref()
    }

    fn join(self, op: &str, next: RemoteCommand) -> RemoteCommand {
        RemoteCommand {
            line: format!("{} {op} {}", self.line, next.line),
            argv: None,
        }
    }

    /// `self && next`.
    pub fn and(self, next: RemoteCommand) -> RemoteCommand {
        self.join("&&", next)
    }

    /// `self || next`.
    pub fn or(self, next: RemoteCommand) -> RemoteCommand {
        self.join("||", next)
    }

    /// `self; next`.
    pub fn then(self, next: RemoteCommand) -> RemoteCommand {
        RemoteCommand {
            line: format!("{}; {}", self.line, next.line),
            argv: None,
        }
    }

    fn redirect(self, how: &str) -> RemoteCommand {
        RemoteCommand {
            line: format!("{} {how}", self.line),
            argv: None,
        }
    }

    /// `2>&1`: errors into the output.
    pub fn stderr_to_stdout(self) -> RemoteCommand {
        self.redirect("2>&1")
    }

    /// `>/dev/null`.
    pub fn stdout_to_null(self) -> RemoteCommand {
        self.redirect(">/dev/null")
    }

    /// `2>/dev/null`.
    pub fn stderr_to_null(self) -> RemoteCommand {
        self.redirect("2>/dev/null")
    }

    /// The whole line run as root: unchanged when the login is root, else
    /// `sudo -n sh -c LINE` (non-interactive: a password prompt fails
    /// instead of hanging).
    pub fn as_root(self, login_is_root: bool) -> RemoteCommand {
        if login_is_root {
            return self;
        }
        match &self.argv {
            Some(argv) => RemoteCommand::new("sudo").arg("-n").args(argv.clone()),
            None => RemoteCommand::new("sudo").arg("-n").arg("sh").arg("-c").arg(&self.line),
        }
    }

    /// The line as the node's shell gets it.
    pub fn as_str(&self) -> &str {
        &self.line
    }
}

impl fmt::Display for RemoteCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a POSIX shell makes of `line`: its words, as `sh` splits them.
    fn split(line: &str) -> Vec<String> {
        shlex::split(line).expect("a line that splits")
    }

    #[test]
    fn test_plain_words_stay_plain_and_every_word_survives_the_shell() {
        assert_eq!(quote("ibv_devinfo"), "ibv_devinfo");
        assert_eq!(quote("-d"), "-d");
        for word in [
            "a b",
            "it's",
            "",
            "$(rm -rf /)",
            "x;y",
            "*",
            "a\"b",
            "tab\there",
            "back`tick`",
            "~",
        ] {
            let cmd = RemoteCommand::new("echo").arg(word);
            assert_eq!(
                split(cmd.as_str()),
                vec!["echo".to_string(), word.to_string()],
                "{word:?}"
            );
        }
    }

    #[test]
    fn test_values_reach_a_script_only_as_positional_parameters() {
        let cmd = RemoteCommand::script_with("kill -INT \"$(cat \"$1\")\"", ["/tmp/x y/pid; reboot"]);
        assert_eq!(
            split(cmd.as_str()),
            ["sh", "-c", "kill -INT \"$(cat \"$1\")\"", "sh", "/tmp/x y/pid; reboot"]
        );
    }

    #[test]
    fn test_the_real_shell_runs_what_was_built() {
        // Run by /bin/sh here, as the node's shell would.
        let tricky = "it's $HOME; `x` \"q\"";
        let cmd = RemoteCommand::new("printf")
            .arg("%s|")
            .arg(tricky)
            .and(RemoteCommand::script_with("printf '%s' \"$1\"", ["end"]));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.as_str())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{tricky}|end"));
    }

    #[test]
    fn test_as_root_wraps_the_whole_line_for_sudo() {
        let one = RemoteCommand::new("tc").arg("qdisc").arg("show");
        assert_eq!(one.clone().as_root(true).as_str(), "tc qdisc show");
        assert_eq!(one.as_root(false).as_str(), "sudo -n tc qdisc show");
        let two = RemoteCommand::new("a").and(RemoteCommand::new("b"));
        assert_eq!(split(two.as_root(false).as_str()), ["sudo", "-n", "sh", "-c", "a && b"]);
    }

    #[test]
    fn test_operators_and_redirections_end_the_argv() {
        let cmd = RemoteCommand::new("ldd").arg("/usr/local/bin/rdma-agent");
        assert_eq!(cmd.argv().unwrap().len(), 2);
        let cmd = cmd.stderr_to_stdout();
        assert!(cmd.argv().is_none());
        assert_eq!(cmd.as_str(), "ldd /usr/local/bin/rdma-agent 2>&1");
    }

    #[test]
    fn test_nul_bytes_are_dropped_not_truncating() {
        assert_eq!(split(RemoteCommand::new("echo").arg("a\0b").as_str()), ["echo", "ab"]);
    }
}
