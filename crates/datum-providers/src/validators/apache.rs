//! The apache2 validator's precheck: `LoadModule` and `LoadFile` only of
//! intact package files.
//!
//! `apache2ctl -t` loads every module (`LoadModule`) and library
//! (`LoadFile`) its configuration names while it reads it, before it judges
//! anything: a shared library's code runs as root the moment it is loaded,
//! and a root process in the validator's mount namespace can leave its view
//! (a `chroot` escape reaches the machine's own file systems). Without this
//! check a repository shipped a library as a `File` of the group and named
//! it in `LoadModule`, and `datum plan`, which must change nothing, ran it
//! as root. So before Apache runs, the assembled configuration is read (the
//! main file and every `Include`/`IncludeOptional`, as Apache resolves them
//! against its server root, the files laid into the view first) and every
//! library it would load must be a file an installed Debian package owns,
//! as it was installed (nginx's rule, [`super::nginx`]). Debian's own
//! `mods-enabled/*.load` pass.
//!
//! Every section (`<IfModule>`, `<IfDefine>`, ...) is taken as if it
//! applied. What cannot be followed for certain (a `${VARIABLE}` in a path
//! that loads or includes, a wildcard in a folder name, more than
//! [`config_walk::MAX_FILES`] files, a file over [`config_walk::MAX_FILE`] bytes) is refused rather
//! than guessed.

use std::path::{Path, PathBuf};

use datum_host::sandbox::Sandbox;

use super::config_walk;
use super::nginx::check_module;

/// The precheck (see the module header). `config` is the main
/// configuration file's real path; the server root is its folder (the
/// validator passes it as `-d`).
pub fn precheck(config: &Path, view: &Sandbox) -> Result<(), String> {
    let server_root = config.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut walk = Walk {
        view,
        server_root,
        files: 0,
        libraries: Vec::new(),
    };
    walk.file(config, 0)?;
    for (library, what, at) in &walk.libraries {
        check_module(library, view)
            .map_err(|why| format!("{at}: {what} {}: {why}", library.display()))?;
    }
    Ok(())
}

struct Walk<'a> {
    view: &'a Sandbox,
    server_root: PathBuf,
    files: usize,
    /// Each library Apache would load, the directive and where it was
    /// written (`file:line`).
    libraries: Vec<(PathBuf, &'static str, String)>,
}

