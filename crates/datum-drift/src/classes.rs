//! Resource classes from `datum.yaml`: how often a class is checked, how
//! deeply, and what happens to its drift.
//!
//! ```yaml
//! classes:
//!   critical: {interval: 60s, content: full, policy: revert, watch: true}
//!   normal:   {interval: 1h}
//!   edited:   {interval: 15m, content: metadata, audit_every: 10, policy: accept}
//!   frozen:   {interval: 5m, policy: quarantine, scope: host}
//!   config:
//!     interval: 1h
//!     watch: true
//!     attribute: true          # the agent finds out who changed each file
//!     policy: revert
//!     on_change_by: {package_manager: accept, person: quarantine, other: revert}
//! ```
//!
//! `on_change_by` (needs `attribute: true`) picks the policy by who made the
//! change (see [`ClassSpec::policy_for`]): a package upgrade the declaration
//! should follow, a person's edit held for review, anything else put back.
//! A writer the agent could not identify counts as `other`; a rule not given
//! falls back to `policy`.
//!
//! `content: metadata` (opt-in, never the default) skips reading a file whose
//! size, mtime, ctime, inode and device all equal what was recorded at its
//! last verified apply. The trade-off: an edit that preserves all five (a
//! same-length rewrite in place with the mtime set back, on a file system
//! whose ctime an attacker controls, or a restore that keeps them) goes
//! unseen until the next full audit; `audit_every: N` makes every Nth check
//! of the class read content anyway.
//!
//! Owns: parsing and checking the `classes:` mapping ([`Classes::parse`]) and
//! the class of each resource ([`Classes::unknown_classes`]). Must not: read
//! the host or the store.

use std::collections::BTreeMap;
use std::time::Duration;

use datum_core::{ChangedBy, WriterKind};
use serde::Serialize;
use serde_json::Value;

/// The class every resource has unless it names another.
pub use datum_core::DEFAULT_CLASS;

/// How deeply a class's resources are inspected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentMode {
    /// Read and hash every declared file (the default).
    Full,
    /// Compare metadata with the last verified apply first; read only what
    /// changed (see the module header for what this can miss).
    Metadata,
}

/// What a check does with a class's drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Record and report only (the default).
    Report,
    /// Apply the declaration to the drifted resources, through the engine.
    Revert,
    /// Record the observed state as accepted and write a patch for the
    /// repository.
    Accept,
    /// Exclude the resource (or host) from apply until `datum release`.
    Quarantine,
}

impl Policy {
    fn parse(word: &str) -> Option<Policy> {
        match word {
            "report" => Some(Policy::Report),
            "revert" => Some(Policy::Revert),
            "accept" => Some(Policy::Accept),
            "quarantine" => Some(Policy::Quarantine),
            _ => None,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Policy::Report => "report",
            Policy::Revert => "revert",
            Policy::Accept => "accept",
            Policy::Quarantine => "quarantine",
        }
    }
}

/// `on_change_by`: the policy by who changed a resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WriterRules {
    /// dpkg or apt (a package upgrade).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package_manager: Option<Policy>,
    /// A person's login session (sshd, a terminal, a login session).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub person: Option<Policy>,
    /// Anything else: a unit, some process, a writer not identified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other: Option<Policy>,
}

impl WriterRules {
    /// `package_manager → accept, person → quarantine, other → revert`.
    pub fn describe(&self) -> String {
        [
            ("package_manager", self.package_manager),
            ("person", self.person),
            ("other", self.other),
        ]
        .iter()
        .filter_map(|(k, p)| p.map(|p| format!("{k} → {}", p.word())))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// What a quarantine covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Resource,
    Host,
}

/// One class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassSpec {
    pub name: String,
    #[serde(serialize_with = "as_secs")]
    pub interval: Duration,
    pub content: ContentMode,
    /// With `content: metadata`: every Nth check of the class reads content.
    pub audit_every: Option<u64>,
    pub policy: Policy,
    pub scope: Scope,
    /// For an agent: react to file-system events between intervals.
    pub watch: bool,
    /// For an agent watching the class: find out which process, user and
    /// login session made each change (fanotify), see `datum_host::attribution`.
    /// Only meaningful with `watch: true`.
    pub attribute: bool,
    /// The policy by who changed a resource (with `attribute: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_change_by: Option<WriterRules>,
    /// Flap detection for `revert`: this many reverts within `flap_window`
    /// and the resource is quarantined instead of reverted again.
    pub flap_limit: u64,
    #[serde(serialize_with = "as_secs")]
    pub flap_window: Duration,
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

impl ClassSpec {
    /// Whether drift of this class may be acted on (a policy, or a writer
    /// rule, other than `report`).
    pub fn acts(&self) -> bool {
        self.policy != Policy::Report
            || self.on_change_by.is_some_and(|r| {
                [r.package_manager, r.person, r.other]
                    .iter()
                    .flatten()
                    .any(|p| *p != Policy::Report)
            })
    }

