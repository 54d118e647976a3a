//! Secret values the engine may quote in its own error text.
//!
//! When `plan` fails, driftwatch reports why with a line of the engine's stderr. A provider's
//! validation error quotes the value it rejected (`expected type to be one of [...], got
//! VALUE`), and neither the provider nor Terraform knows the value came from a sensitive
//! variable. driftwatch does not see which part of a message is a value, so it hides the
//! values it can know before the text goes anywhere: those of every root-module variable
//! declared `sensitive = true` or named like a secret ([`DEFAULT_SECRET_PATTERN`]), from
//! every place the engine takes them from (`TF_VAR_name`, `terraform.tfvars`,
//! `*.auto.tfvars` and their `.json` forms, `-var` and `-var-file` in `TF_CLI_ARGS` and
//! `TF_CLI_ARGS_plan`, and the declared default), and the literals inside every
//! `sensitive(...)` call of the root module's `.tf` files.
//!
//! What this cannot know: a secret that reaches a resource argument from state (another
//! resource's sensitive attribute) rather than from a variable, or from a `sensitive(...)`
//! call in a child module or a `.tf.json` file. docs/driftwatch.md says so.
//!
//! A file that does not parse is skipped: the engine does not evaluate any variable of a
//! configuration it cannot parse, so no provider can have quoted one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hcl_edit::expr::{Expression, FuncCall, ObjectKey};
use hcl_edit::structure::Body;
use hcl_edit::template::Element;
use hcl_edit::visit::{Visit, visit_func_call, visit_object_key};
use hcl_edit::{Decorated, Formatted, Number, Spanned};
use regex::Regex;

use crate::mask::DEFAULT_SECRET_PATTERN;

/// What a hidden value is replaced with, as Terraform writes its own.
pub const HIDDEN: &str = "(sensitive value)";

/// Values shorter than this are hidden only where they stand alone (between characters that
/// cannot be part of a word), so a three-digit secret does not eat every line number.
const SHORT: usize = 4;

/// The secret values of one stack's root module.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EngineSecrets {
    /// Longest first, so a value that contains another is hidden whole.
    values: Vec<String>,
}

/// The root module's variables: whether each is secret, and the values found for it.
#[derive(Default)]
struct Variables {
    secret: BTreeSet<String>,
    values: BTreeMap<String, Vec<String>>,
    /// The literals inside `sensitive(...)` calls, wherever they are (a local, a
    /// resource's argument): secret whatever variable they reach.
    marked: Vec<String>,
}

impl Variables {
    fn value(&mut self, name: &str, found: Vec<String>) {
        self.values
            .entry(name.to_owned())
            .or_default()
            .extend(found);
    }
}

impl EngineSecrets {
    /// Gather the values from the stack in `chdir` and from this process's environment.
    pub fn gather(chdir: &Path) -> EngineSecrets {
        let env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        EngineSecrets::gather_with(chdir, &env)
    }

