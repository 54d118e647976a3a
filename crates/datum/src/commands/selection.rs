//! `--target` and `--class`: which part of the catalogue a plan or an apply
//! covers, resolved against the compiled catalogue, and how the output says
//! that the pass is partial.

use std::collections::{BTreeSet, HashSet};

use anyhow::{Result, bail};
use clap::Args;
use datum_catalog::Catalogue;
use datum_core::ResourceId;
use datum_engine::{Mode, PassOptions};
use serde_json::{Value, json};

/// Which part of the catalogue a plan or an apply covers (all of it by default).
#[derive(Debug, Clone, Default, Args)]
pub struct SelectArgs {
    /// Only this resource and everything it requires, like terraform -target
    /// (repeatable): --target File/sshd-config.
    #[arg(long = "target", value_name = "KIND/NAME", value_parser = parse_target)]
    pub targets: Vec<datum_core::ResourceId>,
    /// Only resources of this drift class; what they require from other
    /// classes is checked, never changed (not in sync: they are blocked).
    #[arg(long, value_name = "NAME")]
    pub class: Option<String>,
}

fn parse_target(text: &str) -> Result<datum_core::ResourceId, String> {
    datum_core::ResourceId::parse(text).map_err(|e| e.to_string())
}

/// A resolved selection.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub targets: Vec<ResourceId>,
    pub class: Option<String>,
    /// `None`: the whole catalogue.
    pub only: Option<BTreeSet<ResourceId>>,
    /// Selected only because a class member requires them: checked, never
    /// changed.
    pub hold: HashSet<ResourceId>,
    /// The catalogue's size, for "N of M".
    pub total: usize,
}

impl Selection {
    /// Resolves `args` against `catalogue`. An unknown target, or a class no
    /// resource has, is an error naming it (exit 1, nothing done).
    pub fn resolve(catalogue: &Catalogue, args: &SelectArgs) -> Result<Selection> {
        let total = catalogue.resources.len();
        let mut only: Option<BTreeSet<ResourceId>> = None;
        if !args.targets.is_empty() {
            match catalogue.with_requirements(&args.targets) {
                Ok(set) => only = Some(set),
                Err(unknown) => bail!("{}", unknown_targets(catalogue, &unknown)),
            }
        }
        let mut hold = HashSet::new();
        if let Some(class) = &args.class {
            let members: Vec<ResourceId> = catalogue
                .resources
                .iter()
                .filter(|r| &r.class == class)
                .filter(|r| only.as_ref().is_none_or(|o| o.contains(&r.id)))
                .map(|r| r.id.clone())
                .collect();
            if members.is_empty() {
                let classes: BTreeSet<&str> = catalogue
                    .resources
                    .iter()
                    .map(|r| r.class.as_str())
                    .collect();
                let classes: Vec<&str> = classes.into_iter().collect();
                bail!(
                    "--class {class}: no {}resource of this host's catalogue is of class `{class}` (its classes: {})",
                    if only.is_some() { "selected " } else { "" },
                    classes.join(", ")
                );
            }
            let closure = catalogue
                .with_requirements(&members)
                .map_err(|u| anyhow::anyhow!("{}", unknown_targets(catalogue, &u)))?;
            let members: HashSet<&ResourceId> = members.iter().collect();
            hold = closure
                .iter()
                .filter(|id| !members.contains(id))
                .cloned()
                .collect();
            only = Some(closure);
        }
        Ok(Selection {
            targets: args.targets.clone(),
            class: args.class.clone(),
            only,
            hold,
            total,
        })
    }

    pub fn is_partial(&self) -> bool {
        self.only.is_some()
    }

    /// The engine's options for this selection.
    pub fn options(&self) -> PassOptions {
        PassOptions {
            only: self.only.clone(),
            hold: self.hold.clone(),
            hold_reason: match &self.class {
                Some(class) => format!("not of class `{class}` (--class {class})"),
                None => String::new(),
            },
            expect: None,
            fingerprints: false,
            trust_metadata: false,
            digest_key: None,
            // The compiled catalogue: an apply of all of it forgets the
            // records of resources it no longer declares.
            whole_catalogue: true,
        }
    }

    /// The flags that made this selection, as written (`--target File[a]
    /// --class critical`).
    pub fn flags(&self) -> String {
        let mut parts: Vec<String> = self
            .targets
            .iter()
            .map(|t| format!("--target {t}"))
            .collect();
        if let Some(class) = &self.class {
            parts.push(format!("--class {class}"));
        }
        parts.join(" ")
    }

    /// The line a person reads before a partial pass (`None` for a full one).
    pub fn banner(&self, mode: Mode) -> Option<String> {
        let only = self.only.as_ref()?;
        let what = if mode == Mode::Plan { "plan" } else { "apply" };
        let mut text = format!(
            "Partial {what} ({}): {} of {} resources",
            self.flags(),
            only.len(),
            self.total
        );
        if !self.targets.is_empty() {
            text.push_str(", the targets and everything they require");
        }
        if self.class.is_some() && !self.hold.is_empty() {
            text.push_str(&format!(
                ", {} of them required from other classes (checked, never changed)",
                self.hold.len()
            ));
        }
        text.push_str(&format!(
            "; the other {} are not {}.",
            self.total - only.len(),
            if mode == Mode::Plan {
                "planned"
            } else {
                "applied"
            }
        ));
        Some(text)
    }

