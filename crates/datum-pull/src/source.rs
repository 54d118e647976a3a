//! Where a revision comes from: a git remote or a bundle file.
//!
//! Owns reading a remote's URL into the one transport git may use for it
//! (every other stays refused, `ext::` and other program-running transports
//! always), and the form a URL is shown in: credentials in a URL
//! (`https://user:token@host/...`) are replaced by `(sensitive)` in every
//! message, log line and state-store row, and handed to git as a secret to
//! scrub from its errors. This module must not run anything.

use std::path::{Path, PathBuf};

use crate::git::Protocol;

/// What `datum pull` fetches from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Remote(Remote),
    /// A `git bundle` file (made by `datum bundle`), for hosts without
    /// access to a remote.
    Bundle(PathBuf),
}

impl Source {
    /// The source as messages and the state store show it.
    pub fn display(&self) -> String {
        match self {
            Source::Remote(r) => r.display.clone(),
            Source::Bundle(p) => format!("bundle:{}", p.display()),
        }
    }

    /// What git is given to fetch from.
    pub fn location(&self) -> std::ffi::OsString {
        match self {
            Source::Remote(r) => r.url.clone().into(),
            Source::Bundle(p) => p.clone().into_os_string(),
        }
    }

    /// The transport git may use.
    pub fn protocol(&self) -> Protocol {
        match self {
            Source::Remote(r) => r.protocol,
            Source::Bundle(_) => Protocol::File,
        }
    }

    /// A credential in the URL that must never be shown.
    pub fn secret(&self) -> Option<&str> {
        match self {
            Source::Remote(r) => r.secret.as_deref(),
            Source::Bundle(_) => None,
        }
    }
}

/// A git remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    url: String,
    protocol: Protocol,
    display: String,
    secret: Option<String>,
}

/// A URL Datum will not fetch from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{shown}` is not a remote datum pull fetches from: {why}")]
pub struct BadUrl {
    /// The URL with any credentials removed.
    pub shown: String,
    pub why: String,
}

impl Remote {
    /// Reads a remote URL: `https://`, `http://`, `ssh://`, scp-like
    /// `user@host:path`, `git://`, `file://` or an absolute path.
    pub fn parse(url: &str) -> Result<Remote, BadUrl> {
        let (display, secret) = redact(url);
        let bad = |why: &str| BadUrl {
            shown: display.clone(),
            why: why.to_owned(),
        };
        if url.is_empty() {
            return Err(bad("it is empty"));
        }
        if url.starts_with('-') {
            return Err(bad("it starts with `-`"));
        }
        if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(bad("it holds whitespace or control characters"));
        }
        let protocol = match url.split_once("://") {
            Some((scheme, rest)) => {
                if rest.is_empty() {
                    return Err(bad("nothing follows the scheme"));
                }
                match scheme.to_ascii_lowercase().as_str() {
                    "https" => Protocol::Https,
                    "http" => Protocol::Http,
                    "ssh" | "git+ssh" | "ssh+git" => Protocol::Ssh,
                    "git" => Protocol::Git,
                    "file" => Protocol::File,
                    _ => {
                        return Err(bad(
                            "use https://, http://, ssh://, git://, file:// or an absolute path",
                        ));
                    }
                }
            }
            None if url.contains("::") => {
                // `ext::`, `fd::` and other remote helpers can run programs.
                return Err(bad("remote helpers (`name::...`) are never used"));
            }
            None if url.starts_with('/') => Protocol::File,
            None => match url.split_once(':') {
                // scp-like `[user@]host:path`, as git reads it: a colon
                // before any slash.
                Some((host, _)) if !host.is_empty() && !host.contains('/') => Protocol::Ssh,
                _ => return Err(bad("a relative path; write an absolute one or a URL")),
            },
        };
        Ok(Remote {
            url: url.to_owned(),
            protocol,
            display,
            secret,
        })
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The URL with credentials replaced by `(sensitive)`.
    pub fn display(&self) -> &str {
        &self.display
    }
}

/// A URL with its credentials (for http and https: the whole user part,
/// since a token is often written as the user name; for the others: a
/// password) replaced by `(sensitive)`, and the secret that was removed.
fn redact(url: &str) -> (String, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_owned(), None);
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return (url.to_owned(), None);
    };
    let web = matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https");
    let (shown, secret) = match userinfo.split_once(':') {
        Some((user, password)) if !web => (format!("{user}:(sensitive)"), password.to_owned()),
        _ if web => ("(sensitive)".to_owned(), userinfo.to_owned()),
        _ => return (url.to_owned(), None),
    };
    (
        format!("{scheme}://{shown}@{host}{}", &rest[authority_end..]),
        (!secret.is_empty()).then_some(secret),
    )
}

/// A bundle file as a source (made absolute against the working directory
/// by the caller).
pub fn bundle(path: &Path) -> Source {
    Source::Bundle(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_url_gets_its_one_transport() {
        for (url, p) in [
            ("https://git.example.com/infra.git", Protocol::Https),
            ("http://10.0.0.1/infra.git", Protocol::Http),
            ("ssh://git@git.example.com/infra.git", Protocol::Ssh),
            ("git@git.example.com:infra.git", Protocol::Ssh),
            ("git://127.0.0.1:9418/infra.git", Protocol::Git),
            ("file:///srv/git/infra.git", Protocol::File),
            ("/srv/git/infra.git", Protocol::File),
        ] {
            assert_eq!(Remote::parse(url).unwrap().protocol(), p, "{url}");
        }
        for url in [
            "ext::sh -c touch% /tmp/pwned",
            "fd::3",
            "-uupload-pack=touch /tmp/x",
            "relative/path",
            "gopher://x/y",
            "https://",
            "https://host/a b",
            "",
        ] {
            assert!(Remote::parse(url).is_err(), "{url} accepted");
        }
    }

    #[test]
    fn credentials_never_show() {
        let r = Remote::parse("https://deploy:hunter2@git.example.com/infra.git").unwrap();
        assert_eq!(r.display(), "https://(sensitive)@git.example.com/infra.git");
        assert_eq!(r.secret.as_deref(), Some("deploy:hunter2"));
        let r = Remote::parse("https://ghp_token123@github.com/o/r.git").unwrap();
        assert_eq!(r.display(), "https://(sensitive)@github.com/o/r.git");
        let r = Remote::parse("ssh://git:pw@host/r.git").unwrap();
        assert_eq!(r.display(), "ssh://git:(sensitive)@host/r.git");
        assert_eq!(r.secret.as_deref(), Some("pw"));
        let r = Remote::parse("ssh://git@host/r.git").unwrap();
        assert_eq!(r.display(), "ssh://git@host/r.git");
        assert_eq!(r.secret, None);
        let err = Remote::parse("gopher://u:hunter2@host/x").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let source = Source::Remote(Remote::parse("https://a:b@h/x").unwrap());
        assert_eq!(source.display(), "https://(sensitive)@h/x");
        assert_eq!(
            bundle(Path::new("/m/x.bundle")).display(),
            "bundle:/m/x.bundle"
        );
    }
}
