//! Checking declared fields against a kind's field table.
//!
//! Each kind lists its fields once, with the kind of value each takes; this
//! module reports every unknown field, wrong type, bad mode or bad owner in
//! one go, each with the field's path so the manifest loader can point at the
//! line. It also parses the values (modes, owners, `ensure`) into typed form
//! for the later phases. Pure: no host access.

use std::path::{Path, PathBuf};

use datum_core::DeclaredFields;
use serde_json::Value;

use crate::FieldError;

/// What a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// An absolute, normalised host path that names something below `/`.
    Path,
    /// Any string.
    Text,
    /// A non-empty string (a symlink target).
    NonEmptyText,
    /// A user or group: a name or a number.
    Account,
    /// A quoted octal mode: "0644", "644", "4755".
    Mode,
    /// `present` or `absent`.
    Ensure,
}

/// One row of a kind's field table.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    pub name: &'static str,
    pub kind: FieldKind,
    pub required: bool,
}

impl FieldSpec {
    pub const fn required(name: &'static str, kind: FieldKind) -> Self {
        FieldSpec {
            name,
            kind,
            required: true,
        }
    }

    pub const fn optional(name: &'static str, kind: FieldKind) -> Self {
        FieldSpec {
            name,
            kind,
            required: false,
        }
    }

    /// `validate:`, in the table of every kind that takes a validator. The
    /// manifest reader takes it out of `desired` (the catalogue checks the
    /// name), so here it only makes an unknown field's hint complete
    /// ("known: ..., validate"; `validator:` reads "did you mean `validate`?").
    pub const VALIDATE: FieldSpec = FieldSpec::optional("validate", FieldKind::NonEmptyText);
}

/// Whether the resource should exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ensure {
    #[default]
    Present,
    Absent,
}

impl Ensure {
    pub fn parse(value: Option<&Value>) -> Result<Self, String> {
        match value {
            None => Ok(Ensure::Present),
            Some(Value::String(s)) if s == "present" => Ok(Ensure::Present),
            Some(Value::String(s)) if s == "absent" => Ok(Ensure::Absent),
            Some(Value::String(s)) => {
                Err(format!("`ensure` must be `present` or `absent`, not `{s}`"))
            }
            Some(other) => Err(format!(
                "`ensure` must be `present` or `absent`, found {}",
                type_name(other)
            )),
        }
    }
}

/// The YAML word for a value's type, for messages (the core's, which
/// `DeclaredFields::mapping` names a non-mapping `desired:` with).
pub use datum_core::desired::type_name;

/// [`crate::Capabilities::check_resource_name`] of a kind whose `name:` defaults
/// to the resource's name: `name` checked by `check` as the `what`'s name
/// when `name:` is not written (a written one is `check`ed with the other
/// fields).
pub fn name_as_field(
    field: crate::FieldLookup<'_, '_>,
    name: &str,
    what: &str,
    check: impl Fn(&str) -> Result<(), String>,
) -> Option<String> {
    if field("name").is_some_and(|v| !v.is_null()) {
        return None;
    }
    check(name).err().map(|problem| {
        format!("the resource's name is the {what}'s name (no `name:` is written): {problem}")
    })
}

/// The `name:` of a kind whose name defaults to the resource's own
/// (`default_name`): the written string, or else that name, made into the
/// kind's form by `parse`, which says what is wrong with it. A problem
/// (`parse`'s, or a `name:` that is not a string) is added to `errors`
/// under `name`, and gives `None`.
pub(crate) fn name_field<T>(
    desired: &dyn DeclaredFields,
    default_name: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
    errors: &mut Vec<FieldError>,
) -> Option<T> {
    match desired.get("name") {
        None => parse(default_name),
        Some(Value::String(s)) => parse(s),
        Some(other) => Err(format!(
            "`name` must be a string, found {}",
            type_name(other)
        )),
    }
    .map_err(|m| errors.push(FieldError::new(&["name"], m)))
    .ok()
}

