//! Snapshots of what a person reads: a plan with a diff, an apply, lint
//! errors with file:line, and the help text. Durations and temporary paths
//! are filtered; everything else must stay exactly as reviewed.

use crate::support::*;

fn transcript(o: &std::process::Output) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        code(o),
        stdout(o),
        stderr(o)
    )
}

fn settings(s: &Sandbox) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\(\d+ ms\)", "(N ms)");
    settings.add_filter(
        &regex_escape(&s.dir.path().display().to_string()),
        "[SANDBOX]",
    );
    settings
}

const REPO: &str = "datum: v1alpha1\ntype: Directory\nname: app\ndesired: {path: /app, mode: \"0750\"}\n\
---\ndatum: v1alpha1\ntype: File\nname: config\ndesired:\n  path: /app/config.ini\n  mode: \"0640\"\n  content: \"[main]\\nport = 8080\\nworkers = 4\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /app/token\n  mode: \"0600\"\n  content: \"secret-value\\n\"\n";

#[test]
fn plan_apply_and_drift_transcripts() {
    let s = Sandbox::with_base(REPO);
    let settings = settings(&s);
    settings.bind(|| {
        insta::assert_snapshot!("plan_on_an_empty_root", transcript(&s.datum(&["plan"])));
        insta::assert_snapshot!("first_apply", transcript(&s.datum(&["apply"])));
        std::fs::write(
            s.live("/app/config.ini"),
            "[main]\nport = 9090\nworkers = 4\n",
        )
        .unwrap();
        std::fs::write(s.live("/app/token"), "hand-edited\n").unwrap();
        insta::assert_snapshot!("plan_after_hand_edits", transcript(&s.datum(&["plan"])));
        // The same plan for a pull request: fields by name, never a value.
        let md = s.datum(&["--output", "markdown", "plan"]);
        for secret in ["secret-value", "hand-edited", "9090"] {
            assert!(!stdout(&md).contains(secret), "{}", stdout(&md));
        }
        insta::assert_snapshot!("plan_after_hand_edits_markdown", transcript(&md));
    });
}

#[test]
fn lint_errors_read_like_a_compiler_s() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  mdoe: \"0644\"\n  source: ../../etc/shadow\n\
---\ndatum: v1alpha1\ntype: File\nname: sshd\nrequires: [File/nope]\ndesired:\n  path: /etc/ssh/sshd_config\n  content: x\n  validate: \"sshd -t -f %s\"\n",
    );
    settings(&s).bind(|| {
        insta::assert_snapshot!("lint_errors", transcript(&s.datum(&["lint"])));
    });
}

#[test]
fn a_quoted_value_is_underlined_without_the_comment_after_it() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  mode: \"0999\"  # world-readable\n  owner: 'r t'\t# \"q\"\n  content: x\n",
    );
    settings(&s).bind(|| {
        insta::assert_snapshot!(
            "lint_quoted_value_before_a_comment",
            transcript(&s.datum(&["lint"]))
        );
    });
}

#[test]
fn a_syntax_error_at_the_end_of_a_file_shows_the_line_it_is_on() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired: {path: /etc/motd, content: x\n\n",
    );
    settings(&s).bind(|| {
        insta::assert_snapshot!(
            "lint_syntax_error_at_the_end_of_a_file",
            transcript(&s.datum(&["lint"]))
        );
    });
}

#[test]
fn a_misspelt_type_or_field_is_answered_with_the_one_meant() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Fiel\nname: motd\ndesired: {path: /etc/motd, content: x}\n\
---\ndatum: v1alpha1\ntype: File\nname: issue\ndesired: {path: /etc/issue, ownr: root, content: x}\n\
---\ndatum: v1alpha1\ntype: Service\nname: ssh\ndesired: {stat: running}\n\
---\ndatum: v1alpha1\ntype: Package\nname: curl\ndesired: {verison: \"8.5\"}\n\
---\ndatum: v1alpha1\ntype: Group\nname: ops\ndesired: {gdi: 2000}\n\
---\ndatum: v1alpha1\ntype: User\nname: bob\ndesired: {shel: /bin/sh}\n",
    );
    settings(&s).bind(|| {
        insta::assert_snapshot!("lint_did_you_mean", transcript(&s.datum(&["lint"])));
        s.write("host.yaml", "name: h1\nlable: {role: web}\n");
        insta::assert_snapshot!(
            "lint_did_you_mean_in_the_host_file",
            transcript(&s.datum(&["lint"]))
        );
    });
}

#[test]
fn a_host_name_enrolment_would_refuse_is_refused_by_lint() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired: {path: /etc/motd, content: x}\n",
    );
    s.write("host.yaml", "name: \"web 01\"\nlabels: {role: web}\n");
    settings(&s).bind(|| {
        insta::assert_snapshot!(
            "lint_host_name_with_a_space",
            transcript(&s.datum(&["lint"]))
        );
    });
}

/// A host file's YAML error showed no line (only `FILE:LINE:COL: message`),
/// unlike a manifest's: it is now shown with its line and a caret, by lint
/// and by every command that reads the host file.
#[test]
fn a_malformed_host_file_shows_its_line() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired: {path: /etc/motd, content: x}\n",
    );
    s.write("host.yaml", "name: vm\nlabels: {role: [web\nx: 1\n");
    settings(&s).bind(|| {
        insta::assert_snapshot!("lint_malformed_host_file", transcript(&s.datum(&["lint"])));
        insta::assert_snapshot!("plan_malformed_host_file", transcript(&s.datum(&["plan"])));
    });
}

#[test]
fn help_text() {
    let s = Sandbox::new();
    insta::assert_snapshot!("help", transcript(&s.datum(&["--help"])));
}
