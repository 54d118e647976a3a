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

    /// What git is given to fetch from: never a credential (git's command
    /// line, and its helpers', can be read by every local user in
    /// `/proc/PID/cmdline`); see [`Source::credentials`].
    pub fn location(&self) -> std::ffi::OsString {
        match self {
            Source::Remote(r) => r.fetch_url.clone().into(),
            Source::Bundle(p) => p.clone().into_os_string(),
        }
    }

    /// The user name and password an `http(s)://` URL carried, which git
    /// gets through its credential protocol rather than in the URL.
    pub fn credentials(&self) -> Option<&Credentials> {
        match self {
            Source::Remote(r) => r.credentials.as_ref(),
            Source::Bundle(_) => None,
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

/// A git remote (its `Debug` shows the URL as [`Remote::display`] does).
#[derive(Clone, PartialEq, Eq)]
pub struct Remote {
    url: String,
    /// The URL without its credentials: what git is given.
    fetch_url: String,
    protocol: Protocol,
    display: String,
    secret: Option<String>,
    credentials: Option<Credentials>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.display)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// Credentials from an `http(s)://` URL, percent-decoded as git decodes
/// them, for the host they were written for.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `host[:port]`, as git's credential protocol names it.
    pub host: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
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
        let (display, secret, ambiguous) = redact(url);
        let bad = |why: &str| BadUrl {
            shown: display.clone(),
            why: why.to_owned(),
        };
        if ambiguous {
            // git would read another host (the start of the credentials)
            // and put the rest on its command line and in its messages.
            return Err(bad(
                "an `@` comes after the host begins (a `/` in a user name or password, or an `@` in the path): write `/`, `:`, `@`, `?` and `#` in credentials percent-encoded (%2F, %3A, %40, %3F, %23), and an `@` in the path as %40 (an scp-like address cannot: write it as an ssh:// URL)",
            ));
        }
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
        let (fetch_url, credentials) = without_credentials(url).map_err(bad)?;
        Ok(Remote {
            url: url.to_owned(),
            fetch_url,
            protocol,
            display,
            secret,
            credentials,
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

/// `url` as messages show it, valid or not: credentials replaced by
/// `(sensitive)` (for the `Debug` form of settings that hold a URL).
pub fn shown(url: &str) -> String {
    redact(url).0
}

/// A URL with its credentials (for http and https: the whole user part,
/// since a token is often written as the user name; for the others: a
/// password) replaced by `(sensitive)`, the secret that was removed, and
/// whether the URL is ambiguous: an `@` after the first `/` of a
/// `scheme://` URL, or after the first `:` of an scp-like one. A
/// credential written with a raw `/` (`https://u:pa/ss@host/x`) is read by
/// git as a host `u` and a path holding the rest, so the credentials are
/// taken to end at the last `@` whatever comes before it: everything up to
/// it is hidden (more than needed when it was an `@` in the path, never
/// less), and [`Remote::parse`] refuses such a URL.
///
/// Not ambiguous, though an `@` is in the path, are the URLs where nothing
/// before that `@` can be a secret: a `file:///` URL (no authority at
/// all); an `ssh://`, `git://` or `file://` URL whose authority already
/// holds a user name without a password (`ssh://git@host:22/o/a@b.git`:
/// for these only a password is a secret); an scp-like address with a
/// user name (`git@host:o/a@b.git`: git reads the user and the host up to
/// the first `:`, and ssh takes no password there). An http(s) URL stays
/// refused: its whole user part is a secret, which a raw `@` and `/` in a
/// token or password would split.
fn redact(url: &str) -> (String, Option<String>, bool) {
    let Some((scheme, rest)) = url.split_once("://") else {
        // scp-like `[user@]host:path` (a `/` before the first `:` makes it
        // a local path, as git reads it): a user part holding a `:` is no
        // user name git would read.
        let colon = url.find(':');
        let local = colon.is_none_or(|colon| url[..colon].contains('/'));
        let user_named = colon.is_some_and(|colon| url[..colon].contains('@'));
        return match (url.rfind('@'), colon) {
            (Some(at), Some(colon)) if colon < at && !local && !user_named => (
                format!("(sensitive)@{}", &url[at + 1..]),
                Some(url[..at].to_owned()),
                true,
            ),
            _ => (url.to_owned(), None, false),
        };
    };
    let Some(at) = rest.rfind('@') else {
        return (url.to_owned(), None, false);
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let web = matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https");
    if at > authority_end {
        let no_authority = authority.is_empty() && scheme.eq_ignore_ascii_case("file");
        let user_only = !web
            && authority
                .rsplit_once('@')
                .is_some_and(|(userinfo, _)| !userinfo.contains(':'));
        if no_authority || user_only {
            // The `@` is the path's; the URL holds no secret.
            return (url.to_owned(), None, false);
        }
        return (
            format!("{scheme}://(sensitive)@{}", &rest[at + 1..]),
            Some(rest[..at].to_owned()),
            true,
        );
    }
    let (userinfo, host) = (&rest[..at], &rest[at + 1..authority_end]);
    let (shown, secret) = match userinfo.split_once(':') {
        Some((user, password)) if !web => (format!("{user}:(sensitive)"), password.to_owned()),
        _ if web => ("(sensitive)".to_owned(), userinfo.to_owned()),
        _ => return (url.to_owned(), None, false),
    };
    (
        format!("{scheme}://{shown}@{host}{}", &rest[authority_end..]),
        (!secret.is_empty()).then_some(secret),
        false,
    )
}

/// The URL without the credentials in it, and (for http and https) those
/// credentials, decoded. A password in another kind of URL is dropped: ssh
/// is run with `BatchMode`, and git:// and file:// have no use for one.
fn without_credentials(url: &str) -> Result<(String, Option<Credentials>), &'static str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok((url.to_owned(), None));
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some((userinfo, host)) = rest[..authority_end].rsplit_once('@') else {
        return Ok((url.to_owned(), None));
    };
    let path = &rest[authority_end..];
    let web = matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https");
    if !web {
        let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
        return Ok((format!("{scheme}://{user}@{host}{path}"), None));
    }
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let decode = |text: &str| -> Result<String, &'static str> {
        let decoded =
            percent_decode(text).ok_or("its credentials are not valid percent-encoded UTF-8")?;
        if decoded.contains(['\n', '\0']) {
            return Err("its credentials hold a line break or a NUL");
        }
        Ok(decoded)
    };
    Ok((
        format!("{scheme}://{host}{path}"),
        Some(Credentials {
            host: host.to_owned(),
            username: decode(user)?,
            password: decode(password)?,
        }),
    ))
}

/// `%XX` decoded (as git decodes the user and password of a URL); `None`
/// when the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h)? * 16 + hex(l)?) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
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
        // git is given the URL without them, and the credentials apart.
        let source =
            Source::Remote(Remote::parse("https://de%40ploy:hun%3Ater2@h:8443/x.git").unwrap());
        assert_eq!(source.location(), "https://h:8443/x.git");
        let c = source.credentials().unwrap();
        assert_eq!(
            (c.host.as_str(), c.username.as_str(), c.password.as_str()),
            ("h:8443", "de@ploy", "hun:ter2")
        );
        assert!(!format!("{c:?}").contains("ter2"));
        let token = Source::Remote(Remote::parse("https://ghp_token123@github.com/o/r").unwrap());
        assert_eq!(token.location(), "https://github.com/o/r");
        assert_eq!(token.credentials().unwrap().username, "ghp_token123");
        assert_eq!(token.credentials().unwrap().password, "");
        let ssh = Source::Remote(Remote::parse("ssh://git:pw@host/r.git").unwrap());
        assert_eq!(ssh.location(), "ssh://git@host/r.git");
        assert_eq!(ssh.credentials(), None);
        let plain = Source::Remote(Remote::parse("https://h/x").unwrap());
        assert_eq!(
            (plain.location(), plain.credentials()),
            ("https://h/x".into(), None)
        );
        assert!(Remote::parse("https://u:a%0Ab@h/x").is_err());
        assert_eq!(
            bundle(Path::new("/m/x.bundle")).display(),
            "bundle:/m/x.bundle"
        );
    }

    #[test]
    fn a_credential_holding_a_slash_never_shows_in_any_form() {
        // Percent-encoded, as a URL must write it: hidden, and handed to
        // git decoded through the credential protocol.
        let r = Remote::parse("https://deploy:can%2Fary-pw@h/x.git").unwrap();
        assert_eq!(r.display(), "https://(sensitive)@h/x.git");
        let source = Source::Remote(r);
        assert_eq!(source.location(), "https://h/x.git");
        assert_eq!(source.credentials().unwrap().password, "can/ary-pw");
        let r = Remote::parse("ssh://git:can%2Fary-pw@h/x.git").unwrap();
        assert_eq!(r.display(), "ssh://git:(sensitive)@h/x.git");
        // Raw: git would read a host `deploy` and a path holding the rest,
        // so it is refused, and the message hides all of it.
        for url in [
            "https://deploy:can/ary-pw@h/x.git",
            "https://can/ary-pw@h/x.git",
            "http://deploy:can/ary-pw@h:8080/x.git",
            "ssh://git:can/ary-pw@h/x.git",
            "git+ssh://git:can/ary-pw@h/x.git",
            "git://u:can/ary-pw@h/x.git",
            "file://u:can/ary-pw@/srv/x.git",
            "https://deploy:c@n/ary-pw@h/x.git",
            "https://deploy:can/ary-pw@h/x.git?a@b",
            "git:can/ary-pw@h:x.git",
            "deploy:can%2Fary-pw@h:x.git",
        ] {
            let err = Remote::parse(url).unwrap_err();
            let text = err.to_string();
            assert!(
                !text.contains("ary-pw") && !text.contains("can/") && !text.contains("can%2F"),
                "{url}: {text}"
            );
            assert!(text.contains("(sensitive)@"), "{url}: {text}");
            assert!(text.contains("percent-encoded"), "{url}: {text}");
        }
        // Nor in a debug print of the settings.
        for url in [
            "https://deploy:can%2Fary-pw@h/x.git",
            "ssh://git:can%2Fary-pw@h/x.git",
        ] {
            let shown = format!("{:?}", Source::Remote(Remote::parse(url).unwrap()));
            assert!(!shown.contains("ary-pw"), "{shown}");
            assert!(shown.contains("(sensitive)@h/x.git"), "{shown}");
        }
        // An scp-like address with a user name only is as it was.
        let r = Remote::parse("git@h:o/x.git").unwrap();
        assert_eq!(r.display(), "git@h:o/x.git");
    }

    #[test]
    fn an_at_in_the_path_is_refused_only_where_it_could_end_a_secret() {
        // Nothing before the path's `@` can be a secret: taken as written.
        for url in [
            "https://host/org/repo.git",
            "git@host:org/repo.git",
            "ssh://git@host:22/org/repo.git",
            "file:///srv/repo.git",
            "git@host:org/re@po.git",
            "ssh://git@host:22/org/re@po.git",
            "git+ssh://git@host/org/re@po.git",
            "git://git@host/re@po.git",
            "file:///srv/re@po.git",
            "/srv/re@po.git",
            "/srv/a:b@c.git",
            "https://host/org/re%40po.git",
        ] {
            let r = Remote::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(r.display(), url);
            assert_eq!(Source::Remote(r).secret(), None, "{url}");
        }
        let r = Remote::parse("https://deploy:p%40ss@host/org/repo.git").unwrap();
        assert_eq!(r.display(), "https://(sensitive)@host/org/repo.git");
        assert_eq!(Source::Remote(r).credentials().unwrap().password, "p@ss");
        // Where the part before it could be a token or a password holding a
        // raw `/` (an http(s) user part is secret whole; an scp-like address
        // or a URL without a user name), still refused, with the way out.
        for url in [
            "https://host/org/re@po.git",
            "https://tok@host/org/re@po.git",
            "host:org/re@po.git",
            "ssh://host/org/re@po.git",
        ] {
            let text = Remote::parse(url).unwrap_err().to_string();
            assert!(text.contains("an `@` in the path as %40"), "{url}: {text}");
        }
    }
}
