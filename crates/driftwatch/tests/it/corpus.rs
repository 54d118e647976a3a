//! Every file of the real corpus (`DRIFTWATCH_TOFU_REAL`, e.g. `../shared/fixtures/tofu-real`)
//! is read without a crash: errored plans, old format versions, state and TFC redacted JSON
//! exit 1 with one line naming the file, and so does a normal plan (one that proposes a
//! change) given as `--refresh-plan`; everything else is accepted, whichever
//! way it is paired: as both plans, as `--plan` alone or as `--refresh-plan` alone.
//! Skipped, with a note, when the variable is unset.

use std::path::PathBuf;

use crate::support::{driftwatch, outcome};

fn corpus_dir() -> Option<PathBuf> {
    let raw = std::env::var_os("DRIFTWATCH_TOFU_REAL").filter(|v| !v.is_empty())?;
    let path = PathBuf::from(raw);
    if path.is_absolute() || path.exists() {
        return Some(path);
    }
    // Relative paths are meant from the workspace root (where .ci/run runs).
    Some(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path),
    )
}

/// What driftwatch must say about a file, judged from its content and from how it is
/// given: a normal plan (it proposes a change to a managed resource) is refused as
/// `--refresh-plan`.
fn must_refuse(doc: &serde_json::Value, as_refresh_plan: bool) -> bool {
    let version = doc.get("format_version").and_then(|v| v.as_str());
    let normal = doc
        .get("resource_changes")
        .and_then(|c| c.as_array())
        .is_some_and(|c| {
            c.iter().any(|r| {
                r["mode"] != "data" && r["change"]["actions"] != serde_json::json!(["no-op"])
            })
        });
    doc.get("errored") == Some(&serde_json::Value::Bool(true))
        || version.is_none()
        || !version.unwrap_or_default().starts_with("1.")
        || (as_refresh_plan && normal)
}

#[test]
fn real_corpus_is_read_without_a_crash() {
    let Some(dir) = corpus_dir() else {
        eprintln!("note: DRIFTWATCH_TOFU_REAL is not set; skipping the real-corpus test");
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the real corpus in {}",
        dir.display()
    );
    let mut refused = std::collections::BTreeSet::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        // Every way a person could pair one file: as both plans, as the normal plan alone,
        // as the refresh-only plan alone; each with text and with JSON.
        let pairings: [&[&str]; 3] = [
            &["--refresh-plan", "F", "--plan", "F"],
            &["--plan", "F"],
            &["--refresh-plan", "F"],
        ];
        for pairing in pairings {
            for json in [false, true] {
                let mut c = driftwatch();
                c.arg("report");
                for a in pairing {
                    if *a == "F" {
                        c.arg(file);
                    } else {
                        c.arg(a);
                    }
                }
                if json {
                    c.arg("--json");
                }
                let out = outcome(&mut c);
                let what = format!("{name} {pairing:?} json={json}");
                if must_refuse(&doc, pairing.contains(&"--refresh-plan")) {
                    assert_eq!(out.code, 1, "{what} should be refused: {}", out.stdout);
                    assert_eq!(out.stderr.lines().count(), 1, "{what}: {}", out.stderr);
                    assert!(out.stderr.contains(&name), "{what}: {}", out.stderr);
                    refused.insert(name.clone());
                } else {
                    assert!(
                        out.code == 0 || out.code == 2,
                        "{what}: exit {} {}",
                        out.code,
                        out.stderr
                    );
                    assert!(
                        out.stderr.contains("driftwatch: default: "),
                        "{what}: {}",
                        out.stderr
                    );
                    if json {
                        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
                        assert_eq!(report["version"], 1);
                    }
                }
            }
        }
    }
    for expected in [
        "opentofu-show-json-plan-error.json",
        "terraform-show-json-plan-error.json",
        "opentofu-cloud-plan-json-full-redacted.json",
        "terraform-json-110-sensitive-values.json",
    ] {
        assert!(
            refused.iter().any(|r| r == expected),
            "{expected} was not refused: {refused:?}"
        );
    }
}

#[test]
fn real_drift_files_classify_as_expected() {
    let Some(dir) = corpus_dir() else {
        eprintln!("note: DRIFTWATCH_TOFU_REAL is not set; skipping");
        return;
    };
    // A normal plan alone: drift on should_refresh is reverted by the update; no_refresh is
    // an unapplied change, not drift.
    let out = outcome(
        driftwatch()
            .arg("report")
            .arg("--plan")
            .arg(dir.join("opentofu-show-json-drift.json"))
            .arg("--json"),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let findings = doc["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0]["address"], "test_instance.should_refresh");
    assert_eq!(findings[0]["category"], "changed_outside");
    assert!(
        doc["pending"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["address"] == "test_instance.no_refresh")
    );
    // The canonical refresh-only plan, drift only: drift, next apply unknown.
    let f = dir.join("opentofu-equivalence-drift-refresh-only.json");
    let out = outcome(
        driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&f)
            .arg("--drift-only")
            .arg("--json"),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    // A moved resource without value changes is not drift.
    let f = dir.join("opentofu-equivalence-moved-with-refresh-only.json");
    let out = outcome(
        driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&f)
            .arg("--plan")
            .arg(&f),
    );
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(out.stderr.contains("moved from"), "{}", out.stderr);
}
