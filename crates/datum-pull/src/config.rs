//! What to pull and how: `pull.yaml` under the root, overridden by options.
//!
//! ```yaml
//! url: https://git.example.com/infra/datum.git   # or ssh://, git://, file://, /path
//! ref: main                                        # a branch or a tag
//! allowed_signers: /etc/datum/allowed_signers      # ssh-keygen's format
//! # optional:
//! deploy: /etc/datum/repository    # the link the agent reads (default)
//! keep: 3                          # checkouts kept, the deployed one included
//! revoked_keys: /etc/datum/revoked_keys
//! openpgp_keyring: /etc/datum/trusted.gpg
//! ssh_key: /etc/datum/deploy_key   # for ssh:// remotes
//! known_hosts: /etc/datum/known_hosts
//! timeout: 10m                     # per git command
//! ```
//!
//! Paths in the file are host paths (resolved under `--root`, like declared
//! ones); paths given as options are used as given, like `--host-file`,
//! except `--deploy`, which is a host path in both. There is deliberately no
//! way to configure `--allow-rollback`: going backwards is a person's
//! decision, made each time. Owns parsing and checking; must not fetch or
//! read the trust files (`pull` does, checking their owner and mode).

use std::path::{Path, PathBuf};
use std::time::Duration;

use datum_manifest::yaml::{self, Node, Value};

use crate::error::ConfigError;
use crate::source::{Remote, Source};

/// `pull.yaml`'s place under the root.
pub const CONFIG_FILE: &str = "/etc/datum/pull.yaml";
/// Where the deployed repository is, unless told otherwise.
pub const DEFAULT_DEPLOY: &str = "/etc/datum/repository";
/// The branch pulled unless told otherwise.
pub const DEFAULT_REF: &str = "main";
/// Checkouts kept, the deployed one included.
pub const DEFAULT_KEEP: usize = 3;
/// How long one git command may run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A settled configuration for one pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullConfig {
    pub source: Source,
    pub git_ref: String,
    /// Real paths (already under the root where they came from the file).
    pub allowed_signers: Option<PathBuf>,
    pub revoked_keys: Option<PathBuf>,
    pub openpgp_keyring: Option<PathBuf>,
    /// The link the agent reads, as a host path (`/etc/datum/repository`).
    pub deploy: PathBuf,
    pub keep: usize,
    pub ssh_key: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    pub timeout: Duration,
}

/// What the command line says (each wins over the file).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub url: Option<String>,
    pub git_ref: Option<String>,
    pub allowed_signers: Option<PathBuf>,
    pub revoked_keys: Option<PathBuf>,
    pub openpgp_keyring: Option<PathBuf>,
    /// A host path.
    pub deploy: Option<PathBuf>,
    pub keep: Option<usize>,
    /// Pull from this bundle file instead of the remote.
    pub bundle: Option<PathBuf>,
}

/// The URL as messages show it, for the `Debug` form below: a password in
/// it is never printed, not even by a debug log of the settings.
fn url_shown(url: &Option<String>) -> Option<String> {
    url.as_deref().map(crate::source::shown)
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("url", &url_shown(&self.url))
            .field("git_ref", &self.git_ref)
            .field("allowed_signers", &self.allowed_signers)
            .field("revoked_keys", &self.revoked_keys)
            .field("openpgp_keyring", &self.openpgp_keyring)
            .field("deploy", &self.deploy)
            .field("keep", &self.keep)
            .field("bundle", &self.bundle)
            .finish()
    }
}

/// The file's settings before the options are laid over them (no `Debug`:
/// nothing prints them, and a form that could would have to hide the URL's
/// password).
#[derive(Default)]
struct FileSettings {
    url: Option<String>,
    git_ref: Option<String>,
    allowed_signers: Option<PathBuf>,
    revoked_keys: Option<PathBuf>,
    openpgp_keyring: Option<PathBuf>,
    deploy: Option<PathBuf>,
    keep: Option<usize>,
    ssh_key: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    timeout: Option<Duration>,
}

