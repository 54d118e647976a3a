//! The Package kind's declared fields: checking them and parsing them into a
//! [`PackageSpec`].
//!
//! Pure: no host access. Names and versions are checked against Debian's
//! rules here, so what reaches `apt-get` is always a package name (never an
//! option such as `-oAPT::...`) and a version made of the characters Debian
//! allows.

use datum_core::DeclaredFields;
use serde_json::Value;

use crate::FieldError;
use crate::common::fields::{name_field, type_name, unknown_fields};

/// What the declaration asks of the package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Installed (held or not: the hold is not managed).
    Installed,
    /// Not installed. Removed, not purged: its configuration files stay.
    Absent,
    /// Installed and held (`apt-mark hold`), so apt does not upgrade it.
    Held,
}

impl Wanted {
    pub fn word(self) -> &'static str {
        match self {
            Wanted::Installed => "installed",
            Wanted::Absent => "absent",
            Wanted::Held => "held",
        }
    }

    pub fn wants_installed(self) -> bool {
        self != Wanted::Absent
    }
}

/// A declared version: exact, or a prefix written with a trailing `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionReq {
    /// The whole version string as dpkg shows it (`1.22.1-9`, `1:9.2p1-2`).
    Exact(String),
    /// Any version starting with this text: `1.22.*` is `Prefix("1.22.")`.
    Prefix(String),
}

impl VersionReq {
    /// Parses a declared version (already checked by [`check_version`]).
    pub fn parse(text: &str) -> Result<Self, String> {
        check_version(text)?;
        Ok(match text.strip_suffix('*') {
            Some(prefix) => VersionReq::Prefix(prefix.to_owned()),
            None => VersionReq::Exact(text.to_owned()),
        })
    }

    /// Whether an installed version satisfies the declaration.
    ///
    /// Versions are compared as text, epoch included, which is what "exact"
    /// means to dpkg and to apt (`apt-get install openssh-server=9.2p1-2`
    /// finds nothing when the version is `1:9.2p1-2`): write the version as
    /// `dpkg-query -W` shows it.
    pub fn matches(&self, installed: &str) -> bool {
        match self {
            VersionReq::Exact(want) => installed == want,
            VersionReq::Prefix(prefix) => installed.starts_with(prefix.as_str()),
        }
    }

    /// The declared text without the `*`.
    pub fn text(&self) -> &str {
        match self {
            VersionReq::Exact(v) | VersionReq::Prefix(v) => v,
        }
    }

    /// As the manifest writes it (`1.22.*`).
    pub fn declared(&self) -> String {
        match self {
            VersionReq::Exact(v) => v.clone(),
            VersionReq::Prefix(p) => format!("{p}*"),
        }
    }

    /// The `name=version` argument apt understands: apt matches a trailing
    /// `*` as a prefix itself and picks the highest version that matches.
    pub fn apt_pin(&self, name: &str) -> String {
        format!("{name}={}", self.declared())
    }
}

/// A Package declaration, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSpec {
    /// The package name, optionally with `:arch`.
    pub name: String,
    pub version: Option<VersionReq>,
    pub state: Wanted,
}

/// No `validate`: a Package stages nothing a validator could check (the
/// catalogue refuses it, see `Capabilities::takes_validator`).
const FIELDS: &[&str] = &["name", "version", "state"];

/// A Package's `desired` as written in a manifest: the type its JSON Schema
/// is derived from (held to `FIELDS` and to `PackageSpec::parse` below).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "Package",
    description = "A Debian package, installed, held or absent, optionally at a version.",
    extend("not" = {"required": ["version", "state"], "properties": {"state": {"const": "absent"}}})
)]
pub struct PackageDeclaration {
    /// The package (default: the resource's name), optionally `:arch`.
    #[schemars(with = "Option<PackageName>")]
    pub name: Option<String>,
    /// Exactly this version as `dpkg-query -W` shows it, or a prefix ending
    /// in `*` (`1.22.*`).
    #[schemars(with = "Option<PackageVersion>")]
    pub version: Option<String>,
    #[schemars(with = "Option<PackageState>")]
    pub state: Option<String>,
}

