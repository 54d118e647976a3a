//! Which declared packages provide the validators a catalogue uses.
//!
//! A File with `validate: nginx` cannot be validated before nginx is
//! installed, so when the catalogue also declares the package that provides
//! the validator's program, the File must come after it: an implicit
//! ordering edge, the same one an author would write as `requires:`. When it
//! declares Packages but not that one, `datum lint` warns, because on a fresh
//! host the validator would be missing and the File would fail. (A catalogue
//! with no Package at all leaves packages to the host's image: no warning.)
//!
//! This module is pure: it reads resources and the validator table, and
//! returns edges and findings. Adding the edges to the graph is the
//! catalogue's business, printing the warning is lint's.

use datum_core::{Resource, ResourceId};

use super::desired::{PackageSpec, Wanted};
use crate::validators::{self, ValidatorDef};

/// Packages that also ship a validator's program, beyond the
/// [`ValidatorDef::package`] named in the validator table. Debian splits
/// some programs into flavours that conflict with each other: `/usr/sbin/
/// nginx` comes from whichever of nginx-light, nginx-core, nginx-full or
/// nginx-extras is installed (`nginx` itself is a metapackage choosing one),
/// and `visudo` from sudo or sudo-ldap.
const ALSO_PROVIDED_BY: &[(&str, &[&str])] = &[
    (
        "nginx",
        &["nginx-light", "nginx-core", "nginx-full", "nginx-extras"],
    ),
    ("sudoers", &["sudo-ldap"]),
    ("apache2", &["apache2-bin"]),
];

/// Every package whose installation provides `validator`'s program, the
/// table's suggestion first. Empty for validators built into Datum.
pub fn validator_packages(validator: &ValidatorDef) -> Vec<&'static str> {
    let mut packages: Vec<&'static str> = validator.package.into_iter().collect();
    if let Some((_, also)) = ALSO_PROVIDED_BY
        .iter()
        .find(|(name, _)| *name == validator.name)
    {
        packages.extend(also.iter().copied());
    }
    packages
}

/// A resource whose validator no declared package provides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingValidatorPackage {
    pub resource: ResourceId,
    pub validator: &'static str,
    /// The package to declare (the validator table's suggestion).
    pub package: &'static str,
}

/// A declared package that will be installed: its resource id and name.
fn installed_packages(resources: &[Resource]) -> Vec<(&ResourceId, String)> {
    resources
        .iter()
        .filter(|r| r.id.kind == "Package")
        .filter_map(|r| {
            let spec = PackageSpec::parse(&r.desired, &r.id.name).ok()?;
            (spec.state != Wanted::Absent).then(|| (&r.id, spec.bare_name().to_owned()))
        })
        .collect()
}

/// The validator a resource names, when it runs a program from a package.
fn packaged_validator(resource: &Resource) -> Option<&'static ValidatorDef> {
    let def = validators::lookup(resource.validate.as_deref()?)?;
    def.binary?;
    Some(def)
}

/// Ordering edges `(resource, package)`: `resource` names a validator whose
/// program the declared (installed or held) `package` provides, so the
/// package must be applied first. A package declared absent provides
/// nothing. Sorted, without duplicates; edges a resource already declares in
/// `requires` are included too (adding them again is harmless).
pub fn implicit_edges(resources: &[Resource]) -> Vec<(ResourceId, ResourceId)> {
    let packages = installed_packages(resources);
    let mut edges = Vec::new();
    for resource in resources {
        let Some(def) = packaged_validator(resource) else {
            continue;
        };
        let providers = validator_packages(def);
        for (id, name) in &packages {
            if providers.contains(&name.as_str()) && **id != resource.id {
                edges.push((resource.id.clone(), (*id).clone()));
            }
        }
    }
    edges.sort();
    edges.dedup();
    edges
}

