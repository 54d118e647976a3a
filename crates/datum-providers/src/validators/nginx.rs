//! The nginx validator's precheck: `load_module` only of intact package files.
//!
//! `nginx -t` loads every module its configuration names before it judges
//! anything, and a module is a shared library whose code runs as root (in
//! the sandbox, but a root process in a mount namespace can still reach
//! the machine). A repository could ship a library as a `File` and name it
//! in `load_module`; so before nginx runs, the assembled configuration is
//! read (the main file and every `include`, as nginx resolves them, the
//! files laid into the view first) and every `load_module` must name a file
//! that an installed Debian package owns (`dpkg-query -S`) and whose content
//! is still the package's (its MD5 in the package's `md5sums`). Debian's own
//! `modules-enabled/*.conf` pass; anything else is refused with the file and
//! line that names it.
//!
//! Relative module paths are taken against nginx's prefix as Debian builds
//! it (`/usr/share/nginx`), relative includes against the folder of the main
//! configuration file, as nginx does with `-c`. What cannot be followed for
//! certain (a wildcard in a folder name, more than [`config_walk::MAX_FILES`] files, a
//! file over [`config_walk::MAX_FILE`] bytes) is refused rather than guessed.

use std::path::{Path, PathBuf};

use datum_host::command::{self, CommandSpec};
use datum_host::sandbox::Sandbox;
use md5::{Digest as _, Md5};

use super::config_walk;

/// nginx's compiled-in prefix on Debian (`nginx -V`: `--prefix=/usr/share/nginx`).
pub const PREFIX: &str = "/usr/share/nginx";

/// The precheck (see the module header). `config` is the main
/// configuration file's real path.
pub fn precheck(config: &Path, view: &Sandbox) -> Result<(), String> {
    let conf_dir = config.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut walk = Walk {
        view,
        conf_dir,
        files: 0,
        modules: Vec::new(),
    };
    walk.file(config, 0)?;
    for (module, written) in &walk.modules {
        check_module(module, view)
            .map_err(|why| format!("{written} {}: {why}", module.display()))?;
    }
    Ok(())
}

struct Walk<'a> {
    view: &'a Sandbox,
    conf_dir: PathBuf,
    files: usize,
    /// Each library a directive loads (`load_module`, an `ssl_engine`
    /// named by path) and where and how it was written (`file:line:
    /// directive`).
    modules: Vec<(PathBuf, String)>,
}