impl Walk<'_> {
    /// A file Apache reads, or a folder whose every file (and folder) it
    /// reads, in name order.
    fn file(&mut self, path: &Path, depth: usize) -> Result<(), String> {
        config_walk::count(&mut self.files, path, depth)?;
        let bytes = match config_walk::read(self.view, path)? {
            Some(bytes) => bytes,
            None => {
                // A folder: Apache includes everything in it.
                if let Ok(mut names) = self.view.list_as_program(path) {
                    names.sort();
                    for name in names {
                        self.file(&path.join(name), depth + 1)?;
                    }
                }
                // Anything else Apache reports itself.
                return Ok(());
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        for (line, words) in directives(&text) {
            let at = format!("{}:{line}", path.display());
            let Some((name, args)) = words.split_first() else {
                continue;
            };
            let name = name.to_ascii_lowercase();
            if runs_code(&name) {
                return Err(format!(
                    "{at}: {}: it runs Perl while Apache reads the configuration (mod_perl), which Datum does not let a validator do",
                    words[0]
                ));
            }
            let paths: &[String] = match name.as_str() {
                "loadmodule" => args
                    .get(1..)
                    .unwrap_or_default()
                    .get(..1)
                    .unwrap_or_default(),
                "loadfile" | "include" | "includeoptional" | "serverroot" => args,
                // mod_ssl hands it to OpenSSL's ENGINE_by_id, which loads a
                // path as a library; a bare id comes from OpenSSL's engines
                // folder.
                "sslcryptodevice" if args.first().is_some_and(|a| a.contains('/')) => &args[..1],
                _ => continue,
            };
            for arg in paths {
                if arg.contains("${") {
                    return Err(format!(
                        "{at}: {} {arg}: Datum does not resolve variables in a path Apache loads or includes",
                        words[0]
                    ));
                }
                let full = if Path::new(arg).is_absolute() {
                    PathBuf::from(arg)
                } else {
                    self.server_root.join(arg)
                };
                match name.as_str() {
                    "loadmodule" => self.libraries.push((full, "LoadModule", at.clone())),
                    "loadfile" => self.libraries.push((full, "LoadFile", at.clone())),
                    "sslcryptodevice" => {
                        self.libraries.push((full, "SSLCryptoDevice", at.clone()));
                    }
                    "serverroot" => self.server_root = full,
                    _ => {
                        for included in config_walk::expand(self.view, &full, &at, "Include")? {
                            self.file(&included, depth + 1)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether a directive (lower case) makes mod_perl, a package's module,
/// run Perl while Apache reads the configuration: a `<Perl>` section, and
/// the files and modules it is told to load at start-up.
fn runs_code(directive: &str) -> bool {
    directive.starts_with("<perl")
        || matches!(
            directive,
            "perlrequire"
                | "perlmodule"
                | "perlconfigrequire"
                | "perlpostconfigrequire"
                | "perlloadmodule"
                | "perlpostconfighandler"
                | "perlopenlogshandler"
                | "perlchildinithandler"
                | "perlswitches"
        )
}

/// The directives of an Apache configuration file, each with its line and
/// words (the directive's name first), sections included as they are
/// written (`<IfModule x>` is a word like any other): a line ending in `\`
/// goes on on the next, `#` at the start of a line makes it a comment, and
/// double or single quotes group words (`\` escapes the next character
/// inside them).
fn directives(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut logical = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        if logical.is_empty() {
            start = i + 1;
        }
        if let Some(cont) = raw.strip_suffix('\\') {
            logical.push_str(cont);
            logical.push(' ');
            continue;
        }
        logical.push_str(raw);
        let line = std::mem::take(&mut logical);
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        out.push((start, words(trimmed)));
    }
    if !logical.trim().is_empty() {
        out.push((start, words(logical.trim_start())));
    }
    out
}

/// Apache's `ap_getword_conf`: whitespace-separated words, quotes grouping.
pub(crate) fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            break;
        };
        let mut word = String::new();
        if first == '"' || first == '\'' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(next) = chars.next() {
                            word.push(next);
                        }
                    }
                    c if c == first => break,
                    c => word.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                word.push(c);
            }
        }
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_read_as_apache_reads_them() {
        let text = "# LoadModule x /commented.so\nServerName localhost\n<IfModule foo>\n  LoadModule \"a_module\" \"/usr/lib/a b.so\"\n</IfModule>\nLoadFile /x.so \\\n  /y.so\n";
        let found = directives(text);
        assert_eq!(
            found,
            [
                (2, vec!["ServerName".to_owned(), "localhost".to_owned()]),
                (3, vec!["<IfModule".to_owned(), "foo>".to_owned()]),
                (
                    4,
                    vec![
                        "LoadModule".to_owned(),
                        "a_module".to_owned(),
                        "/usr/lib/a b.so".to_owned()
                    ]
                ),
                (5, vec!["</IfModule>".to_owned()]),
                (
                    6,
                    vec![
                        "LoadFile".to_owned(),
                        "/x.so".to_owned(),
                        "/y.so".to_owned()
                    ]
                ),
            ]
        );
    }

    #[test]
    fn mod_perl_code_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("apache2.conf");
        for line in [
            "<Perl>\nsystem('id');\n</Perl>",
            "PerlRequire /srv/startup.pl",
            "  perlmodule Evil::Module",
        ] {
            std::fs::write(&conf, format!("ServerName localhost\n{line}\n")).unwrap();
            let err = precheck(&conf, &Sandbox::new()).unwrap_err();
            assert!(err.contains("apache2.conf:2"), "{line}: {err}");
            assert!(err.contains("runs Perl"), "{line}: {err}");
        }
        std::fs::write(&conf, "ServerName localhost\nPerlSetVar x y\n").unwrap();
        assert!(precheck(&conf, &Sandbox::new()).is_ok());
    }

    #[test]
    fn a_library_outside_any_package_is_refused_and_a_placed_one_too() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("apache2.conf");
        let module = dir.path().join("evil.so");
        std::fs::write(&module, b"\x7fELF").unwrap();
        std::fs::create_dir(dir.path().join("mods-enabled")).unwrap();
        std::fs::write(
            &conf,
            "ServerName localhost\n<IfModule nothing>\nIncludeOptional mods-enabled/*.load\n</IfModule>\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("mods-enabled/evil.load"),
            format!("loadmodule evil_module {}\n", module.display()),
        )
        .unwrap();
        let err = precheck(&conf, &Sandbox::new()).unwrap_err();
        assert!(err.contains("evil.load:1: LoadModule"), "{err}");
        assert!(err.contains("not a file of an installed package"), "{err}");

        // LoadFile, relative to the server root, and in a folder Include.
        std::fs::remove_file(dir.path().join("mods-enabled/evil.load")).unwrap();
        std::fs::create_dir(dir.path().join("conf.d")).unwrap();
        std::fs::write(dir.path().join("conf.d/x.conf"), "LoadFile evil.so\n").unwrap();
        std::fs::write(&conf, "Include conf.d\n").unwrap();
        let err = precheck(&conf, &Sandbox::new()).unwrap_err();
        assert!(err.contains("x.conf:1: LoadFile"), "{err}");

        // A library laid into the view with the configuration.
        std::fs::write(dir.path().join("conf.d/x.conf"), "").unwrap();
        let mut view = Sandbox::new();
        view.place(
            dir.path().join("conf.d/y.conf"),
            b"LoadModule y_module /usr/lib/y.so".to_vec(),
            0o644,
            None,
            None,
        );
        view.place("/usr/lib/y.so", b"".to_vec(), 0o644, None, None);
        let err = precheck(&conf, &view).unwrap_err();
        assert!(err.contains("y.conf:1"), "{err}");
        assert!(err.contains("one of the files being validated"), "{err}");

        // An OpenSSL engine named by its path is a library like any other.
        std::fs::write(&conf, format!("SSLCryptoDevice {}\n", module.display())).unwrap();
        let err = precheck(&conf, &Sandbox::new()).unwrap_err();
        assert!(err.contains("apache2.conf:1: SSLCryptoDevice"), "{err}");
        std::fs::write(&conf, "SSLCryptoDevice builtin\n").unwrap();
        assert!(precheck(&conf, &Sandbox::new()).is_ok());

        // A variable in a path that loads is not guessed.
        std::fs::write(&conf, "LoadModule x_module ${LIBDIR}/x.so\n").unwrap();
        let err = precheck(&conf, &Sandbox::new()).unwrap_err();
        assert!(err.contains("does not resolve variables"), "{err}");

        // Without any library there is nothing to refuse.
        std::fs::write(&conf, "ServerName localhost\nInclude conf.d\n").unwrap();
        assert!(precheck(&conf, &Sandbox::new()).is_ok());
    }
}
