//! `ignore_changes` and module calls from a `*.tf` file (HCL native syntax), with
//! `hcl-edit`.
//!
//! An entry of `ignore_changes` is a traversal (`tags`, `tags["Name"]`,
//! `metadata[0].labels`), the keyword `all`, or in old configurations a quoted string.
//! Anything else (a splat, an index computed from an expression) is an error with the
//! file and line, because guessing would misclassify drift.

use datum_core::text::line_of;
use hcl_edit::Span as _;
use hcl_edit::expr::{Expression, TraversalOperator};
use hcl_edit::structure::{Block, Body};

use super::{BlockRules, FileRules, Rule, RulesError};
use crate::flatten::{Path, Step};

pub(super) fn read(name: &str, bytes: &[u8]) -> Result<FileRules, RulesError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let offset = e.valid_up_to();
        RulesError::Hcl {
            path: name.to_owned(),
            line: line_of(bytes, offset),
            column: 0,
            message: "not UTF-8".to_owned(),
        }
    })?;
    let body = parse(name, text)?;
    let mut out = FileRules::default();
    for block in body.blocks() {
        match (block.ident.as_str(), block.labels.as_slice()) {
            ("resource", [rtype, rname]) => {
                let address = format!("{}.{}", rtype.as_str(), rname.as_str());
                out.blocks.push(BlockRules {
                    rtype: rtype.as_str().to_owned(),
                    rname: rname.as_str().to_owned(),
                    rules: ignore_changes(block, name, text, &address)?,
                });
            }
            ("module", [module]) => {
                if let Some(source) = block
                    .body
                    .get_attribute("source")
                    .and_then(|a| a.value.as_str())
                {
                    out.modules
                        .push((module.as_str().to_owned(), source.to_owned()));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Parse a whole file; errors carry the position and the parser's message, never the
/// offending line itself (it could hold a secret literal).
pub(crate) fn parse(name: &str, text: &str) -> Result<Body, RulesError> {
    hcl_edit::parser::parse_body(text).map_err(|e| RulesError::Hcl {
        path: name.to_owned(),
        line: e.location().line(),
        column: e.location().column(),
        message: e
            .message()
            .lines()
            .next()
            .unwrap_or("syntax error")
            .to_owned(),
    })
}

fn ignore_changes(
    block: &Block,
    name: &str,
    text: &str,
    address: &str,
) -> Result<Option<Vec<Rule>>, RulesError> {
    let mut found: Option<Vec<Rule>> = None;
    for lifecycle in block.body.get_blocks("lifecycle") {
        let Some(attr) = lifecycle.body.get_attribute("ignore_changes") else {
            continue;
        };
        let rules = found.get_or_insert_with(Vec::new);
        let entries: Vec<&Expression> = match &attr.value {
            Expression::Array(items) => items.iter().collect(),
            single => vec![single],
        };
        for entry in entries {
            let at = entry
                .span()
                .or_else(|| attr.span())
                .map(|s| format!("{name}:{}", line_of(text, s.start)))
                .unwrap_or_else(|| name.to_owned());
            // The entry as written, for the report ("covered by ignore_changes (...)").
            let written = entry
                .span()
                .and_then(|s| text.get(s))
                .map(str::to_owned)
                .unwrap_or_else(|| entry.to_string())
                .trim()
                .to_owned();
            let bad = |reason: String| RulesError::BadRule {
                at: at.clone(),
                address: address.to_owned(),
                entry: written.clone(),
                reason,
            };
            let rule = match entry {
                Expression::Variable(v) if v.as_str() == "all" => Rule {
                    text: "all".to_owned(),
                    path: None,
                },
                Expression::String(s) => Rule::parse(s.value()).map_err(bad)?,
                other => {
                    let path = traversal_path(other).map_err(bad)?;
                    Rule {
                        text: written.clone(),
                        path: Some(path),
                    }
                }
            };
            rules.push(rule);
        }
    }
    Ok(found)
}

/// `tags["Name"]`, `metadata[0].labels`, `metadata.0.labels` as a [`Path`].
pub(crate) fn traversal_path(expr: &Expression) -> Result<Path, String> {
    match expr {
        Expression::Variable(v) => Ok(Path(vec![Step::Key(v.as_str().to_owned())])),
        Expression::Traversal(t) => {
            let mut path = traversal_path(&t.expr)?;
            for op in &t.operators {
                let step = match op.value() {
                    TraversalOperator::GetAttr(ident) => Step::Key(ident.as_str().to_owned()),
                    TraversalOperator::LegacyIndex(n) => Step::Index(*n.value()),
                    TraversalOperator::Index(Expression::String(key)) => {
                        Step::Key(key.value().clone())
                    }
                    TraversalOperator::Index(Expression::Number(n)) => n
                        .value()
                        .as_u64()
                        .map(Step::Index)
                        .ok_or_else(|| "an index must be a whole number".to_owned())?,
                    TraversalOperator::AttrSplat(_) | TraversalOperator::FullSplat(_) => {
                        return Err("a splat cannot name one attribute".to_owned());
                    }
                    TraversalOperator::Index(_) => {
                        return Err("an index must be a literal number or string".to_owned());
                    }
                };
                path.0.push(step);
            }
            Ok(path)
        }
        _ => Err("not an attribute reference".to_owned()),
    }
}
