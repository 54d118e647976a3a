//! The kind-name guard: no code compares a resource kind's name (`"File"`,
//! `"Service"`, `package::KIND`, ...) outside that kind's own folder and the
//! registry. Above the providers, what a kind can do is asked of its
//! capabilities (`Capabilities::paths`, `activation`, `batching`, ...); a match
//! on a name is a place a new kind would silently miss.
//!
//! What counts as a comparison: the quoted name or a `KIND` constant next to
//! `==`, `!=`, `=>` or a match pattern's `|`, and `ResourceId::new("Kind",
//! ...)` on a line that compares. Naming a kind elsewhere (a test building a
//! `File[a]`, a message, a doc comment) is not a comparison. Test code
//! (`tests/` folders, `*tests.rs`, a file's trailing `#[cfg(test)] mod`) is
//! not checked.

use std::path::{Path, PathBuf};

/// Files that still compare kind names, and why they may for now (none
/// today). A file listed here that no longer compares a kind name fails the
/// test, so the list only shrinks; a new entry needs a reason beside it and
/// the change that will remove it.
///
/// The last entry, `datum-engine/src/activation.rs` (`LEGACY_GROUP_KIND`,
/// owed revalidations stored as `Group[NAME]` before group validators
/// became `ValidationGroup[NAME]`), went when the state store's schema
/// version 15 renamed those rows.
const PENDING: &[&str] = &[];

/// The workspace's top folder (two up from this crate's manifest).
fn workspace() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let top = dir.parent().and_then(Path::parent).unwrap();
    assert!(
        top.join("Cargo.toml").is_file(),
        "no workspace at {}",
        top.display()
    );
    top.to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "tests" || n == "target")
            {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's code without its trailing unit-test module.
fn without_tests(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.trim_start().starts_with("mod "))
        {
            return lines[..i].to_vec();
        }
    }
    lines
}

fn compares_before(before: &str) -> bool {
    // `datum_providers::tree::KIND`: what precedes the path counts.
    let mut b = before;
    while let Some(rest) = b.strip_suffix("::") {
        b = rest.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_');
    }
    let b = b.trim_end();
    b.ends_with("==") || b.ends_with("!=") || (b.ends_with('|') && !b.ends_with("||"))
}

fn compares_after(after: &str) -> bool {
    let a = after.trim_start();
    a.starts_with("==")
        || a.starts_with("!=")
        || a.starts_with("=>")
        || (a.starts_with('|') && !a.starts_with("||"))
}

/// Whether `line` compares something against `needle` (at a word boundary).
fn compares(line: &str, needle: &str) -> bool {
    let mut from = 0;
    while let Some(at) = line[from..].find(needle).map(|i| i + from) {
        let end = at + needle.len();
        let word_end = !line[end..].starts_with(|c: char| c.is_alphanumeric() || c == '_');
        if word_end && (compares_before(&line[..at]) || compares_after(&line[end..])) {
            return true;
        }
        from = end;
    }
    false
}

/// Every `(line number, line)` of `code` in `file` that compares a kind
/// name it may not compare.
fn violations(file: &str, code: &[&str], kinds: &[&str]) -> Vec<(usize, String)> {
    let registry = [
        "crates/datum-providers/src/lib.rs",
        "crates/datum-providers/src/registry.rs",
    ];
    if registry.contains(&file) {
        return Vec::new();
    }
    let own_folder = |kind: &str| {
        file.starts_with(&format!(
            "crates/datum-providers/src/{}/",
            kind.to_lowercase()
        ))
    };
    // A kind's name held in a constant of another name (`const
    // LEGACY: &str = "Group";`) and compared under that name.
    let held: Vec<String> = code
        .iter()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = ["pub(crate) ", "pub "]
                .iter()
                .find_map(|p| line.strip_prefix(p))
                .unwrap_or(line);
            let (name, value) = line.strip_prefix("const ")?.split_once(':')?;
            let value = value.split_once('=')?.1.trim().trim_end_matches(';');
            kinds
                .iter()
                .any(|kind| !own_folder(kind) && value == format!("\"{kind}\""))
                .then(|| name.trim().to_owned())
        })
        .collect();
    let mut found = Vec::new();
    for (n, line) in code.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let hit = kinds.iter().any(|kind| {
            if own_folder(kind) {
                return false;
            }
            let quoted = format!("\"{kind}\"");
            compares(line, &quoted)
                || (line.contains(&format!("ResourceId::new({quoted}"))
                    && (line.contains("==") || line.contains("!=")))
                || compares(line, &format!("{}::KIND", kind.to_lowercase()))
        }) || (!kinds.iter().any(|k| own_folder(k)) && compares(line, "KIND"))
            || held.iter().any(|name| compares(line, name));
        if hit {
            found.push((n + 1, line.trim().to_owned()));
        }
    }
    found
}

