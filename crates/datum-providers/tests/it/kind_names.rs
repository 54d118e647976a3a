//! The kind-name guard: no code names a resource kind (`"File"`,
//! `"Service"`, `"File[a]"`, `package::KIND`, ...) outside that kind's own
//! folder (`crates/datum-providers/src/<kind>/`) and the registry. Above the
//! providers, what a kind can do is asked of its capabilities
//! (`Capabilities::paths`, `activation`, `batching`, `owns_subtree`, ...); a
//! test of a name is a place a new kind would silently miss.
//!
//! What counts, whatever surrounds it (`==`, `match`, `matches!`, `if let`,
//! `.contains(..)`, `.starts_with(..)`, `.eq(..)`, a `const`, `static` or
//! `let` that holds it): a string literal (plain, byte or raw) that is a
//! registered kind's name (`"File"`) or starts with it followed by `[`
//! (`"File[a]"`), in any case when it is compared ignoring case
//! (`k.eq_ignore_ascii_case("file")`); and a `KIND` whose path names a
//! kind's module or type (`package::KIND`, `datum_providers::file::File::KIND`,
//! `<tree::Tree as Kind>::KIND`, `use datum_providers::package::{self, KIND}`).
//! Not counted: a kind's name inside a longer text (a message,
//! `"FileSystem"`), in another case otherwise (`"file"` as a file type,
//! `"FILE"` as a value name), a generic `T::KIND` or `Self::KIND`, a file's
//! own constant named `KIND`, and comments of every sort, doc comments
//! included. Test code is not checked: `tests/` folders, `*tests.rs`,
//! `testing.rs`, `datum-testkit`, the file of a module declared
//! `#[cfg(test)] mod x;`, and a `#[cfg(test)] mod x { .. }` block (to its
//! matching brace: the code after it is checked; `#[cfg(test)]` on any
//! other item is not skipped). The remaining uses are listed one by one in
//! [`ALLOWED`] (the name is data, not a test of a kind) and [`PENDING`] (a
//! test of a kind still to be replaced by a capability), each with its
//! count and reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A use of a kind's name the guard lets be: the file, the token as written
/// (`"File"`, `file::KIND`), how many times that file has it, and why. The
/// count is exact: one more is a new use (the test fails), one fewer means
/// the entry must shrink (the test fails too), so the list only shrinks.
struct Listed {
    file: &'static str,
    token: &'static str,
    count: usize,
    why: &'static str,
}

/// Kind names that are data, not a test of a kind.
const ALLOWED: &[Listed] = &[
    Listed {
        file: "crates/datum-server/examples/fleet-load.rs",
        token: "\"File[conf-{n:03}]\"",
        count: 1,
        why: "the load generator builds sample reports: a finding's subject, as a host sends it",
    },
    Listed {
        file: "crates/datum-server/examples/fleet-load.rs",
        token: "\"Tree[t{t}]\"",
        count: 1,
        why: "the load generator builds sample reports: a Tree's fingerprints, as a host sends them",
    },
    Listed {
        file: "crates/datum-engine/src/activation.rs",
        token: "\"File[{p}]\"",
        count: 1,
        why: "test code outside a test module: the `#[cfg(test)] fn new` of the searched \
              paths names each path's owner for unit tests (the guard skips only \
              `#[cfg(test)]` modules)",
    },
    Listed {
        file: "crates/datum-pull/src/source.rs",
        token: "\"file\"",
        count: 1,
        why: "a URL's scheme (`file://`), compared ignoring case, not a kind",
    },
];

/// Tests of a kind's name still to be replaced by a capability (none
/// today). An entry needs the change that will remove it beside its reason.
///
/// The last earlier entry, `datum-engine/src/activation.rs`
/// (`LEGACY_GROUP_KIND`, owed revalidations stored as `Group[NAME]` before
/// group validators became `ValidationGroup[NAME]`), went when the state
/// store's schema version 15 renamed those rows.
const PENDING: &[Listed] = &[];

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

