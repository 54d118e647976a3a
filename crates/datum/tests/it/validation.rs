//! Safe activation with real validators (sshd from openssh-server, visudo
//! from sudo): a rejected configuration never goes live, the failure names
//! the validator and the host, dependents are blocked, independent resources
//! converge, and a sensitive resource's validator output is never shown.

use std::fs;
use std::os::unix::fs::MetadataExt;

use crate::support::*;

const GOOD_SSHD: &str = "Port 22\nPermitRootLogin no\nPasswordAuthentication no\n";

fn sshd_repo(config: &str, sensitive: bool) -> Sandbox {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    s.write("repo/base/files/sshd_config", config);
    s.write(
        "repo/base/main.yaml",
        &format!(
            "datum: v1alpha1\ntype: File\nname: sshd-config\nsensitive: {sensitive}\ndesired:\n  path: /sshd_config\n  mode: \"0600\"\n  source: files/sshd_config\n  validate: sshd\n\
---\ndatum: v1alpha1\ntype: File\nname: banner\nrequires: [File/sshd-config]\ndesired:\n  path: /banner\n  content: \"hello\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: unrelated\ndesired:\n  path: /unrelated\n  content: \"independent\\n\"\n"
        ),
    );
    s
}

fn require(binary: &str) -> bool {
    let found = datum_host::command::which(binary).is_some();
    if !found {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "{binary} is required here (scripts/deps installs it)"
        );
        eprintln!("skipped: {binary} is not installed (run scripts/deps)");
    }
    found
}

#[test]
fn a_broken_sshd_config_never_goes_live_and_blocks_only_its_dependents() {
    if !require("sshd") {
        return;
    }
    let s = sshd_repo(GOOD_SSHD, false);
    assert_exit(&s.datum(&["apply"]), 2);
    let live = s.live("/sshd_config");
    let before = fs::metadata(&live).unwrap();
    fs::remove_file(s.live("/banner")).unwrap();

    // The declaration changes to something sshd rejects.
    s.write(
        "repo/base/files/sshd_config",
        "Port 22\nNoSuchDirective yes\n",
    );
    let plan = s.datum(&["plan"]);
    // sshd_config would fail, and the banner that requires it is blocked.
    assert_exit(&plan, 4);
    assert!(
        stdout(&plan).contains("would fail: validation failed (sshd on test-host"),
        "{}",
        stdout(&plan)
    );

    let out = s.datum(&["apply"]);
    assert_exit(&out, 4);
    let text = stdout(&out);
    assert!(
        text.contains("! File[sshd-config]  failed (apply): validation failed (sshd on test-host"),
        "{text}"
    );
    assert!(text.contains("exit 255"), "{text}");
    assert!(
        text.contains("NoSuchDirective"),
        "validator output is shown for a non-sensitive file:\n{text}"
    );
    // ...and the line it names is quoted from the content.
    assert!(
        text.contains("offending line:\n") && text.contains(":2: NoSuchDirective yes"),
        "{text}"
    );
    assert!(
        text.contains("# File[banner]  blocked (by File[sshd-config])"),
        "{text}"
    );
    assert!(!s.live("/banner").exists());

    // The live file is byte-identical: same inode, mtime and content.
    let after = fs::metadata(&live).unwrap();
    assert_eq!(
        (before.ino(), before.mtime(), before.mtime_nsec()),
        (after.ino(), after.mtime(), after.mtime_nsec())
    );
    assert_eq!(fs::read_to_string(&live).unwrap(), GOOD_SSHD);
    assert!(
        !s.files_under_root()
            .iter()
            .any(|p| p.contains(".datum.stage."))
    );

    // Fixed: the next pass converges everything.
    s.write("repo/base/files/sshd_config", "Port 2222\n");
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(fs::read_to_string(&live).unwrap(), "Port 2222\n");
    assert!(s.live("/banner").exists());
}

#[test]
fn an_independent_resource_converges_when_validation_fails() {
    if !require("sshd") {
        return;
    }
    let s = sshd_repo("Port 22\nNoSuchDirective yes\n", false);
    let out = s.datum(&["apply"]);
    assert_exit(&out, 6);
    assert!(
        !s.live("/sshd_config").exists(),
        "rejected content never went live"
    );
    assert_eq!(
        fs::read_to_string(s.live("/unrelated")).unwrap(),
        "independent\n"
    );
}

#[test]
fn validator_output_of_a_sensitive_resource_is_never_shown() {
    if !require("sshd") {
        return;
    }
    const CANARY: &str = "CANARYd4t7x";
    let s = sshd_repo(&format!("Port 22\n{CANARY} yes\n"), true);
    let mut all = String::new();
    for args in [
        &["plan"][..],
        &["apply"],
        &["--output", "json", "apply"],
        &["--output", "json", "plan"],
    ] {
        let o = s.datum(args);
        all.push_str(&stdout(&o));
        all.push_str(&stderr(&o));
    }
    assert!(!all.contains(CANARY), "canary leaked:\n{all}");
    assert!(
        all.contains("validation failed (sshd on test-host"),
        "{all}"
    );
    assert!(all.contains("exit 255"), "{all}");
    // Without `sensitive`, the same output is shown: the test above can fail.
    let open = sshd_repo(&format!("Port 22\n{CANARY} yes\n"), false);
    assert!(stdout(&open.datum(&["apply"])).contains(CANARY));
}

