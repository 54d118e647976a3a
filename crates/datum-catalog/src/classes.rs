//! Resource classes in lint: `datum.yaml`'s `classes:` must parse
//! (`datum_drift::classes`, the same rules `datum check` applies), and when
//! any class is declared, every resource's `class:` must name one of them.
//!
//! Owns only the diagnostics; what a class means is `datum_drift::classes`.
//! Must not: read the host or the state store.

use datum_drift::classes::Classes;
use datum_manifest::{Diagnostic, Diagnostics, Repository};

/// Reports every problem with the classes of `repo`.
pub(crate) fn check(repo: &Repository, diags: &mut Diagnostics) {
    let classes = match Classes::parse(&repo.settings.classes) {
        Ok(classes) => classes,
        Err(errors) => {
            for e in errors {
                // At the most precise place written: the field, else the
                // class, else `classes:` itself.
                let at = &repo.settings.classes_at;
                let origin = std::iter::successors(Some(e.path.as_str()), |p| {
                    (!p.is_empty()).then(|| p.rsplit_once('.').map_or("", |(head, _)| head))
                })
                .find_map(|p| at.get(p));
                let mut d = Diagnostic::error(e.to_string());
                if let Some(origin) = origin {
                    d = d.at(origin.clone());
                }
                diags.push(d);
            }
            return;
        }
    };
    if !classes.declared {
        return;
    }
    let mut known: Vec<&str> = classes.classes.keys().map(String::as_str).collect();
    known.sort_unstable();
    for doc in &repo.documents {
        let Some(class) = &doc.class else { continue };
        if classes.classes.contains_key(&class.value) {
            continue;
        }
        diags.push(
            Diagnostic::error(format!(
                "class `{}` is not declared in datum.yaml `classes:` (declared: {})",
                class.value,
                known.join(", ")
            ))
            .resource(&doc.id)
            .at(class.origin())
            .until(class.end),
        );
    }
}