/// One token of Rust source, comments dropped.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok<'a> {
    /// A string literal's text between its quotes (escapes left as
    /// written), of any form: `"…"`, `b"…"`, `r#"…"#`.
    Str(&'a str),
    /// An identifier, keyword or number.
    Word(&'a str),
    /// A character literal or lifetime (neither can be a kind's name).
    Quote,
    /// Any other character.
    Punct(char),
}

/// `text` as tokens, each with its line (1-based). Line comments, doc
/// comments and (nested) block comments are dropped; strings and
/// character literals are read whole, so a quote or brace inside one does
/// not count.
fn tokens(text: &str) -> Vec<(usize, Tok<'_>)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    // The newlines in `[from, to)`.
    let lines_in = |from: usize, to: usize| b[from..to].iter().filter(|&&c| c == b'\n').count();
    while i < b.len() {
        let c = b[i];
        let start_line = line;
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            let from = i;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            line += lines_in(from, i);
        } else if c == b'"' {
            let from = i + 1;
            i = from;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            let to = i.min(b.len());
            out.push((start_line, Tok::Str(&text[from..to])));
            line += lines_in(from, to);
            i = to + 1;
        } else if c == b'\'' {
            // `'\n'`, `'"'`, `'x'` are characters; `'a` is a lifetime.
            if b.get(i + 1) == Some(&b'\\') {
                i += 3;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch) == Some(&b'\'') {
                    i += ch + 2;
                } else {
                    i += 1;
                    while i < b.len() && word(b[i]) {
                        i += 1;
                    }
                }
            }
            out.push((start_line, Tok::Quote));
        } else if word(c) {
            let from = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            let w = &text[from..i];
            let next = b.get(i).copied();
            if matches!(w, "r" | "br" | "cr") && matches!(next, Some(b'"' | b'#')) {
                let hashes = b[i..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + hashes) == Some(&b'"') {
                    let from = i + hashes + 1;
                    let close = format!("\"{}", "#".repeat(hashes));
                    let to = text[from..].find(&close).map_or(b.len(), |at| from + at);
                    out.push((start_line, Tok::Str(&text[from..to])));
                    line += lines_in(from, to);
                    i = (to + close.len()).min(b.len());
                    continue;
                }
            }
            if matches!(w, "b" | "c") && next == Some(b'"') {
                // The string itself is read next round.
                continue;
            }
            if w == "b" && next == Some(b'\'') {
                continue;
            }
            out.push((start_line, Tok::Word(w)));
        } else {
            let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
            out.push((start_line, Tok::Punct(ch)));
            i += ch.len_utf8();
        }
    }
    out
}

/// Where the bracket opened at `open` (a `(`, `[` or `{`) closes: the index
/// just past its match, or the end.
fn past_match(toks: &[(usize, Tok<'_>)], open: usize) -> usize {
    let mut depth = 0usize;
    for (at, (_, t)) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// A `#[cfg(test)] mod x;` or `#[cfg(test)] mod x { .. }` starting at
/// `at` (other attributes and a visibility may stand between): the module's
/// name and the index just past its `;` or closing brace.
fn test_module<'a>(toks: &[(usize, Tok<'a>)], at: usize) -> Option<(&'a str, usize)> {
    let cfg_test = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Word("cfg"),
        Tok::Punct('('),
        Tok::Word("test"),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    let is = |i: usize, t: Tok<'_>| toks.get(i).is_some_and(|(_, x)| *x == t);
    if !cfg_test.iter().enumerate().all(|(k, &t)| is(at + k, t)) {
        return None;
    }
    let mut i = at + cfg_test.len();
    loop {
        if is(i, Tok::Punct('#')) && is(i + 1, Tok::Punct('[')) {
            i = past_match(toks, i + 1);
        } else if is(i, Tok::Word("pub")) {
            i += 1;
            if is(i, Tok::Punct('(')) {
                i = past_match(toks, i);
            }
        } else {
            break;
        }
    }
    if !is(i, Tok::Word("mod")) {
        return None;
    }
    let Some((_, Tok::Word(name))) = toks.get(i + 1) else {
        return None;
    };
    if is(i + 2, Tok::Punct(';')) {
        Some((name, i + 3))
    } else if is(i + 2, Tok::Punct('{')) {
        Some((name, past_match(toks, i + 2)))
    } else {
        None
    }
}

