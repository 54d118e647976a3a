//! Resource identity: a kind (provider name) plus a name unique within the kind.
//!
//! Users read and write identities as `Kind[name]` (reports, errors) and refer to
//! them as `Kind/name` in `requires:` lists; both forms parse.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `File[sshd-config]`: the kind is the provider's type name, the name is the
/// document's `name:`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceId {
    pub kind: String,
    pub name: String,
}

/// A reference that is neither `Kind/name` nor `Kind[name]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a resource reference: write Kind/name, for example File/sshd-config")]
pub struct ParseIdError {
    pub text: String,
}

impl ResourceId {
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// Parses `Kind/name` or `Kind[name]`.
    pub fn parse(text: &str) -> Result<Self, ParseIdError> {
        let err = || ParseIdError {
            text: text.to_owned(),
        };
        let (kind, name) = if let Some(stripped) = text.strip_suffix(']') {
            stripped.split_once('[').ok_or_else(err)?
        } else {
            text.split_once('/').ok_or_else(err)?
        };
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !kind_ok || name.is_empty() {
            return Err(err());
        }
        Ok(Self::new(kind, name))
    }
}

/// A reference as a manifest writes it (`File/sshd-config` or
/// `File[sshd-config]`), for JSON Schemas: what [`ResourceId::parse`]
/// accepts. ([`ResourceId`]'s own serde form is a `kind`/`name` object.)
pub struct ReferenceText;

impl schemars::JsonSchema for ReferenceText {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Reference".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[A-Z][A-Za-z0-9]*(/.*[^\\]]|\\[.+\\])$",
            "description": "A resource reference: Kind/name (File/sshd-config) or Kind[name].",
        })
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.kind, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_reference_forms_parse_to_the_same_id() {
        let a = ResourceId::parse("File/sshd-config").unwrap();
        let b = ResourceId::parse("File[sshd-config]").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "File[sshd-config]");
    }

    #[test]
    fn malformed_references_are_rejected() {
        for bad in ["sshd", "file/x", "File/", "File[x", "/x", "Fi le/x"] {
            assert!(ResourceId::parse(bad).is_err(), "{bad} should not parse");
        }
    }
}