    /// [`EngineSecrets::gather`] with the environment given (tests).
    pub fn gather_with(chdir: &Path, env: &[(String, String)]) -> EngineSecrets {
        let Ok(name_pattern) = Regex::new(DEFAULT_SECRET_PATTERN) else {
            return EngineSecrets::default();
        };
        let mut vars = Variables::default();
        let mut names: Vec<String> = match std::fs::read_dir(chdir) {
            Ok(dir) => dir
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        for name in &names {
            let path = chdir.join(name);
            if name.ends_with(".tf") {
                if let Some(body) = read_hcl(&path) {
                    declarations_hcl(&body, &name_pattern, &mut vars);
                    marked_literals(&body, &mut vars);
                }
            } else if name.ends_with(".tf.json")
                && let Some(json) = read_json(&path)
            {
                declarations_json(&json, &name_pattern, &mut vars);
            }
        }
        // Value files the engine loads by itself, then those named on its command line.
        let mut value_files: Vec<std::path::PathBuf> = names
            .iter()
            .filter(|n| {
                n.as_str() == "terraform.tfvars"
                    || n.as_str() == "terraform.tfvars.json"
                    || n.ends_with(".auto.tfvars")
                    || n.ends_with(".auto.tfvars.json")
            })
            .map(|n| chdir.join(n))
            .collect();
        for (key, value) in env {
            if let Some(var) = key.strip_prefix("TF_VAR_") {
                // A complex value is HCL; its strings count as well as the whole text.
                let mut found = vec![value.clone()];
                if let Ok(expr) = value.parse::<Expression>() {
                    leaves(&expr, &mut found);
                }
                vars.value(var, found);
            }
        }
        for key in ["TF_CLI_ARGS", "TF_CLI_ARGS_plan", "TF_CLI_ARGS_apply"] {
            let Some((_, args)) = env.iter().find(|(k, _)| k == key) else {
                continue;
            };
            let words = shlex::split(args)
                .unwrap_or_else(|| args.split_whitespace().map(str::to_owned).collect());
            let mut words = words.into_iter();
            while let Some(word) = words.next() {
                let word = word.trim_start_matches('-');
                let (flag, inline) = match word.split_once('=') {
                    Some((flag, rest)) => (flag.to_owned(), Some(rest.to_owned())),
                    None => (word.to_owned(), None),
                };
                let mut arg = || inline.clone().or_else(|| words.next());
                match flag.as_str() {
                    "var" => {
                        if let Some((var, value)) = arg().as_deref().and_then(|a| a.split_once('='))
                        {
                            let mut found = vec![value.to_owned()];
                            if let Ok(expr) = value.parse::<Expression>() {
                                leaves(&expr, &mut found);
                            }
                            vars.value(var, found);
                        }
                    }
                    "var-file" => {
                        if let Some(file) = arg() {
                            value_files.push(chdir.join(file));
                        }
                    }
                    _ => {}
                }
            }
        }
        for file in &value_files {
            let is_json = file.extension().is_some_and(|e| e == "json");
            if is_json {
                if let Some(serde_json::Value::Object(map)) = read_json(file) {
                    for (var, value) in &map {
                        let mut found = Vec::new();
                        json_leaves(value, &mut found);
                        vars.value(var, found);
                    }
                }
            } else if let Some(body) = read_hcl(file) {
                for attr in body.attributes() {
                    let mut found = Vec::new();
                    leaves(&attr.value, &mut found);
                    vars.value(attr.key.as_str(), found);
                }
            }
        }
        let mut values: BTreeSet<String> = BTreeSet::new();
        for value in std::mem::take(&mut vars.marked) {
            add_value(&mut values, value);
        }
        for (var, found) in vars.values {
            if vars.secret.contains(&var) || name_pattern.is_match(&var) {
                for value in found {
                    add_value(&mut values, value);
                }
            }
        }
        let mut values: Vec<String> = values.into_iter().collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        EngineSecrets { values }
    }

    /// Whether there is nothing to hide.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every secret value replaced by [`HIDDEN`].
    pub fn hide(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for value in &self.values {
            if value.len() >= SHORT {
                if out.contains(value.as_str()) {
                    out = out.replace(value.as_str(), HIDDEN);
                }
            } else {
                out = hide_word(&out, value);
            }
        }
        out
    }
}

/// A value as the engine may print it: as it is, Go-quoted (`%q` escapes quotes,
/// backslashes and control characters), and, for a value of several lines, each line of
/// some length on its own (an error can quote a single line of a key).
fn add_value(values: &mut BTreeSet<String>, value: String) {
    if value.is_empty() {
        return;
    }
    let quoted: String = value
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            '\n' => vec!['\\', 'n'],
            '\t' => vec!['\\', 't'],
            '\r' => vec!['\\', 'r'],
            c => vec![c],
        })
        .collect();
    if quoted != value {
        values.insert(quoted);
    }
    if value.contains('\n') {
        for line in value.lines().map(str::trim) {
            if line.len() >= 8 {
                values.insert(line.to_owned());
            }
        }
    }
    values.insert(value);
}

/// Replace `value` where it is not part of a longer word.
fn hide_word(text: &str, value: &str) -> String {
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(value) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + value.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(word) || after.is_some_and(word) {
            out.push_str(value);
        } else {
            out.push_str(HIDDEN);
        }
        rest = &rest[at + value.len()..];
    }
    out.push_str(rest);
    out
}

