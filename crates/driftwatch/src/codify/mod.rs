//! `driftwatch codify`: make "accept" a command.
//!
//! For every changed-outside finding, write the drifted values into the configuration file
//! that declares the resource (`*.tf` through `hcl`, `*.tf.json` through `json`), prove
//! with a normal plan that the next apply would leave those resources alone, run
//! `apply -refresh-only -auto-approve` with a `-target` per accepted resource so state
//! takes reality for those alone (refused drift stays drift, visible tomorrow), and prove
//! it again with a second normal plan. A finding is codified whole or not at all, and it is refused when
//! any attribute the next apply would revert is sensitive, is not a literal in the
//! configuration (a variable, an expression, a heredoc, a `dynamic` block), or when the
//! finding is a replace (accepting it would still destroy the object) or belongs to a
//! module or a `count`/`for_each` instance (the block is shared or lives elsewhere).
//! Attributes the next apply leaves alone (computed ones such as `resource_version`) are not
//! written; attributes the configuration does not set at all (`tags_all`, computed from
//! `tags`) are not written either, and the first plan decides whether that was right: a
//! finding the plan still changes is refused and its edits are taken back.
//!
//! Nothing is left half-done: files are replaced atomically, and until both plans and the
//! refresh-only apply succeeded, any failure puts every file back byte for byte.

mod hcl;
mod json;

use std::collections::BTreeMap;
use std::io::Write as _;

use crate::classify::{self, Category, Finding};
use crate::cli::{CodifyArgs, Io, load_rules, masker, options, parse_saved, stack_name, tofu_of};
use crate::config::{self, ConfigFile, Syntax};
use crate::error::{Error, Result};
use crate::flatten::Path;
use crate::mask::Masker;
use crate::plan::{Action, ChangeEntry, Leaf, PlanRole, parse_reader};
use crate::runner::{Runner, Tofu};

/// One configuration file as codify can read and edit it, whatever its syntax.
pub(crate) trait Document {
    /// Whether the file declares `resource "rtype" "rname"`.
    fn declares(&self, rtype: &str, rname: &str) -> bool;
    /// Where `path` of that resource lands in this file.
    fn locate(&self, rtype: &str, rname: &str, path: &Path) -> Spot;
    /// Write `value` at `path` (a [`Spot::Literal`] or [`Spot::Insert`]); false if it could not.
    fn write(&mut self, rtype: &str, rname: &str, path: &Path, value: &Leaf) -> bool;
    /// The whole file as it should be written.
    fn render(&self) -> std::result::Result<String, String>;
}

/// Where a drifted path lands in a resource's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Spot {
    /// A literal: overwrite it.
    Literal,
    /// A missing key in a literal map that exists: add it.
    Insert,
    /// The resource does not set this attribute at all (often a computed one).
    Absent,
    /// The value comes from a variable or an expression, not from this file.
    Expression,
    /// Part of the path is missing (a list index, a nested block, a key of a nested map).
    NotSet,
    /// The configuration has a list, map or block where the plan has one value.
    Structured,
    /// Something codify does not rewrite, with the reason.
    Unsupported(String),
}

/// A configuration file of the root module, as read before codify touched it.
struct Source {
    file: ConfigFile,
    original: Vec<u8>,
    /// The file is a symbolic link. It is read (OpenTofu follows it), but never written:
    /// replacing it would turn the link into a copy (even when putting it back), and
    /// writing through it would edit a file that may lie outside the stack.
    is_link: bool,
}

impl Source {
    fn open(&self) -> std::result::Result<Box<dyn Document>, String> {
        match self.file.syntax {
            Syntax::Json => json::JsonDocument::parse(&self.original)
                .map(|d| Box::new(d) as Box<dyn Document>)
                .map_err(|e| format!("invalid JSON at line {}, column {}", e.line(), e.column())),
            Syntax::Native => std::str::from_utf8(&self.original)
                .map_err(|_| "not UTF-8".to_owned())
                .and_then(hcl::HclDocument::parse)
                .map(|d| Box::new(d) as Box<dyn Document>),
        }
    }
}

/// One value to write.
struct Write {
    file: usize,
    path: Path,
    value: Leaf,
}

/// A finding codify accepts: what to write, and what it leaves to the plan to confirm.
struct Accepted {
    address: String,
    rtype: String,
    rname: String,
    writes: Vec<Write>,
}