impl Walk<'_> {
    fn file(&mut self, path: &Path, depth: usize) -> Result<(), String> {
        config_walk::count(&mut self.files, path, depth)?;
        // nginx reports a file it cannot open itself.
        let Some(bytes) = config_walk::read(self.view, path)? else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(&bytes);
        for directive in directives(&text) {
            let at = format!("{}:{}", path.display(), directive.line);
            match (directive.name.as_str(), directive.args.as_slice()) {
                // A module, or an engine OpenSSL loads by path as a
                // library (ENGINE_by_id: dlopen, its constructor runs; a
                // bare id comes from OpenSSL's own engines folder).
                (directive @ ("load_module" | "ssl_engine"), [library, ..])
                    if directive == "load_module" || library.contains('/') =>
                {
                    let library = Path::new(library);
                    let library = if library.is_absolute() {
                        library.to_path_buf()
                    } else {
                        Path::new(PREFIX).join(library)
                    };
                    self.modules.push((library, format!("{at}: {directive}")));
                }
                (name, _) if runs_code(name) => {
                    return Err(format!(
                        "{at}: {name}: it runs code while nginx reads the configuration (the perl and njs modules), which Datum does not let a validator do"
                    ));
                }
                ("include", [pattern, ..]) => {
                    let pattern = Path::new(pattern);
                    let pattern = if pattern.is_absolute() {
                        pattern.to_path_buf()
                    } else {
                        self.conf_dir.join(pattern)
                    };
                    for included in config_walk::expand(self.view, &pattern, &at, "include")? {
                        self.file(&included, depth + 1)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Whether a directive makes nginx run code while it reads the
/// configuration: the perl module evaluates `perl_set`, `perl` and what
/// `perl_require` loads (a `BEGIN` block runs as it is compiled), the njs
/// module runs the top level of what `js_import` loads; both modules are
/// package files `load_module` may name.
fn runs_code(directive: &str) -> bool {
    matches!(
        directive,
        "perl"
            | "perl_modules"
            | "perl_require"
            | "perl_set"
            | "js_import"
            | "js_include"
            | "js_path"
    )
}

/// Whether `name` matches a glob(3) pattern of one path component (`*`,
/// `?`, `[...]` with ranges and `!`/`^` negation).
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    /// One token of the pattern: each but `Star` matches one character.
    enum Token {
        Star,
        Any,
        Char(char),
        /// The characters and ranges of a `[...]`, and whether it is negated.
        Class(Vec<(char, char)>, bool),
    }
    /// A class's ranges, whether it is negated, and its length in the pattern.
    type Class = (Vec<(char, char)>, bool, usize);
    // A `[...]` at p[0], or `None` when it is not closed (then `[` is a
    // literal).
    fn class(p: &[char]) -> Option<Class> {
        let mut i = 1;
        let negate = matches!(p.get(i), Some('!' | '^'));
        if negate {
            i += 1;
        }
        let mut ranges = Vec::new();
        let mut first = true;
        while i < p.len() {
            if p[i] == ']' && !first {
                return Some((ranges, negate, i + 1));
            }
            first = false;
            if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
                ranges.push((p[i], p[i + 2]));
                i += 3;
            } else {
                ranges.push((p[i], p[i]));
                i += 1;
            }
        }
        None
    }
    let p: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '*' => {
                tokens.push(Token::Star);
                i += 1;
            }
            '?' => {
                tokens.push(Token::Any);
                i += 1;
            }
            '[' => match class(&p[i..]) {
                Some((ranges, negate, len)) => {
                    tokens.push(Token::Class(ranges, negate));
                    i += len;
                }
                None => {
                    tokens.push(Token::Char('['));
                    i += 1;
                }
            },
            c => {
                tokens.push(Token::Char(c));
                i += 1;
            }
        }
    }
    let one = |t: &Token, c: char| match t {
        Token::Star => false,
        Token::Any => true,
        Token::Char(x) => *x == c,
        Token::Class(ranges, negate) => ranges.iter().any(|&(a, b)| a <= c && c <= b) != *negate,
    };
    // The usual wildcard walk: on a mismatch, go back to just after the last
    // `*` and let it take one more character. Time is the product of the
    // lengths, never exponential in the number of stars (a recursion that
    // tried every split hung `datum plan` on `*a*a*a...*b`).
    let n: Vec<char> = name.chars().collect();
    let (mut t, mut c) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while c < n.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                star = Some((t + 1, c));
                t += 1;
            }
            Some(token) if one(token, n[c]) => {
                t += 1;
                c += 1;
            }
            _ => match star {
                Some((after, taken)) => {
                    t = after;
                    c = taken + 1;
                    star = Some((after, taken + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|t| matches!(t, Token::Star))
}

/// One directive: its name, arguments and line.
#[derive(Debug, PartialEq, Eq)]
struct Directive {
    name: String,
    args: Vec<String>,
    line: usize,
}

/// The directives of an nginx configuration file, at any block depth
/// (nginx's lexer: whitespace-separated words, `;` ends a directive, `{`
/// opens a block after one, `#` starts a comment, quotes group words and
/// `\` escapes the next character).
fn directives(text: &str) -> Vec<Directive> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut line = 1;
    let mut start_line = 1;
    let mut chars = text.chars().peekable();
    let end = |words: &mut Vec<String>, start_line: usize, out: &mut Vec<Directive>| {
        if !words.is_empty() {
            let name = words.remove(0);
            out.push(Directive {
                name,
                args: std::mem::take(words),
                line: start_line,
            });
        }
    };
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
        }
        if let Some(q) = quote {
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        if next == '\n' {
                            line += 1;
                        }
                        word.push(next);
                    }
                }
                c if c == q => quote = None,
                c => word.push(c),
            }
            continue;
        }
        match c {
            '#' if !in_word => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '"' | '\'' if !in_word => {
                quote = Some(c);
                in_word = true;
                if words.is_empty() {
                    start_line = line;
                }
            }
            ';' | '{' | '}' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                end(&mut words, start_line, &mut out);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
                in_word = true;
            }
            c => {
                if !in_word && words.is_empty() {
                    start_line = line;
                }
                word.push(c);
                in_word = true;
            }
        }
    }
    out
}