#[test]
fn visudo_rejects_a_broken_sudoers_drop_in_and_the_live_one_stays() {
    if !require("visudo") {
        return;
    }
    let decl = |content: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: ops\ndesired:\n  path: /ops\n  owner: root\n  group: root\n  mode: \"0440\"\n  content: \"{content}\"\n  validate: sudoers\n"
        )
    };
    let s = Sandbox::with_base(&decl("%ops ALL=(root) /usr/bin/apt-get\\n"));
    assert_exit(&s.datum(&["apply"]), 2);
    s.write(
        "repo/base/main.yaml",
        &decl("%ops ALL=(root /usr/bin/apt-get\\n"),
    );
    let out = s.datum(&["apply"]);
    assert_exit(&out, 4);
    let text = stdout(&out);
    assert!(
        text.contains("validation failed (sudoers on test-host"),
        "{text}"
    );
    // Without -q visudo says where; the line is quoted.
    assert!(text.contains("syntax error"), "{text}");
    assert!(
        text.contains("/ops:1: %ops ALL=(root /usr/bin/apt-get"),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(s.live("/ops")).unwrap(),
        "%ops ALL=(root) /usr/bin/apt-get\n"
    );
}

#[test]
fn nothing_is_validated_implicitly() {
    // An nginx path without `validate:` is not checked by nginx.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: n\ndesired:\n  path: /nginx.conf\n  content: \"this is not nginx syntax {\\n\"\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(s.live("/nginx.conf").exists());
}

#[test]
fn the_validators_command_lists_every_shipped_validator() {
    let s = Sandbox::new();
    let out = s.datum(&["--output", "json", "validators"]);
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["format_version"], "1");
    let names: Vec<&str> = doc["validators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for name in [
        "sshd",
        "nginx",
        "sudoers",
        "json",
        "yaml",
        "toml",
        "systemd-unit",
        "nftables",
        "haproxy",
        "apache2",
        "logrotate",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let json = doc["validators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "json")
        .unwrap();
    assert_eq!(json["installed"], true);
}

#[test]
fn a_group_that_fails_validation_is_refused_again_until_it_is_fixed() {
    if !require("nginx") {
        return;
    }
    let conf = |directive: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: /etc/nginx/nginx.conf\n  content: \"events {{}}\\nhttp {{ {directive} }}\\n\"\n  validate: nginx\n"
        )
    };
    let s = Sandbox::with_base(&conf("server_tokens off;"));
    std::fs::create_dir_all(s.live("/etc/nginx")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    let live = fs::read(s.live("/etc/nginx/nginx.conf")).unwrap();

    s.write("repo/base/main.yaml", &conf("no_such_directive on;"));
    let broken = s.datum(&["apply"]);
    assert_exit(&broken, 4);
    let text = stdout(&broken);
    assert!(
        text.contains(
            "! ValidationGroup[nginx]  failed (apply): validation failed (nginx on test-host"
        ),
        "{text}"
    );
    assert!(text.contains("no_such_directive"), "{text}");
    assert_eq!(fs::read(s.live("/etc/nginx/nginx.conf")).unwrap(), live);

    // Nothing was written, so the next pass refuses it again.
    let again = s.datum(&["apply"]);
    assert_exit(&again, 4);
    assert!(
        stdout(&again).contains("ValidationGroup[nginx]"),
        "{}",
        stdout(&again)
    );

    s.write("repo/base/main.yaml", &conf("server_tokens on;"));
    assert_exit(&s.datum(&["apply"]), 2);
    assert_exit(&s.datum(&["apply"]), 0);
}

/// A two-file nginx group under `--root` (the main file includes the site
/// by its path under the root) and a file outside it.
fn nginx_group(s: &Sandbox, marker: &str, site: &str, unrelated: &str) {
    let root = s.root().display().to_string();
    s.write(
        "repo/base/files/nginx.conf",
        &format!(
            "# {marker}\nevents {{ worker_connections 64; }}\nhttp {{\n    access_log off;\n    include {root}/etc/nginx/sites-enabled/*.conf;\n}}\n"
        ),
    );
    s.write("repo/base/files/x.conf", site);
    s.write(
        "repo/base/main.yaml",
        &format!("datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: /etc/nginx/nginx.conf\n  source: files/nginx.conf\n  validate: nginx\n\
---\ndatum: v1alpha1\ntype: File\nname: site\ndesired:\n  path: /etc/nginx/sites-enabled/x.conf\n  source: files/x.conf\n  validate: nginx\n\
---\ndatum: v1alpha1\ntype: File\nname: unrelated\ndesired:\n  path: /unrelated\n  content: \"{unrelated}\\n\"\n"),
    );
}