fn read_hcl(path: &Path) -> Option<Body> {
    let text = std::fs::read_to_string(path).ok()?;
    hcl_edit::parser::parse_body(&text).ok()
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `variable "NAME" { sensitive = true, default = ... }` blocks of a `.tf` file.
fn declarations_hcl(body: &Body, name_pattern: &Regex, vars: &mut Variables) {
    for block in body.get_blocks("variable") {
        let Some(name) = block.labels.first().map(|l| l.as_str().to_owned()) else {
            continue;
        };
        let sensitive = block
            .body
            .get_attribute("sensitive")
            .is_some_and(|a| !matches!(a.value, Expression::Bool(ref b) if !*b.value()));
        if sensitive || name_pattern.is_match(&name) {
            vars.secret.insert(name.clone());
        }
        if let Some(default) = block.body.get_attribute("default") {
            let mut found = Vec::new();
            leaves(&default.value, &mut found);
            vars.value(&name, found);
        }
    }
}

/// The literals inside every `sensitive(...)` call of a `.tf` file (`locals { t =
/// sensitive("...") }`): the engine gives the value to the provider unmarked, and a
/// provider's validation error quotes it.
fn marked_literals(body: &Body, vars: &mut Variables) {
    struct Calls<'a>(&'a mut Vec<String>);
    impl Visit for Calls<'_> {
        fn visit_func_call(&mut self, node: &FuncCall) {
            if node.name.namespace.is_empty() && node.name.name.as_str() == "sensitive" {
                let mut literals = Literals(Vec::new());
                visit_func_call(&mut literals, node);
                self.0.extend(literals.0);
            } else {
                visit_func_call(self, node);
            }
        }
    }
    /// Every literal string, number and object key below a node.
    struct Literals(Vec<String>);
    impl Visit for Literals {
        fn visit_string(&mut self, node: &Decorated<String>) {
            self.0.push(node.value().clone());
        }
        fn visit_literal(&mut self, node: &Spanned<String>) {
            self.0.push(node.value().clone());
        }
        fn visit_number(&mut self, node: &Formatted<Number>) {
            self.0.push(node.value().to_string());
        }
        fn visit_object_key(&mut self, node: &ObjectKey) {
            if let ObjectKey::Ident(k) = node {
                self.0.push(k.as_str().to_owned());
            }
            visit_object_key(self, node);
        }
    }
    Calls(&mut vars.marked).visit_body(body);
}

/// `{"variable": {"NAME": {"sensitive": true, "default": ...}}}` of a `.tf.json` file.
fn declarations_json(json: &serde_json::Value, name_pattern: &Regex, vars: &mut Variables) {
    let Some(serde_json::Value::Object(declared)) = json.get("variable") else {
        return;
    };
    for (name, decl) in declared {
        let sensitive = decl
            .get("sensitive")
            .is_some_and(|s| s != &serde_json::Value::Bool(false));
        if sensitive || name_pattern.is_match(name) {
            vars.secret.insert(name.clone());
        }
        if let Some(default) = decl.get("default") {
            let mut found = Vec::new();
            json_leaves(default, &mut found);
            vars.value(name, found);
        }
    }
}

/// Every literal string and number in an expression: object keys as well as values, since
/// a sensitive map's keys are part of its value.
fn leaves(expr: &Expression, out: &mut Vec<String>) {
    match expr {
        Expression::String(s) => out.push(s.value().clone()),
        Expression::Number(n) => out.push(n.value().to_string()),
        Expression::Array(items) => items.iter().for_each(|e| leaves(e, out)),
        Expression::Object(object) => {
            for (key, value) in object.iter() {
                if let ObjectKey::Expression(k) = key {
                    leaves(k, out);
                } else if let ObjectKey::Ident(k) = key {
                    out.push(k.as_str().to_owned());
                }
                leaves(value.expr(), out);
            }
        }
        Expression::StringTemplate(t) => literal_parts(t.iter(), out),
        Expression::HeredocTemplate(h) => literal_parts(h.template.iter(), out),
        Expression::Parenthesis(p) => leaves(p.inner(), out),
        _ => {}
    }
}

fn literal_parts<'a>(elements: impl Iterator<Item = &'a Element>, out: &mut Vec<String>) {
    for element in elements {
        if let Element::Literal(text) = element {
            out.push(text.value().clone());
        }
    }
}

