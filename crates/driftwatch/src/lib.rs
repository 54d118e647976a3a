//! driftwatch: triage OpenTofu/Terraform drift from a refresh-only plan and a normal plan.
//!
//! The pipeline, one module per step:
//! [`runner`] (every tofu call) → [`plan`] (parse and refuse, secrets dropped with
//! [`mask`], paths from [`flatten`]) → [`rules`] (`ignore_changes` from `*.tf` and `*.tf.json`, files listed by [`config`]) →
//! [`classify`] (one category per finding, pending changes apart) → [`history`] (ages) →
//! [`report`] (text, JSON, Markdown) → [`exit`] (0/1/2). [`codify`] turns accepted drift
//! into configuration. [`cli`] wires them together; `main.rs` only hands it the real
//! process and streams.

#![allow(
    clippy::disallowed_methods,
    reason = "driftwatch reads OpenTofu/Terraform plan JSON and writes the reports and history files its operator names, runs tofu/terraform on a CI runner, and never manages a host's files as root: the host boundary that clippy.toml enforces is not its concern"
)]

pub mod classify;
pub mod cli;
pub mod codify;
pub mod config;
pub mod engine_secrets;
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
pub mod stacks;
