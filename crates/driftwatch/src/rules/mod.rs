//! `ignore_changes` rules, read from the configuration in either syntax.
//!
//! The plan JSON has no `lifecycle` block, so the rules come from the source: every `*.tf`
//! file (HCL native syntax, read with `hcl-edit` in `hcl`) and every `*.tf.json` file
//! (JSON syntax, `json`) of the root module, and, following `module` blocks whose
//! `source` is a local path, the files of those modules (their resources are keyed as
//! `module.NAME.TYPE.NAME`). Override files are read last and replace the
//! `ignore_changes` of a block they set it for, as OpenTofu merges them.
//!
//! Rule lookup uses configuration addresses: instance keys from `count`/`for_each` are
//! stripped (`module.a["x"].aws_instance.b[0]` is `module.a.aws_instance.b`), since one
//! block's `lifecycle` applies to all of its instances.

mod hcl;
mod json;

use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};

use crate::config::{self, Syntax};
use crate::flatten::Path;

/// How deep local module calls are followed; a loop of modules calling each other stops here.
const MAX_MODULE_DEPTH: usize = 8;

/// One `ignore_changes` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// As written in the configuration (`metadata[0].labels`, `all`).
    pub text: String,
    /// `None` for `all`.
    pub path: Option<Path>,
}

impl Rule {
    pub fn covers(&self, path: &Path) -> bool {
        match &self.path {
            None => true,
            Some(rule) => rule.covers(path),
        }
    }

    /// The rule for one entry as written (`all`, `tags`, `tags["Name"]`, legacy `"${tags}"`).
    fn parse(text: &str) -> Result<Rule, String> {
        let text = strip_interpolation(text);
        if text == "all" || text == "*" {
            return Ok(Rule {
                text: "all".to_owned(),
                path: None,
            });
        }
        Ok(Rule {
            path: Some(Path::parse(&text)?),
            text,
        })
    }
}

/// The rules of a configuration, keyed by configuration address.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    by_address: BTreeMap<String, Vec<Rule>>,
    /// Files that were read, for the report's provenance line.
    pub files: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("{path}: cannot read configuration: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: invalid JSON at line {line}, column {column}")]
    Json {
        path: String,
        line: usize,
        column: usize,
    },
    /// Only the parser's message and position: its full text quotes the offending line,
    /// which may hold a secret literal.
    #[error("{path}:{line}:{column}: invalid HCL: {message}")]
    Hcl {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{at}: {address}: ignore_changes entry {entry:?} is not a valid path: {reason}")]
    BadRule {
        /// `file` or `file:line`.
        at: String,
        address: String,
        entry: String,
        reason: String,
    },
}

/// What one resource block of one file says about `ignore_changes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockRules {
    pub rtype: String,
    pub rname: String,
    /// `None` when the block sets no `ignore_changes` (an override then changes nothing).
    pub rules: Option<Vec<Rule>>,
}

/// What one configuration file contributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FileRules {
    pub blocks: Vec<BlockRules>,
    /// `(module name, source)` of every `module` call with a literal `source`.
    pub modules: Vec<(String, String)>,
}

impl Rules {
    /// Rules for the resource at `address` (an instance address from the plan).
    pub fn for_address(&self, address: &str) -> &[Rule] {
        self.by_address
            .get(&config_address(address))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.by_address.is_empty()
    }

    /// One rule for one configuration address (tests of the classifier).
    #[cfg(test)]
    pub(crate) fn insert_for_test(&mut self, address: &str, rule: &str) {
        let rule = Rule::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
        self.by_address
            .entry(address.to_owned())
            .or_default()
            .push(rule);
    }

    /// Read one configuration file, or every configuration file of a directory (the root
    /// module), following local module calls.
    pub fn load(config: &FsPath) -> Result<Rules, RulesError> {
        let mut rules = Rules::default();
        if config.is_dir() {
            rules.load_module_dir(config, "", 0)?;
        } else {
            let syntax = config
                .file_name()
                .and_then(|n| config::syntax_of(&n.to_string_lossy()))
                .unwrap_or(Syntax::Json);
            let dir = config.parent().map(FsPath::to_owned).unwrap_or_default();
            let file = config::ConfigFile {
                path: config.to_owned(),
                syntax,
                is_override: false,
            };
            rules.load_file(&file, &dir, "", 0)?;
        }
        Ok(rules)
    }