const GOOD_SITE: &str =
    "server {\n    listen 127.0.0.1:8097;\n    location / { return 200 \"ok\"; }\n}\n";
const BROKEN_SITE: &str =
    "server {\n    listen 127.0.0.1:8097;\n    datum_no_such_directive on;\n}\n";

/// The group applied with a valid site.
fn applied_nginx_group() -> Sandbox {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    fs::create_dir_all(s.live("/etc/nginx/sites-enabled")).unwrap();
    nginx_group(&s, "v1", GOOD_SITE, "one");
    assert_exit(&s.datum(&["apply"]), 2);
    s
}

#[test]
fn a_group_with_one_broken_include_changes_no_file_and_plan_says_it_would_fail() {
    if !require("nginx") || !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs nginx and root (the validator sandbox)");
        return;
    }
    let s = applied_nginx_group();
    let conf = s.live("/etc/nginx/nginx.conf");
    let site = s.live("/etc/nginx/sites-enabled/x.conf");
    let stat = |p: &std::path::Path| {
        let m = fs::metadata(p).unwrap();
        (m.ino(), m.mtime(), m.mtime_nsec(), fs::read(p).unwrap())
    };
    let before = (stat(&conf), stat(&site));

    // Both files change; the included site now breaks the whole. Only the
    // group is pending, and it would fail: 4.
    nginx_group(&s, "v2", BROKEN_SITE, "one");
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 4);
    let text = stdout(&plan);
    for needle in [
        "! ValidationGroup[nginx]  failed (plan): validation failed (nginx on test-host, nginx version: nginx/",
        "would fail validation (nginx): validated with File[nginx-conf], File[site] laid over the live configuration",
        "! File[nginx-conf]  failed (plan): would fail validation (nginx)",
        "! File[site]  failed (plan): would fail validation (nginx)",
        "datum_no_such_directive",
        "offending line:",
        "/etc/nginx/sites-enabled/x.conf:3:     datum_no_such_directive on;",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    // With an unrelated change pending too: 6.
    nginx_group(&s, "v2", BROKEN_SITE, "two");
    assert_exit(&s.datum(&["plan"]), 6);

    let out = s.datum(&["apply"]);
    assert_exit(&out, 6);
    let text = stdout(&out);
    for needle in [
        "! ValidationGroup[nginx]  failed (apply): validation failed (nginx on test-host",
        "no file written (nginx): validated with File[nginx-conf], File[site]",
        "! File[nginx-conf]  failed (apply): not written: ValidationGroup[nginx] failed validation",
        "! File[site]  failed (apply): not written: ValidationGroup[nginx] failed validation",
        "datum_no_such_directive",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    // No file of the group changed: same inode, mtime and bytes.
    assert!((stat(&conf), stat(&site)) == before, "a group file changed");
    assert!(
        !s.files_under_root()
            .iter()
            .any(|p| p.contains(".datum.stage."))
    );
    // The independent file converged.
    assert_eq!(fs::read_to_string(s.live("/unrelated")).unwrap(), "two\n");
    assert_exit(&s.datum(&["plan"]), 4);

    // Fixed: both files go live together.
    nginx_group(&s, "v2", GOOD_SITE, "two");
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(fs::read_to_string(&site).unwrap(), GOOD_SITE);
    assert!(fs::read_to_string(&conf).unwrap().starts_with("# v2\n"));
    assert_exit(&s.datum(&["plan"]), 0);
}

/// How a process that cannot build the validator sandbox behaves: as a
/// non-root user, validation refuses (naming the way out) unless the
/// operator opted out with `DATUM_VALIDATOR_SANDBOX=off`; then the validator
/// runs with that user's own rights.
#[test]
fn a_non_root_run_refuses_to_validate_unless_told_to_run_validators_unsandboxed() {
    if !rustix::process::geteuid().is_root() || !require("systemd-analyze") || !require("setpriv") {
        eprintln!("skipped: needs root (to run the binary as nobody), systemd-analyze and setpriv");
        return;
    }
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: unit\ndesired:\n  path: /datum-test.service\n  content: \"[Unit]\\nDescription=t\\n[Service]\\nExecStart=/bin/true\\n\"\n  validate: systemd-unit\n",
    );
    // Everything the unprivileged user needs: the sandbox folder, the root
    // (theirs), and a copy of the binary.
    for p in [s.dir.path().to_path_buf(), s.repo(), s.repo().join("base")] {
        fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    for p in ["host.yaml", "repo/datum.yaml", "repo/base/main.yaml"] {
        fs::set_permissions(
            s.dir.path().join(p),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
    }
    std::os::unix::fs::chown(s.root(), Some(65534), Some(65534)).unwrap();
    let exe = s.dir.path().join("datum");
    fs::copy(assert_cmd::cargo::cargo_bin("datum"), &exe).unwrap();
    let run = |env: Option<&str>| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .arg("--repo")
            .arg(s.repo())
            .arg("--root")
            .arg(s.root())
            .arg("--host-file")
            .arg(s.dir.path().join("host.yaml"))
            .args(["--color", "never", "apply"])
            .env_remove("DATUM_VALIDATOR_SANDBOX");
        if let Some(v) = env {
            cmd.env("DATUM_VALIDATOR_SANDBOX", v);
        }
        cmd.output().unwrap()
    };
    let out = run(None);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("needs root"), "{text}");
    assert!(text.contains("DATUM_VALIDATOR_SANDBOX=off"), "{text}");
    assert!(
        !s.live("/datum-test.service").exists(),
        "written without validation"
    );
    let out = run(Some("off"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(s.live("/datum-test.service").exists());
}

#[test]
fn a_relative_root_is_made_absolute_once_so_validators_see_absolute_paths() {
    if !require("sshd") {
        return;
    }
    let s = sshd_repo("Port 22\nNoSuchDirective yes\n", false);
    // `--root root`, relative to the folder the command runs in.
    let out = assert_cmd::Command::cargo_bin("datum")
        .unwrap()
        .current_dir(s.dir.path())
        .args([
            "--repo",
            "repo",
            "--root",
            "root",
            "--host-file",
            "host.yaml",
        ])
        .args(["--color", "never", "apply"])
        .output()
        .unwrap();
    assert_exit(&out, 6);
    let text = stdout(&out);
    let absolute = s.root().canonicalize().unwrap();
    // sshd names the file it was given: the staged copy's absolute path.
    assert!(
        text.contains(&format!("{}/.datum.stage.", absolute.display())),
        "{text}"
    );
    assert!(!s.live("/sshd_config").exists());
}

const JQ_VALIDATOR: &str = "[validator.jq-json]\nprogram = \"/usr/bin/jq\"\nargs = [\"empty\", \"{staged}\"]\n\
    package = \"jq\"\ninvalid_exit = [2, 4, 5]\nsummary = \"JSON that jq reads\"\n";

#[test]
fn an_administrators_validator_runs_in_the_sandbox_and_a_foreign_definition_is_refused() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root (the definitions must be root's, the sandbox needs it)");
        return;
    }
    if !require("jq") {
        return;
    }
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /app.json\n  content: \"{ not json\\n\"\n  validate: jq-json\n",
    );
    // Unknown until the administrator defines it.
    let out = s.datum(&["lint"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("unknown validator `jq-json`"),
        "{}",
        stderr(&out)
    );

    let file = s.with_admin_validator(JQ_VALIDATOR);
    assert_exit(&s.datum(&["lint"]), 0);
    let listed = s.datum(&["validators"]);
    assert!(stdout(&listed).contains("jq-json"), "{}", stdout(&listed));
    assert!(
        stdout(&listed).contains("validators.d"),
        "{}",
        stdout(&listed)
    );
    // Invalid content: rejected by jq, nothing written.
    let out = s.datum(&["apply"]);
    assert_exit(&out, 4);
    assert!(stdout(&out).contains("jq-json"), "{}", stdout(&out));
    assert!(!s.live("/app.json").exists());
    // Valid content goes live.
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /app.json\n  content: \"{\\\"ok\\\": true}\\n\"\n  validate: jq-json\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(s.live("/app.json").exists());

    // A definition someone else could have written: every command that
    // uses validators refuses, naming the file.
    std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
    let out = s.datum(&["plan"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("local.toml") && err.contains("uid 65534"),
        "{err}"
    );
    std::os::unix::fs::chown(&file, Some(0), None).unwrap();
    // A definition Datum does not understand: refused with its line.
    fs::write(&file, format!("{JQ_VALIDATOR}shell = \"sh -c\"\n")).unwrap();
    let out = s.datum(&["apply"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("local.toml") && err.contains("unknown field"),
        "{err}"
    );
}

/// README: a validator whose binary is not installed is a failure, never a
/// skip, at use. An administrator's validator whose program is missing is
/// listed as not installed and fails only the resources that name it; the
/// commands that use validators still run.
#[test]
fn an_administrators_validator_whose_program_is_missing_fails_only_what_names_it() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root (the definitions must be root's)");
        return;
    }
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: zone\ndesired:\n  path: /zone.conf\n  content: \"zone {}\\n\"\n  validate: zone-check\n\
---\ndatum: v1alpha1\ntype: File\nname: unrelated\ndesired:\n  path: /unrelated\n  content: \"independent\\n\"\n",
    );
    let program = s.dir.path().join("tools/zone-check");
    s.with_admin_validator(
        &format!(
            "[validator.zone-check]\nprogram = \"{}\"\nargs = [\"{{staged}}\"]\npackage = \"bind9-utils\"\nsummary = \"zones\"\n",
            program.display()
        ),
    );
    // Listed, as not installed, like a shipped validator without its binary.
    let listed = s.datum(&["validators"]);
    assert_exit(&listed, 0);
    let row = stdout(&listed)
        .lines()
        .find(|l| l.starts_with("zone-check"))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{}", stdout(&listed)));
    assert!(row.contains("not installed"), "{row}");
    let listed = s.datum(&["--output", "json", "validators"]);
    assert_exit(&listed, 0);
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let entry = json["validators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "zone-check")
        .cloned()
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(entry["installed"], false, "{entry}");
    assert_eq!(entry["source"], "administrator", "{entry}");
    // The resource naming it would fail (the plan says why), the other is
    // a change: exit 6.
    let out = s.datum(&["plan"]);
    assert_exit(&out, 6);
    let text = stdout(&out);
    assert!(
        text.contains("validator zone-check needs") && text.contains("not installed"),
        "{text}"
    );
    // The apply refuses it and converges the rest.
    let out = s.datum(&["apply"]);
    assert_exit(&out, 6);
    assert!(!s.live("/zone.conf").exists());
    assert!(s.live("/unrelated").exists(), "{}", stdout(&out));
    // A program that is there but not root's alone still stops every
    // command that uses validators.
    use std::os::unix::fs::PermissionsExt as _;
    fs::create_dir_all(program.parent().unwrap()).unwrap();
    fs::set_permissions(program.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&program, Some(65534), None).unwrap();
    let out = s.datum(&["validators"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("uid 65534"), "{}", stderr(&out));
}

/// The findings of `datum check --output json`: (category, subject) pairs.
fn check_findings(s: &Sandbox) -> (i32, Vec<(String, String)>, serde_json::Value) {
    let out = s.datum(&["--output", "json", "check"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pairs = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["category"].as_str().unwrap().to_owned(),
                f["subject"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (super::support::code(&out), pairs, doc)
}

#[test]
fn check_reports_a_live_configuration_its_group_validator_refuses() {
    if !require("nginx") || !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs nginx and root (the validator sandbox)");
        return;
    }
    let s = applied_nginx_group();
    let (code, findings, _) = check_findings(&s);
    assert_eq!((code, findings), (0, vec![]));

    // A refused apply leaves the live configuration valid: check says no
    // invalid_live_config (whatever it says of the unapplied files).
    nginx_group(&s, "v2", BROKEN_SITE, "one");
    assert_exit(&s.datum(&["apply"]), 4);
    let (_, findings, _) = check_findings(&s);
    assert!(
        !findings.iter().any(|(c, _)| c == "invalid_live_config"),
        "{findings:?}"
    );
    // ...and the files it refused are work apply still owes, not drift.
    for member in ["File[nginx-conf]", "File[site]"] {
        assert!(
            findings.contains(&("not_converged".to_owned(), member.to_owned())),
            "{member}: {findings:?}"
        );
    }

    // Back to the applied declaration; then someone breaks the live site by
    // hand: the drift and the refused configuration, exit 2.
    nginx_group(&s, "v1", GOOD_SITE, "one");
    assert_exit(&s.datum(&["apply"]), 0);
    fs::write(s.live("/etc/nginx/sites-enabled/x.conf"), BROKEN_SITE).unwrap();
    let (code, findings, doc) = check_findings(&s);
    assert_eq!(code, 2, "{doc}");
    for wanted in [
        ("invalid_live_config", "ValidationGroup[nginx]"),
        ("changed_outside", "File[site]"),
    ] {
        assert!(
            findings.contains(&(wanted.0.to_owned(), wanted.1.to_owned())),
            "{wanted:?} missing from {findings:?}"
        );
    }
    let text = doc.to_string();
    assert!(
        text.contains("validation failed (nginx on test-host, nginx version: nginx/"),
        "{text}"
    );
    let human = stdout(&s.datum(&["check"]));
    assert!(human.contains("invalid_live_config (1)"), "{human}");
}

#[test]
fn check_reports_a_reload_an_apply_owes() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: site\ndesired:\n  path: /site.conf\n  content: \"v1\\n\"\n\
---\ndatum: v1alpha1\ntype: Service\nname: datum-it-web\ndesired:\n  enabled: false\n  reload_on: [File/site]\n",
    );
    // The service is not applied (under --root a Service cannot be): the
    // reload the site's change calls for stays owed.
    assert_exit(&s.datum(&["apply", "--target", "File/site"]), 2);
    let (code, findings, doc) = check_findings(&s);
    assert!(
        findings.contains(&(
            "activation_owed".to_owned(),
            "Service[datum-it-web]".to_owned()
        )),
        "{doc}"
    );
    let text = doc.to_string();
    assert!(
        text.contains("reload owed since") && text.contains("after File[site] changed"),
        "{text}"
    );
    // Exit 1, not 2, only because a Service cannot be observed under --root
    // (the check says so as an error); on a real host it is 2.
    assert_eq!(code, 1, "{doc}");
    assert!(text.contains("under --root"), "{text}");
}

/// A Tree with a validator: the engine judges each staged entry before it
/// replaces the live one (the Tree stages entry by entry and hands each
/// back), so a refused entry never goes live and the walk stops there;
/// the entries accepted before it are live, and the old content they
/// replaced is kept as evidence.
#[test]
fn each_entry_of_a_validated_tree_is_judged_before_it_goes_live() {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: Tree\nname: conf\ndesired:\n  path: /conf.d\n  source: trees/conf\n  validate: json\n",
    );
    s.write("repo/base/trees/conf/a.json", "{\"a\": 1}\n");
    s.write("repo/base/trees/conf/b.json", "{\"b\": 1}\n");
    s.write("repo/base/trees/conf/c.json", "{\"c\": 1}\n");
    assert_exit(&s.datum(&["apply"]), 2);

    s.write("repo/base/trees/conf/a.json", "{\"a\": 2}\n");
    s.write("repo/base/trees/conf/b.json", "{broken\n");
    s.write("repo/base/trees/conf/c.json", "{\"c\": 2}\n");
    let out = s.datum(&["apply"]);
    assert_exit(&out, 4);
    let text = stdout(&out);
    assert!(
        text.contains("Tree[conf]  failed (apply): validation failed (json"),
        "{text}"
    );
    let live = |name: &str| fs::read_to_string(s.live(&format!("/conf.d/{name}"))).unwrap();
    assert_eq!(
        live("a.json"),
        "{\"a\": 2}\n",
        "accepted before the refusal"
    );
    assert_eq!(live("b.json"), "{\"b\": 1}\n", "refused: never live");
    assert_eq!(
        live("c.json"),
        "{\"c\": 1}\n",
        "after the refusal: not written"
    );
    let listing = stdout(&s.datum(&["backup", "list"]));
    assert!(listing.contains("/conf.d/a.json"), "{listing}");
    assert!(
        !std::fs::read_dir(s.live("/conf.d")).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".datum.stage.")),
        "no staged copy left"
    );

    // Mended, the next apply writes the rest.
    s.write("repo/base/trees/conf/b.json", "{\"b\": 2}\n");
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(live("b.json"), "{\"b\": 2}\n");
    assert_eq!(live("c.json"), "{\"c\": 2}\n");
}

