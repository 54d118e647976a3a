//! A failed plan's error text on the real engine. The AWS provider's validation quotes the
//! value it rejects (`expected type to be one of [...], got VALUE`), also when the value
//! came from a sensitive variable: Terraform prints it in plain text. driftwatch puts the
//! engine's error in every output (stderr, the JSON error document, the Markdown pages), so
//! it hides the values of the stack's secret variables first.

use super::{Engine, Ran, Stack};

const CANARY: &str = "CANARY-3rr0r";

const MAIN_TF: &str = r#"variable "ptype" {
  type      = string
  sensitive = true
}

variable "note" {
  type    = string
  default = "plain-note"
}

resource "aws_ssm_parameter" "p" {
  name  = "{{prefix}}-param"
  type  = var.ptype
  value = var.note
}
"#;

#[test]
fn a_rejected_sensitive_value_is_hidden_in_the_engine_error() {
    let Some(engine) = Engine::get("a_rejected_sensitive_value_is_hidden_in_the_engine_error")
    else {
        return;
    };
    let stack = Stack::new(&engine, "errors", &[("main.tf", MAIN_TF)]);
    let init = stack.terraform(&["init", "-input=false", "-no-color"]);
    assert_eq!(init.code, 0, "{}", init.stderr);
    let rejected = format!("{CANARY}-type");

    // Terraform itself quotes the value: what driftwatch must not pass on.
    let mut plan = std::process::Command::new(&engine.terraform);
    plan.arg(format!("-chdir={}", stack.root.display()))
        .args(["plan", "-input=false", "-no-color"])
        .env("TF_VAR_ptype", &rejected)
        .stdin(std::process::Stdio::null());
    stack.env(&mut plan);
    let plan: Ran = plan.output().unwrap().into();
    assert_eq!(plan.code, 1, "{}", plan.stdout);
    assert!(plan.stderr.contains(&rejected), "{}", plan.stderr);

    let pages = tempfile::tempdir().unwrap();
    let runs: Vec<(&str, Ran)> = vec![
        (
            "json",
            stack
                .driftwatch()
                .args(["run", "--binary", "terraform", "--chdir"])
                .arg(&stack.root)
                .arg("--json")
                .env("TF_VAR_ptype", &rejected)
                .output()
                .unwrap()
                .into(),
        ),
        (
            "markdown",
            stack
                .driftwatch()
                .args(["run", "--binary", "terraform", "--chdir"])
                .arg(&stack.root)
                .arg("--markdown-dir")
                .arg(pages.path())
                .env("TF_VAR_ptype", &rejected)
                .output()
                .unwrap()
                .into(),
        ),
    ];
    for (what, ran) in &runs {
        assert_eq!(ran.code, 1, "{what}: {}\n{}", ran.stdout, ran.stderr);
        for (channel, text) in [("stdout", &ran.stdout), ("stderr", &ran.stderr)] {
            assert!(!text.contains(CANARY), "{what} {channel}: {text}");
        }
        // The reason is still there, with the value replaced.
        let both = format!("{}{}", ran.stdout, ran.stderr);
        assert!(
            both.contains("expected type to be one of") && both.contains("(sensitive value)"),
            "{what}: {both}"
        );
    }
    let mut page_count = 0;
    for page in std::fs::read_dir(pages.path()).unwrap() {
        let page = page.unwrap().path();
        let text = std::fs::read_to_string(&page).unwrap();
        assert!(!text.contains(CANARY), "{}: {text}", page.display());
        page_count += 1;
    }
    assert!(page_count > 0, "no Markdown page written");
}
