//! Terraform's conveniences: `--target` (with what it requires), `--class`,
//! and saved plans (`datum plan --out FILE`, `datum apply FILE`) that are
//! refused once stale.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::support::*;

const CANARY: &str = "CANARY-77f0-saved-plan";

/// What is under a root where only the host's digest key was made: the
/// state folder and the key.
const DIGEST_KEY: [&str; 4] = [
    "var",
    "var/lib",
    "var/lib/datum",
    "var/lib/datum/digest.key",
];

/// A folder with a config file and a secret in it (the files require the
/// folder through the catalogue's parent-directory edge), a critical
/// config, and an unrelated file.
fn manifest(config: &str) -> String {
    format!(
        "datum: v1alpha1\ntype: Directory\nname: app\ndesired:\n  path: /app\n  mode: \"0755\"\n\
---\ndatum: v1alpha1\ntype: File\nname: config\nclass: critical\ndesired:\n  path: /app/config.ini\n  content: \"{config}\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: secret\nsensitive: true\ndesired:\n  path: /app/secret\n  mode: \"0600\"\n  content: \"token={CANARY}\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: other\ndesired:\n  path: /other.txt\n  content: \"other\\n\"\n"
    )
}

fn sandbox() -> Sandbox {
    Sandbox::with_base(&manifest("port = 8080"))
}