#[test]
fn no_kind_name_is_compared_outside_its_folder_and_the_registry() {
    let top = workspace();
    let mut files = Vec::new();
    rust_files(&top.join("crates"), &mut files);
    let kinds = datum_providers::registry().kinds();
    let mut problems = Vec::new();
    let mut pending_clean = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(&top)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.ends_with("tests.rs")
            || rel.ends_with("/testing.rs")
            || rel.starts_with("crates/datum-testkit/")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let found = violations(&rel, &without_tests(&text), &kinds);
        if PENDING.contains(&rel.as_str()) {
            if found.is_empty() {
                pending_clean.push(rel);
            }
            continue;
        }
        for (line, code) in found {
            problems.push(format!("{rel}:{line}: {code}"));
        }
    }
    assert!(
        problems.is_empty(),
        "kind names compared outside their kind's folder (ask a capability instead):\n{}",
        problems.join("\n")
    );
    assert!(
        pending_clean.is_empty(),
        "no longer compares a kind name: remove from PENDING: {pending_clean:?}"
    );
}

#[test]
fn the_guard_sees_each_way_of_comparing_a_kind_name() {
    let kinds = ["File", "Service", "Package"];
    let caught =
        |line: &str| !violations("crates/datum-engine/src/x.rs", &[line], &kinds).is_empty();
    assert!(caught(r#"if r.id.kind == "Service" {"#));
    assert!(caught(r#".filter(|r| r.id.kind != "File")"#));
    assert!(caught(r#""File" | "Directory" => true,"#));
    assert!(caught(r#"Some("Package") => x,"#) || caught(r#""Package" => x,"#));
    assert!(caught("r.id.kind == package::KIND"));
    assert!(caught(
        "(r.id.kind == datum_providers::package::KIND).then(|| 1)"
    ));
    assert!(caught(
        r#".any(|r| r.id == ResourceId::new("Package", name))"#
    ));
    assert!(caught("if kind == KIND {"));
    // A kind's name kept in a constant of another name, compared by it.
    let held = |line: &str| {
        !violations(
            "crates/datum-engine/src/x.rs",
            &[r#"pub const LEGACY: &str = "Service";"#, line],
            &kinds,
        )
        .is_empty()
    };
    assert!(held("if o.kind == LEGACY {"));
    assert!(!held("let legacy = LEGACY;"));
    // Naming a kind is not comparing it.
    assert!(!caught(r#"let id = ResourceId::new("File", "a");"#));
    assert!(!caught(r#"// a File's kind == "File""#));
    assert!(!caught(r#"format!("a {} is not a File", "File")"#));
    assert!(!caught(r#"if kind == "FileSystem" {"#));
    // A kind's own folder may compare its own name, not another's.
    let own = |file: &str, line: &str| violations(file, &[line], &kinds).is_empty();
    assert!(own(
        "crates/datum-providers/src/package/edges.rs",
        r#"r.id.kind == KIND"#
    ));
    assert!(own(
        "crates/datum-providers/src/package/edges.rs",
        r#"r.id.kind == "Package""#
    ));
    assert!(!own(
        "crates/datum-providers/src/package/edges.rs",
        r#"r.id.kind == "File""#
    ));
}