/// The file's tokens without its `#[cfg(test)]` modules (each to its `;`
/// or matching brace), and the names of those declared `mod x;` (whose
/// files are test code too).
fn without_tests(text: &str) -> (Vec<(usize, Tok<'_>)>, Vec<&str>) {
    let toks = tokens(text);
    let mut kept = Vec::with_capacity(toks.len());
    let mut files = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if let Some((name, past)) = test_module(&toks, i) {
            if matches!(toks.get(past - 1), Some((_, Tok::Punct(';')))) {
                files.push(name);
            }
            i = past;
        } else {
            kept.push(toks[i]);
            i += 1;
        }
    }
    (kept, files)
}

/// Where the file of module `name`, declared in `file`, is (`x.rs` or
/// `x/mod.rs`, beside `file` if it is a `lib.rs`, `main.rs` or `mod.rs`,
/// else in the folder named after it; a `#[path]` is not followed, and
/// none is used).
fn module_files(file: &Path, name: &str) -> [PathBuf; 2] {
    let folder = file.parent().unwrap_or(Path::new(""));
    let folder = match file.file_stem().and_then(|s| s.to_str()) {
        Some("lib" | "main" | "mod") | None => folder.to_path_buf(),
        Some(stem) => folder.join(stem),
    };
    [
        folder.join(format!("{name}.rs")),
        folder.join(name).join("mod.rs"),
    ]
}