/// The file to edit for `path`: an override file that sets the attribute wins (OpenTofu
/// merges it over the declaration), else the file that declares the resource.
fn choose_file(
    docs: &[std::result::Result<Box<dyn Document>, String>],
    sources: &[Source],
    rtype: &str,
    rname: &str,
    path: &Path,
) -> std::result::Result<Option<(usize, Spot)>, String> {
    let mut declaring = None;
    for (i, doc) in docs.iter().enumerate() {
        let doc = match doc {
            Ok(doc) => doc,
            Err(problem) => {
                return Err(format!("{}: {problem}", sources[i].file.path.display()));
            }
        };
        if !doc.declares(rtype, rname) {
            continue;
        }
        let spot = doc.locate(rtype, rname, path);
        if sources[i].file.is_override {
            if spot != Spot::Absent {
                declaring = Some((i, spot));
            }
        } else if declaring.is_none() {
            declaring = Some((i, spot));
        }
    }
    Ok(declaring)
}

/// Decide what to write for one finding, or why not.
fn plan_finding(
    finding: &Finding,
    change: Option<&ChangeEntry>,
    sources: &[Source],
    docs: &[std::result::Result<Box<dyn Document>, String>],
) -> std::result::Result<Accepted, String> {
    match finding.category {
        Category::Replaced => {
            return Err(
                "replaced by the next apply; accepting the value would not stop the replacement"
                    .to_owned(),
            );
        }
        Category::DeletedOutside => {
            return Err(
                "deleted outside; import it again or remove it from the configuration".to_owned(),
            );
        }
        Category::Ignored => return Err("ignored; nothing to accept".to_owned()),
        Category::ChangedOutside => {}
    }
    if finding.address.starts_with("module.") {
        return Err("belongs to a module; its configuration lives in the module".to_owned());
    }
    if finding.address.contains('[') {
        return Err(
            "is a count/for_each instance; its block is shared by every instance".to_owned(),
        );
    }
    let Some(change) = change.filter(|c| c.action == Action::Update) else {
        return Err("the next apply does not update it".to_owned());
    };
    if finding.overwritten {
        // Writing the drifted value over the edited one would pass every check (the plan
        // becomes a no-op) and silently undo the edit.
        return Err(
            "the configuration sets a drifted attribute to a new value (an unapplied change); accepting the drift would undo it, so decide by hand"
                .to_owned(),
        );
    }
    let Some((rtype, rname)) = finding.address.split_once('.') else {
        return Err("unrecognised address".to_owned());
    };
    let mut accepted = Accepted {
        address: finding.address.clone(),
        rtype: rtype.to_owned(),
        rname: rname.to_owned(),
        writes: Vec::new(),
    };
    let mut declared = false;
    for diff in &finding.diffs {
        // Attributes the next apply leaves alone need no change in the configuration.
        if !change.changed_paths.contains(&diff.path) {
            continue;
        }
        if diff.shown.is_sensitive() {
            return Err(format!("{} is sensitive; accept it by hand", diff.path));
        }
        let Some(value) = diff.after.clone() else {
            return Err(format!("{} has no value to write", diff.path));
        };
        if value.is_null() {
            return Err(format!(
                "{} was removed outside; remove it from the configuration by hand",
                diff.path
            ));
        }
        let Some((file, spot)) = choose_file(docs, sources, rtype, rname, &diff.path)? else {
            continue;
        };
        declared = true;
        if sources[file].is_link && matches!(spot, Spot::Literal | Spot::Insert) {
            return Err(format!(
                "{} is a symbolic link; codify does not write through links, edit its target by hand",
                sources[file].file.path.display()
            ));
        }
        match spot {
            Spot::Literal | Spot::Insert => accepted.writes.push(Write {
                file,
                path: diff.path.clone(),
                value,
            }),
            // Not in the configuration at all: the verification plan decides.
            Spot::Absent => {}
            Spot::Expression => {
                return Err(format!(
                    "{} comes from an expression or variable, not a literal",
                    diff.path
                ));
            }
            Spot::NotSet => {
                return Err(format!(
                    "{} is not set as a literal in the configuration",
                    diff.path
                ));
            }
            Spot::Structured => {
                return Err(format!(
                    "{} is a nested value in the configuration",
                    diff.path
                ));
            }
            Spot::Unsupported(reason) => return Err(format!("{}: {reason}", diff.path)),
        }
    }
    if !declared
        && !docs
            .iter()
            .any(|d| d.as_ref().is_ok_and(|d| d.declares(rtype, rname)))
    {
        return Err("not declared in any configuration file of the root module".to_owned());
    }
    if accepted.writes.is_empty() {
        return Err(
            "no attribute the next apply would revert is a literal in the configuration".to_owned(),
        );
    }
    Ok(accepted)
}