/// Why `module` may not be loaded, if it may not.
pub(crate) fn check_module(module: &Path, view: &Sandbox) -> Result<(), String> {
    if view.placed(module).is_some() {
        return Err("it is one of the files being validated, not a package file".to_owned());
    }
    let real = view
        .canonical_as_program(module)
        .map_err(|e| format!("cannot find it ({e})"))?;
    let out = command::run(
        &CommandSpec::new("dpkg-query")
            .arg("-S")
            .arg(&real)
            .timeout(std::time::Duration::from_secs(30))
            .output_limit(64 * 1024),
    )
    .map_err(|e| format!("cannot ask dpkg who owns it ({e})"))?;
    let text = out.stdout.text();
    let owner = text
        .lines()
        .find_map(|l| {
            let (pkgs, path) = l.split_once(": ")?;
            (Path::new(path.trim()) == real)
                .then(|| pkgs.split(", ").next().unwrap_or("").trim().to_owned())
        })
        .filter(|p| !p.is_empty() && out.success());
    let Some(package) = owner else {
        return Err(format!(
            "{} is not a file of an installed package; only modules installed by a package may be loaded",
            real.display()
        ));
    };
    let sums = ["md5sums"]
        .iter()
        .find_map(|ext| {
            let name = package.split(':').next().unwrap_or(&package);
            [format!("{package}.{ext}"), format!("{name}.{ext}")]
                .iter()
                .find_map(|f| {
                    view.read_as_program(
                        &Path::new("/var/lib/dpkg/info").join(f),
                        config_walk::MAX_FILE,
                    )
                    .ok()
                })
        })
        .ok_or_else(|| {
            format!(
                "package {package} has no md5sums to check {} against",
                real.display()
            )
        })?;
    let relative = real.strip_prefix("/").unwrap_or(&real);
    let want = String::from_utf8_lossy(&sums)
        .lines()
        .find_map(|l| {
            let (sum, path) = l.split_once("  ")?;
            (Path::new(path) == relative).then(|| sum.to_owned())
        })
        .ok_or_else(|| format!("package {package} lists no checksum for {}", real.display()))?;
    let bytes = view
        .read_as_program(&real, 256 * 1024 * 1024)
        .map_err(|e| format!("cannot read it ({e})"))?;
    let have: String = Md5::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if have != want {
        return Err(format!(
            "{} is not as package {package} installed it (MD5 {have}, packaged {want})",
            real.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_found_at_any_depth_with_their_lines() {
        let text = "# load_module /commented.so;\nuser www-data;\nload_module \"modules/a b.so\";\nhttp {\n  include /etc/x/*.conf; # trailing\n  server { listen 80; }\n}\n";
        let found = directives(text);
        let names: Vec<(&str, usize)> = found.iter().map(|d| (d.name.as_str(), d.line)).collect();
        assert_eq!(
            names,
            [
                ("user", 2),
                ("load_module", 3),
                ("http", 4),
                ("include", 5),
                ("server", 6),
                ("listen", 6)
            ]
        );
        assert_eq!(found[1].args, ["modules/a b.so"]);
    }

    #[test]
    fn an_ssl_engine_named_by_path_is_a_library_to_check() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nginx.conf");
        let engine = dir.path().join("evil.so");
        std::fs::write(&engine, b"\x7fELF").unwrap();
        std::fs::write(
            &conf,
            format!("ssl_engine {};\nevents {{}}\n", engine.display()),
        )
        .unwrap();
        let err = precheck(&conf, &Sandbox::new()).unwrap_err();
        assert!(err.contains("nginx.conf:1: ssl_engine "), "{err}");
        assert!(err.contains("not a file of an installed package"), "{err}");
        // An engine by id comes from OpenSSL's engines folder.
        std::fs::write(&conf, "ssl_engine pkcs11;\nevents {}\n").unwrap();
        assert!(precheck(&conf, &Sandbox::new()).is_ok());
    }

    #[test]
    fn directives_that_run_code_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nginx.conf");
        for line in [
            "http { perl_set $x 'sub { BEGIN { system(\"id\") } }'; }",
            "http { perl_require /srv/x.pm; }",
            "http { js_import /srv/x.js; }",
        ] {
            std::fs::write(&conf, format!("events {{}}\n{line}\n")).unwrap();
            let err = precheck(&conf, &Sandbox::new()).unwrap_err();
            assert!(err.contains("nginx.conf:2"), "{line}: {err}");
            assert!(err.contains("runs code"), "{line}: {err}");
        }
        std::fs::write(&conf, "events {}\nhttp { js_set $x y; }\n").unwrap();
        assert!(precheck(&conf, &Sandbox::new()).is_ok());
    }

    #[test]
    fn a_glob_with_many_stars_is_matched_in_time() {
        let started = std::time::Instant::now();
        let pattern = "*a".repeat(20) + "*b";
        let name = "a".repeat(200);
        assert!(!glob_match(&pattern, &name));
        assert!(glob_match(&pattern, &(name + "b")));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    /// The recursive matcher glob_match replaced (exponential in the
    /// number of stars), as the oracle for short inputs.
    fn glob_oracle(pattern: &str, name: &str) -> bool {
        fn class(p: &[char], c: char) -> Option<(bool, usize)> {
            let mut i = 1;
            let negate = matches!(p.get(i), Some('!' | '^'));
            if negate {
                i += 1;
            }
            let mut matched = false;
            let mut first = true;
            while i < p.len() {
                if p[i] == ']' && !first {
                    return Some((matched != negate, i + 1));
                }
                first = false;
                if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
                    if p[i] <= c && c <= p[i + 2] {
                        matched = true;
                    }
                    i += 3;
                } else {
                    if p[i] == c {
                        matched = true;
                    }
                    i += 1;
                }
            }
            None
        }
        fn go(p: &[char], n: &[char]) -> bool {
            match p.first() {
                None => n.is_empty(),
                Some('*') => (0..=n.len()).any(|k| go(&p[1..], &n[k..])),
                Some('?') => !n.is_empty() && go(&p[1..], &n[1..]),
                Some('[') => match (n.first(), class(p, n.first().copied().unwrap_or('\0'))) {
                    (Some(_), Some((true, len))) => go(&p[len..], &n[1..]),
                    (Some(_), Some((false, _))) => false,
                    (Some('['), None) => go(&p[1..], &n[1..]),
                    _ => false,
                },
                Some(c) => n.first() == Some(c) && go(&p[1..], &n[1..]),
            }
        }
        let p: Vec<char> = pattern.chars().collect();
        let n: Vec<char> = name.chars().collect();
        go(&p, &n)
    }

    #[test]
    fn glob_match_agrees_with_the_recursive_matcher() {
        // Every pattern and name up to a few characters over a small
        // alphabet (with the class syntax in it).
        let pattern_chars = ['a', 'b', '*', '?', '[', ']', '!', '-'];
        let name_chars = ['a', 'b', '[', ']', '-'];
        fn all(chars: &[char], len: usize) -> Vec<String> {
            let mut out = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..len {
                let next: Vec<String> = last
                    .iter()
                    .flat_map(|s| chars.iter().map(move |c| format!("{s}{c}")))
                    .collect();
                out.extend(next.iter().cloned());
                last = next;
            }
            out
        }
        let names = all(&name_chars, 4);
        for pattern in all(&pattern_chars, 4) {
            for name in &names {
                assert_eq!(
                    glob_match(&pattern, name),
                    glob_oracle(&pattern, name),
                    "{pattern:?} {name:?}"
                );
            }
        }
    }

    #[test]
    fn globs_match_like_glob3() {
        for (p, n, want) in [
            ("*.conf", "a.conf", true),
            ("*.conf", "a.conf~", false),
            ("*", "x", true),
            ("?.c", "ab.c", false),
            ("[a-c]x", "bx", true),
            ("[!a-c]x", "bx", false),
            ("50-*", "50-mod-http-echo.conf", true),
        ] {
            assert_eq!(glob_match(p, n), want, "{p} {n}");
        }
    }

    #[test]
    fn a_module_outside_any_package_is_refused_and_a_placed_one_too() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nginx.conf");
        let module = dir.path().join("evil.so");
        std::fs::write(&module, b"\x7fELF").unwrap();
        std::fs::write(
            &conf,
            format!(
                "include {}/mods/*.conf;\nevents {{}}\n",
                dir.path().display()
            ),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("mods")).unwrap();
        std::fs::write(
            dir.path().join("mods/10-x.conf"),
            format!("load_module {};\n", module.display()),
        )
        .unwrap();
        let err = precheck(&conf, &Sandbox::new()).unwrap_err();
        assert!(err.contains("10-x.conf:1: load_module"), "{err}");
        assert!(err.contains("not a file of an installed package"), "{err}");

        let mut view = Sandbox::new();
        std::fs::write(dir.path().join("mods/10-x.conf"), "").unwrap();
        view.place(
            dir.path().join("mods/20-y.conf"),
            b"load_module /usr/lib/x.so;".to_vec(),
            0o644,
            None,
            None,
        );
        view.place("/usr/lib/x.so", b"".to_vec(), 0o644, None, None);
        let err = precheck(&conf, &view).unwrap_err();
        assert!(err.contains("20-y.conf:1"), "{err}");
        // Without any load_module there is nothing to refuse.
        assert!(precheck(&conf, &Sandbox::new()).is_ok());
    }
}