    /// The reminder under a partial pass's summary.
    pub fn footer(&self, mode: Mode) -> Option<String> {
        self.only.as_ref()?;
        Some(match mode {
            Mode::Plan => "Note: this plan is partial: it does not show what the rest of the catalogue would change. Run `datum plan` without --target/--class to see everything.".to_owned(),
            Mode::Apply => "Note: this apply was partial: the rest of the catalogue was not applied. A service outside the selection that a change notified was reloaded (or restarted) and is listed above, or, not as declared, quarantined or blocked, was left alone with its reload owed (see the warnings). Run `datum apply` without --target/--class to converge the host.".to_owned(),
        })
    }

    /// The selection in a pass's JSON document.
    pub fn json(&self) -> Value {
        json!({
            "partial": self.is_partial(),
            "targets": self.targets.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "class": self.class,
            "resources": self.only.as_ref().map_or(self.total, BTreeSet::len),
            "of": self.total,
        })
    }
}

/// "unknown target `File[motdd]` (did you mean `File[motd]`?)", for each.
fn unknown_targets(catalogue: &Catalogue, unknown: &[ResourceId]) -> String {
    let names: Vec<String> = catalogue
        .resources
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    let each: Vec<String> = unknown
        .iter()
        .map(|id| {
            let text = id.to_string();
            match datum_manifest::suggest::closest(&text, names.iter().map(String::as_str)) {
                Some(close) => format!("{text} (did you mean {close}?)"),
                None => text,
            }
        })
        .collect();
    format!(
        "unknown target{} {}: no such resource in the catalogue of host {}; nothing was done",
        if unknown.len() == 1 { "" } else { "s" },
        each.join(", "),
        catalogue.host.name
    )
}

#[cfg(test)]
mod tests {
    use datum_core::Resource;
    use serde_json::json;

    use super::*;

    fn catalogue() -> Catalogue {
        let r = |kind: &str, name: &str, class: &str, requires: &[ResourceId]| Resource {
            class: class.to_owned(),
            requires: requires.to_vec(),
            ..Resource::new(ResourceId::new(kind, name), json!({}))
        };
        let dir = ResourceId::new("Directory", "ssh");
        Catalogue {
            host: datum_catalog::HostIdentity {
                name: "web-01".to_owned(),
                ..Default::default()
            },
            resources: vec![
                r("Directory", "ssh", "normal", &[]),
                r("File", "sshd", "critical", std::slice::from_ref(&dir)),
                r("File", "motd", "normal", &[]),
            ],
            autorequires: Vec::new(),
            boundary: Default::default(),
        }
    }

    fn args(targets: &[&str], class: Option<&str>) -> SelectArgs {
        SelectArgs {
            targets: targets
                .iter()
                .map(|t| ResourceId::parse(t).unwrap())
                .collect(),
            class: class.map(str::to_owned),
        }
    }

    #[test]
    fn no_flags_select_everything() {
        let s = Selection::resolve(&catalogue(), &args(&[], None)).unwrap();
        assert!(!s.is_partial());
        assert_eq!(s.banner(Mode::Plan), None);
        assert_eq!(s.json()["partial"], json!(false));
    }

    #[test]
    fn a_class_holds_what_its_members_require_from_other_classes() {
        let s = Selection::resolve(&catalogue(), &args(&[], Some("critical"))).unwrap();
        let only: Vec<String> = s.only.iter().flatten().map(|i| i.to_string()).collect();
        assert_eq!(only, ["Directory[ssh]", "File[sshd]"]);
        assert_eq!(
            s.hold.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
            ["Directory[ssh]"]
        );
        assert_eq!(
            s.banner(Mode::Apply).unwrap(),
            "Partial apply (--class critical): 2 of 3 resources, 1 of them required from other classes (checked, never changed); the other 1 are not applied."
        );
    }

    /// The apply's footer says what became of a service outside the
    /// selection that a change notified: since 077237f it is reloaded when
    /// it may be, and the footer said it kept its reload owed.
    #[test]
    fn a_partial_applys_footer_says_an_outside_service_was_reloaded_or_left_owed() {
        let s = Selection::resolve(&catalogue(), &args(&["File/motd"], None)).unwrap();
        let footer = s.footer(Mode::Apply).unwrap();
        assert!(!footer.contains("keeps any reload owed"), "{footer}");
        assert!(
            footer.contains("was reloaded (or restarted) and is listed above")
                && footer.contains("left alone with its reload owed (see the warnings)"),
            "{footer}"
        );
    }

    #[test]
    fn unknown_targets_and_classes_are_errors_naming_them() {
        let err = Selection::resolve(&catalogue(), &args(&["File/motdd"], None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown target File[motdd] (did you mean File[motd]?): no such resource in the catalogue of host web-01; nothing was done"
        );
        let err = Selection::resolve(&catalogue(), &args(&[], Some("nope"))).unwrap_err();
        assert!(
            err.to_string()
                .contains("no resource of this host's catalogue is of class `nope` (its classes: critical, normal)"),
            "{err}"
        );
    }
}