/// Every `(line, token as written)` of `code` (tokens of `file`, tests
/// removed) that names a kind it may not name.
fn violations(file: &str, code: &[(usize, Tok<'_>)], kinds: &[&str]) -> Vec<(usize, String)> {
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
    let tok = |at: Option<usize>| at.and_then(|at| code.get(at)).map(|&(_, t)| t);
    // The kind whose module `word` is (`package`), if any.
    let module = |word: &str| kinds.iter().find(|k| k.eq_ignore_ascii_case(word)).copied();
    let mut found = Vec::new();
    for (at, &(line, t)) in code.iter().enumerate() {
        match t {
            Tok::Str(s) => {
                // Any case where the comparison ignores case:
                // `k.eq_ignore_ascii_case("file")`, `"file".eq_ignore_ascii_case(k)`.
                let caseless = [at.checked_sub(2), at.checked_sub(3)]
                    .into_iter()
                    .any(|before| tok(before) == Some(Tok::Word("eq_ignore_ascii_case")))
                    || tok(at.checked_add(2)) == Some(Tok::Word("eq_ignore_ascii_case"));
                let same = |a: &str, b: &str| {
                    if caseless {
                        a.eq_ignore_ascii_case(b)
                    } else {
                        a == b
                    }
                };
                let names = |kind: &&str| {
                    !own_folder(kind)
                        && (same(s, kind)
                            || (s.get(..kind.len()).is_some_and(|head| same(head, kind))
                                && s.as_bytes().get(kind.len()) == Some(&b'[')))
                };
                if kinds.iter().any(names) {
                    found.push((line, format!("\"{s}\"")));
                }
            }
            Tok::Word("KIND") => {
                // `package::KIND`, `datum_providers::file::File::KIND`,
                // `<tree::Tree as Kind>::KIND`: a word of the path before it
                // names the kind (`T::KIND`, `Self::KIND` and a file's own
                // `KIND` do not).
                let mut owner = None;
                let mut back = at;
                loop {
                    let colons = back
                        .checked_sub(2)
                        .is_some_and(|c| code[c..back].iter().all(|&(_, t)| t == Tok::Punct(':')));
                    if !colons {
                        break;
                    }
                    back -= 2;
                    match tok(back.checked_sub(1)) {
                        Some(Tok::Word(w)) => {
                            back -= 1;
                            owner = owner.or(module(w));
                        }
                        Some(Tok::Punct('>')) => {
                            // Back to the `<` that opens the qualified path.
                            let mut depth = 0usize;
                            while let Some(prev) = back.checked_sub(1) {
                                back = prev;
                                match code[back].1 {
                                    Tok::Punct('>') => depth += 1,
                                    Tok::Punct('<') => depth = depth.saturating_sub(1),
                                    Tok::Word(w) => owner = owner.or(module(w)),
                                    _ => {}
                                }
                                if depth == 0 {
                                    break;
                                }
                            }
                        }
                        _ => break,
                    }
                }
                // `use datum_providers::package::{self, KIND};`: the nearest
                // kind module before it in its `use`.
                if owner.is_none() {
                    let mut back = at;
                    while let Some(prev) = back.checked_sub(1) {
                        back = prev;
                        match code[back].1 {
                            Tok::Punct(';') | Tok::Word("use") => break,
                            Tok::Word(w)
                                if owner.is_none()
                                    && tok(Some(back + 1)) == Some(Tok::Punct(':')) =>
                            {
                                owner = module(w);
                            }
                            _ => {}
                        }
                    }
                    if tok(Some(back)) != Some(Tok::Word("use")) {
                        owner = None;
                    }
                }
                if let Some(kind) = owner.filter(|kind| !own_folder(kind)) {
                    found.push((line, format!("{}::KIND", kind.to_lowercase())));
                }
            }
            _ => {}
        }
    }
    found
}

#[test]
fn no_kind_is_named_outside_its_folder_and_the_registry() {
    let top = workspace();
    let mut files = Vec::new();
    rust_files(&top.join("crates"), &mut files);
    let kinds = datum_providers::registry().kinds();
    let mut scanned = Vec::new();
    let mut test_files = BTreeSet::new();
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
        let (code, modules) = without_tests(&text);
        for name in modules {
            test_files.extend(module_files(Path::new(&rel), name));
        }
        let found = violations(&rel, &code, &kinds);
        scanned.push((rel, found));
    }
    // (file, token) -> its lines.
    let mut uses: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (rel, found) in scanned {
        if test_files.contains(Path::new(&rel)) {
            continue;
        }
        for (line, token) in found {
            uses.entry((rel.clone(), token)).or_default().push(line);
        }
    }
    let problems = unlisted(uses, ALLOWED.iter().chain(PENDING));
    assert!(
        problems.is_empty(),
        "kind names used outside their kind's folder (ask a capability instead):\n{}",
        problems.join("\n")
    );
}

/// What of `uses` (each `(file, token)` with its lines) the lists do not
/// account for: a use no entry lists, and an entry whose count differs
/// from the uses found (more: a new one; fewer: the entry must shrink).
fn unlisted<'a>(
    mut uses: BTreeMap<(String, String), Vec<usize>>,
    lists: impl IntoIterator<Item = &'a Listed>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for listed in lists {
        assert!(!listed.why.is_empty(), "{}: no reason", listed.file);
        let key = (listed.file.to_owned(), listed.token.to_owned());
        let lines = uses.remove(&key).unwrap_or_default();
        if lines.len() != listed.count {
            problems.push(format!(
                "{}: {} listed {} times, found {} (lines {lines:?}): a new use asks a \
                 capability instead; one gone shrinks the list",
                listed.file,
                listed.token,
                listed.count,
                lines.len()
            ));
        }
    }
    for ((rel, token), lines) in uses {
        for line in lines {
            problems.push(format!("{rel}:{line}: {token}"));
        }
    }
    problems
}