/// A built-in validator (json, yaml, toml) parses the bytes it is given: a
/// plan writes no copy of them anywhere, not even in the temporary folder
/// (here a file, where no scratch folder can be made).
#[test]
fn a_plan_writes_no_scratch_copy_for_a_builtin_validator() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: good\ndesired:\n  path: /good.json\n  content: \"{\\\"a\\\": 1}\\n\"\n  validate: json\n---\ndatum: v1alpha1\ntype: File\nname: bad\ndesired:\n  path: /bad.json\n  content: \"{\\\"a\\\": \\n\"\n  validate: json\n",
    );
    let tmp = s.write("tmp-is-a-file", "");
    let out = assert_cmd::Command::cargo_bin("datum")
        .unwrap()
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(["--color", "never", "plan"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("scratch copy"), "{text}");
    assert!(
        text.contains("File[good]") && text.contains("File[bad]"),
        "{text}"
    );
    let bad = text
        .lines()
        .find(|l| l.contains("File[bad]"))
        .unwrap_or_default();
    let good = text
        .lines()
        .find(|l| l.contains("File[good]"))
        .unwrap_or_default();
    assert!(bad.contains("fail"), "the invalid one would fail: {text}");
    assert!(!good.contains("fail"), "the valid one would not: {text}");
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(
        s.files_under_root().is_empty(),
        "{:?}",
        s.files_under_root()
    );
}

