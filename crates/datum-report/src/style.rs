//! Colour for every human report of both tools: one decision ([`wants_colour`]) and one
//! painter ([`Paint`]), so `datum` and `driftwatch` colour the same way and honour
//! `NO_COLOR` the same way.
//!
//! The rule: `--color always` and `--color never` win; `auto` colours a terminal unless
//! `NO_COLOR` is set to anything but the empty string (<https://no-color.org>).

/// The `--color` choice of either tool (with the `clap` feature, the value
/// of their `--color` flag; the variants carry no doc comments, as
/// [`crate::render::Format`]'s do not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Choice {
    Auto,
    Always,
    Never,
}

/// Whether to colour output going to a stream (`terminal`: whether it is one), given
/// `NO_COLOR` as read from the environment.
pub fn wants_colour(choice: Choice, terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    match choice {
        Choice::Always => true,
        Choice::Never => false,
        Choice::Auto => terminal && no_color.is_none_or(std::ffi::OsStr::is_empty),
    }
}

/// [`wants_colour`] for stdout, with this process's `NO_COLOR`.
pub fn stdout_wants_colour(choice: Choice) -> bool {
    wants_colour(
        choice,
        std::io::IsTerminal::is_terminal(&std::io::stdout()),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// SGR codes the reports use, by meaning.
pub const RED: &str = "31";
pub const GREEN: &str = "32";
pub const YELLOW: &str = "33";
pub const MAGENTA: &str = "35";
pub const CYAN: &str = "36";
pub const BOLD: &str = "1";
pub const DIM: &str = "2";
pub const RED_BOLD: &str = "1;31";

/// Wraps text in an SGR sequence when colour is on, and leaves it alone when it is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paint {
    pub on: bool,
}

impl Paint {
    pub fn new(on: bool) -> Self {
        Paint { on }
    }

    /// `text` in the colour `sgr` (one of the constants above, or any SGR code).
    pub fn wrap(&self, sgr: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// A plan-style marker in its colour: `+` green, `-` red, `~` yellow, `-/+` magenta,
    /// `#` (quarantined, blocked) magenta, `!` (failed) bold red, anything else dim.
    pub fn marker(&self, marker: &str) -> String {
        let sgr = match marker {
            "+" => GREEN,
            "-" => RED,
            "~" => YELLOW,
            "-/+" | "#" => MAGENTA,
            "!" => RED_BOLD,
            _ => DIM,
        };
        self.wrap(sgr, marker)
    }

    /// One line of a unified diff: headers bold, hunks cyan, removals red,
    /// additions green, context as it is.
    pub fn diff_line(&self, line: &str) -> String {
        let sgr = if line.starts_with("---") || line.starts_with("+++") {
            BOLD
        } else if line.starts_with("@@") {
            CYAN
        } else if line.starts_with('-') {
            RED
        } else if line.starts_with('+') {
            GREEN
        } else {
            return line.to_owned();
        };
        self.wrap(sgr, line)
    }

    /// `text` padded to `width` columns, then painted (padding outside the escape codes
    /// keeps columns aligned whether colour is on or not).
    pub fn padded(&self, sgr: &str, text: &str, width: usize) -> String {
        let pad = width.saturating_sub(text.chars().count());
        format!("{}{}", self.wrap(sgr, text), " ".repeat(pad))
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn explicit_choices_win_and_auto_follows_the_terminal_and_no_color() {
        assert!(wants_colour(Choice::Always, false, Some(OsStr::new("1"))));
        assert!(!wants_colour(Choice::Never, true, None));
        assert!(wants_colour(Choice::Auto, true, None));
        assert!(!wants_colour(Choice::Auto, false, None));
        assert!(!wants_colour(Choice::Auto, true, Some(OsStr::new("1"))));
        // An empty NO_COLOR is as good as unset (no-color.org).
        assert!(wants_colour(Choice::Auto, true, Some(OsStr::new(""))));
    }

    #[test]
    fn paint_wraps_only_when_on_and_pads_outside_the_codes() {
        assert_eq!(Paint::new(false).wrap(RED, "x"), "x");
        assert_eq!(Paint::new(true).wrap(RED, "x"), "\x1b[31mx\x1b[0m");
        assert_eq!(
            Paint::new(true).padded(YELLOW, "ab", 4),
            "\x1b[33mab\x1b[0m  "
        );
        assert_eq!(Paint::new(false).marker("~"), "~");
        assert_eq!(Paint::new(true).marker("!"), "\x1b[1;31m!\x1b[0m");
        assert_eq!(Paint::new(true).diff_line("-a"), "\x1b[31m-a\x1b[0m");
        assert_eq!(
            Paint::new(true).diff_line("@@ -1 +1 @@"),
            "\x1b[36m@@ -1 +1 @@\x1b[0m"
        );
        assert_eq!(Paint::new(true).diff_line(" same"), " same");
        assert_eq!(Paint::new(false).diff_line("+b"), "+b");
    }
}