#[test]
fn a_target_brings_what_it_requires_and_the_output_says_the_pass_is_partial() {
    let s = sandbox();
    let plan = s.datum(&["plan", "--target", "File/config"]);
    assert_exit(&plan, 2);
    let out = stdout(&plan);
    assert!(
        out.starts_with(
            "Partial plan (--target File[config]): 2 of 4 resources, the targets and everything they require; the other 2 are not planned.\n"
        ),
        "{out}"
    );
    assert!(out.contains("+ Directory[app]"), "{out}");
    assert!(out.contains("+ File[config]"), "{out}");
    assert!(
        !out.contains("File[other]") && !out.contains("File[secret]"),
        "{out}"
    );
    assert!(out.contains("Plan: 2 to change"), "{out}");
    assert!(out.contains("Note: this plan is partial"), "{out}");

    let json = s.datum(&["--output", "json", "plan", "--target", "File/config"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["selection"]["partial"], true);
    assert_eq!(
        doc["selection"]["targets"],
        serde_json::json!(["File[config]"])
    );
    assert_eq!(doc["resources"].as_array().unwrap().len(), 2);

    // Repeatable; apply changes the selection only.
    let apply = s.datum(&[
        "apply",
        "--target",
        "File[config]",
        "--target",
        "File/other",
    ]);
    assert_exit(&apply, 2);
    assert!(
        stdout(&apply).starts_with("Partial apply"),
        "{}",
        stdout(&apply)
    );
    assert_eq!(
        fs::read_to_string(s.live("/app/config.ini")).unwrap(),
        "port = 8080\n"
    );
    assert!(s.live("/other.txt").is_file());
    assert!(
        !s.live("/app/secret").exists(),
        "an untargeted file was written"
    );
    // The rest is still pending for a full plan.
    let full = s.datum(&["plan"]);
    assert_exit(&full, 2);
    assert!(
        stdout(&full).contains("+ File[secret]"),
        "{}",
        stdout(&full)
    );
    assert!(!stdout(&full).contains("Partial"), "{}", stdout(&full));
}

#[test]
fn an_unknown_target_is_an_error_naming_it_and_nothing_is_done() {
    let s = sandbox();
    for cmd in ["plan", "apply"] {
        let o = s.datum(&[cmd, "--target", "File/confg", "--target", "File/other"]);
        assert_exit(&o, 1);
        assert!(
            stderr(&o).contains("unknown target File[confg] (did you mean File[config]?)"),
            "{}",
            stderr(&o)
        );
        assert!(
            s.files_under_root().is_empty(),
            "{cmd} wrote {:?}",
            s.files_under_root()
        );
    }
    let o = s.datum(&["apply", "--class", "nope"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("class `nope`"), "{}", stderr(&o));
    // Not a reference at all: a usage error, also exit 1.
    let o = s.datum(&["plan", "--target", "config"]);
    assert_exit(&o, 1);
}

#[test]
fn apply_class_changes_only_that_class_and_never_what_it_requires_from_others() {
    let s = sandbox();
    // File[config] (critical) requires Directory[app] (normal), missing.
    let o = s.datum(&["apply", "--class", "critical"]);
    assert_exit(&o, 4);
    let out = stdout(&o);
    assert!(
        out.contains("# Directory[app]  held (not selected; it would change)"),
        "{out}"
    );
    assert!(
        out.contains("not of class `critical` (--class critical): not applied"),
        "{out}"
    );
    assert!(
        out.contains("# File[config]  blocked (by Directory[app])"),
        "{out}"
    );
    assert!(!s.live("/app").exists());

    assert_exit(&s.datum(&["apply", "--target", "Directory/app"]), 2);
    let o = s.datum(&["apply", "--class", "critical"]);
    assert_exit(&o, 2);
    assert!(s.live("/app/config.ini").is_file());
    assert!(!s.live("/app/secret").exists() && !s.live("/other.txt").exists());
}

fn plan_file(s: &Sandbox) -> String {
    s.dir.path().join("saved.plan").display().to_string()
}

#[test]
fn a_saved_plan_is_applied_exactly_and_holds_no_sensitive_value() {
    let s = sandbox();
    // The secret's live file drifted: the plan replaces it.
    fs::create_dir_all(s.live("/app")).unwrap();
    fs::write(s.live("/app/secret"), format!("live-{CANARY}\n")).unwrap();
    let file = plan_file(&s);
    let plan = s.datum(&["plan", "--target", "File/secret", "--out", &file]);
    assert_exit(&plan, 2);
    assert!(
        stdout(&plan).contains(&format!("Saved the plan to {file}")),
        "{}",
        stdout(&plan)
    );
    let meta = fs::symlink_metadata(&file).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let text = fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains(CANARY),
        "the plan file holds the secret:\n{text}"
    );
    assert!(!text.contains("token="), "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["format_version"], "1");
    assert_eq!(doc["kind"], "datum-plan");
    assert_eq!(
        doc["selection"]["targets"],
        serde_json::json!(["File[secret]"])
    );
    assert_eq!(doc["catalogue"]["resources"].as_object().unwrap().len(), 4);
    let planned: Vec<&str> = doc["planned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(planned, ["Directory[app]", "File[secret]"]);
    assert!(
        doc["planned"][0]["observed"]
            .as_str()
            .is_some_and(|f| f.len() == 64)
    );
    // The secret's observation only by the host's keyed digest.
    assert!(
        doc["planned"][1]["observed"]
            .as_str()
            .is_some_and(|f| f.starts_with("keyed-blake3:")),
        "{doc}"
    );

    let apply = s.datum(&["apply", &file]);
    assert_exit(&apply, 2);
    let out = format!("{}{}", stdout(&apply), stderr(&apply));
    assert!(!out.contains(CANARY), "{out}");
    assert!(
        out.contains("Partial apply (--target File[secret])"),
        "{out}"
    );
    assert_eq!(
        fs::read_to_string(s.live("/app/secret")).unwrap(),
        format!("token={CANARY}\n")
    );
    assert!(!s.live("/app/config.ini").exists() && !s.live("/other.txt").exists());
    // Applied once, the plan is stale: what it observed is gone.
    let again = s.datum(&["apply", &file]);
    assert_exit(&again, 1);
    assert!(stderr(&again).contains("is stale"), "{}", stderr(&again));
}

#[test]
fn a_saved_plan_is_refused_after_a_catalogue_edit_naming_what_changed() {
    let s = sandbox();
    let file = plan_file(&s);
    assert_exit(&s.datum(&["plan", "--out", &file]), 2);
    s.write("repo/base/main.yaml", &manifest("port = 9090"));
    let o = s.datum(&["apply", &file]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains(&format!("the saved plan {file} is stale")),
        "{err}"
    );
    assert!(
        err.contains("the catalogue changed since the plan was made: File[config] changed"),
        "{err}"
    );
    assert!(!err.contains("File[other]"), "{err}");
    // Nothing applied: only the digest key the plan of a sensitive
    // resource needed (`datum plan --out` made it).
    assert_eq!(s.files_under_root(), DIGEST_KEY);
}

#[test]
fn a_saved_plan_is_refused_after_a_live_file_changed_under_it() {
    let s = sandbox();
    assert_exit(&s.datum(&["apply"]), 2);
    fs::write(s.live("/app/config.ini"), "port = 1\n").unwrap();
    let file = plan_file(&s);
    let plan = s.datum(&["plan", "--out", &file]);
    assert_exit(&plan, 2);
    assert!(
        stdout(&plan).contains("~ File[config]"),
        "{}",
        stdout(&plan)
    );
    // Someone edits the file again after the plan was reviewed.
    fs::write(s.live("/app/config.ini"), "port = 2\n").unwrap();
    let o = s.datum(&["apply", &file]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("1 resource(s) changed since the plan was made: File[config] (what is on the host changed)"),
        "{err}"
    );
    assert!(err.contains("nothing was applied"), "{err}");
    assert_eq!(
        fs::read_to_string(s.live("/app/config.ini")).unwrap(),
        "port = 2\n"
    );
    // A fresh plan of the same state applies.
    assert_exit(&s.datum(&["plan", "--out", &file]), 2);
    assert_exit(&s.datum(&["apply", &file]), 2);
    assert_eq!(
        fs::read_to_string(s.live("/app/config.ini")).unwrap(),
        "port = 8080\n"
    );
}

#[test]
fn a_plan_is_never_written_through_a_link_and_a_foreign_file_is_not_applied() {
    let s = sandbox();
    let victim = s.write("victim.txt", "keep me\n");
    let link = s.dir.path().join("link.plan");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = s.datum(&["plan", "--out", link.to_str().unwrap()]);
    assert_exit(&o, 1);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
    let o = s.datum(&["apply", victim.to_str().unwrap()]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("not a saved Datum plan"),
        "{}",
        stderr(&o)
    );
    // Only the digest key, made by the first plan (of a catalogue with a
    // sensitive resource) before its file was refused.
    assert_eq!(s.files_under_root(), DIGEST_KEY);
}

/// A saved plan recorded a sensitive resource's hash over its declaration
/// (which covers the content's SHA-256) and the fingerprint of its
/// observation (which covers the live content's): anyone holding the file
/// could plan the guessed repository on a host of their own and compare.
/// Both are the host's keyed digests now: another host's plan of the same
/// secret gives other values, and the plan still applies, and is still
/// refused once the repository or the host changed.
#[test]
fn a_saved_plan_of_a_secret_cannot_be_matched_by_a_guess_elsewhere() {
    let repo = |live: &str| {
        let s = Sandbox::with_base(
            "datum: v1alpha1\ntype: File\nname: sec\nsensitive: true\ndesired:\n  path: /sec.conf\n  mode: \"0600\"\n  content: \"password=hunter2\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /motd\n  content: \"hello\\n\"\n",
        );
        // The live secret, which the plan observes (and replaces).
        fs::write(s.live("/sec.conf"), live).unwrap();
        fs::set_permissions(s.live("/sec.conf"), fs::Permissions::from_mode(0o600)).unwrap();
        s
    };
    let plan_of = |s: &Sandbox| -> (String, serde_json::Value) {
        let file = plan_file(s);
        let o = s.datum(&["plan", "--out", &file]);
        assert_exit(&o, 2);
        let text = fs::read_to_string(&file).unwrap();
        let doc = serde_json::from_str(&text).unwrap();
        (text, doc)
    };
    let observed = |doc: &serde_json::Value, id: &str| -> serde_json::Value {
        doc["planned"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .unwrap()["observed"]
            .clone()
    };
    let host = repo("password=live-secret\n");
    let (text, plan) = plan_of(&host);
    for secret in ["password=hunter2\n", "password=live-secret\n"] {
        assert!(!text.contains(&sha256_hex(secret.as_bytes())), "{text}");
    }
    // Whoever holds the plan guesses both secrets right, on their own host.
    let guesser = repo("password=live-secret\n");
    let (_, guess) = plan_of(&guesser);
    let resources = |doc: &serde_json::Value, id: &str| doc["catalogue"]["resources"][id].clone();
    // Like is compared with like: what is not sensitive is the same.
    assert_eq!(
        resources(&plan, "File[motd]"),
        resources(&guess, "File[motd]")
    );
    assert_eq!(
        observed(&plan, "File[motd]"),
        observed(&guess, "File[motd]")
    );
    let keyed = resources(&plan, "File[sec]");
    assert!(
        keyed
            .as_str()
            .is_some_and(|h| h.starts_with("keyed-blake3:")),
        "{plan}"
    );
    assert_ne!(
        keyed,
        resources(&guess, "File[sec]"),
        "the guess is confirmed"
    );
    assert_ne!(plan["catalogue"]["digest"], guess["catalogue"]["digest"]);
    let seen = observed(&plan, "File[sec]");
    assert!(
        seen.as_str()
            .is_some_and(|h| h.starts_with("keyed-blake3:")),
        "{plan}"
    );
    assert_ne!(
        seen,
        observed(&guess, "File[sec]"),
        "the live secret is confirmed"
    );

    // The plan applies, exactly.
    let file = plan_file(&host);
    assert_exit(&host.datum(&["apply", &file]), 2);
    assert_eq!(
        fs::read_to_string(host.live("/sec.conf")).unwrap(),
        "password=hunter2\n"
    );
    // Refused once the secret's declaration changed...
    fs::write(host.live("/sec.conf"), "password=live-secret\n").unwrap();
    plan_of(&host);
    host.write(
        "repo/base/main.yaml",
        &fs::read_to_string(host.repo().join("base/main.yaml"))
            .unwrap()
            .replace("hunter2", "hunter3"),
    );
    let o = host.datum(&["apply", &file]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("the catalogue changed since the plan was made: File[sec] changed"),
        "{}",
        stderr(&o)
    );
    // ... or the live secret did.
    plan_of(&host);
    fs::write(host.live("/sec.conf"), "password=edited\n").unwrap();
    let o = host.datum(&["apply", &file]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("File[sec] (what is on the host changed)"),
        "{}",
        stderr(&o)
    );
    // ... or the key it was made with is gone (none is made beside the
    // records keyed with it: the plan cannot be checked).
    plan_of(&host);
    fs::remove_file(host.live("/var/lib/datum/digest.key")).unwrap();
    let o = host.datum(&["apply", &file]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("cannot be checked") && stderr(&o).contains("--rebuild-state"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        fs::read_to_string(host.live("/sec.conf")).unwrap(),
        "password=edited\n",
        "nothing applied"
    );

    // Where no key can be made, no plan of a secret is saved.
    let keyless = repo("password=live-secret\n");
    fs::create_dir_all(keyless.live("/var/lib")).unwrap();
    fs::write(keyless.live("/var/lib/datum"), "not a folder\n").unwrap();
    let file = plan_file(&keyless);
    let o = keyless.datum(&["plan", "--out", &file]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("File[sec] is sensitive") && stderr(&o).contains("no plan was saved"),
        "{}",
        stderr(&o)
    );
    assert!(!std::path::Path::new(&file).exists());
}

/// SHA-256 hex of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
