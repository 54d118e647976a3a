//! Several real stacks in one `driftwatch run`: checked side by side, one report each, a
//! summary table, a stack whose plan fails reported without hiding the drift of the
//! others, and the worst exit code.

use super::{Engine, Stack, each_in_parallel};
use crate::support::assert_table;

const QUEUE_TF: &str = r#"resource "aws_sqs_queue" "jobs" {
  name = "{{prefix}}-jobs"
  tags = { Team = "shop" }
}
"#;

#[test]
fn several_real_stacks_in_one_run() {
    let Some(engine) = Engine::get("several_real_stacks_in_one_run") else {
        return;
    };
    let drifted = Stack::new(&engine, "orders", &[("main.tf", QUEUE_TF)]);
    let clean = Stack::new(&engine, "network", &[("main.tf", QUEUE_TF)]);
    // Never initialised: its plan fails.
    let broken = Stack::new(&engine, "broken", &[("main.tf", QUEUE_TF)]);
    each_in_parallel(&[&drifted, &clean], |s| s.init_and_apply());
    drifted.out_of_band(
        r#"sqs.tag_queue(QueueUrl=queue_url(f"{P}-jobs"), Tags={"Team": "payments"})"#,
    );

    let run = |stacks: &[&Stack<'_>], extra: &[&str]| -> super::Ran {
        let mut cmd = drifted.driftwatch();
        cmd.args(["run", "--binary", "terraform", "--jobs", "2"]);
        for s in stacks {
            cmd.arg("--chdir").arg(&s.root);
        }
        cmd.args(extra).output().unwrap().into()
    };
    let md = tempfile::tempdir().unwrap();
    let md_dir = md.path().display().to_string();
    let out = run(
        &[&drifted, &clean, &broken],
        &["--timings", "--markdown-dir", &md_dir],
    );
    // The broken stack makes it 1; the others are reported all the same.
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let text = &out.stdout;
    let orders = text.find("=== orders (").unwrap();
    let network = text.find("=== network (").unwrap();
    let failed = text.find("=== broken (").unwrap();
    assert!(orders < network && network < failed, "{text}");
    assert!(
        text[orders..network].contains(
            "~ aws_sqs_queue.jobs changed outside: the next apply reverts it; tags.Team: \"shop\" -> \"payments\", tags_all.Team: \"shop\" -> \"payments\""
        ),
        "{text}"
    );
    assert!(
        text[failed..]
            .contains("! could not check this stack: refresh-only plan failed (exit 1): Error: "),
        "{text}"
    );
    assert_table(
        text,
        &[
            "stack    result",
            "orders   drift      2           1",
            "network  clean      0           0",
            "broken   error      1           -",
        ],
    );
    // Real engine time was measured for each stack that was checked.
    for name in ["orders", "network"] {
        let line = out
            .stderr
            .lines()
            .find(|l| l.starts_with(&format!("driftwatch: {name}: timings: engine ")))
            .unwrap_or_else(|| panic!("{}", out.stderr));
        assert!(line.contains("refresh-only plan "), "{line}");
    }
    assert!(
        out.stderr
            .contains("driftwatch: error: broken: refresh-only plan failed")
    );
    for name in ["orders", "network", "broken", "summary"] {
        let page = std::fs::read_to_string(md.path().join(format!("{name}.md"))).unwrap();
        // A stack's page starts with its dedupe-key marker line, then the
        // heading; the summary has no marker.
        let mut lines = page.lines();
        if name != "summary" {
            let marker = lines.next().unwrap_or_default();
            assert!(marker.starts_with("<!-- driftwatch-"), "{name}: {page}");
        }
        let heading = lines.next().unwrap_or_default();
        assert!(heading.starts_with("## Drift "), "{name}: {page}");
    }
}