/// Settles the configuration: `file` is `pull.yaml`'s text (`None` when
/// there is none) and `file_path` where it was read, for messages.
pub fn settle(
    root: &Path,
    file: Option<(&Path, &str)>,
    overrides: &Overrides,
) -> Result<PullConfig, ConfigError> {
    let settings = match file {
        Some((path, text)) => parse(root, path, text)?,
        None => FileSettings::default(),
    };
    // Which file to set it in: the one read, else the default under the
    // root (named in full: an operator passing --root looks in the wrong
    // /etc otherwise).
    let from = file.map_or_else(
        || {
            format!(
                "{} (there is none yet)",
                root.join(CONFIG_FILE.trim_start_matches('/')).display()
            )
        },
        |(p, _)| p.display().to_string(),
    );
    let source = match &overrides.bundle {
        Some(bundle) => Source::Bundle(bundle.clone()),
        None => {
            let url = overrides.url.clone().or(settings.url).ok_or_else(|| {
                ConfigError::Missing(format!(
                    "no remote to pull from: give --url URL (or --bundle FILE), or set `url:` in {from}"
                ))
            })?;
            Source::Remote(Remote::parse(&url)?)
        }
    };
    let git_ref = overrides
        .git_ref
        .clone()
        .or(settings.git_ref)
        .unwrap_or_else(|| DEFAULT_REF.to_owned());
    check_ref(&git_ref).map_err(|why| {
        ConfigError::Missing(format!(
            "--ref `{git_ref}` is not a branch or tag name: {why}"
        ))
    })?;
    let allowed_signers = overrides
        .allowed_signers
        .clone()
        .or(settings.allowed_signers);
    let openpgp_keyring = overrides
        .openpgp_keyring
        .clone()
        .or(settings.openpgp_keyring);
    if allowed_signers.is_none() && openpgp_keyring.is_none() {
        return Err(ConfigError::Missing(format!(
            "no trust root: give --allowed-signers FILE, or set `allowed_signers:` in {from} (a revision is deployed only when someone this host trusts signed it)"
        )));
    }
    let deploy = overrides
        .deploy
        .clone()
        .or(settings.deploy)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DEPLOY));
    check_host_path(&deploy)
        .map_err(|why| ConfigError::Missing(format!("--deploy {}: {why}", deploy.display())))?;
    if deploy.parent().is_none_or(|p| p == Path::new("/")) {
        return Err(ConfigError::Missing(format!(
            "--deploy {}: the link must be in a folder below /",
            deploy.display()
        )));
    }
    let keep = overrides.keep.or(settings.keep).unwrap_or(DEFAULT_KEEP);
    if keep < 2 {
        return Err(ConfigError::Missing(format!(
            "--keep {}",
            keep_too_few(keep)
        )));
    }
    Ok(PullConfig {
        source,
        git_ref,
        allowed_signers,
        revoked_keys: overrides.revoked_keys.clone().or(settings.revoked_keys),
        openpgp_keyring,
        deploy,
        keep,
        ssh_key: settings.ssh_key,
        known_hosts: settings.known_hosts,
        timeout: settings.timeout.unwrap_or(DEFAULT_TIMEOUT),
    })
}

/// Why `n` checkouts are too few to keep.
fn keep_too_few(n: impl std::fmt::Display) -> String {
    format!(
        "{n}: at least 2 checkouts are kept (the deployed one and the one it replaced, which a reader may still be reading)"
    )
}

/// A branch or tag name git accepts and that cannot become an option or a
/// refspec of our making.
fn check_ref(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.starts_with('-') || name.starts_with('/') || name.ends_with('/') {
        return Err("it starts with `-` or `/`, or ends with `/`");
    }
    if name.contains("..") || name.contains("//") || name.contains("@{") || name.ends_with(".lock")
    {
        return Err("it holds `..`, `//` or `@{`, or ends with `.lock`");
    }
    if name
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c))
    {
        return Err("it holds a space, a control character or one of ~^:?*[\\");
    }
    Ok(())
}

/// An absolute, normalised path (no `.`, `..`, `//`, trailing `/`).
fn check_host_path(path: &Path) -> Result<(), String> {
    datum_host::paths::check_declared(path).map_err(|e| e.to_string())
}

const KEYS: &[&str] = &[
    "datum",
    "url",
    "ref",
    "allowed_signers",
    "revoked_keys",
    "openpgp_keyring",
    "deploy",
    "keep",
    "ssh_key",
    "known_hosts",
    "timeout",
];

