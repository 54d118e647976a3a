//! The one interface every report is rendered through: a [`Format`] chosen once by the
//! front end, and a [`Render`] implementation per report (a plan or an apply, a check, a
//! driftwatch stack or run).
//!
//! Owns: the list of output formats and the rule that turns a report into the bytes of
//! one format ([`render`]). Must not: know any report's data (each report implements
//! [`Render`] in the crate that owns its data, so this crate depends on none of them),
//! print, or choose a format itself.
//!
//! Adding a format is one variant of [`Format`], one method of [`Render`] and, when the
//! format has conventions of its own, one module here (as [`crate::json`] and
//! [`crate::markdown`] are): [`render`] matches every variant without a wildcard, and every
//! report must implement the new method, so the compiler lists each place to finish.
//! A report that cannot be shown in a format says so ([`Unsupported`]); a command never
//! falls back to another format silently.
//!
//! A command that prints its own lines or document (a listing, a status, a confirmation:
//! `datum backup list`, `datum release`) has an [`Answer`] instead: one method per format
//! it has (human and JSON), none with a default, and one function of the front end that
//! matches every [`Format`] to call them. No command compares the format itself, so a new
//! format is refused by every answer, or shown by each once it has a method, never given
//! another format's text by an `if` that did not know of it.

use crate::style::Paint;

/// How a report leaves the program: `human` (text for a person: tables, diffs, colour on
/// a terminal, plain when piped), `json` (one document with `format_version`, see
/// [`crate::json`]) or `markdown` (for an issue tracker or a CI summary, see
/// [`crate::markdown`]). The variants carry no doc comments of their own: clap would turn
/// them into per-value help and switch every help text to its long layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    Human,
    Json,
    Markdown,
}

impl Format {
    /// Every format, in the order help texts list them.
    pub const ALL: [Format; 3] = [Format::Human, Format::Json, Format::Markdown];