fn json_leaves(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Number(n) => out.push(n.to_string()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| json_leaves(v, out)),
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                json_leaves(v, out);
            }
        }
        serde_json::Value::Null | serde_json::Value::Bool(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn stack(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn literals_marked_with_sensitive_are_secret_wherever_they_are() {
        // As on the real engine (terraform 1.11.4, hashicorp/aws 5.100.0): a parameter's
        // `type` from a local marked with sensitive() is quoted by the provider's
        // validation error (`expected type to be one of [...], got VALUE`).
        let dir = stack(&[(
            "main.tf",
            r#"
locals {
  ptype = sensitive("CANARY-e1-local")
  tags  = sensitive({ "CANARY-e1-key" = 1234567, plain = "CANARY-e1-${var.x}-tail" })
  other = upper("not-secret")
}
resource "aws_ssm_parameter" "p" {
  type  = local.ptype
  value = jsonencode([sensitive(["CANARY-e1-inline"])])
}
"#,
        )]);
        let secrets = EngineSecrets::gather_with(dir.path(), &[]);
        let text = "got CANARY-e1-local; CANARY-e1-key CANARY-e1-inline 1234567 not-secret";
        assert_eq!(
            secrets.hide(text),
            "got (sensitive value); (sensitive value) (sensitive value) (sensitive value) not-secret"
        );
        assert!(!secrets.hide("CANARY-e1-x-tail").contains("tail"));
    }

    const VARS: &str = r#"
variable "ptype" {
  type      = string
  sensitive = true
}
variable "region" {
  type    = string
  default = "eu-central-1"
}
variable "db_password" {
  type    = string
  default = "hunter2-default"
}
variable "keys" {
  type      = map(string)
  sensitive = true
  default   = { "key-from-default" = "val-from-default" }
}
variable "plain_but_set" {
  type      = string
  sensitive = false
}
"#;

    #[test]
    fn values_of_sensitive_variables_are_hidden_from_every_source() {
        let dir = stack(&[
            ("main.tf", VARS),
            ("terraform.tfvars", "ptype = \"from-tfvars-file\"\n"),
            (
                "x.auto.tfvars.json",
                r#"{"keys": {"json-key": "json-value"}}"#,
            ),
            ("extra.tfvars", "ptype = \"from-var-file\"\n"),
        ]);
        let secrets = EngineSecrets::gather_with(
            dir.path(),
            &env(&[
                ("TF_VAR_ptype", "from-env"),
                ("TF_VAR_region", "us-east-1"),
                ("TF_VAR_plain_but_set", "visible-value"),
                (
                    "TF_CLI_ARGS_plan",
                    "-var 'ptype=from cli args' -var-file=extra.tfvars",
                ),
            ]),
        );
        for hidden in [
            "from-env",
            "from-tfvars-file",
            "from-var-file",
            "from cli args",
            "hunter2-default",
            "key-from-default",
            "val-from-default",
            "json-key",
            "json-value",
        ] {
            let text = format!("Error: expected one of [a b], got {hidden} here");
            let shown = secrets.hide(&text);
            assert!(!shown.contains(hidden), "{hidden}: {shown}");
            assert!(shown.contains(HIDDEN), "{shown}");
        }
        // Variables neither sensitive nor named like a secret stay readable.
        let text = "Error: region us-east-1 has no visible-value";
        assert_eq!(secrets.hide(text), text);
    }

    #[test]
    fn json_configurations_declare_sensitive_variables_too() {
        let dir = stack(&[(
            "main.tf.json",
            r#"{"variable": {"ptype": {"type": "string", "sensitive": true}}}"#,
        )]);
        let secrets =
            EngineSecrets::gather_with(dir.path(), &env(&[("TF_VAR_ptype", "json-declared")]));
        assert_eq!(secrets.hide("got json-declared"), format!("got {HIDDEN}"));
    }

    #[test]
    fn quoted_and_multi_line_values_are_hidden_as_the_engine_prints_them() {
        let dir = stack(&[("main.tf", "variable \"key\" {\n  sensitive = true\n}\n")]);
        let value = "-----BEGIN KEY-----\nAAAAsecretline1\n\"quoted\"\n-----END KEY-----";
        let secrets = EngineSecrets::gather_with(dir.path(), &env(&[("TF_VAR_key", value)]));
        let go_quoted =
            "got \"-----BEGIN KEY-----\\nAAAAsecretline1\\n\\\"quoted\\\"\\n-----END KEY-----\"";
        let shown = secrets.hide(go_quoted);
        assert!(!shown.contains("AAAAsecretline1"), "{shown}");
        assert!(
            !secrets
                .hide("line: AAAAsecretline1")
                .contains("AAAAsecretline1")
        );
    }

    #[test]
    fn a_short_value_is_hidden_only_where_it_stands_alone() {
        let dir = stack(&[("main.tf", "variable \"pin\" {\n  sensitive = true\n}\n")]);
        let secrets = EngineSecrets::gather_with(dir.path(), &env(&[("TF_VAR_pin", "42")]));
        assert_eq!(
            secrets.hide("got 42, on main.tf line 427"),
            format!("got {HIDDEN}, on main.tf line 427")
        );
    }

    #[test]
    fn a_configuration_that_does_not_parse_is_skipped() {
        let dir = stack(&[
            ("broken.tf", "variable \"x\" {\n"),
            ("main.tf", "variable \"ptype\" {\n  sensitive = true\n}\n"),
        ]);
        let secrets = EngineSecrets::gather_with(dir.path(), &env(&[("TF_VAR_ptype", "canary-9")]));
        assert_eq!(secrets.hide("canary-9"), HIDDEN);
    }
}