fn parse(root: &Path, path: &Path, text: &str) -> Result<FileSettings, ConfigError> {
    let at = |pos: yaml::Pos, message: String| ConfigError::At {
        path: path.to_owned(),
        line: pos.line as usize,
        column: pos.column as usize,
        message,
    };
    let parsed = yaml::parse(text);
    if let Some(e) = parsed.errors.first() {
        return Err(at(e.start, e.message.clone()));
    }
    let docs: Vec<&Node> = parsed.documents.iter().filter(|d| !d.is_null()).collect();
    let Some(doc) = docs.first() else {
        return Ok(FileSettings::default());
    };
    if let Some(second) = docs.get(1) {
        return Err(at(second.start, "pull.yaml holds one document".to_owned()));
    }
    let Some(entries) = doc.as_map() else {
        return Err(at(
            doc.start,
            format!("pull.yaml must be a mapping, found {}", doc.type_name()),
        ));
    };
    let mut s = FileSettings::default();
    for e in entries {
        let string = || -> Result<String, ConfigError> {
            match &e.value.value {
                Value::Str(v) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
                _ => Err(at(
                    e.value.start,
                    format!(
                        "`{}` must be a non-empty string, found {}",
                        e.key,
                        e.value.type_name()
                    ),
                )),
            }
        };
        let host_path = || -> Result<PathBuf, ConfigError> {
            let declared = PathBuf::from(string()?);
            check_host_path(&declared)
                .map_err(|why| at(e.value.start, format!("`{}`: {why}", e.key)))?;
            Ok(declared)
        };
        let under_root = || -> Result<PathBuf, ConfigError> {
            let declared = host_path()?;
            datum_host::paths::resolve(root, &declared)
                .map_err(|err| at(e.value.start, format!("`{}`: {err}", e.key)))
        };
        match e.key.as_str() {
            "datum" => {
                if e.value.as_str() != Some(datum_manifest::API_VERSION) {
                    return Err(at(
                        e.value.start,
                        format!(
                            "unsupported format version: this Datum reads `{}`",
                            datum_manifest::API_VERSION
                        ),
                    ));
                }
            }
            // Checked here too, to name the line (the options are checked
            // when they are laid over the file).
            "url" => {
                let url = string()?;
                Remote::parse(&url).map_err(|err| at(e.value.start, format!("`url`: {err}")))?;
                s.url = Some(url);
            }
            "ref" => {
                let name = string()?;
                check_ref(&name).map_err(|why| {
                    at(
                        e.value.start,
                        format!("`ref`: `{name}` is not a branch or tag name: {why}"),
                    )
                })?;
                s.git_ref = Some(name);
            }
            "allowed_signers" => s.allowed_signers = Some(under_root()?),
            "revoked_keys" => s.revoked_keys = Some(under_root()?),
            "openpgp_keyring" => s.openpgp_keyring = Some(under_root()?),
            "ssh_key" => s.ssh_key = Some(under_root()?),
            "known_hosts" => s.known_hosts = Some(under_root()?),
            "deploy" => {
                let deploy = host_path()?;
                if deploy.parent().is_none_or(|p| p == Path::new("/")) {
                    return Err(at(
                        e.value.start,
                        "`deploy`: the link must be in a folder below /".to_owned(),
                    ));
                }
                s.deploy = Some(deploy);
            }
            "keep" => match e.value.value {
                Value::Int(n) if n >= 2 => s.keep = Some(usize::try_from(n).unwrap_or(usize::MAX)),
                Value::Int(n) if n >= 0 => {
                    return Err(at(e.value.start, format!("`keep` {}", keep_too_few(n))));
                }
                _ => {
                    return Err(at(
                        e.value.start,
                        format!(
                            "`keep` must be a whole number, found {}",
                            e.value.type_name()
                        ),
                    ));
                }
            },
            "timeout" => {
                let text = string()?;
                s.timeout = Some(humantime::parse_duration(&text).map_err(|err| {
                    at(
                        e.value.start,
                        format!("`timeout`: `{text}` is not a duration: {err}"),
                    )
                })?);
            }
            "allow_rollback" | "allow-rollback" => {
                return Err(at(
                    e.key_start,
                    "going backwards cannot be configured: it is a person's decision, given with --allow-rollback each time".to_owned(),
                ));
            }
            other => {
                return Err(at(
                    e.key_start,
                    format!("unknown key `{other}` (known: {})", KEYS.join(", ")),
                ));
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle_text(text: &str, o: &Overrides) -> Result<PullConfig, ConfigError> {
        settle(
            Path::new("/r"),
            Some((Path::new("/r/etc/datum/pull.yaml"), text)),
            o,
        )
    }

    /// A debug print of the settings (a log line someone adds later) never
    /// shows a password in the URL, valid URL or refused one.
    #[test]
    fn the_settings_debug_form_hides_the_urls_password() {
        for url in [
            "https://deploy:canary-pw@git.example/x.git",
            "https://deploy:can/ary-pw@git.example/x.git",
            "ssh://git:canary-pw@git.example/x.git",
        ] {
            let o = Overrides {
                url: Some(url.to_owned()),
                ..Overrides::default()
            };
            let shown = format!("{o:?}");
            assert!(!shown.contains("canary-pw"), "{shown}");
            assert!(!shown.contains("ary-pw"), "{shown}");
            assert!(shown.contains("(sensitive)"), "{shown}");
        }
    }

    #[test]
    fn the_file_gives_host_paths_and_options_win() {
        let text = "url: https://git.example.com/infra.git\nref: release\nallowed_signers: /etc/datum/allowed_signers\nkeep: 5\ntimeout: 2m\nssh_key: /etc/datum/key\n";
        let c = settle_text(text, &Overrides::default()).unwrap();
        assert_eq!(c.git_ref, "release");
        assert_eq!(
            c.allowed_signers.as_deref(),
            Some(Path::new("/r/etc/datum/allowed_signers"))
        );
        assert_eq!(c.ssh_key.as_deref(), Some(Path::new("/r/etc/datum/key")));
        assert_eq!(c.deploy, Path::new(DEFAULT_DEPLOY));
        assert_eq!((c.keep, c.timeout), (5, Duration::from_secs(120)));
        let o = Overrides {
            url: Some("/srv/other.git".into()),
            git_ref: Some("v2".into()),
            allowed_signers: Some("/tmp/signers".into()),
            deploy: Some("/srv/datum/repo".into()),
            ..Overrides::default()
        };
        let c = settle_text(text, &o).unwrap();
        assert_eq!(c.source.display(), "/srv/other.git");
        assert_eq!(c.git_ref, "v2");
        assert_eq!(
            c.allowed_signers.as_deref(),
            Some(Path::new("/tmp/signers"))
        );
        assert_eq!(c.deploy, Path::new("/srv/datum/repo"));
        let bundle = Overrides {
            bundle: Some("/media/x.bundle".into()),
            ..Overrides::default()
        };
        assert_eq!(
            settle_text(text, &bundle).unwrap().source.display(),
            "bundle:/media/x.bundle"
        );
    }

    #[test]
    fn mistakes_name_their_line_and_nothing_configures_a_rollback() {
        for (text, want) in [
            (
                "url: /a\nallow_rollback: true\n",
                "2:1: going backwards cannot be configured",
            ),
            ("url: /a\nbranch: main\n", "2:1: unknown key `branch`"),
            (
                "url: /a\nkeep: many\n",
                "2:7: `keep` must be a whole number",
            ),
            (
                "url: /a\nallowed_signers: etc/x\n",
                "2:18: `allowed_signers`: path `etc/x` must be absolute",
            ),
            (
                "url: /a\ntimeout: soon\n",
                "`timeout`: `soon` is not a duration",
            ),
            ("- a\n", "1:1: pull.yaml must be a mapping"),
            // What the options are checked for, named by the file's line.
            (
                "url: /a\nkeep: 1\n",
                "2:7: `keep` 1: at least 2 checkouts are kept",
            ),
            (
                "url: /a\ndeploy: /repository\n",
                "2:9: `deploy`: the link must be in a folder below /",
            ),
            (
                "url: /a\nref: a..b\n",
                "2:6: `ref`: `a..b` is not a branch or tag name",
            ),
            ("url: ext::sh\n", "1:6: `url`: "),
        ] {
            let err = settle_text(text, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("/r/etc/datum/pull.yaml:"), "{err}");
            assert!(err.contains(want), "{want} not in {err}");
        }
        let none = settle(Path::new("/r"), None, &Overrides::default()).unwrap_err();
        assert!(
            none.to_string().contains("no remote to pull from"),
            "{none}"
        );
        // Which pull.yaml: the one under --root, which does not exist.
        assert!(
            none.to_string()
                .ends_with("or set `url:` in /r/etc/datum/pull.yaml (there is none yet)"),
            "{none}"
        );
        let unsigned = Overrides {
            url: Some("/srv/r.git".into()),
            ..Overrides::default()
        };
        let err = settle(Path::new("/r"), None, &unsigned).unwrap_err();
        assert!(err.to_string().contains("no trust root"), "{err}");
        for bad in ["-main", "a..b", "a b", "main:x", "x.lock", "re*"] {
            let o = Overrides {
                git_ref: Some(bad.into()),
                allowed_signers: Some("/a".into()),
                url: Some("/srv/r.git".into()),
                ..Overrides::default()
            };
            assert!(settle(Path::new("/r"), None, &o).is_err(), "{bad} accepted");
        }
        let keep = Overrides {
            keep: Some(1),
            allowed_signers: Some("/a".into()),
            url: Some("/srv/r.git".into()),
            ..Overrides::default()
        };
        assert!(
            settle(Path::new("/r"), None, &keep)
                .unwrap_err()
                .to_string()
                .contains("at least 2")
        );
        let deploy = Overrides {
            deploy: Some("/repo".into()),
            ..keep
        };
        assert!(
            settle(Path::new("/r"), None, &deploy).is_err(),
            "a link directly in /"
        );
    }
}