#[test]
fn the_lists_only_shrink() {
    let listed = [Listed {
        file: "crates/a/src/x.rs",
        token: "\"File\"",
        count: 2,
        why: "sample data",
    }];
    let uses = |lines: &[usize]| {
        let mut uses = BTreeMap::new();
        if !lines.is_empty() {
            uses.insert(
                ("crates/a/src/x.rs".to_owned(), "\"File\"".to_owned()),
                lines.to_vec(),
            );
        }
        uses
    };
    assert_eq!(unlisted(uses(&[3, 9]), &listed), Vec::<String>::new());
    // One more, one fewer, none left: each fails.
    for lines in [&[3, 9, 12][..], &[3], &[]] {
        let problems = unlisted(uses(lines), &listed);
        assert_eq!(problems.len(), 1, "{lines:?}: {problems:?}");
        assert!(problems[0].contains("listed 2 times"), "{problems:?}");
    }
    // Another token of the same file is not covered by the entry.
    let mut other = uses(&[3, 9]);
    other.insert(
        ("crates/a/src/x.rs".to_owned(), "package::KIND".to_owned()),
        vec![20],
    );
    assert_eq!(
        unlisted(other, &listed),
        ["crates/a/src/x.rs:20: package::KIND"]
    );
}

/// What the guard finds in `source`, as a file of the engine.
fn found_in(source: &str) -> Vec<String> {
    let kinds = ["File", "Directory", "Service", "Package"];
    let (code, _) = without_tests(source);
    violations("crates/datum-engine/src/x.rs", &code, &kinds)
        .into_iter()
        .map(|(_, token)| token)
        .collect()
}