/// A value of the manifest schema (see the declaration type above).
pub struct PackageName;

impl schemars::JsonSchema for PackageName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PackageName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$",
            "description": "A Debian package name (lower-case letters, digits, `+-.`), optionally with `:architecture`.",
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct PackageVersion;

impl schemars::JsonSchema for PackageVersion {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PackageVersion".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[A-Za-z0-9.+~:-]+\\*?$",
            "description": "A Debian version (`1.22.1-9`, with its epoch `1:9.2p1-2` as dpkg shows it) or a prefix ending in `*` (`1.22.*`).",
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct PackageState;

impl schemars::JsonSchema for PackageState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PackageState".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "enum": ["installed", "absent", "held"], "description": "Default installed." })
    }
}

impl PackageSpec {
    /// Parses `desired`. `default_name` (the resource's own name) is the
    /// package when `desired.name` is absent. Returns every problem found.
    pub fn parse(
        desired: &dyn DeclaredFields,
        default_name: &str,
    ) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        // `desired: {}` written as nothing (null) reads as no fields: the
        // resource name is the package.
        match desired.mapping() {
            Ok(()) => {}
            Err(_) if desired.is_null() => {}
            Err(found) => {
                return Err(vec![FieldError::new(
                    &[],
                    format!(
                        "a Package's `desired` must be a mapping (name, version, state), found {found}"
                    ),
                )]);
            }
        }
        errors.extend(unknown_fields("Package", desired, FIELDS));

        let name = name_field(
            desired,
            default_name,
            |n| check_name(n).map(|()| n.to_owned()),
            &mut errors,
        );

        let state = match desired.get("state") {
            None => Some(Wanted::Installed),
            Some(Value::String(s)) => match s.as_str() {
                "installed" => Some(Wanted::Installed),
                "absent" => Some(Wanted::Absent),
                "held" => Some(Wanted::Held),
                other => {
                    errors.push(FieldError::new(
                        &["state"],
                        format!("`state` must be `installed`, `absent` or `held`, not `{other}`"),
                    ));
                    None
                }
            },
            Some(other) => {
                errors.push(FieldError::new(
                    &["state"],
                    format!(
                        "`state` must be `installed`, `absent` or `held`, found {}",
                        type_name(other)
                    ),
                ));
                None
            }
        };

        let version = match desired.get("version") {
            None => None,
            Some(Value::String(s)) => VersionReq::parse(s)
                .map_err(|m| errors.push(FieldError::new(&["version"], m)))
                .ok(),
            // `version: 1.5` in YAML is a number; say how to write it.
            Some(Value::Number(n)) => {
                errors.push(FieldError::new(
                    &["version"],
                    format!("`version` must be a string: write it quoted, \"{n}\""),
                ));
                None
            }
            Some(other) => {
                errors.push(FieldError::new(
                    &["version"],
                    format!("`version` must be a string, found {}", type_name(other)),
                ));
                None
            }
        };
        if version.is_some() && state == Some(Wanted::Absent) {
            errors.push(FieldError::new(
                &["version"],
                "`version` cannot be combined with `state: absent`",
            ));
        }

        match (name, state) {
            (Some(name), Some(state)) if errors.is_empty() => Ok(PackageSpec {
                name,
                version,
                state,
            }),
            _ => Err(errors),
        }
    }

    /// The name without an `:arch` suffix.
    pub fn bare_name(&self) -> &str {
        self.name.split_once(':').map_or(&self.name, |(n, _)| n)
    }
}