    fn load_module_dir(
        &mut self,
        dir: &FsPath,
        prefix: &str,
        depth: usize,
    ) -> Result<(), RulesError> {
        let files = config::module_files(dir).map_err(|error| RulesError::Read {
            path: dir.display().to_string(),
            error,
        })?;
        for file in files {
            self.load_file(&file, dir, prefix, depth)?;
        }
        Ok(())
    }

    fn load_file(
        &mut self,
        file: &config::ConfigFile,
        dir: &FsPath,
        prefix: &str,
        depth: usize,
    ) -> Result<(), RulesError> {
        let name = file.path.display().to_string();
        let bytes = std::fs::read(&file.path).map_err(|error| RulesError::Read {
            path: name.clone(),
            error,
        })?;
        let found = match file.syntax {
            Syntax::Json => json::read(&name, &bytes)?,
            Syntax::Native => hcl::read(&name, &bytes)?,
        };
        self.files.push(file.path.clone());
        for block in found.blocks {
            let address = format!("{prefix}{}.{}", block.rtype, block.rname);
            let Some(rules) = block.rules else { continue };
            let slot = self.by_address.entry(address).or_default();
            if file.is_override {
                // An override's ignore_changes replaces the original argument.
                *slot = rules;
            } else {
                slot.extend(rules);
            }
        }
        if depth < MAX_MODULE_DEPTH {
            for (module, source) in found.modules {
                if !config::is_local_source(&source) {
                    continue;
                }
                let child = dir.join(&source);
                if child.is_dir() {
                    let child_prefix = format!("{prefix}module.{module}.");
                    self.load_module_dir(&child, &child_prefix, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

/// Old configurations wrap traversals as `"${metadata[0].labels}"`.
fn strip_interpolation(s: &str) -> String {
    let t = s.trim();
    t.strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or(t)
        .trim()
        .to_owned()
}

/// Strip instance keys: `module.a["x"].module.b[0].t.n["k"]` -> `module.a.module.b.t.n`.
pub fn config_address(address: &str) -> String {
    let mut out = String::with_capacity(address.len());
    let mut chars = address.chars();
    while let Some(c) = chars.next() {
        if c != '[' {
            out.push(c);
            continue;
        }
        // Skip to the matching ']', honouring quoted keys that may contain ']' or '\"'.
        let mut in_string = false;
        while let Some(k) = chars.next() {
            match (in_string, k) {
                (true, '\\') => {
                    chars.next();
                }
                (true, '"') => in_string = false,
                (false, '"') => in_string = true,
                (false, ']') => break,
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_addresses() {
        assert_eq!(config_address("aws_instance.a"), "aws_instance.a");
        assert_eq!(config_address("aws_instance.a[3]"), "aws_instance.a");
        assert_eq!(
            config_address(r#"module.a["x.y]"].module.b[0].local_file.foo["file1.txt"]"#),
            "module.a.module.b.local_file.foo"
        );
        assert_eq!(config_address(r#"t.n["q\"]"]"#), "t.n");
    }

    #[test]
    fn loads_rules_from_dir_and_local_modules() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("main.tf.json"),
            r#"{"resource":{"kubernetes_config_map_v1":{"routing":{"lifecycle":{"ignore_changes":["metadata[0].labels"]}}},
                "local_file":[{"boot":{"lifecycle":[{"ignore_changes":"all"}]}}]},
               "module":{"net":{"source":"./modules/net"}}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.json"), "not json at all").unwrap();
        std::fs::create_dir_all(dir.path().join("modules/net")).unwrap();
        std::fs::write(
            dir.path().join("modules/net/net.tf.json"),
            r#"{"resource":{"google_compute_network":{"main":{"lifecycle":{"ignore_changes":["${labels}"]}}}}}"#,
        )
        .unwrap();
        let rules = Rules::load(dir.path()).unwrap();
        let r = rules.for_address("kubernetes_config_map_v1.routing");
        assert_eq!(r[0].text, "metadata[0].labels");
        assert!(r[0].covers(&Path::parse("metadata[0].labels.owner").unwrap()));
        assert!(rules.for_address("local_file.boot")[0].covers(&Path::parse("anything").unwrap()));
        let m = rules.for_address(r#"module.net.google_compute_network.main"#);
        assert_eq!(m[0].text, "labels");
        assert!(rules.for_address("local_file.other").is_empty());
    }

    /// A `.tf` file that is not UTF-8 is refused at the line where the
    /// decoder stopped (counted in the bytes before it).
    #[test]
    fn a_tf_file_that_is_not_utf8_is_refused_at_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.tf"), b"a = 1\n# \xe9t\xe9\nb = 2\n").unwrap();
        match Rules::load(dir.path()) {
            Err(RulesError::Hcl { line, message, .. }) => {
                assert_eq!((line, message.as_str()), (2, "not UTF-8"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn native_syntax_with_modules_of_both_syntaxes_and_overrides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("main.tf"),
            r#"
# The queue's tags are written by the cost tool.
resource "aws_sqs_queue" "jobs" {
  name = "jobs"
  tags = { Team = "a" }
  lifecycle {
    ignore_changes = [tags["CostCenter"], tags_all, redrive_policy]
  }
}

resource "aws_s3_bucket" "logs" {
  bucket = "logs"
  lifecycle {
    ignore_changes = all
  }
}

resource "aws_ssm_parameter" "flag" {
  name = "flag"
  lifecycle {
    prevent_destroy = true
  }
}

module "queues" {
  source = "./modules/queues"
}

module "remote" {
  source = "git::https://example.invalid/x.git"
}
"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("flag_override.tf"),
            "resource \"aws_ssm_parameter\" \"flag\" {\n  lifecycle {\n    ignore_changes = [value]\n  }\n}\n",
        )
        .unwrap();
        let queues = dir.path().join("modules/queues");
        std::fs::create_dir_all(&queues).unwrap();
        std::fs::write(
            queues.join("queues.tf"),
            "resource \"aws_sqs_queue\" \"dead\" {\n  lifecycle { ignore_changes = [tags] }\n}\nmodule \"inner\" {\n  source = \"../inner\"\n}\n",
        )
        .unwrap();
        let inner = dir.path().join("modules/inner");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(
            inner.join("inner.tf.json"),
            r#"{"resource":{"aws_sqs_queue":{"deep":{"lifecycle":{"ignore_changes":["delay_seconds"]}}}}}"#,
        )
        .unwrap();
        let rules = Rules::load(dir.path()).unwrap();
        let texts = |address: &str| -> Vec<String> {
            rules
                .for_address(address)
                .iter()
                .map(|r| r.text.clone())
                .collect()
        };
        assert_eq!(
            texts("aws_sqs_queue.jobs"),
            [r#"tags["CostCenter"]"#, "tags_all", "redrive_policy"]
        );
        let jobs = rules.for_address("aws_sqs_queue.jobs");
        assert!(jobs[0].covers(&Path::parse("tags.CostCenter").unwrap()));
        assert!(!jobs[0].covers(&Path::parse("tags.Team").unwrap()));
        assert!(rules.for_address("aws_s3_bucket.logs")[0].path.is_none());
        assert_eq!(texts("aws_ssm_parameter.flag"), ["value"]);
        assert_eq!(
            texts(r#"module.queues["a"].aws_sqs_queue.dead[0]"#),
            ["tags"]
        );
        assert_eq!(
            texts("module.queues.module.inner.aws_sqs_queue.deep"),
            ["delay_seconds"]
        );
        assert_eq!(rules.files.len(), 4);
    }

    #[test]
    fn bad_config_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.tf.json");
        std::fs::write(&f, "{").unwrap();
        let msg = Rules::load(&f).unwrap_err().to_string();
        assert!(msg.contains("x.tf.json"), "{msg}");
        let f = dir.path().join("x.tf");
        std::fs::write(
            &f,
            "resource \"a\" \"b\" {\n  value = \"CANARY-hcl\"\n  oops = = 1\n}\n",
        )
        .unwrap();
        let msg = Rules::load(&f).unwrap_err().to_string();
        assert!(msg.starts_with(&format!("{}:3:", f.display())), "{msg}");
        assert!(!msg.contains("CANARY"), "{msg}");
        std::fs::write(
            &f,
            "resource \"a\" \"b\" {\n\n  lifecycle {\n    ignore_changes = [tags[*].x]\n  }\n}\n",
        )
        .unwrap();
        let msg = Rules::load(&f).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("{}:4: a.b: ignore_changes entry", f.display())),
            "{msg}"
        );
    }
}
