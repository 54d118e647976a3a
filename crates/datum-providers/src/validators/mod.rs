//! The validators this build of Datum ships, by name.
//!
//! A resource refers to a validator only by name (`validate: sshd`); the
//! program, its arguments and what its exit statuses mean are defined here,
//! in code, never in a repository (repository content must not become a
//! command line run as root). Adding a validator is one new row in
//! [`VALIDATORS`].
//!
//! Every definition here must be free of side effects: it reads the staged
//! content and says yes or no, and does not write, reload or touch the live
//! configuration. Datum cannot enforce that for a third-party binary, so it is
//! a rule for whoever adds a row.
//!
//! This module only lists the definitions. Running them, and what the engine
//! does with a "no", is the gate's business (issue 3).

/// What a validator checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One staged file on its own.
    File,
    /// The application's whole assembled configuration (nginx with its
    /// includes): run once for a group of files, after all are written.
    Group,
}

/// One validator definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidatorDef {
    /// The name a manifest uses in `validate:`.
    pub name: &'static str,
    /// The program it runs, looked up in PATH and the sbin directories; `None`
    /// for validators built into Datum (parsers).
    pub binary: Option<&'static str>,
    /// The Debian package that provides the binary, for the "missing
    /// validator" error's suggestion of an ordering edge.
    pub package: Option<&'static str>,
    pub scope: Scope,
    /// One line for `datum validators`.
    pub summary: &'static str,
}

/// Every shipped validator, in the order `datum validators` lists them.
pub const VALIDATORS: &[ValidatorDef] = &[
    ValidatorDef {
        name: "sshd",
        binary: Some("sshd"),
        package: Some("openssh-server"),
        scope: Scope::File,
        summary: "OpenSSH server configuration (sshd -t -f)",
    },
    ValidatorDef {
        name: "nginx",
        binary: Some("nginx"),
        package: Some("nginx"),
        scope: Scope::Group,
        summary: "nginx configuration as a whole (nginx -t)",
    },
    ValidatorDef {
        name: "sudoers",
        binary: Some("visudo"),
        package: Some("sudo"),
        scope: Scope::File,
        summary: "sudoers file or drop-in (visudo -c -f)",
    },
    ValidatorDef {
        name: "json",
        binary: None,
        package: None,
        scope: Scope::File,
        summary: "well-formed JSON (built in)",
    },
    ValidatorDef {
        name: "yaml",
        binary: None,
        package: None,
        scope: Scope::File,
        summary: "well-formed YAML (built in)",
    },
    ValidatorDef {
        name: "toml",
        binary: None,
        package: None,
        scope: Scope::File,
        summary: "well-formed TOML (built in)",
    },
    ValidatorDef {
        name: "systemd-unit",
        binary: Some("systemd-analyze"),
        package: Some("systemd"),
        scope: Scope::File,
        summary: "systemd unit file (systemd-analyze verify)",
    },
    ValidatorDef {
        name: "nftables",
        binary: Some("nft"),
        package: Some("nftables"),
        scope: Scope::File,
        summary: "nftables ruleset (nft -c -f)",
    },
    ValidatorDef {
        name: "haproxy",
        binary: Some("haproxy"),
        package: Some("haproxy"),
        scope: Scope::File,
        summary: "HAProxy configuration (haproxy -c -f)",
    },
    ValidatorDef {
        name: "apache2",
        binary: Some("apache2ctl"),
        package: Some("apache2"),
        scope: Scope::Group,
        summary: "Apache configuration as a whole (apache2ctl configtest)",
    },
    ValidatorDef {
        name: "logrotate",
        binary: Some("logrotate"),
        package: Some("logrotate"),
        scope: Scope::File,
        summary: "logrotate configuration (logrotate -d)",
    },
];

/// Every shipped validator.
pub fn all() -> &'static [ValidatorDef] {
    VALIDATORS
}

/// The validator a manifest names, if Datum ships one by that name.
pub fn lookup(name: &str) -> Option<&'static ValidatorDef> {
    VALIDATORS.iter().find(|v| v.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_the_issue_lists_is_shipped_once() {
        let names = [
            "sshd",
            "nginx",
            "sudoers",
            "json",
            "yaml",
            "toml",
            "systemd-unit",
            "nftables",
            "haproxy",
            "apache2",
            "logrotate",
        ];
        for name in names {
            assert_eq!(lookup(name).map(|v| v.name), Some(name));
        }
        let mut all_names: Vec<&str> = all().iter().map(|v| v.name).collect();
        all_names.sort_unstable();
        all_names.dedup();
        assert_eq!(all_names.len(), all().len(), "duplicate names");
    }

    #[test]
    fn command_lines_and_unknown_names_are_not_validators() {
        for bad in ["sshd -t -f %s", "/usr/sbin/sshd", "SSHD", "", "nginx {}"] {
            assert_eq!(lookup(bad), None, "{bad}");
        }
    }

    #[test]
    fn binaries_and_packages_go_together() {
        for v in all() {
            assert_eq!(v.binary.is_some(), v.package.is_some(), "{}", v.name);
            if let Some(binary) = v.binary {
                assert!(
                    !binary.contains(['/', ' ']),
                    "{}: a bare program name",
                    v.name
                );
            }
        }
        assert_eq!(lookup("nginx").map(|v| v.scope), Some(Scope::Group));
    }
}
