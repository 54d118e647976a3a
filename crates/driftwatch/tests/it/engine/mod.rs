//! driftwatch against the real engine: `terraform` with the hashicorp/aws provider from
//! its filesystem mirror, talking to moto's AWS emulator on loopback. Drift is made out of
//! band with boto3 against the same emulator, as an on-call engineer would with the
//! console, so every plan here is a real refresh-only or normal plan with real
//! `resource_drift`, `replace_paths` and sensitivity markers.
//!
//! `scripts/moto start` (run by `scripts/test`) starts one moto server for the whole
//! suite and exports where it is (`DRIFTWATCH_MOTO_ENDPOINT`, `DRIFTWATCH_MOTO_PYTHON`)
//! and where the provider mirror is (`DRIFTWATCH_TF_MIRROR`). Tests share that server and
//! keep apart by name: every stack gets its own prefix. When terraform, the mirror or the
//! server is missing, each test says so on stderr and returns; with
//! `DRIFTWATCH_ENGINE_REQUIRED=1` (set by `scripts/test` when terraform and the mirror are
//! on the machine) a missing part fails the test instead, so CI cannot pass by skipping.
//!
//! `terraform init` needs no network: the CLI configuration written for each stack points
//! `provider_installation` at the mirror (an unpacked mirror is linked, not copied, so
//! init takes under a second), and `CHECKPOINT_DISABLE` keeps terraform from calling home.

mod categories;
mod codify;
mod copies;
mod errors;
mod many;
mod sets;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use tempfile::TempDir;

