//! driftwatch: triage OpenTofu/Terraform drift from a refresh-only plan and a normal plan.
//!
//! The pipeline, one module per step:
//! [`runner`] (every tofu call) → [`plan`] (parse and refuse, secrets dropped with
//! [`mask`], paths from [`flatten`]) → [`rules`] (`ignore_changes` from `*.tf.json`) →
//! [`classify`] (one category per finding, pending changes apart) → [`history`] (ages) →
//! [`report`] (text, JSON, Markdown) → [`exit`] (0/1/2). [`codify`] turns accepted drift
//! into configuration. [`cli`] wires them together; `main.rs` only hands it the real
//! process and streams.

pub mod classify;
pub mod cli;
pub mod codify;
pub mod error;
pub mod exit;
pub mod flatten;
pub mod fleet;
pub mod history;
pub mod mask;
pub mod plan;
pub mod report;
pub mod rules;
pub mod runner;