/// Debian's rules for a package name (Debian Policy 5.6.1): at least two
/// characters, lower-case letters, digits, `+`, `-` and `.`, starting with a
/// letter or digit. An `:arch` qualifier (`libc6:i386`) is accepted.
pub fn check_name(name: &str) -> Result<(), String> {
    let (base, arch) = match name.split_once(':') {
        Some((base, arch)) => (base, Some(arch)),
        None => (name, None),
    };
    if base.len() < 2 {
        return Err(format!(
            "package name `{name}` is too short: Debian package names have at least two characters"
        ));
    }
    if !base.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return Err(format!(
            "package name `{name}` must start with a lower-case letter or a digit"
        ));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c);
    if let Some(bad) = base.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "package name `{name}` contains `{}`: Debian package names use lower-case letters, digits, `+`, `-` and `.` only",
            bad.escape_default()
        ));
    }
    if let Some(arch) = arch {
        let arch_ok = !arch.is_empty()
            && arch
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !arch_ok {
            return Err(format!(
                "`{name}`: the architecture after `:` must be a Debian architecture such as amd64 or i386"
            ));
        }
    }
    Ok(())
}

/// Debian's rules for a version (Debian Policy 5.6.12), with one addition: a
/// trailing `*` makes it a prefix. `[epoch:]upstream[-revision]`, the
/// upstream part starting with a digit, and only `A-Za-z0-9.+~-:` inside.
pub fn check_version(text: &str) -> Result<(), String> {
    let body = text.strip_suffix('*').unwrap_or(text);
    if body.is_empty() {
        return Err(if text.is_empty() {
            "`version` must not be empty; leave it out to accept any version".to_owned()
        } else {
            "`version: *` accepts every version; leave `version` out instead".to_owned()
        });
    }
    if body.contains('*') {
        return Err(format!(
            "version `{text}`: `*` may only end a version, as in `1.22.*` (any version starting with `1.22.`)"
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || ".+~-:".contains(c);
    if let Some(bad) = body.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "version `{text}` contains `{}`: Debian versions use letters, digits and `.+~-:` only",
            bad.escape_default()
        ));
    }
    let upstream = match body.split_once(':') {
        Some((epoch, rest)) => {
            if epoch.is_empty() || !epoch.chars().all(|c| c.is_ascii_digit()) {
                return Err(format!(
                    "version `{text}`: the epoch before `:` must be a number"
                ));
            }
            rest
        }
        None => body,
    };
    if !upstream.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "version `{text}` must start with a digit (after the epoch, if any)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(errors: &[FieldError]) -> Vec<String> {
        let mut p: Vec<String> = errors.iter().map(|e| e.path.join(".")).collect();
        p.sort();
        p
    }

    #[test]
    fn the_declaration_type_has_the_field_table_and_agrees_with_check() {
        use crate::common::schema;
        let p = crate::package::PackageProvider;
        let schema = crate::Provider::declaration_schema(&p, &mut schema::generator());
        let (names, required) = schema::fields_of(&schema);
        let mut want: Vec<&str> = FIELDS.to_vec();
        want.sort();
        assert_eq!(names, want);
        assert_eq!(required, [] as [&str; 0]);
        let cases = [
            json!({}),
            json!({"state": "installed"}),
            json!({"name": "nginx-light", "version": "1.22.1-9", "state": "held"}),
            json!({"name": "libc6:amd64", "version": "1.22.*"}),
            json!({"name": "openssh-server", "version": "1:9.2p1-2"}),
            json!({"state": "absent"}),
            json!({"state": "absent", "version": "1.0"}),
            json!({"state": "latest"}),
            json!({"name": "Bad Name"}),
            json!({"name": "x"}),
            json!({"version": 1.2}),
            json!({"version": ""}),
            json!({"version": "1.*.2"}),
            json!({"version": "1 2"}),
            json!({"release": "bookworm"}),
        ];
        schema::agrees_with_check(&p, &cases).unwrap();
    }

    #[test]
    fn a_full_declaration_parses() {
        let spec = PackageSpec::parse(
            &json!({"name": "nginx-light", "version": "1.22.*", "state": "held"}),
            "web",
        )
        .unwrap();
        assert_eq!(spec.name, "nginx-light");
        assert_eq!(spec.version, Some(VersionReq::Prefix("1.22.".into())));
        assert_eq!(spec.state, Wanted::Held);
    }

    #[test]
    fn the_resource_name_is_the_package_and_installed_the_default() {
        let spec = PackageSpec::parse(&json!({}), "openssh-server").unwrap();
        assert_eq!(spec.name, "openssh-server");
        assert_eq!(spec.state, Wanted::Installed);
        assert_eq!(spec.version, None);
        assert!(PackageSpec::parse(&Value::Null, "curl").is_ok());
        assert_eq!(
            PackageSpec::parse(&json!({"name": "libc6:i386"}), "x")
                .unwrap()
                .bare_name(),
            "libc6"
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let errors = PackageSpec::parse(
            &json!({"name": "-oAPT::Get=1", "version": 1.5, "state": "latest", "ensure": "x"}),
            "x",
        )
        .unwrap_err();
        assert_eq!(paths(&errors), ["ensure", "name", "state", "version"]);
        assert!(
            errors.iter().any(|e| e.message.contains("\"1.5\"")),
            "{errors:?}"
        );
        let errors =
            PackageSpec::parse(&json!({"version": "1.0", "state": "absent"}), "curl").unwrap_err();
        assert_eq!(paths(&errors), ["version"]);
        assert!(PackageSpec::parse(&json!(["curl"]), "x").is_err());
        assert!(PackageSpec::parse(&json!({"state": true}), "curl").is_err());
    }

    #[test]
    fn package_names_follow_debian_policy() {
        for good in [
            "nginx-light",
            "g++",
            "libstdc++6",
            "python3.11",
            "0ad",
            "libc6:i386",
        ] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "a",
            "Nginx",
            "-y",
            "--purge",
            "a b",
            "a_b",
            "x;rm",
            "nginx=1.0",
            "curl:",
            "libc6:I386",
            ".x",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn versions_follow_debian_policy_with_a_trailing_star() {
        for good in [
            "1.0",
            "1:9.2p1-2+deb12u3",
            "2.36-9+deb12u4",
            "1.0~rc1",
            "1.22.*",
            "1*",
        ] {
            assert!(check_version(good).is_ok(), "{good}");
        }
        for bad in [
            "", "*", "1.*.3", "a1.0", "x:1.0", ":1.0", "1.0 ", "1.0;", "1.0/2", "=1.0",
        ] {
            assert!(check_version(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn exact_and_prefix_versions_match() {
        let exact = VersionReq::parse("1.22.1-9").unwrap();
        assert!(exact.matches("1.22.1-9"));
        assert!(!exact.matches("1.22.1-9+deb12u1"));
        assert!(!exact.matches("1.22.1"));

        let prefix = VersionReq::parse("1.22.*").unwrap();
        assert!(prefix.matches("1.22.1-9"));
        assert!(prefix.matches("1.22.0"));
        assert!(!prefix.matches("1.2.2"));
        assert!(!prefix.matches("1.220.1"), "the dot is part of the prefix");
        assert!(!prefix.matches("2.1.22.1"));
        assert_eq!(prefix.declared(), "1.22.*");
        assert_eq!(prefix.apt_pin("nginx"), "nginx=1.22.*");
        assert_eq!(exact.apt_pin("nginx"), "nginx=1.22.1-9");
    }

    #[test]
    fn the_epoch_is_part_of_the_version() {
        let installed = "1:9.2p1-2+deb12u3";
        assert!(VersionReq::parse("1:9.2p1-*").unwrap().matches(installed));
        assert!(
            VersionReq::parse("1:9.2p1-2+deb12u3")
                .unwrap()
                .matches(installed)
        );
        assert!(!VersionReq::parse("9.2p1-*").unwrap().matches(installed));
        assert!(
            !VersionReq::parse("9.2p1-2+deb12u3")
                .unwrap()
                .matches(installed)
        );
        assert!(!VersionReq::parse("2:9.2p1-*").unwrap().matches(installed));
        assert!(!VersionReq::parse("1:9.2").unwrap().matches("9.2"));
    }
}