/// A validator reads more than the file it checks: `Include` (sshd) and
/// `include` (nginx) pull in other files, and the validator echoes their
/// offending lines with their names. A File that is not sensitive,
/// including a sensitive File that everyone may read (so not withheld as
/// private), had the sensitive File's line shown in its failure (plan,
/// apply, JSON, and so the fleet report's validator output). Output that
/// names a sensitive resource's path is now withheld.
///
/// `dotted`: the include names the file by another spelling of its path
/// (`/secrets/./included.conf`), which the validator echoes as given: its
/// output quotes the secret without the declared path, and is withheld
/// because it holds a word of the sensitive content.
fn included_sensitive_file_is_never_shown(validator: &str, dotted: bool) {
    const CANARY: &str = "CANARY-included-4e1b";
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    let root = s.root();
    let root = root.display();
    let included = if dotted {
        format!("{root}/secrets/./included.conf")
    } else {
        format!("{root}/secrets/included.conf")
    };
    let line = if validator == "sshd" { "yes" } else { "on;" };
    s.write(
        "repo/base/secrets.yaml",
        &format!(
            "datum: v1alpha1\ntype: Directory\nname: secrets\ndesired: {{path: /secrets, mode: \"0755\"}}\n---\n\
datum: v1alpha1\ntype: File\nname: secret\nsensitive: true\ndesired: {{path: /secrets/included.conf, mode: \"0644\", content: \"{CANARY} {line}\\n\"}}\n"
        ),
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let including = if validator == "sshd" {
        format!(
            "datum: v1alpha1\ntype: File\nname: sshd-config\ndesired:\n  path: /sshd_config\n  mode: \"0600\"\n  validate: sshd\n  content: \"Port 22\\nInclude {included}\\n\"\n"
        )
    } else {
        // The included file is outside nginx's folder.
        format!(
            "datum: v1alpha1\ntype: Directory\nname: etc\ndesired: {{path: /etc, mode: \"0755\"}}\n---\n\
datum: v1alpha1\ntype: Directory\nname: nginx\ndesired: {{path: /etc/nginx, mode: \"0755\"}}\n---\n\
datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: /etc/nginx/nginx.conf\n  mode: \"0644\"\n  validate: nginx\n  content: \"events {{}}\\nhttp {{\\n  include {included};\\n}}\\n\"\n"
        )
    };
    s.write("repo/base/main.yaml", &including);
    let mut all = String::new();
    let mut each = Vec::new();
    for args in [
        &["plan"][..],
        &["--output", "json", "plan"],
        &["--output", "markdown", "plan"],
        &["apply"],
        &["--output", "json", "apply"],
    ] {
        let o = s.datum(args);
        each.push(stdout(&o));
        all.push_str(&stdout(&o));
        all.push_str(&stderr(&o));
    }
    assert!(
        !all.contains(CANARY),
        "{validator}: the included file was shown:\n{all}"
    );
    // Every form says the output was withheld, and for which resource.
    let (why, sentence) = if dotted {
        (
            "quotes_sensitive_content",
            "it holds a word of the content of File[secret]",
        )
    } else {
        ("names_sensitive_path", "it names the path of File[secret]")
    };
    for human in [&each[0], &each[2], &each[3]] {
        assert!(
            human.contains(&format!(
                "validator output withheld: it may quote a sensitive value ({sentence})"
            )),
            "{validator}: withheld unsaid:\n{human}"
        );
    }
    for json in [&each[1], &each[4]] {
        let doc: serde_json::Value = serde_json::from_str(json).unwrap();
        let withheld: Vec<&serde_json::Value> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r.get("output_withheld"))
            .collect();
        assert!(!withheld.is_empty(), "{validator}: {json}");
        for w in withheld {
            assert_eq!(
                *w,
                serde_json::json!({"reason": why, "resources": ["File[secret]"]}),
                "{json}"
            );
        }
    }
    for entry in fs::read_dir(s.live("/var/lib/datum")).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("state.db") {
            let bytes = fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(CANARY),
                "{validator}: {:?} holds it",
                entry.path()
            );
        }
    }
    assert!(
        all.contains(&format!("validation failed ({validator} on test-host")),
        "{all}"
    );
    // Once the included file is not sensitive, the same output is shown:
    // the assertion above can fail.
    let secrets = fs::read_to_string(s.repo().join("base/secrets.yaml")).unwrap();
    s.write(
        "repo/base/secrets.yaml",
        &secrets.replace("sensitive: true", "sensitive: false"),
    );
    let open = stdout(&s.datum(&["plan"]));
    assert!(open.contains(CANARY), "{open}");
}