fn load_sources(dir: &std::path::Path) -> Result<Vec<Source>> {
    config::module_files(dir)
        .map_err(|e| Error::file(dir, "cannot read the configuration directory", e))?
        .into_iter()
        .map(|file| {
            let original =
                std::fs::read(&file.path).map_err(|e| Error::file(&file.path, "cannot read", e))?;
            let is_link = std::fs::symlink_metadata(&file.path)
                .map_err(|e| Error::file(&file.path, "cannot read", e))?
                .file_type()
                .is_symlink();
            Ok(Source {
                file,
                original,
                is_link,
            })
        })
        .collect()
}

/// The new contents of every file that the accepted findings change.
fn render_edits(sources: &[Source], accepted: &[Accepted]) -> Result<Vec<(usize, Vec<u8>)>> {
    let mut docs: BTreeMap<usize, Box<dyn Document>> = BTreeMap::new();
    for a in accepted {
        for w in &a.writes {
            let doc = match docs.entry(w.file) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(sources[w.file].open().map_err(Error::Codify)?)
                }
            };
            if !doc.write(&a.rtype, &a.rname, &w.path, &w.value) {
                return Err(Error::Codify(format!(
                    "{}: cannot write {} of {}",
                    sources[w.file].file.path.display(),
                    w.path,
                    a.address
                )));
            }
        }
    }
    docs.into_iter()
        .map(|(i, doc)| {
            let text = doc
                .render()
                .map_err(|e| Error::Codify(format!("{}: {e}", sources[i].file.path.display())))?;
            Ok((i, text.into_bytes()))
        })
        .collect()
}

/// Replace a file's contents atomically (a temporary file beside it, then a rename), with
/// the original's permissions.
fn replace_file(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| std::path::Path::new("."));
    let err = |e: std::io::Error| Error::file(path, "cannot write", e);
    let mut tmp = tempfile::Builder::new()
        .prefix(".driftwatch-")
        .tempfile_in(dir)
        .map_err(err)?;
    tmp.write_all(bytes).map_err(err)?;
    if let Ok(meta) = std::fs::metadata(path) {
        tmp.as_file()
            .set_permissions(meta.permissions())
            .map_err(err)?;
    }
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// Files as they are on disk now, so every exit path can put them back.
struct Edits<'a> {
    sources: &'a [Source],
    changed: Vec<usize>,
}

impl Edits<'_> {
    /// Bring the files to the state `accepted` asks for (originals for the rest).
    fn apply(&mut self, accepted: &[Accepted]) -> Result<()> {
        let wanted: BTreeMap<usize, Vec<u8>> =
            render_edits(self.sources, accepted)?.into_iter().collect();
        for &i in &self.changed {
            if !wanted.contains_key(&i) {
                replace_file(&self.sources[i].file.path, &self.sources[i].original)?;
            }
        }
        self.changed.retain(|i| wanted.contains_key(i));
        // Recorded file by file, so that a write failing half way still lets restore()
        // put back every file already written.
        for (&i, bytes) in &wanted {
            if !self.changed.contains(&i) {
                self.changed.push(i);
            }
            replace_file(&self.sources[i].file.path, bytes)?;
        }
        self.changed.retain(|i| wanted.contains_key(i));
        Ok(())
    }

    /// Put every changed file back as it was.
    fn restore(&mut self) -> Result<()> {
        // Every file is tried, even after one fails; the first failure is reported.
        let mut first = None;
        for &i in &self.changed {
            if let Err(e) = replace_file(&self.sources[i].file.path, &self.sources[i].original) {
                first.get_or_insert(e);
            }
        }
        self.changed.clear();
        first.map_or(Ok(()), Err)
    }
}

/// Addresses among `accepted` that the normal plan still changes, with what it changes.
fn still_changed(
    tofu: &Tofu,
    runner: &dyn Runner,
    masker: &Masker,
    label: &str,
    accepted: &[Accepted],
) -> Result<BTreeMap<String, String>> {
    let saved = tofu.plan(runner, false, &mut crate::runner::Timings::default())?;
    let file = std::fs::File::open(&saved.json).map_err(|error| crate::plan::PlanError::Read {
        source_name: label.to_owned(),
        error,
    })?;
    let plan = parse_reader(file, label, PlanRole::Normal, masker)?;
    let mut out = BTreeMap::new();
    for a in accepted {
        if let Some(c) = plan
            .changes
            .iter()
            .find(|c| c.address == a.address && !c.deposed)
            && c.action != Action::NoOp
        {
            let paths: Vec<String> = c.changed_paths.iter().map(Path::to_string).collect();
            let what = if paths.is_empty() {
                c.action.as_str().to_owned()
            } else {
                format!("{}: {}", c.action.as_str(), paths.join(", "))
            };
            out.insert(a.address.clone(), what);
        }
    }
    Ok(out)
}