    /// The name on the command line (`--output NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Human => "human",
            Format::Json => "json",
            Format::Markdown => "markdown",
        }
    }

    /// Whether progress (a bar, the step under way) is drawn on stderr while the command
    /// runs: for `human` only, whose reader watches the terminal. A document (`json`,
    /// `markdown`) is read when it is whole, by a program or in a tracker, and the stderr
    /// of whoever asked for one is often a log. What changes what a command does (not how
    /// it shows its result) asks this, never compares formats itself.
    pub fn wants_progress(self) -> bool {
        match self {
            Format::Human => true,
            Format::Json | Format::Markdown => false,
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A report (or a command) that cannot be shown in the format asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} cannot be shown as {format} (--output {format}); it can be shown as: {}", names(.supported))]
pub struct Unsupported {
    /// What was to be shown: `the plan`, `datum backup list`.
    pub what: String,
    pub format: Format,
    /// The formats it does support.
    pub supported: Vec<Format>,
}

fn names(formats: &[Format]) -> String {
    let names: Vec<&str> = formats.iter().map(|f| f.name()).collect();
    names.join(", ")
}

impl Unsupported {
    /// `what` cannot be shown as `format`; it can be as each of `supported`.
    pub fn new(what: impl Into<String>, format: Format, supported: &[Format]) -> Self {
        Unsupported {
            what: what.into(),
            format,
            supported: supported.to_vec(),
        }
    }
}

/// A report, in every format there is. One method per [`Format`], none with a default:
/// a new format is not done until every report has said how it looks in it (or that it
/// has no such form).
pub trait Render {
    /// What the report is, for errors: `the plan`, `the check report`.
    fn what(&self) -> String;

    /// Text for a person; `paint` is on only for a terminal that wants colour.
    fn human(&self, paint: Paint) -> String;

    /// The JSON document, `format_version` included, as [`crate::json::pretty`] writes it
    /// (a report may serialise a typed struct, whose field order a `Value` would lose).
    fn json(&self) -> String;

    /// The Markdown document, or `None` when this report has no Markdown form.
    fn markdown(&self) -> Option<String>;
}

/// What a command that prints its own output (not a report) answers: a listing, a
/// status, a confirmation, in the formats such a command has (`human`, `json`). One method
/// per format, none with a default; the front end's one function that shows an answer
/// matches every [`Format`] (a format without a method here is [`Unsupported`]), so a new
/// format is refused by every command until this trait has its method, and then every
/// answer must say how it looks in it.
pub trait Answer {
    /// The command, for errors: `datum backup list`.
    fn what(&self) -> &'static str;

    /// Text for a person, written to `out`; `paint` is on only for a terminal that wants
    /// colour. What goes to stderr beside it (diagnostics) is written there by this method
    /// too.
    ///
    /// The contract is where the text goes, not how much of it is held: the front end
    /// hands `out` (stdout) and collects nothing itself, so an answer may write each line
    /// as it makes it (a backup listing does, from the entries the answer holds), and
    /// one that makes its whole text first may do that too: `datum fleet`'s
    /// (`commands::fleet` in the binary) holds the server's whole document and builds
    /// the view's text from it before writing it.
    fn human(&self, out: &mut dyn std::io::Write, paint: Paint) -> std::io::Result<()>;

    /// The JSON value; [`crate::json::document`] makes it the document (`format_version`,
    /// RFC 3339 times), putting a value that is not an object under [`Answer::json_key`].
    fn json(&self) -> serde_json::Result<serde_json::Value>;

    /// The key of a value that is not an object (`backups` for a list); an object is the
    /// document itself and may say `""`.
    fn json_key(&self) -> &'static str;
}

/// The formats `report` can be rendered in.
pub fn supported(report: &(impl Render + ?Sized)) -> Vec<Format> {
    Format::ALL
        .into_iter()
        .filter(|f| match f {
            Format::Human | Format::Json => true,
            Format::Markdown => report.markdown().is_some(),
        })
        .collect()
}

/// `report` in `format`: the exact bytes to write (JSON pretty-printed, every format
/// ending with a newline as its renderer made it).
pub fn render(
    report: &(impl Render + ?Sized),
    format: Format,
    paint: Paint,
) -> Result<String, Unsupported> {
    match format {
        Format::Human => Ok(report.human(paint)),
        Format::Json => Ok(report.json()),
        Format::Markdown => report
            .markdown()
            .ok_or_else(|| Unsupported::new(report.what(), format, &supported(report))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Plain(bool);

    impl Render for Plain {
        fn what(&self) -> String {
            "the plain report".to_owned()
        }
        fn human(&self, paint: Paint) -> String {
            paint.wrap(crate::style::BOLD, "hello") + "\n"
        }
        fn json(&self) -> String {
            crate::json::pretty(&serde_json::json!({"format_version": "1", "hello": true}))
        }
        fn markdown(&self) -> Option<String> {
            self.0.then(|| "# hello\n".to_owned())
        }
    }

    #[test]
    fn each_format_goes_to_its_method() {
        let r = Plain(true);
        assert_eq!(
            render(&r, Format::Human, Paint::new(false)).unwrap(),
            "hello\n"
        );
        assert_eq!(
            render(&r, Format::Human, Paint::new(true)).unwrap(),
            "\x1b[1mhello\x1b[0m\n"
        );
        assert_eq!(
            render(&r, Format::Json, Paint::new(true)).unwrap(),
            "{\n  \"format_version\": \"1\",\n  \"hello\": true\n}\n"
        );
        assert_eq!(
            render(&r, Format::Markdown, Paint::new(false)).unwrap(),
            "# hello\n"
        );
    }

    #[test]
    fn a_format_a_report_lacks_is_an_error_naming_what_it_has() {
        let err = render(&Plain(false), Format::Markdown, Paint::new(false)).unwrap_err();
        assert_eq!(err.supported, vec![Format::Human, Format::Json]);
        assert_eq!(
            err.to_string(),
            "the plain report cannot be shown as markdown (--output markdown); it can be shown as: human, json"
        );
        assert_eq!(supported(&Plain(true)), Format::ALL.to_vec());
    }

    #[test]
    fn progress_is_drawn_for_a_person_at_a_terminal_only() {
        let drawn: Vec<Format> = Format::ALL
            .into_iter()
            .filter(|f| f.wants_progress())
            .collect();
        assert_eq!(drawn, [Format::Human]);
    }

    #[test]
    fn names_are_the_command_line_words() {
        let names: Vec<String> = Format::ALL.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["human", "json", "markdown"]);
    }
}