#[test]
fn the_guard_sees_each_way_of_naming_a_kind() {
    let caught = |source: &str| !found_in(source).is_empty();
    // Comparisons the earlier guard also saw.
    assert!(caught(r#"if r.id.kind == "Service" {"#));
    assert!(caught(r#".filter(|r| r.id.kind != "File")"#));
    assert!(caught(r#""File" | "Directory" => true,"#));
    assert!(caught(r#"Some("Package") => x,"#));
    assert!(caught("r.id.kind == package::KIND"));
    assert!(caught(
        "(r.id.kind == datum_providers::package::KIND).then(|| 1)"
    ));
    assert!(caught(
        r#".any(|r| r.id == ResourceId::new("Package", name))"#
    ));
    // The forms the earlier guard missed.
    assert!(caught(
        r#"const PATH_KINDS: &[&str] = &["File", "Directory"];"#
    ));
    assert!(caught(r#"if ["File", "Directory"].contains(&k) {}"#));
    assert!(caught(r#"let yes = matches!(k, "Service");"#));
    assert!(caught(r#"if let "Package" = k {}"#));
    assert!(caught(r#"if id.starts_with("File[") {}"#));
    assert!(caught(r#"if k.eq("File") {}"#));
    assert!(caught(r#"if k.eq_ignore_ascii_case("file") {}"#));
    assert!(caught(r#"let wanted = "Service";"#));
    assert!(caught(r#"static WANTED: &str = "Package";"#));
    assert!(caught(
        r#"let id: ResourceId = "File[/etc/motd]".parse()?;"#
    ));
    assert!(caught(r#"let raw = r"Service";"#));
    assert!(caught(r##"let raw = r#"Service"#;"##));
    assert!(caught("use datum_providers::package::KIND as PACKAGE;"));
    assert!(caught("use datum_providers::package::{self, KIND};"));
    assert!(caught("let k = datum_providers::file::File::KIND;"));
    assert!(caught(
        "let k = <datum_providers::package::Provider as Kind>::KIND;"
    ));
    assert!(caught(
        "let k = package :: KIND; // spaced, and a comment after"
    ));
    // Not comments, doc comments, test modules, or a name in longer text.
    assert_eq!(
        found_in(r#"// a File's kind == "File""#),
        Vec::<String>::new()
    );
    assert_eq!(found_in(r#"/// `kind == "File"`"#), Vec::<String>::new());
    assert_eq!(found_in(r#"//! `kind == "File"`"#), Vec::<String>::new());
    assert_eq!(
        found_in("/* outer /* \"File\" nested */ still \"File\" */ let a = 1;"),
        Vec::<String>::new()
    );
    assert!(!caught(r#"format!("a {} is not a File", kind)"#));
    assert!(!caught(r#"if kind == "FileSystem" {"#));
    assert!(!caught(r#"let k = "Files[";"#));
    assert!(!caught(r#"let q = '"'; let s = "no kind here";"#));
    assert!(!caught("fn f<'a>(x: &'a str) -> &'a str { x }"));
    assert!(!caught("let k = other::KINDS;"));
    // A kind's name in another case is a word (a file type, a field, a
    // clap value name), unless compared ignoring case.
    assert!(!caught(r#"Presence::OtherType("file".into())"#));
    assert!(!caught(r#"#[arg(value_name = "FILE")]"#));
    assert!(caught(r#"if "FILE".eq_ignore_ascii_case(k) {}"#));
    assert!(caught(r#"if k.eq_ignore_ascii_case(&"service") {}"#));
    // `KIND` of no kind's module: a kind's generic one, a file's own.
    assert!(!caught("let k = T::KIND; let s = Self::KIND;"));
    assert!(!caught(
        r#"const KIND: &str = "datum-plan"; if k == KIND {}"#
    ));
    assert!(!caught(
        "use crate::plan::{KIND, x}; let k = package::other;"
    ));
    let in_tests = r#"
        #[cfg(test)]
        mod tests {
            fn f() { let s = "}"; assert_eq!(k, "File"); }
            mod inner { const K: &str = "Service"; }
        }
    "#;
    assert_eq!(found_in(in_tests), Vec::<String>::new());
    // A test module is skipped to its end, not the rest of the file: the
    // earlier guard stopped reading at the first `#[cfg(test)] mod`.
    let after = format!("{in_tests}\nfn g(k: &str) -> bool {{ k == \"Package\" }}");
    assert_eq!(found_in(&after), ["\"Package\""]);
    let declared = r#"
        #[cfg(test)]
        mod tests;
        #[cfg(test)]
        #[allow(dead_code)]
        pub(crate) mod other;
        const K: &str = "Directory";
    "#;
    assert_eq!(found_in(declared), ["\"Directory\""]);
    let (_, files) = without_tests(declared);
    assert_eq!(files, ["tests", "other"]);
    // `#[cfg(test)]` on anything but a module is still read.
    assert_eq!(
        found_in("#[cfg(test)]\nfn helper() -> &'static str { \"File\" }"),
        ["\"File\""]
    );
    // A kind's own folder may name its own kind, not another's.
    let kinds = ["File", "Service", "Package"];
    let own = |file: &str, source: &str| {
        let (code, _) = without_tests(source);
        violations(file, &code, &kinds).is_empty()
    };
    let edges = "crates/datum-providers/src/package/edges.rs";
    assert!(own(edges, "r.id.kind == KIND"));
    assert!(own(edges, r#"r.id.kind == "Package""#));
    assert!(own(edges, "r.id.kind == package::KIND"));
    assert!(!own(edges, r#"r.id.kind == "File""#));
    assert!(!own(edges, "r.id.kind == crate::file::KIND"));
    // The registry may name them all.
    assert!(own(
        "crates/datum-providers/src/registry.rs",
        r#"lookup("File")"#
    ));
}

#[test]
fn a_test_modules_file_is_found_beside_or_under_its_parent() {
    assert_eq!(
        module_files(Path::new("crates/a/src/lib.rs"), "race"),
        [
            PathBuf::from("crates/a/src/race.rs"),
            PathBuf::from("crates/a/src/race/mod.rs")
        ]
    );
    assert_eq!(
        module_files(Path::new("crates/a/src/snapshot/mod.rs"), "write"),
        [
            PathBuf::from("crates/a/src/snapshot/write.rs"),
            PathBuf::from("crates/a/src/snapshot/write/mod.rs")
        ]
    );
    assert_eq!(
        module_files(Path::new("crates/a/src/check.rs"), "cases"),
        [
            PathBuf::from("crates/a/src/check/cases.rs"),
            PathBuf::from("crates/a/src/check/cases/mod.rs")
        ]
    );
}