    /// The policy for drift written by `writers`, and the rule that chose
    /// it (`None`: the class's `policy`). A person among the writers decides
    /// (the most careful reading); only package-manager writers make it the
    /// package manager's; anything else, or nobody known, is `other`.
    pub fn policy_for(&self, writers: &[ChangedBy]) -> (Policy, Option<String>) {
        let Some(rules) = self.on_change_by else {
            return (self.policy, None);
        };
        let kinds = || writers.iter().map(|w| w.kind);
        let (key, rule) = if kinds().any(|k| k == WriterKind::Person) {
            ("person", rules.person)
        } else if !writers.is_empty() && kinds().all(|k| k == WriterKind::PackageManager) {
            ("package_manager", rules.package_manager)
        } else {
            ("other", rules.other)
        };
        match rule {
            Some(p) => (p, Some(format!("on_change_by.{key}: {}", p.word()))),
            None => (self.policy, None),
        }
    }

    /// The class used when `datum.yaml` declares none of that name.
    pub fn default_named(name: &str) -> Self {
        ClassSpec {
            name: name.to_owned(),
            interval: Duration::from_secs(3600),
            content: ContentMode::Full,
            audit_every: None,
            policy: Policy::Report,
            scope: Scope::Resource,
            watch: false,
            attribute: false,
            on_change_by: None,
            flap_limit: 3,
            flap_window: Duration::from_secs(3600),
        }
    }
}

/// A problem in `classes:`; `path` names the key (`critical.interval`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("datum.yaml: classes.{path}: {message}")]
pub struct ClassError {
    pub path: String,
    pub message: String,
}

/// Every declared class; `normal` exists even when undeclared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classes {
    pub declared: bool,
    pub classes: BTreeMap<String, ClassSpec>,
}

const KEYS: &[&str] = &[
    "interval",
    "content",
    "audit_every",
    "policy",
    "scope",
    "watch",
    "attribute",
    "on_change_by",
    "flap_limit",
    "flap_window",
];

