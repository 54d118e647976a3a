//! The backup store: an apply never destroys the evidence of what was there.

use std::fs;

use crate::support::*;

#[test]
fn replaced_content_is_kept_and_can_be_shown_and_restored() {
    let decl = |c: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: \"{c}\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&decl("declared"));
    fs::write(s.live("/f.conf"), "what was there before\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "declared\n");

    let list = s.datum(&["--output", "json", "backup", "list"]);
    assert_exit(&list, 0);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(doc["format_version"], "1");
    let entries = &doc["backups"];
    assert_eq!(entries.as_array().unwrap().len(), 1, "{entries}");
    assert_eq!(entries[0]["path"], "/f.conf");
    let id = entries[0]["id"].to_string().trim_matches('"').to_owned();

    let show = s.datum(&["backup", "show", &id]);
    assert_exit(&show, 0);
    assert_eq!(stdout(&show), "what was there before\n");

    assert_exit(&s.datum(&["backup", "restore", &id]), 0);
    assert_eq!(
        fs::read_to_string(s.live("/f.conf")).unwrap(),
        "what was there before\n"
    );
    // The restored file is drift from the declaration again.
    assert_exit(&s.datum(&["plan"]), 2);
}
