//! When labctl writes colour: `--color auto|always|never` and `NO_COLOR`
//! (https://no-color.org). One decision, applied to everything that styles
//! text: clap's help and errors, the progress spinners and bars (console,
//! through indicatif) and the log lines (tracing-subscriber).
//!
//! `--color` is also parsed by clap with the other global flags (so it is in
//! `--help`, the completions and the man pages); it is read here first, by
//! hand, because clap prints help and usage errors while it parses.

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;

/// `--color`'s values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    /// Colour on a terminal, unless NO_COLOR is set (and not empty) or TERM=dumb.
    #[default]
    Auto,
    /// Always colour, even when piped or with NO_COLOR set.
    Always,
    /// Never colour.
    Never,
}

/// What the environment says about colour: NO_COLOR set and not empty, or
/// a terminal that cannot show it (TERM=dumb).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Environment {
    /// NO_COLOR is set to a non-empty value.
    pub no_color: bool,
    /// TERM is `dumb`.
    pub dumb_terminal: bool,
}

impl Environment {
    /// Reads NO_COLOR and TERM.
    pub fn current() -> Environment {
        Environment::from_values(
            std::env::var_os("NO_COLOR").as_deref(),
            std::env::var_os("TERM").as_deref(),
        )
    }

    /// From NO_COLOR's and TERM's values (None: unset). An empty NO_COLOR
    /// does not count: no-color.org asks for "present and not empty".
    pub fn from_values(no_color: Option<&OsStr>, term: Option<&OsStr>) -> Environment {
        Environment {
            no_color: no_color.is_some_and(|v| !v.is_empty()),
            dumb_terminal: term.is_some_and(|t| t == "dumb"),
        }
    }
}

/// Whether to colour one output stream: `always` and `never` win over
/// everything; `auto` colours a terminal unless the environment says not to.
pub fn enabled(when: ColorWhen, env: Environment, is_terminal: bool) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => is_terminal && !env.no_color && !env.dumb_terminal,
    }
}

/// `--color`'s value in `args` (the last one wins, as clap takes it), read
/// before clap parses them; `auto` when absent or not a value clap accepts
/// (clap then reports it). Stops at `--`: what follows is another
/// program's arguments (`labctl exec NODE -- ls --color=always`).
pub fn scan_args<I: IntoIterator<Item = OsString>>(args: I) -> ColorWhen {
    let mut when = ColorWhen::Auto;
    let mut args = args.into_iter().skip(1);
    while let Some(arg) = args.next() {
        let Some(arg) = arg.to_str() else { continue };
        let value = match arg {
            "--" => break,
            "--color" => args.next().and_then(|v| v.into_string().ok()),
            _ => arg.strip_prefix("--color=").map(str::to_string),
        };
        if let Some(value) = value {
            when = match value.as_str() {
                "always" => ColorWhen::Always,
                "never" => ColorWhen::Never,
                _ => ColorWhen::Auto,
            };
        }
    }
    when
}

/// The choice clap gets for its help (stdout) and errors (stderr). For
/// `auto` clap checks each stream itself; NO_COLOR or TERM=dumb make it
/// `never` here, so the rule is this module's, not a copy of it.
pub fn clap_choice(when: ColorWhen, env: Environment) -> clap::ColorChoice {
    match when {
        ColorWhen::Always => clap::ColorChoice::Always,
        ColorWhen::Never => clap::ColorChoice::Never,
        ColorWhen::Auto if env.no_color || env.dumb_terminal => clap::ColorChoice::Never,
        ColorWhen::Auto => clap::ColorChoice::Auto,
    }
}

/// Whether stdout and stderr get colour, decided once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streams {
    /// Colour on stdout.
    pub stdout: bool,
    /// Colour on stderr.
    pub stderr: bool,
}

impl Streams {
    /// Decides for this process's stdout and stderr, and tells console
    /// (whose styles indicatif's spinners and bars use) the same.
    pub fn apply(when: ColorWhen) -> Streams {
        let env = Environment::current();
        let streams = Streams {
            stdout: enabled(when, env, std::io::stdout().is_terminal()),
            stderr: enabled(when, env, std::io::stderr().is_terminal()),
        };
        console::set_colors_enabled(streams.stdout);
        console::set_colors_enabled_stderr(streams.stderr);
        streams
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(no_color: Option<&str>, term: Option<&str>) -> Environment {
        Environment::from_values(no_color.map(OsStr::new), term.map(OsStr::new))
    }

    #[test]
    fn test_auto_colours_a_terminal_only_without_no_color() {
        let plain = env(None, Some("xterm-256color"));
        assert!(enabled(ColorWhen::Auto, plain, true));
        assert!(!enabled(ColorWhen::Auto, plain, false), "a pipe stays plain");
        assert!(!enabled(ColorWhen::Auto, env(Some("1"), None), true), "NO_COLOR=1");
        assert!(
            !enabled(ColorWhen::Auto, env(Some("false"), None), true),
            "any non-empty value counts"
        );
        assert!(
            enabled(ColorWhen::Auto, env(Some(""), None), true),
            "an empty NO_COLOR does not count"
        );
        assert!(!enabled(ColorWhen::Auto, env(None, Some("dumb")), true), "TERM=dumb");
    }

    #[test]
    fn test_always_and_never_win_over_the_environment() {
        for e in [env(None, None), env(Some("1"), None), env(None, Some("dumb"))] {
            for tty in [true, false] {
                assert!(enabled(ColorWhen::Always, e, tty), "{e:?} tty={tty}");
                assert!(!enabled(ColorWhen::Never, e, tty), "{e:?} tty={tty}");
            }
        }
    }

    #[test]
    fn test_clap_gets_the_same_rule() {
        assert_eq!(clap_choice(ColorWhen::Auto, env(None, None)), clap::ColorChoice::Auto);
        assert_eq!(
            clap_choice(ColorWhen::Auto, env(Some("1"), None)),
            clap::ColorChoice::Never
        );
        assert_eq!(
            clap_choice(ColorWhen::Always, env(Some("1"), None)),
            clap::ColorChoice::Always
        );
        assert_eq!(clap_choice(ColorWhen::Never, env(None, None)), clap::ColorChoice::Never);
    }

    fn scan(args: &[&str]) -> ColorWhen {
        scan_args(
            std::iter::once("labctl")
                .chain(args.iter().copied())
                .map(OsString::from),
        )
    }

    #[test]
    fn test_scan_reads_both_spellings_and_stops_at_double_dash() {
        assert_eq!(scan(&["status"]), ColorWhen::Auto);
        assert_eq!(scan(&["--color", "never", "status"]), ColorWhen::Never);
        assert_eq!(scan(&["status", "--color=always"]), ColorWhen::Always);
        assert_eq!(
            scan(&["--color=never", "up", "--color", "always"]),
            ColorWhen::Always,
            "the last wins"
        );
        assert_eq!(
            scan(&["--color=sometimes"]),
            ColorWhen::Auto,
            "clap reports the bad value"
        );
        assert_eq!(scan(&["exec", "server", "--", "ls", "--color=always"]), ColorWhen::Auto);
        assert_eq!(scan(&["--color"]), ColorWhen::Auto);
    }
}
