//! What can go wrong managing a package, in words an operator can act on.
//!
//! Every variant names the package and, where the host matters, the host;
//! failures of apt carry apt's own `E:` lines (bounded), because "apt-get
//! failed" alone sends the operator to the machine to find out why. This
//! module owns the wording only; it must not decide what a pass does about a
//! failure (the engine does).

use std::path::PathBuf;

use datum_host::HostError;

use super::status::StatusError;

/// A failure of the Package provider.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// `--root` is a directory tree: apt and dpkg would change this machine.
    #[error(
        "cannot change package {package} under --root {}: packages are installed and removed only on the running system (--root /) or from inside it",
        root.display()
    )]
    NotRunningSystem { package: String, root: PathBuf },

    /// The package database could not be read.
    #[error("cannot observe package {package}: {source}")]
    Status {
        package: String,
        #[source]
        source: StatusError,
    },

    /// apt knows no such package (or no such version of it).
    #[error("package {package} cannot be installed on {host}: {}", lines(apt))]
    Unknown {
        package: String,
        host: String,
        /// apt's `E:` lines that name it.
        apt: Vec<String>,
    },

    /// apt ran and said no.
    #[error(
        "`apt-get {verb}` failed for {} on {host} ({}){}",
        packages.join(", "),
        status_words(*status, *timed_out),
        if apt.is_empty() { String::new() } else { format!(": {}", lines(apt)) }
    )]
    Apt {
        verb: &'static str,
        packages: Vec<String>,
        host: String,
        status: Option<i32>,
        timed_out: bool,
        /// apt's `E:` lines, or the last lines of its output when it printed
        /// none.
        apt: Vec<String>,
    },

    /// Installing would remove other packages (a conflict), or removing this
    /// package would remove others that depend on it. Datum removes only what
    /// the repository declares absent.
    #[error(
        "{verb} {package} on {host} would also remove {}: declare them `state: absent` if that is intended",
        others.join(", ")
    )]
    WouldRemoveOthers {
        verb: &'static str,
        package: String,
        host: String,
        others: Vec<String>,
    },

    /// apt-get installed something, but nothing of the declared name: apt
    /// takes the name of a virtual package (one other packages `Provides:`)
    /// with a single provider as that provider's, so every pass would
    /// install nothing and fail its verify without saying why.
    #[error(
        "`apt-get install {package}` succeeded on {host}, yet no package named {package} is installed: apt took it for a virtual package (a name other packages provide) and installed one that provides it (/var/log/apt/history.log names it); declare that package by its own name"
    )]
    NotInstalledByName { package: String, host: String },

    /// The declared name is a virtual package's (apt knows no version of
    /// it; other packages `Provides:` it): refused before apt runs, which
    /// would install a provider in its place.
    #[error(
        "{package} is a virtual package on {host}: no package of that name exists, {} provide{} it, and apt-get would install one of them in its place; nothing was installed: declare the package you want by its own name",
        providers.join(", "),
        if providers.len() == 1 { "s" } else { "" }
    )]
    Virtual {
        package: String,
        host: String,
        providers: Vec<String>,
    },

    /// dpkg reports unfinished work: `dpkg --audit` printed something, or a
    /// package is half-installed, half-configured, unpacked or waiting for
    /// triggers.
    #[error(
        "the package database on {host} is not consistent after changing {package}: {}; run `dpkg --configure -a` (or reinstall the package named) and apply again",
        problems.join(" / ")
    )]
    Inconsistent {
        package: String,
        host: String,
        problems: Vec<String>,
    },

    /// apt-get, apt-mark or dpkg could not be run at all.
    #[error("cannot run {program} for {package}: {source}")]
    Host {
        program: &'static str,
        package: String,
        #[source]
        source: HostError,
    },
}

impl From<PackageError> for crate::ProviderError {
    fn from(err: PackageError) -> Self {
        crate::ProviderError::Kind(crate::KindError::new(err))
    }
}

fn lines(apt: &[String]) -> String {
    if apt.is_empty() {
        "apt printed no error line".to_owned()
    } else {
        apt.join(" / ")
    }
}

fn status_words(status: Option<i32>, timed_out: bool) -> String {
    match (timed_out, status) {
        (true, _) => "timed out".to_owned(),
        (false, Some(code)) => format!("exit {code}"),
        (false, None) => "killed by a signal".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_failures_quote_apt_on_one_line() {
        let err = PackageError::Apt {
            verb: "install",
            packages: vec!["nginx-light".into(), "openssh-server".into()],
            host: "web-01".into(),
            status: Some(100),
            timed_out: false,
            apt: vec![
                "E: Sub-process /usr/bin/dpkg returned an error code (1)".into(),
                "E: second".into(),
            ],
        };
        assert_eq!(
            err.to_string(),
            "`apt-get install` failed for nginx-light, openssh-server on web-01 (exit 100): E: Sub-process /usr/bin/dpkg returned an error code (1) / E: second"
        );
        let err = PackageError::Unknown {
            package: "nosuch".into(),
            host: "h".into(),
            apt: vec!["E: Unable to locate package nosuch".into()],
        };
        assert_eq!(
            err.to_string(),
            "package nosuch cannot be installed on h: E: Unable to locate package nosuch"
        );
    }

    #[test]
    fn removals_name_what_else_would_go() {
        let err = PackageError::WouldRemoveOthers {
            verb: "removing",
            package: "libfoo1".into(),
            host: "h".into(),
            others: vec!["foo".into(), "bar".into()],
        };
        assert!(
            err.to_string().contains("would also remove foo, bar"),
            "{err}"
        );
    }
}
