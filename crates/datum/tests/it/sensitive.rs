//! A value marked sensitive never appears in any output: plan, apply, JSON,
//! catalogue, backups, the state store.

use std::fs;

use crate::support::*;

const CANARY: &str = "CANARY-9c1e-do-not-print";

#[test]
fn sensitive_content_never_appears_in_any_output_or_the_state_store() {
    let manifest = |v: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: \"token={CANARY}-{v}\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&manifest("v1"));
    let mut outputs = Vec::new();
    for args in [
        &["plan"][..],
        &["--output", "json", "plan"],
        &["apply"],
        &["catalogue"],
        &["catalogue", "--explain"],
    ] {
        outputs.push(s.datum(args));
    }
    // Change the declaration and the live file: diffs and backups get involved.
    s.write("repo/base/main.yaml", &manifest("v2"));
    fs::write(s.live("/token"), format!("token={CANARY}-hand-edit\n")).unwrap();
    for args in [
        &["plan"][..],
        &["--output", "json", "plan"],
        &["--output", "json", "apply"],
        &["backup", "list"],
        &["--output", "json", "backup", "list"],
    ] {
        outputs.push(s.datum(args));
    }
    for o in &outputs {
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(!all.contains(CANARY), "canary leaked:\n{all}");
    }
    assert!(outputs.iter().any(|o| stdout(o).contains("(sensitive)")));
    // The backup exists (restore works) but `show` does not print it.
    let list: serde_json::Value =
        serde_json::from_slice(&s.datum(&["--output", "json", "backup", "list"]).stdout).unwrap();
    let id = list["backups"][0]["id"]
        .to_string()
        .trim_matches('"')
        .to_owned();
    let show = s.datum(&["backup", "show", &id]);
    assert_exit(&show, 0);
    assert!(!stdout(&show).contains(CANARY));
    // The state store never holds the value.
    let db = fs::read(s.live("/var/lib/datum/state.db")).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains(CANARY));
    for entry in fs::read_dir(s.live("/var/lib/datum")).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("state.db") {
            let bytes = fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(CANARY),
                "{:?}",
                entry.path()
            );
        }
    }
}