impl Classes {
    /// Parses the `classes:` value of `datum.yaml` (null or a mapping).
    /// Returns every problem found.
    pub fn parse(value: &Value) -> Result<Classes, Vec<ClassError>> {
        let mut classes = BTreeMap::new();
        let mut errors = Vec::new();
        let map = match value {
            Value::Null => None,
            Value::Object(map) => Some(map),
            _ => {
                return Err(vec![ClassError {
                    path: String::new(),
                    message: "must be a mapping of class names".to_owned(),
                }]);
            }
        };
        let declared = map.is_some_and(|m| !m.is_empty());
        for (name, body) in map.into_iter().flatten() {
            let mut err = |key: &str, message: String| {
                errors.push(ClassError {
                    path: if key.is_empty() {
                        name.clone()
                    } else {
                        format!("{name}.{key}")
                    },
                    message,
                })
            };
            let mut spec = ClassSpec::default_named(name);
            let Some(body) = body.as_object() else {
                if !body.is_null() {
                    err("", "must be a mapping".to_owned());
                }
                classes.insert(name.clone(), spec);
                continue;
            };
            for (key, v) in body {
                match key.as_str() {
                    "interval" | "flap_window" => match v.as_str().map(humantime::parse_duration) {
                        Some(Ok(d)) if !d.is_zero() => {
                            if key == "interval" {
                                spec.interval = d;
                            } else {
                                spec.flap_window = d;
                            }
                        }
                        _ => err(key, "must be a duration such as 60s, 15m or 1h".to_owned()),
                    },
                    "content" => match v.as_str() {
                        Some("full") => spec.content = ContentMode::Full,
                        Some("metadata") => spec.content = ContentMode::Metadata,
                        _ => err(key, "must be `full` or `metadata`".to_owned()),
                    },
                    "audit_every" | "flap_limit" => match v.as_u64() {
                        Some(n) if n >= 1 => {
                            if key == "audit_every" {
                                spec.audit_every = Some(n);
                            } else {
                                spec.flap_limit = n;
                            }
                        }
                        _ => err(key, "must be a whole number of at least 1".to_owned()),
                    },
                    "policy" => match v.as_str() {
                        Some("report") => spec.policy = Policy::Report,
                        Some("revert") => spec.policy = Policy::Revert,
                        Some("accept") => spec.policy = Policy::Accept,
                        Some("quarantine") => spec.policy = Policy::Quarantine,
                        _ => err(
                            key,
                            "must be `report`, `revert`, `accept` or `quarantine`".to_owned(),
                        ),
                    },
                    "scope" => match v.as_str() {
                        Some("resource") => spec.scope = Scope::Resource,
                        Some("host") => spec.scope = Scope::Host,
                        _ => err(key, "must be `resource` or `host`".to_owned()),
                    },
                    "watch" => match v.as_bool() {
                        Some(b) => spec.watch = b,
                        None => err(key, "must be true or false".to_owned()),
                    },
                    "attribute" => match v.as_bool() {
                        Some(b) => spec.attribute = b,
                        None => err(key, "must be true or false".to_owned()),
                    },
                    "on_change_by" => {
                        let mut rules = WriterRules::default();
                        match v.as_object() {
                            Some(map) => {
                                for (who, p) in map {
                                    let policy = p.as_str().and_then(Policy::parse);
                                    let slot = match who.as_str() {
                                        "package_manager" => &mut rules.package_manager,
                                        "person" => &mut rules.person,
                                        "other" => &mut rules.other,
                                        _ => {
                                            err(&format!("on_change_by.{who}"), "unknown writer (known: package_manager, person, other)".to_owned());
                                            continue;
                                        }
                                    };
                                    match policy {
                                        Some(p) => *slot = Some(p),
                                        None => err(&format!("on_change_by.{who}"), "must be `report`, `revert`, `accept` or `quarantine`".to_owned()),
                                    }
                                }
                            }
                            None => err(key, "must be a mapping of writer (package_manager, person, other) to policy".to_owned()),
                        }
                        spec.on_change_by = Some(rules);
                    }
                    other => err(other, format!("unknown key (known: {})", KEYS.join(", "))),
                }
            }
            if spec.audit_every.is_some() && spec.content == ContentMode::Full {
                err(
                    "audit_every",
                    "only means something with `content: metadata`".to_owned(),
                );
            }
            if spec.on_change_by.is_some() && !spec.attribute {
                err(
                    "on_change_by",
                    "needs `attribute: true` (the rules decide on who changed a file)".to_owned(),
                );
            }
            if spec.attribute && !spec.watch {
                err(
                    "attribute",
                    "needs `watch: true` (the agent attributes the changes it watches)".to_owned(),
                );
            }
            if spec.scope == Scope::Host && spec.policy != Policy::Quarantine {
                err(
                    "scope",
                    "`scope: host` goes with `policy: quarantine`".to_owned(),
                );
            }
            classes.insert(name.clone(), spec);
        }
        classes
            .entry(DEFAULT_CLASS.to_owned())
            .or_insert_with(|| ClassSpec::default_named(DEFAULT_CLASS));
        if errors.is_empty() {
            Ok(Classes { declared, classes })
        } else {
            Err(errors)
        }
    }

    /// The class named `name`; an undeclared name falls back to `normal`'s
    /// settings (lint reports it when classes are declared).
    pub fn get(&self, name: &str) -> &ClassSpec {
        self.classes
            .get(name)
            .or_else(|| self.classes.get(DEFAULT_CLASS))
            .unwrap_or_else(|| default_class())
    }

    /// `(resource, class)` pairs whose class is not declared, when any class
    /// is declared at all (a repository without `classes:` uses `normal`).
    pub fn unknown_classes<'a>(
        &self,
        resources: impl IntoIterator<Item = (String, &'a str)>,
    ) -> Vec<(String, String)> {
        if !self.declared {
            return Vec::new();
        }
        resources
            .into_iter()
            .filter(|(_, class)| !self.classes.contains_key(*class))
            .map(|(id, class)| (id, class.to_owned()))
            .collect()
    }
}