/// An optional boolean field: `None` when it is not written, or when it is
/// not a boolean, which is added to `errors` under `field`.
pub(crate) fn bool_field(
    desired: &dyn DeclaredFields,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<bool> {
    match desired.get(field)? {
        Value::Bool(b) => Some(*b),
        other => {
            errors.push(FieldError::new(
                &[field],
                format!(
                    "`{field}` must be true or false, found {}",
                    type_name(other)
                ),
            ));
            None
        }
    }
}

/// Parses a mode: a quoted string of octal digits, 3 or 4 significant
/// (`644`, `0644`, `4755`), at most `07777`. Numbers are refused because YAML
/// reads an unquoted `0644` as a number and the octal meaning is lost (644
/// decimal or 420, depending on the parser): quoting is the only spelling
/// that means the same thing everywhere.
pub fn parse_mode(value: &Value) -> Result<u32, String> {
    let text = match value {
        Value::String(s) => s.as_str(),
        Value::Number(n) => {
            return Err(format!(
                "`mode` must be a quoted octal string: write mode: \"0{n}\" with quotes (an unquoted {n} is read as a number and loses its octal meaning)"
            ));
        }
        other => {
            return Err(format!(
                "`mode` must be a quoted octal string such as \"0644\", found {}",
                type_name(other)
            ));
        }
    };
    let digits_ok = !text.is_empty() && text.bytes().all(|b| (b'0'..=b'7').contains(&b));
    if !digits_ok {
        return Err(format!(
            "`mode` \"{text}\" is not an octal mode: use 3 or 4 octal digits, such as \"0644\" or \"4755\""
        ));
    }
    // 3 or 4 digits, with at most one more leading zero ("01777"):
    // "00000000000000644" is not a mode anyone means.
    let significant = text.trim_start_matches('0');
    if !(3..=5).contains(&text.len()) || significant.len() > 4 {
        return Err(format!(
            "`mode` \"{text}\" is not an octal mode: use 3 or 4 octal digits, such as \"0644\" or \"4755\""
        ));
    }
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("`mode` \"{text}\" is larger than 07777"))
}

/// A mode as observed fields and plans show it: four octal digits.
pub fn format_mode(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// Parses a user or group: a name, or a number (as a YAML number or digits).
pub fn parse_account(field: &str, value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => {
            if s.is_empty() {
                Err(format!("`{field}` must not be empty"))
            } else if s
                .chars()
                .any(|c| c == ':' || c.is_whitespace() || c.is_control())
            {
                Err(format!(
                    "`{field}` \"{s}\" is not a valid name (no spaces, colons or control characters)"
                ))
            } else {
                Ok(s.clone())
            }
        }
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(|n| n.to_string())
            .ok_or_else(|| format!("`{field}` {n} is not a valid id (0 to 4294967295)")),
        other => Err(format!(
            "`{field}` must be a name or a number, found {}",
            type_name(other)
        )),
    }
}

fn check_value(name: &str, kind: FieldKind, value: &Value) -> Result<(), String> {
    match kind {
        FieldKind::Path => {
            let Value::String(s) = value else {
                return Err(format!(
                    "`{name}` must be an absolute path, found {}",
                    type_name(value)
                ));
            };
            datum_host::paths::check_declared(Path::new(s))
                .map_err(|e| format!("`{name}`: {e}"))?;
            if s == "/" {
                return Err(format!("`{name}` must name something below /"));
            }
            Ok(())
        }
        FieldKind::Text => match value {
            Value::String(_) => Ok(()),
            other => Err(format!(
                "`{name}` must be a string, found {}",
                type_name(other)
            )),
        },
        FieldKind::NonEmptyText => match value {
            Value::String(s) if !s.is_empty() => Ok(()),
            Value::String(_) => Err(format!("`{name}` must not be empty")),
            other => Err(format!(
                "`{name}` must be a string, found {}",
                type_name(other)
            )),
        },
        FieldKind::Account => parse_account(name, value).map(|_| ()),
        FieldKind::Mode => parse_mode(value).map(|_| ()),
        FieldKind::Ensure => Ensure::parse(Some(value)).map(|_| ()),
    }
}