/// Resources whose validator's program no declared package provides (the
/// lint warning): on a host without it the validator is missing and the
/// resource fails. A catalogue that declares no Package at all leaves this
/// host's packages to something else (its image, another tool, a scratch
/// root): then there is nothing Datum could order, and nothing to warn of.
pub fn missing_validator_packages(resources: &[Resource]) -> Vec<MissingValidatorPackage> {
    if !resources.iter().any(|r| r.id.kind == "Package") {
        return Vec::new();
    }
    let packages = installed_packages(resources);
    let mut missing = Vec::new();
    for resource in resources {
        let Some(def) = packaged_validator(resource) else {
            continue;
        };
        let providers = validator_packages(def);
        if packages
            .iter()
            .any(|(_, name)| providers.contains(&name.as_str()))
        {
            continue;
        }
        if let Some(package) = def.package {
            missing.push(MissingValidatorPackage {
                resource: resource.id.clone(),
                validator: def.name,
                package,
            });
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn resource(kind: &str, name: &str, desired: Value, validate: Option<&str>) -> Resource {
        Resource {
            validate: validate.map(str::to_owned),
            ..Resource::new(ResourceId::new(kind, name), desired)
        }
    }

    fn catalogue() -> Vec<Resource> {
        vec![
            resource(
                "File",
                "sshd-config",
                json!({"path": "/etc/ssh/sshd_config"}),
                Some("sshd"),
            ),
            resource(
                "File",
                "nginx-conf",
                json!({"path": "/etc/nginx/nginx.conf"}),
                Some("nginx"),
            ),
            resource(
                "File",
                "app-json",
                json!({"path": "/etc/app.json"}),
                Some("json"),
            ),
            resource(
                "File",
                "sudoers",
                json!({"path": "/etc/sudoers"}),
                Some("sudoers"),
            ),
            resource("File", "motd", json!({"path": "/etc/motd"}), None),
            resource("Package", "openssh-server", json!({}), None),
            resource(
                "Package",
                "web",
                json!({"name": "nginx-light", "version": "1.22.*"}),
                None,
            ),
            resource("Package", "sudo", json!({"state": "absent"}), None),
        ]
    }

    #[test]
    fn validated_files_come_after_the_package_providing_the_validator() {
        let edges = implicit_edges(&catalogue());
        assert_eq!(
            edges,
            [
                (
                    ResourceId::new("File", "nginx-conf"),
                    ResourceId::new("Package", "web")
                ),
                (
                    ResourceId::new("File", "sshd-config"),
                    ResourceId::new("Package", "openssh-server")
                ),
            ]
        );
    }

    #[test]
    fn a_catalogue_without_packages_is_not_warned_about_them() {
        let mut none = catalogue();
        none.retain(|r| r.id.kind != "Package");
        assert!(none.iter().any(|r| packaged_validator(r).is_some()));
        assert_eq!(missing_validator_packages(&none), []);
    }

    #[test]
    fn validators_without_a_declared_package_are_listed_for_lint() {
        let missing = missing_validator_packages(&catalogue());
        assert_eq!(
            missing,
            [MissingValidatorPackage {
                resource: ResourceId::new("File", "sudoers"),
                validator: "sudoers",
                package: "sudo",
            }],
            "sudo is declared absent, json is built in"
        );
        let mut with_nginx = catalogue();
        with_nginx.retain(|r| r.id.name != "web");
        with_nginx.push(resource(
            "Package",
            "nginx-full",
            json!({"state": "held"}),
            None,
        ));
        let edges = implicit_edges(&with_nginx);
        assert!(edges.contains(&(
            ResourceId::new("File", "nginx-conf"),
            ResourceId::new("Package", "nginx-full")
        )));
    }

    #[test]
    fn every_packaged_validator_names_its_package_first() {
        for def in validators::all() {
            let packages = validator_packages(def);
            assert_eq!(def.binary.is_some(), !packages.is_empty(), "{}", def.name);
            if let Some(first) = def.package {
                assert_eq!(packages[0], first);
            }
        }
        let nginx = validators::lookup("nginx").unwrap();
        assert!(validator_packages(nginx).contains(&"nginx-light"));
    }
}