fn default_class() -> &'static ClassSpec {
    static DEFAULT: std::sync::OnceLock<ClassSpec> = std::sync::OnceLock::new();
    DEFAULT.get_or_init(|| ClassSpec::default_named(DEFAULT_CLASS))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_every_key_and_keeps_normal() {
        let c = Classes::parse(&json!({
            "critical": {"interval": "60s", "content": "full", "policy": "revert", "watch": true},
            "edited": {"interval": "15m", "content": "metadata", "audit_every": 10, "policy": "accept"},
        }))
        .unwrap();
        assert!(c.declared);
        let crit = c.get("critical");
        assert_eq!(crit.interval, Duration::from_secs(60));
        assert_eq!(crit.policy, Policy::Revert);
        assert!(crit.watch);
        assert_eq!(c.get("edited").content, ContentMode::Metadata);
        assert_eq!(c.get("edited").audit_every, Some(10));
        assert_eq!(c.get("normal").content, ContentMode::Full);
        assert_eq!(c.get("nope").name, "normal");
    }

    fn writer(kind: WriterKind) -> ChangedBy {
        let mut w = ChangedBy::unknown("/etc/x", "modified", 0, Some(1), "test");
        w.kind = kind;
        w
    }

    #[test]
    fn writer_rules_pick_the_policy_by_who_changed_it() {
        let c = Classes::parse(&json!({
            "config": {"watch": true, "attribute": true, "policy": "report",
                       "on_change_by": {"package_manager": "accept", "person": "quarantine", "other": "revert"}},
            "partial": {"watch": true, "attribute": true, "policy": "report",
                        "on_change_by": {"person": "quarantine"}},
            "plain": {"policy": "report"},
        }))
        .unwrap();
        let spec = c.get("config");
        assert!(spec.acts());
        let pm = writer(WriterKind::PackageManager);
        let person = writer(WriterKind::Person);
        let unit = writer(WriterKind::Unit);
        assert_eq!(
            spec.policy_for(std::slice::from_ref(&pm)),
            (
                Policy::Accept,
                Some("on_change_by.package_manager: accept".to_owned())
            )
        );
        // A person among several writers decides.
        assert_eq!(
            spec.policy_for(&[pm.clone(), person.clone()]).0,
            Policy::Quarantine
        );
        assert_eq!(spec.policy_for(&[unit]).0, Policy::Revert);
        // Nobody known is `other`, never a guess.
        assert_eq!(spec.policy_for(&[]).0, Policy::Revert);
        assert_eq!(
            spec.policy_for(&[writer(WriterKind::Unknown)]).0,
            Policy::Revert
        );
        // A rule not given falls back to the class's policy.
        assert_eq!(c.get("partial").policy_for(&[pm]), (Policy::Report, None));
        assert_eq!(c.get("plain").policy_for(&[person]), (Policy::Report, None));
        assert!(!c.get("plain").acts());
        assert_eq!(
            spec.on_change_by.unwrap().describe(),
            "package_manager → accept, person → quarantine, other → revert"
        );
        let errs = Classes::parse(&json!({
            "a": {"on_change_by": {"person": "quarantine"}},
            "b": {"watch": true, "attribute": true, "on_change_by": {"robot": "revert", "person": "shrug"}},
            "c": {"attribute": true},
        }))
        .unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "a.on_change_by",
                "b.on_change_by.person",
                "b.on_change_by.robot",
                "c.attribute"
            ]
        );
    }

    #[test]
    fn metadata_is_never_the_default() {
        let c = Classes::parse(&json!({"x": {}})).unwrap();
        assert_eq!(c.get("x").content, ContentMode::Full);
        assert_eq!(c.get("x").policy, Policy::Report);
        assert!(!Classes::parse(&Value::Null).unwrap().declared);
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let errs = Classes::parse(&json!({
            "a": {"interval": "soon", "content": "some", "policy": "ignore", "colour": 1},
            "b": {"scope": "host"},
        }))
        .unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["a.colour", "a.content", "a.interval", "a.policy", "b.scope"]
        );
        assert!(
            errs[0]
                .to_string()
                .starts_with("datum.yaml: classes.a.colour:")
        );
    }

    #[test]
    fn unknown_class_names_only_matter_when_classes_are_declared() {
        let none = Classes::parse(&Value::Null).unwrap();
        assert!(
            none.unknown_classes([("File[a]".to_owned(), "critcal")])
                .is_empty()
        );
        let some = Classes::parse(&json!({"critical": {}})).unwrap();
        assert_eq!(
            some.unknown_classes([
                ("File[a]".to_owned(), "critcal"),
                ("File[b]".to_owned(), "normal")
            ]),
            vec![("File[a]".to_owned(), "critcal".to_owned())]
        );
    }
}