#[test]
fn a_group_validators_output_naming_an_included_sensitive_file_is_never_shown() {
    if require("nginx") {
        included_sensitive_file_is_never_shown("nginx", false);
    }
}

#[test]
fn a_file_validators_output_naming_an_included_sensitive_file_is_never_shown() {
    if require("sshd") {
        included_sensitive_file_is_never_shown("sshd", false);
    }
}

/// A validator that quotes a sensitive File's value without its declared
/// path (nginx's `unknown directive "..." in /root/secrets/./included.conf`,
/// sshd's `Bad configuration option: ...` from a file named the same way)
/// had it shown: only the path was looked for. The output is now searched
/// for the sensitive content's words too.
#[test]
fn a_group_validators_output_quoting_a_sensitive_value_by_another_path_is_never_shown() {
    if require("nginx") {
        included_sensitive_file_is_never_shown("nginx", true);
    }
}

#[test]
fn a_file_validators_output_quoting_a_sensitive_value_by_another_path_is_never_shown() {
    if require("sshd") {
        included_sensitive_file_is_never_shown("sshd", true);
    }
}

/// 6111135 withholds a validator's output quoting a word of a sensitive
/// File's content, but a sensitive Tree's files were not looked through:
/// sshd -t including one of them by another spelling of its path (a link
/// to the Tree's folder) printed 'Bad configuration option: CANARY...' in
/// plan and apply. A sensitive Tree's declared files' words are now
/// searched for as a File's are.
#[test]
fn a_validators_output_quoting_a_sensitive_trees_file_is_never_shown() {
    if !require("sshd") {
        return;
    }
    const CANARY: &str = "CNRYh107-tree-4e1b";
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    s.write("repo/base/tree/included.conf", &format!("{CANARY} yes\n"));
    let tree = |sensitive: bool| {
        format!(
            "datum: v1alpha1\ntype: Tree\nname: secrets\nsensitive: {sensitive}\ndesired:\n  path: /secrets\n  source: tree\n"
        )
    };
    s.write("repo/base/secrets.yaml", &tree(true));
    assert_exit(&s.datum(&["apply"]), 2);
    std::os::unix::fs::symlink("secrets", s.live("/sl")).unwrap();
    s.write(
        "repo/base/main.yaml",
        &format!(
            "datum: v1alpha1\ntype: File\nname: sshd-config\ndesired:\n  path: /sshd_config\n  mode: \"0600\"\n  validate: sshd\n  content: \"Port 22\\nInclude {}/sl/included.conf\\n\"\n",
            s.root().display()
        ),
    );
    let mut all = String::new();
    for args in [&["plan"][..], &["--output", "json", "apply"]] {
        let o = s.datum(args);
        all.push_str(&stdout(&o));
        all.push_str(&stderr(&o));
    }
    assert!(!all.contains(CANARY), "{all}");
    assert!(all.contains("validation failed (sshd on"), "{all}");
    // Not sensitive: shown (the assertion above can fail).
    s.write("repo/base/secrets.yaml", &tree(false));
    let open = stdout(&s.datum(&["plan"]));
    assert!(open.contains(CANARY), "{open}");
}