/// The parts of the real engine on this machine.
pub struct Engine {
    pub terraform: PathBuf,
    pub mirror: PathBuf,
    pub endpoint: String,
    pub python: PathBuf,
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl Engine {
    /// The engine, or `None` after saying loudly what is missing. Fails instead of
    /// skipping when `DRIFTWATCH_ENGINE_REQUIRED=1`.
    pub fn get(test: &str) -> Option<Engine> {
        let terraform = env_path("DRIFTWATCH_TERRAFORM").or_else(|| which("terraform"));
        let mirror = env_path("DRIFTWATCH_TF_MIRROR")
            .filter(|m| m.join("registry.terraform.io/hashicorp/aws").is_dir());
        let endpoint = std::env::var("DRIFTWATCH_MOTO_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty());
        let python = env_path("DRIFTWATCH_MOTO_PYTHON").filter(|p| p.is_file());
        let mut missing = Vec::new();
        if terraform.is_none() {
            missing.push("terraform is not on PATH");
        }
        if mirror.is_none() {
            missing.push("DRIFTWATCH_TF_MIRROR does not name a hashicorp/aws provider mirror");
        }
        if endpoint.is_none() || python.is_none() {
            missing.push("no moto server (run: eval \"$(scripts/moto start)\")");
        }
        if missing.is_empty() {
            return Some(Engine {
                terraform: terraform?,
                mirror: mirror?,
                endpoint: endpoint?,
                python: python?,
            });
        }
        let why = missing.join("; ");
        assert!(
            std::env::var("DRIFTWATCH_ENGINE_REQUIRED").as_deref() != Ok("1"),
            "{test}: the real engine is required here (DRIFTWATCH_ENGINE_REQUIRED=1) but {why}"
        );
        eprintln!(
            "\n*** SKIPPED {test}: real-engine test not run: {why}. scripts/test runs it where terraform and the provider mirror are installed. ***\n"
        );
        None
    }
}

/// A name prefix no other stack of this run (or of another checkout's run) uses. S3
/// bucket names are global, lower case and at most 63 characters.
fn unique_prefix(label: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!(
        "dw-{label}-{:x}{:x}{}",
        std::process::id(),
        nanos & 0xfff_ffff,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One real stack in a temporary folder: its own root module, CLI configuration and
/// resource names.
pub struct Stack<'e> {
    engine: &'e Engine,
    _dir: TempDir,
    pub root: PathBuf,
    pub prefix: String,
    cli_config: PathBuf,
}

/// A finished command, as text.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Ran {
    fn from(out: Output) -> Ran {
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl<'e> Stack<'e> {
    /// Write a stack: `provider.tf` for the emulator plus `files` (relative paths), where
    /// `{{prefix}}` becomes this stack's name prefix.
    pub fn new(engine: &'e Engine, label: &str, files: &[(&str, &str)]) -> Stack<'e> {
        let dir = tempfile::Builder::new()
            .prefix("driftwatch-engine-")
            .tempdir()
            .expect("temporary folder");
        let prefix = unique_prefix(label);
        let root = dir.path().join(label);
        std::fs::create_dir_all(&root).unwrap();
        let cli_config = dir.path().join("cli.tfrc");
        std::fs::write(
            &cli_config,
            format!(
                "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = [\"registry.terraform.io/hashicorp/*\"]\n  }}\n  direct {{\n    exclude = [\"registry.terraform.io/hashicorp/*\"]\n  }}\n}}\n",
                engine.mirror.display()
            ),
        )
        .unwrap();
        let stack = Stack {
            engine,
            _dir: dir,
            root,
            prefix,
            cli_config,
        };
        stack.write("provider.tf", &stack.provider_block());
        for (name, text) in files {
            stack.write(name, text);
        }
        stack
    }

    fn provider_block(&self) -> String {
        let e = &self.engine.endpoint;
        format!(
            r#"# Written by the test harness: the AWS provider talks to moto on loopback.
terraform {{
  required_providers {{
    aws = {{
      source = "hashicorp/aws"
    }}
  }}
}}

provider "aws" {{
  region                      = "eu-central-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
  s3_use_path_style           = true

  endpoints {{
    s3  = "{e}"
    ssm = "{e}"
    sqs = "{e}"
    ec2 = "{e}"
    iam = "{e}"
    sts = "{e}"
  }}
}}
"#
        )
    }

    /// Write (or overwrite) a file of the stack, `{{prefix}}` filled in.
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text.replace("{{prefix}}", &self.prefix)).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }

    /// The environment every engine call of this stack needs, for terraform itself and
    /// for driftwatch (which runs terraform as a child).
    pub fn env(&self, cmd: &mut Command) {
        cmd.env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("TF_PLUGIN_CACHE_DIR")
            .env_remove("TF_LOG")
            .env_remove("AWS_PROFILE");
    }

    /// Run terraform in the stack.
    pub fn terraform(&self, args: &[&str]) -> Ran {
        let mut cmd = Command::new(&self.engine.terraform);
        cmd.arg(format!("-chdir={}", self.root.display()))
            .args(args)
            .stdin(std::process::Stdio::null());
        self.env(&mut cmd);
        cmd.output().expect("terraform runs").into()
    }

    /// `init` and `apply`; panics with terraform's output when either fails.
    pub fn init_and_apply(&self) {
        for args in [
            &["init", "-input=false", "-no-color"][..],
            &["apply", "-auto-approve", "-input=false", "-no-color"][..],
        ] {
            let out = self.terraform(args);
            assert_eq!(
                out.code,
                0,
                "terraform {args:?} in {}:\n{}\n{}",
                self.root.display(),
                out.stdout,
                out.stderr
            );
        }
    }

    /// Run a boto3 script against the emulator, as an on-call engineer would use the
    /// console. The script sees `s3`, `ssm`, `sqs` clients, `P` (the prefix) and
    /// `queue_url(name)`.
    pub fn out_of_band(&self, script: &str) {
        let prelude = r#"
import os, boto3
P = os.environ["STACK_PREFIX"]
kw = dict(endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="eu-central-1",
          aws_access_key_id="test", aws_secret_access_key="test")
s3 = boto3.client("s3", **kw)
ssm = boto3.client("ssm", **kw)
sqs = boto3.client("sqs", **kw)
def queue_url(name):
    return sqs.get_queue_url(QueueName=name)["QueueUrl"]
"#;
        let out = Command::new(&self.engine.python)
            .arg("-c")
            .arg(format!("{prelude}\n{script}"))
            .env("STACK_PREFIX", &self.prefix)
            .env("MOTO_ENDPOINT", &self.engine.endpoint)
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "boto3 script failed:\n{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A plan saved and read back with `show -json`, as a file (for `driftwatch report`).
    pub fn plan_json(&self, refresh_only: bool, to: &Path) {
        let plan = self.root.join(if refresh_only {
            "saved-refresh.tfplan"
        } else {
            "saved.tfplan"
        });
        let plan_arg = format!("-out={}", plan.display());
        let mut args = vec!["plan", "-input=false", "-no-color", &plan_arg];
        if refresh_only {
            args.push("-refresh-only");
        }
        let out = self.terraform(&args);
        assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
        let shown = self.terraform(&["show", "-json", &plan.display().to_string()]);
        assert_eq!(shown.code, 0, "{}", shown.stderr);
        std::fs::write(to, shown.stdout).unwrap();
        std::fs::remove_file(plan).unwrap();
    }

    /// The driftwatch binary with this stack's engine environment and a fixed clock.
    pub fn driftwatch(&self) -> assert_cmd::Command {
        let mut cmd = crate::support::driftwatch();
        let mut probe = Command::new("true");
        self.env(&mut probe);
        for (k, v) in probe.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }

    /// `driftwatch run --binary terraform --chdir ROOT` plus `extra`.
    pub fn run(&self, extra: &[&str]) -> Ran {
        let out = self
            .driftwatch()
            .arg("run")
            .arg("--binary")
            .arg("terraform")
            .arg("--chdir")
            .arg(&self.root)
            .args(extra)
            .output()
            .expect("driftwatch runs");
        out.into()
    }
}

/// Run `f` for each item on its own thread (applies of independent stacks side by side).
pub fn each_in_parallel<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    std::thread::scope(|scope| {
        for item in items {
            let f = &f;
            scope.spawn(move || f(item));
        }
    });
}