/// `Ok` when no problem was found, else every problem: the shape
/// `Provider::check` returns.
/// Field problems found again at observe or apply (a declaration `check`
/// accepted cannot fail here; a resource built by hand can), as one
/// provider error: the first problem's field, every message.
pub fn invalid(errors: Vec<FieldError>) -> crate::ProviderError {
    crate::ProviderError::Invalid {
        field: errors.first().map(|e| e.path.join(".")).unwrap_or_default(),
        message: errors
            .iter()
            .map(|e| e.message.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    }
}

pub fn all_or_nothing(errors: Vec<FieldError>) -> Result<(), Vec<FieldError>> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Checks `desired` against a field table: it must be a mapping, every field
/// known, every required field present, every value well-formed. Returns all
/// problems found.
pub fn check_fields(kind: &str, desired: &Value, specs: &[FieldSpec]) -> Vec<FieldError> {
    let Value::Object(map) = desired else {
        return vec![FieldError::new(
            &[],
            format!(
                "`desired` of a {kind} must be a mapping, found {}",
                type_name(desired)
            ),
        )];
    };
    let mut errors = Vec::new();
    for (name, value) in map {
        match specs.iter().find(|s| s.name == name) {
            Some(spec) => {
                if let Err(message) = check_value(name, spec.kind, value) {
                    errors.push(FieldError::new(&[name], message));
                }
            }
            None => errors.push(FieldError::new(&[name], unknown_field(kind, name, specs))),
        }
    }
    for spec in specs.iter().filter(|s| s.required) {
        if !map.contains_key(spec.name) {
            errors.push(FieldError::new(
                &[],
                format!("a {kind} needs `{}`", spec.name),
            ));
        }
    }
    errors
}

fn unknown_field(kind: &str, name: &str, specs: &[FieldSpec]) -> String {
    let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
    unknown_field_message(kind, name, &known)
}

/// An error for each field of `map` that is not in `known`, in the order
/// written: the unknown fields of a kind that parses its declaration
/// without a field table (User, Group, Package, Service).
pub(crate) fn unknown_fields(
    kind: &str,
    map: &dyn DeclaredFields,
    known: &[&str],
) -> Vec<FieldError> {
    map.keys()
        .filter(|k| !known.contains(k))
        .map(|k| FieldError::new(&[k], unknown_field_message(kind, k, known)))
        .collect()
}

/// `unknown field `stat` for Service: did you mean `state`?`, or the known
/// fields when none is close (every kind's wording of an unknown field).
pub(crate) fn unknown_field_message(kind: &str, name: &str, known: &[&str]) -> String {
    match datum_core::suggest::closest(name, known.iter().copied()) {
        Some(close) => format!("unknown field `{name}` for {kind}: did you mean `{close}`?"),
        None => format!(
            "unknown field `{name}` for {kind} (known: {})",
            known.join(", ")
        ),
    }
}

/// The declared path (after `check`, always present and valid).
pub fn declared_path(desired: &dyn DeclaredFields) -> Result<PathBuf, String> {
    match desired.get("path") {
        Some(Value::String(s)) => Ok(PathBuf::from(s)),
        Some(other) => Err(format!(
            "`path` must be a string, found {}",
            type_name(other)
        )),
        None => Err("`path` is missing".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A boolean field (a Group's or User's `system`, a Service's
    /// `enabled`): taken when written as one, else one error naming it and
    /// what was found.
    #[test]
    fn a_boolean_field_is_true_or_false() {
        use crate::{group::GroupDesired, service::ServiceSpec, user::UserDesired};
        let group = |d: Value| GroupDesired::parse(&d, "ops").map(|g| g.system);
        let user = |d: Value| UserDesired::parse(&d, "ops").map(|u| u.system);
        let service = |d: Value| ServiceSpec::parse(&d, "web").map(|s| s.enabled);
        assert!(!group(json!({})).unwrap());
        assert!(group(json!({"system": true})).unwrap());
        assert!(!user(json!({})).unwrap());
        assert!(user(json!({"system": true})).unwrap());
        assert_eq!(service(json!({"state": "running"})).unwrap(), None);
        assert_eq!(service(json!({"enabled": false})).unwrap(), Some(false));
        let errors = [
            group(json!({"system": "yes"})).unwrap_err(),
            user(json!({"system": 1})).unwrap_err(),
            service(json!({"enabled": "yes"})).unwrap_err(),
        ];
        let shown: Vec<(String, &str)> = errors
            .iter()
            .flatten()
            .map(|e| (e.path.join("."), e.message.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "system".to_owned(),
                    "`system` must be true or false, found a string"
                ),
                (
                    "system".to_owned(),
                    "`system` must be true or false, found a number"
                ),
                (
                    "enabled".to_owned(),
                    "`enabled` must be true or false, found a string"
                ),
            ]
        );
    }

    /// `name:` of a User-like kind (Group, Package, Service): a string
    /// written, else the resource's name, either checked by the kind; a
    /// problem with it is one error under `name`, whatever else is wrong.
    #[test]
    fn a_name_is_the_string_written_or_the_resources_name_checked_alike() {
        type Parse = fn(&Value, &str) -> Result<(), Vec<FieldError>>;
        let kinds: [(&str, Parse); 3] = [
            ("Group", |d, n| {
                crate::group::GroupDesired::parse(d, n).map(drop)
            }),
            ("Package", |d, n| {
                crate::package::PackageSpec::parse(d, n).map(drop)
            }),
            ("Service", |d, n| {
                crate::service::ServiceSpec::parse(d, n).map(drop)
            }),
        ];
        let name_errors = |parse: Parse, desired: Value, default: &str| -> Vec<String> {
            match parse(&desired, default) {
                Ok(()) => Vec::new(),
                Err(errors) => errors
                    .into_iter()
                    .filter(|e| e.path == ["name"])
                    .map(|e| e.message)
                    .collect(),
            }
        };
        for (kind, parse) in kinds {
            let fine = json!({"enabled": true});
            assert_eq!(
                name_errors(parse, fine.clone(), "web"),
                [] as [&str; 0],
                "{kind}"
            );
            let written = json!({"name": "web", "enabled": true});
            assert_eq!(
                name_errors(parse, written, "-x y"),
                [] as [&str; 0],
                "{kind}"
            );
            let number = json!({"name": 3, "enabled": true});
            assert_eq!(
                name_errors(parse, number, "web"),
                ["`name` must be a string, found a number"],
                "{kind}"
            );
            for desired in [fine, json!({"name": "-x y", "enabled": true})] {
                let errors = name_errors(parse, desired, "-x y");
                assert_eq!(errors.len(), 1, "{kind}: {errors:?}");
            }
        }
    }

    #[test]
    fn modes_must_be_quoted_octal() {
        let good = [
            ("0644", 0o644),
            ("644", 0o644),
            ("4755", 0o4755),
            ("01777", 0o1777),
            ("0000", 0),
        ];
        for (text, want) in good {
            assert_eq!(parse_mode(&json!(text)), Ok(want), "{text}");
        }
        let bad = [
            (json!(644), "quoted"),
            (json!(420), "\"0420\""),
            (json!("0899"), "octal"),
            (json!("u+rw"), "octal"),
            (json!("44"), "3 or 4"),
            (json!(""), "octal"),
            (json!("17777"), "3 or 4"),
            (json!("00000000000000644"), "3 or 4"),
            (json!(true), "found a boolean"),
        ];
        for (value, hint) in bad {
            let err = parse_mode(&value).unwrap_err();
            assert!(err.contains(hint), "{value}: {err}");
        }
        assert_eq!(format_mode(0o644), "0644");
        assert_eq!(format_mode(0o4755), "4755");
    }

    #[test]
    fn accounts_are_names_or_numbers() {
        assert_eq!(parse_account("owner", &json!("root")).unwrap(), "root");
        assert_eq!(parse_account("owner", &json!(0)).unwrap(), "0");
        assert_eq!(parse_account("owner", &json!("33")).unwrap(), "33");
        for bad in [
            json!(""),
            json!("a b"),
            json!("a:b"),
            json!(-1),
            json!(1.5),
            json!([1]),
        ] {
            assert!(parse_account("owner", &bad).is_err(), "{bad}");
        }
    }

    const SPECS: &[FieldSpec] = &[
        FieldSpec::required("path", FieldKind::Path),
        FieldSpec::optional("mode", FieldKind::Mode),
        FieldSpec::optional("owner", FieldKind::Account),
        FieldSpec::optional("ensure", FieldKind::Ensure),
    ];

    fn paths(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(|e| e.path.join(".")).collect()
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let errors = check_fields(
            "File",
            &json!({"mdoe": "0644", "owner": [], "ensure": "gone", "mode": 644}),
            SPECS,
        );
        let mut got = paths(&errors);
        got.sort();
        assert_eq!(got, ["", "ensure", "mdoe", "mode", "owner"]);
        let typo = errors.iter().find(|e| e.path == ["mdoe"]).unwrap();
        assert!(
            typo.message.contains("did you mean `mode`"),
            "{}",
            typo.message
        );
        let missing = errors.iter().find(|e| e.path.is_empty()).unwrap();
        assert!(missing.message.contains("`path`"), "{}", missing.message);
    }

    #[test]
    fn paths_must_be_absolute_normalised_and_below_the_root() {
        for bad in ["etc/motd", "/etc/../shadow", "/", "/etc//x"] {
            let errors = check_fields("File", &json!({"path": bad}), SPECS);
            assert_eq!(paths(&errors), ["path"], "{bad}");
        }
        assert!(check_fields("File", &json!({"path": "/etc/motd"}), SPECS).is_empty());
        assert_eq!(paths(&check_fields("File", &json!("x"), SPECS)), [""]);
    }

    #[test]
    fn unknown_fields_list_the_known_ones_when_nothing_is_close() {
        let errors = check_fields("File", &json!({"path": "/x", "colour": "red"}), SPECS);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .message
                .contains("known: path, mode, owner, ensure"),
            "{}",
            errors[0].message
        );
    }
}