/// A sensitive file's common words ("configuration", "file", "unknown",
/// "directive", "failed") are nginx's own, in every line it prints: each
/// withheld nginx's whole output (6111135), so a broken nginx.conf failed
/// with no reason beside any sensitive file holding one. The fixed words of
/// a line nginx is known to print are no longer searched; what it quotes
/// (the directive, the path) still is, and so are the offending lines.
#[test]
fn a_validators_own_words_in_a_sensitive_file_withhold_nothing() {
    if !require("nginx") {
        return;
    }
    const CANARY: &str = "CNRYh113-4e1b";
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    fs::create_dir_all(s.live("/etc/nginx")).unwrap();
    fs::create_dir_all(s.live("/srv")).unwrap();
    s.write(
        "repo/base/main.yaml",
        &format!(
            "datum: v1alpha1\ntype: File\nname: upstream\nsensitive: true\ndesired:\n  path: /srv/upstream.conf\n  mode: \"0600\"\n  content: \"# configuration file: an unknown directive, test failed\\npassword {CANARY};\\n\"\n---\n\
datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: /etc/nginx/nginx.conf\n  validate: nginx\n  content: \"events {{}}\\nhttp {{\\n  server {{ listen 127.0.0.1:8098; h113_nonsense on; }}\\n}}\\n\"\n"
        ),
    );
    let plan = s.datum(&["plan"]);
    let text = stdout(&plan);
    assert!(
        text.contains("| nginx: configuration file ")
            && text.contains("unknown directive \"h113_nonsense\""),
        "{text}"
    );
    assert!(!text.contains("withheld"), "{text}");
    let json = stdout(&s.datum(&["--output", "json", "apply"]));
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let group = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "ValidationGroup[nginx]")
        .unwrap();
    assert!(
        group["detail"]
            .as_str()
            .is_some_and(|d| d.contains("h113_nonsense")),
        "{json}"
    );
    assert!(!format!("{text}{json}").contains(CANARY));
    // A word of it that nginx quotes is still withheld.
    s.write(
        "repo/base/main.yaml",
        &fs::read_to_string(s.repo().join("base/main.yaml"))
            .unwrap()
            .replace("h113_nonsense on", "unknown_h113 on")
            .replace("password ", "unknown_h113 "),
    );
    let text = stdout(&s.datum(&["plan"]));
    // (The word is in nginx.conf's diff, which is not sensitive; nginx's
    // quoting of it is not shown.)
    assert!(!text.contains("\"unknown_h113\""), "{text}");
    assert!(!text.contains("| nginx:"), "{text}");
    assert!(
        text.contains("validator output withheld: it may quote a sensitive value (it holds a word of the content of File[upstream])"),
        "{text}"
    );
}