/// Quote for a POSIX shell.
fn sh(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn branch_name(stack: &str, date: &str) -> String {
    let clean: String = stack
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("driftwatch/codify-{clean}-{date}")
}

pub fn cmd_codify(args: CodifyArgs, runner: &dyn Runner, io: &mut Io<'_>) -> Result<u8> {
    let masker = masker(&args.common)?;
    let options = options(&args.common)?;
    let tofu = tofu_of(&args.engine, &args.chdir);
    let stack = stack_name(&args.common, &args.chdir);
    let now = crate::history::now(args.common.now.as_deref())?;

    let mut timings = crate::runner::Timings::default();
    let refresh_saved = tofu.plan(runner, true, &mut timings)?;
    let normal_saved = tofu.plan(runner, false, &mut timings)?;
    let (refresh, normal) = parse_saved(&refresh_saved, Some(&normal_saved), &masker)?;
    drop((refresh_saved, normal_saved));
    let normal = normal.unwrap_or_default();
    let rules = load_rules(Some(&args.chdir))?;
    let report = classify::classify(&stack, &refresh, Some(&normal), &rules, &options);
    let changes: BTreeMap<&str, &ChangeEntry> = normal
        .changes
        .iter()
        .filter(|c| !c.deposed)
        .map(|c| (c.address.as_str(), c))
        .collect();

    let sources = load_sources(&args.chdir)?;
    let docs: Vec<_> = sources.iter().map(Source::open).collect();
    let mut accepted: Vec<Accepted> = Vec::new();
    let mut refused = 0usize;
    for finding in report
        .findings
        .iter()
        .filter(|f| f.category != Category::Ignored)
    {
        match plan_finding(
            finding,
            changes.get(finding.address.as_str()).copied(),
            &sources,
            &docs,
        ) {
            Ok(a) => accepted.push(a),
            Err(reason) => {
                refused += 1;
                writeln!(io.stdout, "codify: refused {}: {reason}", finding.address)?;
            }
        }
    }
    drop(docs);
    if accepted.is_empty() {
        if report.findings.is_empty() {
            writeln!(io.stdout, "codify: {stack}: no drift, nothing to codify")?;
            return Ok(crate::exit::CLEAN);
        }
        return Err(Error::Codify(format!(
            "{stack}: nothing could be codified ({refused} finding(s) refused)"
        )));
    }

    // `apply -refresh-only -target=…` refuses to run while the configuration moves an
    // object that is not targeted ("Moved resource instances excluded by targeting"), and
    // targeting it would take its drift into state too: say so before any file is touched.
    let moves: Vec<String> = normal
        .changes
        .iter()
        .filter(|c| !c.deposed && !accepted.iter().any(|a| a.address == c.address))
        .filter_map(|c| {
            let from = c.previous_address.as_deref()?;
            (from != c.address).then(|| format!("{} (from {from})", c.address))
        })
        .collect();
    if !moves.is_empty() {
        return Err(Error::Codify(format!(
            "{stack}: the configuration has moves the next apply has yet to make ({}); apply -refresh-only -target cannot run until they are applied, so nothing was written",
            moves.join(", ")
        )));
    }

    let mut edits = Edits {
        sources: &sources,
        changed: Vec::new(),
    };
    match write_and_prove(&tofu, runner, &masker, &mut edits, &mut accepted, io) {
        Ok(()) => {}
        Err(e) => {
            // Nothing half-done: the configuration goes back to what it was.
            edits.restore()?;
            return Err(e);
        }
    }

    for a in &accepted {
        for w in &a.writes {
            let shown = w.value.json();
            writeln!(
                io.stdout,
                "codify: {}: {} = {} ({})",
                a.address,
                w.path,
                crate::report::truncate(&shown, 80),
                sources[w.file].file.path.display()
            )?;
        }
    }
    writeln!(
        io.stdout,
        "codify: verified: the next apply is a no-op for {} resource(s)",
        accepted.len()
    )?;
    let codified: Vec<(String, Vec<String>)> = accepted
        .iter()
        .map(|a| {
            (
                a.address.clone(),
                a.writes.iter().map(|w| w.path.to_string()).collect(),
            )
        })
        .collect();
    let written: Vec<String> = edits
        .changed
        .iter()
        .map(|&i| sources[i].file.path.display().to_string())
        .collect();

    let date = now.format("%Y-%m-%d").to_string();
    let branch = branch_name(&stack, &date);
    let title = format!("Accept drift in {stack} ({date})");
    let mut body = format!(
        "Drift accepted by `driftwatch codify` on {date} (values written into the configuration; state refreshed with `apply -refresh-only`):\n\n"
    );
    for (address, paths) in &codified {
        body.push_str(&format!("- `{address}`: {}\n", paths.join(", ")));
    }
    let files_arg: Vec<String> = written.iter().map(|f| sh(f)).collect();
    writeln!(io.stdout, "branch: {branch}")?;
    writeln!(io.stdout, "  git switch -c {}", sh(&branch))?;
    writeln!(io.stdout, "  git add -- {}", files_arg.join(" "))?;
    writeln!(
        io.stdout,
        "  git commit -m {}",
        sh(&format!("drift: {title}"))
    )?;
    writeln!(io.stdout, "  git push -u origin {}", sh(&branch))?;
    writeln!(
        io.stdout,
        "  gh pr create --head {} --title {} --body {}",
        sh(&branch),
        sh(&title),
        sh(&body)
    )?;
    Ok(crate::exit::CLEAN)
}

/// Write the accepted values, prove with a plan that the next apply leaves those resources
/// alone (dropping, and taking back, any finding it does not), accept reality into state
/// with `apply -refresh-only`, and prove it once more.
fn write_and_prove(
    tofu: &Tofu,
    runner: &dyn Runner,
    masker: &Masker,
    edits: &mut Edits<'_>,
    accepted: &mut Vec<Accepted>,
    io: &mut Io<'_>,
) -> Result<()> {
    // Each round drops at least one finding, so this ends.
    loop {
        edits.apply(accepted)?;
        let still = still_changed(tofu, runner, masker, "verification plan", accepted)?;
        if still.is_empty() {
            break;
        }
        accepted.retain(|a| !still.contains_key(&a.address));
        for (address, what) in &still {
            writeln!(
                io.stdout,
                "codify: refused {address}: with the drifted values written, the next apply still changes it ({what}); its edits were taken back"
            )?;
        }
        if accepted.is_empty() {
            return Err(Error::Codify(
                "nothing could be codified: the next apply would still change every candidate"
                    .to_owned(),
            ));
        }
    }
    let targets: Vec<String> = accepted.iter().map(|a| a.address.clone()).collect();
    tofu.apply_refresh_only(runner, &targets)?;
    let still = still_changed(tofu, runner, masker, "final plan", accepted)?;
    if !still.is_empty() {
        let list: Vec<String> = still.iter().map(|(a, w)| format!("{a} ({w})")).collect();
        return Err(Error::Codify(format!(
            "after apply -refresh-only the next apply still changes: {}",
            list.join("; ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_and_quoting() {
        assert_eq!(
            branch_name("shop prod/eu", "2026-10-28"),
            "driftwatch/codify-shop-prod-eu-2026-10-28"
        );
        assert_eq!(sh("it's"), "'it'\\''s'");
    }

    #[test]
    fn a_write_failing_half_way_is_put_back() {
        // Two files to edit; the second cannot be written (a folder stands where it was
        // read), so apply fails after the first was already replaced.
        let dir = tempfile::tempdir().unwrap();
        let doc = |name: &str| format!(r#"{{"resource":{{"t":{{"{name}":{{"v":"old"}}}}}}}}"#);
        let a = dir.path().join("a.tf.json");
        let b = dir.path().join("b.tf.json");
        std::fs::write(&a, doc("a")).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("keep"), "").unwrap();
        let source = |path: &std::path::Path, name: &str| Source {
            file: ConfigFile {
                path: path.to_owned(),
                syntax: Syntax::Json,
                is_override: false,
            },
            original: doc(name).into_bytes(),
            is_link: false,
        };
        let sources = [source(&a, "a"), source(&b, "b")];
        let accepted: Vec<Accepted> = [(0, "a"), (1, "b")]
            .into_iter()
            .map(|(file, name)| Accepted {
                address: format!("t.{name}"),
                rtype: "t".to_owned(),
                rname: name.to_owned(),
                writes: vec![Write {
                    file,
                    path: Path::parse("v").unwrap(),
                    value: Leaf::from(serde_json::Value::from("new")),
                }],
            })
            .collect();
        let mut edits = Edits {
            sources: &sources,
            changed: Vec::new(),
        };
        assert!(edits.apply(&accepted).is_err());
        let _ = edits.restore();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), doc("a"));
    }

    #[test]
    fn replace_file_keeps_mode_and_leaves_no_temporary() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("main.tf");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        replace_file(&f, b"new").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
