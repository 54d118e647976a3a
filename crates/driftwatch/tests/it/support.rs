//! Shared helpers: fixture paths that fail loudly, and a command with a fixed environment.

use std::path::PathBuf;

use assert_cmd::Command;

/// The path of a fixture file; panics with the path when it does not exist.
pub fn fixture(rel: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    assert!(path.exists(), "missing fixture {}", path.display());
    path
}

/// The driftwatch binary with a clean, fixed environment.
pub fn driftwatch() -> Command {
    let mut cmd = Command::cargo_bin("driftwatch").expect("binary built");
    cmd.env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("DRIFTWATCH_NOW")
        .env_remove("NO_COLOR")
        .env("DRIFTWATCH_NOW", "2026-10-28");
    cmd
}

/// `report` on one scenario directory with its three files.
pub fn report(scenario: &str) -> Command {
    let mut cmd = driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(fixture(&format!("{scenario}/refresh_only.json")))
        .arg("--plan")
        .arg(fixture(&format!("{scenario}/plan.json")))
        .arg("--stack")
        .arg("shop-prod");
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(scenario)
        .join("main.tf.json");
    if config.exists() {
        cmd.arg("--config").arg(config);
    }
    cmd
}

pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn outcome(cmd: &mut Command) -> Outcome {
    let out = cmd.output().expect("driftwatch ran");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The finding for `address` in a JSON report, if there is one.
pub fn find_finding<'a>(
    doc: &'a serde_json::Value,
    address: &str,
) -> Option<&'a serde_json::Value> {
    doc["findings"]
        .as_array()
        .expect("a JSON report")
        .iter()
        .find(|f| f["address"] == address)
}

/// The finding for `address` in a JSON report; panics with the report when there is none.
pub fn finding<'a>(doc: &'a serde_json::Value, address: &str) -> &'a serde_json::Value {
    find_finding(doc, address).unwrap_or_else(|| panic!("no finding for {address} in {doc:#}"))
}

/// (address, category) of every finding of a JSON report, in report order.
pub fn categories(doc: &serde_json::Value) -> Vec<(&str, &str)> {
    doc["findings"]
        .as_array()
        .expect("a JSON report")
        .iter()
        .map(|f| {
            (
                f["address"].as_str().unwrap_or_default(),
                f["category"].as_str().unwrap_or_default(),
            )
        })
        .collect()
}

/// Assert the rows of a multi-stack summary table (the text from its header on) start as
/// given; row 0 is the header.
#[track_caller]
pub fn assert_table(text: &str, rows: &[&str]) {
    let start = text
        .find("stack ")
        .unwrap_or_else(|| panic!("no summary table in {text}"));
    let table: Vec<&str> = text[start..].lines().collect();
    for (i, row) in rows.iter().enumerate() {
        let line = table.get(i).copied().unwrap_or_default();
        assert!(
            line.starts_with(row),
            "row {i}: {line:?} does not start with {row:?}\n{text}"
        );
    }
}