/// sshd -t's own words ("Bad configuration option", "line",
/// "terminating") in a sensitive file withheld its output; its lines end
/// in CR LF, which the fixed lines must allow for. Shown now; the option it
/// quotes is still searched.
#[test]
fn sshds_own_words_in_a_sensitive_file_withhold_nothing() {
    if !require("sshd") {
        return;
    }
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    fs::create_dir_all(s.live("/srv")).unwrap();
    let main = |option: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /srv/token.conf\n  content: \"# Bad configuration option on line 2, terminating\\nsecret CNRYh113-sshd\\n\"\n---\n\
datum: v1alpha1\ntype: File\nname: sshd-config\ndesired:\n  path: /sshd_config\n  mode: \"0600\"\n  validate: sshd\n  content: \"Port 22\\n{option} 23\\n\"\n"
        )
    };
    s.write("repo/base/main.yaml", &main("Prot"));
    let text = stdout(&s.datum(&["plan"]));
    assert!(
        text.contains(": line 2: Bad configuration option: Prot")
            && text.contains(": terminating, 1 bad configuration options"),
        "{text}"
    );
    assert!(!text.contains("withheld"), "{text}");
    // The option it quotes, a word of the sensitive file: withheld.
    s.write("repo/base/main.yaml", &main("terminating"));
    let text = stdout(&s.datum(&["plan"]));
    assert!(!text.contains("option: terminating"), "{text}");
    assert!(text.contains("validator output withheld"), "{text}");
}
