//! `--history`: five nights in a row with an injected clock.

use crate::support::{driftwatch, fixture, outcome, report};

fn night(history: &std::path::Path, date: &str, scenario: &str) -> crate::support::Outcome {
    outcome(
        report(scenario)
            .arg("--history")
            .arg(history)
            .env("DRIFTWATCH_NOW", date),
    )
}

#[test]
fn five_nights_new_attribute_and_clean_night() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.json");
    for (i, date) in ["2026-10-28", "2026-10-29", "2026-10-30", "2026-10-31"]
        .iter()
        .enumerate()
    {
        let out = night(&history, date, "shop-prod");
        let flags = out
            .stdout
            .lines()
            .find(|l| l.contains("kubernetes_config_map_v1.flags"))
            .unwrap();
        let n = i + 1;
        let unit = if n == 1 { "night" } else { "nights" };
        assert!(
            flags.ends_with(&format!("(first seen 2026-10-28, {n} {unit})")),
            "{flags}"
        );
    }
    // Night five: the flags map drifted on one more attribute, so it is new drift.
    let out = night(&history, "2026-11-01", "canary");
    let flags = out
        .stdout
        .lines()
        .find(|l| l.contains("kubernetes_config_map_v1.flags"))
        .unwrap();
    assert!(
        flags.ends_with("(first seen 2026-11-01, 1 night)"),
        "{flags}"
    );
    let db = out
        .stdout
        .lines()
        .find(|l| l.contains("kubernetes_secret_v1.db"))
        .unwrap();
    assert!(db.ends_with("(first seen 2026-10-28, 5 nights)"), "{db}");
    // The Markdown and JSON show the age too.
    let md = dir.path().join("d.md");
    let out = outcome(
        report("canary")
            .arg("--history")
            .arg(&history)
            .arg("--markdown")
            .arg(&md)
            .arg("--json")
            .env("DRIFTWATCH_NOW", "2026-11-02"),
    );
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["findings"][1]["first_seen"], "2026-10-28");
    assert_eq!(doc["findings"][1]["nights"], 6);
    assert!(
        std::fs::read_to_string(&md)
            .unwrap()
            .contains("first seen 2026-10-28, 6 nights")
    );
    // A clean night clears the stack.
    let out = night(&history, "2026-11-03", "clean");
    assert_eq!(out.code, 0);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&history).unwrap()).unwrap();
    assert_eq!(saved["entries"], serde_json::json!({}));
    let out = night(&history, "2026-11-04", "shop-prod");
    assert!(out.stdout.contains("(first seen 2026-11-04, 1 night)"));
}

#[test]
fn now_flag_and_bad_dates() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.json");
    let out = outcome(
        report("shop-prod")
            .arg("--history")
            .arg(&history)
            .arg("--now")
            .arg("2026-01-02"),
    );
    assert!(
        out.stdout.contains("first seen 2026-01-02"),
        "{}",
        out.stdout
    );
    let out = outcome(
        report("shop-prod")
            .arg("--history")
            .arg(&history)
            .env("DRIFTWATCH_NOW", "yesterday"),
    );
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("yesterday"));
    std::fs::write(&history, "not json").unwrap();
    let out = outcome(report("shop-prod").arg("--history").arg(&history));
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("h.json"));
    let _ = (driftwatch, fixture);
}
