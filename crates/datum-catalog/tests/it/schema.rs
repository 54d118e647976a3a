//! The shipped JSON Schema of manifests: current with the declaration types,
//! referenced from every example manifest, and every example valid by it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use datum_catalog::schema::{SCHEMA_FILE, manifest_schema_text};

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const REGENERATE: &str =
    "cargo run -p datum-catalog --example manifest-schema > schema/datum-manifest.schema.json";

#[test]
fn the_shipped_schema_is_current() {
    let shipped = top().join(SCHEMA_FILE);
    let want = manifest_schema_text();
    if std::env::var_os("DATUM_UPDATE_SCHEMA").is_some() {
        std::fs::write(&shipped, &want).unwrap();
    }
    let have = std::fs::read_to_string(&shipped)
        .unwrap_or_else(|e| panic!("{}: {e}; write it with `{REGENERATE}`", shipped.display()));
    assert!(
        have == want,
        "{} is stale: the declaration types say something else now. Regenerate it with `{REGENERATE}` (or DATUM_UPDATE_SCHEMA=1 cargo nextest run -p datum-catalog) and commit it",
        shipped.display()
    );
}

fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(top().join(SCHEMA_FILE)).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

/// Every file of the example repository that holds resource documents.
fn example_manifests() -> Vec<PathBuf> {
    let examples = top().join("examples");
    let repository = datum_catalog::load(&examples).unwrap();
    let files: BTreeSet<PathBuf> = repository
        .documents
        .iter()
        .map(|d| d.place.file.to_path_buf())
        .collect();
    let files: Vec<PathBuf> = files
        .into_iter()
        .map(|f| if f.is_absolute() { f } else { examples.join(f) })
        .collect();
    assert!(files.len() >= 8, "too few manifests found: {files:?}");
    files
}

fn errors_of(validator: &jsonschema::Validator, text: &str) -> Vec<String> {
    let parsed = datum_manifest::yaml::parse(text);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    let mut errors = Vec::new();
    for doc in parsed.documents {
        let json = doc.to_json();
        for e in validator.iter_errors(&json) {
            errors.push(format!("{}: {e}", e.instance_path()));
        }
    }
    errors
}

#[test]
fn every_example_manifest_names_the_schema_and_validates_against_it() {
    let validator = validator();
    let shipped = std::fs::canonicalize(top().join(SCHEMA_FILE)).unwrap();
    let mut problems = Vec::new();
    for file in example_manifests() {
        let text = std::fs::read_to_string(&file).unwrap();
        let modeline = text
            .lines()
            .find_map(|l| l.strip_prefix("# yaml-language-server: $schema="));
        match modeline {
            None => problems.push(format!(
                "{}: no yaml-language-server modeline",
                file.display()
            )),
            Some(rel) => {
                let named = file.parent().unwrap().join(rel.trim());
                if std::fs::canonicalize(&named).ok().as_deref() != Some(shipped.as_path()) {
                    problems.push(format!(
                        "{}: the modeline names {}, not the shipped schema",
                        file.display(),
                        named.display()
                    ));
                }
            }
        }
        for e in errors_of(&validator, &text) {
            problems.push(format!("{}: {e}", file.display()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_schema_refuses_what_lint_refuses() {
    let validator = validator();
    let good = "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  mode: \"0644\"\n  content: hi\n  validate: sshd\nrequires: [Directory/etc]\nclass: critical\nsensitive: false\n";
    assert_eq!(errors_of(&validator, good), Vec::<String>::new());
    let bad = [
        // An unquoted mode is a number: its octal meaning is lost.
        good.replace("\"0644\"", "0644"),
        good.replace("type: File", "type: Fiel"),
        good.replace("class: critical", "clas: critical"),
        good.replace("datum: v1alpha1", "datum: v2"),
        good.replace("path: /etc/motd", "path: etc/motd"),
        good.replace("content: hi", "content: hi\n  source: files/motd"),
        good.replace("[Directory/etc]", "[etc]"),
        good.replace("name: motd", "name: \"mo[td]\""),
        "datum: v1alpha1\ntype: Service\nname: nginx\ndesired:\n  state: started\n".to_owned(),
        "datum: v1alpha1\ntype: Service\nname: nginx\ndesired:\n  reload_on: File/nginx\n"
            .to_owned(),
        "datum: v1alpha1\ntype: Package\nname: nginx\ndesired:\n  state: latest\n".to_owned(),
    ];
    for text in &bad {
        assert!(
            !errors_of(&validator, text).is_empty(),
            "the schema accepts:\n{text}"
        );
    }
    // A layer's document may override some fields of a resource another
    // layer declares (lint judges the merged resource), remove one with
    // null, or leave `desired:` empty.
    for text in [
        "datum: v1alpha1\ntype: File\nname: motd\ndesired: {validate: sshd}\n",
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  mode: null\n  ensure: absent\n",
        "datum: v1alpha1\ntype: Service\nname: nginx\ndesired:\n  settle: 1s\n",
        "datum: v1alpha1\ntype: Package\nname: nginx\ndesired:\n",
    ] {
        assert_eq!(errors_of(&validator, text), Vec::<String>::new(), "{text}");
    }
}

#[test]
fn the_shipped_reference_page_is_current() {
    use datum_catalog::reference::{REFERENCE_FILE, reference_markdown};
    let shipped = top().join(REFERENCE_FILE);
    let want = reference_markdown();
    if std::env::var_os("DATUM_UPDATE_SCHEMA").is_some() {
        std::fs::write(&shipped, &want).unwrap();
    }
    let have = std::fs::read_to_string(&shipped).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale: the declaration types say something else now. Regenerate it with `cargo run -p datum-catalog --example manifest-reference > docs/manifests.md` (or DATUM_UPDATE_SCHEMA=1 cargo nextest run -p datum-catalog) and commit it",
        shipped.display()
    );
}
