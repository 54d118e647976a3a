//! The manual pages and shell completions the package ships, written by
//! the hidden `datum generate-man DIR` / `generate-completions DIR`.

use std::path::Path;
use std::process::Command;

use crate::support::{assert_exit, stderr, stdout};

fn generate(what: &str, dir: &Path) {
    let out = assert_cmd::Command::cargo_bin("datum")
        .unwrap()
        .env_remove("DATUM_CONFIG")
        .arg(what)
        .arg(dir)
        .output()
        .unwrap();
    assert_exit(&out, 0);
}

/// What bash offers after `words` (the last one being completed), with the
/// generated script loaded into a plain bash.
fn bash_completes(script: &Path, words: &[&str]) -> String {
    let words: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}' || exit 9\ncomplete -p datum || exit 8\n\
         COMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n\
         _datum datum \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        words.join(" "),
        words.len() - 1
    );
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", &program])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

#[test]
fn bash_loads_the_completions_and_they_complete_commands_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("completions");
    generate("generate-completions", &out);
    for file in ["datum.bash", "_datum", "datum.fish"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let script = out.join("datum.bash");
    // `complete -p datum` (first line) says bash registered it.
    let offered = bash_completes(&script, &["datum", "pl"]);
    let mut lines = offered.lines();
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with("complete ") && l.ends_with(" datum")),
        "{offered}"
    );
    let offered: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    assert_eq!(offered, ["plan"], "commands starting with `pl`");
    let offered = bash_completes(&script, &["datum", "agent", "--li"]);
    assert!(offered.lines().any(|l| l == "--listen"), "{offered}");
    // clap_complete offers the hidden packaging commands too
    // (generate-man, generate-completions): known, left as it is.
    // zsh's and fish's are the same command line in their own syntax.
    let zsh = std::fs::read_to_string(out.join("_datum")).unwrap();
    assert!(zsh.starts_with("#compdef datum"), "{zsh}");
    let fish = std::fs::read_to_string(out.join("datum.fish")).unwrap();
    assert!(fish.contains("complete -c datum"), "{fish}");
    // A second run into the same folder refuses instead of overwriting.
    let again = assert_cmd::Command::cargo_bin("datum")
        .unwrap()
        .args(["generate-completions", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_exit(&again, 1);
}

#[test]
fn the_manual_pages_render_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man");
    generate("generate-man", &out);
    let mut pages: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for page in [
        "datum.1",
        "datum-plan.1",
        "datum-agent.1",
        "datum-server-serve.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} missing: {pages:?}");
    }
    assert!(
        !pages.iter().any(|p| p.starts_with("datum-generate")),
        "hidden commands get no page: {pages:?}"
    );
    for page in &pages {
        // groff with every warning on, output thrown away: the page parses.
        let groff = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(out.join(page))
            .output()
            .expect("groff (groff-base, installed by scripts/deps)");
        assert!(
            groff.status.success() && groff.stderr.is_empty(),
            "{page}: {}",
            stderr(&groff)
        );
    }
    // man-db renders the top page as a reader sees it.
    let man = Command::new("man")
        .arg("-l")
        .arg(out.join("datum.1"))
        .env("MANWIDTH", "100")
        .env_remove("MAN_KEEP_FORMATTING")
        .output()
        .expect("man (man-db, installed by scripts/deps)");
    assert!(man.status.success(), "{}", stderr(&man));
    let text = String::from_utf8_lossy(&man.stdout);
    for expected in [
        "NAME",
        "datum - Declare a host's configuration",
        "SYNOPSIS",
        "--repo",
        "SUBCOMMANDS",
        "datum-plan(1)",
    ] {
        assert!(text.contains(expected), "`{expected}` missing:\n{text}");
    }
}
