//! `datum server`: the fleet's report collector.
//!
//! Every host (and every driftwatch stack) delivers its reports here over
//! HTTPS; operators read the fleet back through the same API (`datum
//! fleet`, and the web view). The layers, each in its own module:
//!
//! - [`config`] and [`init`]: the server's folder (`server.yaml`, the CA
//!   and certificate made with rcgen, `admin.yaml`) and enrolling hosts
//!   (one token each, stored hashed);
//! - [`store`]: the [`store::Backend`] trait with its SQLite (embedded,
//!   default) and PostgreSQL implementations and their versioned
//!   migrations;
//! - [`fleet`]: the query layer, the SQL written once for both databases
//!   (hosts, rollout, drift, stale, sampling, history), each view reading
//!   only the current state it shows; [`ingest`]: storing reports in
//!   batches (group commit) and keeping that current state up to date;
//! - [`cache`]: answers one process keeps while the store's generation
//!   (bumped by every write a view shows) is unchanged;
//! - [`views`]: the pure computations behind what the fleet shows (states,
//!   failure groups and the labels that separate them, drift clusters,
//!   staleness, sampling bounds), and the documents the API returns;
//! - [`api`]: the JSON handlers and their rules (who may write what, size,
//!   rate and time bounds); [`openapi`]: the document describing them;
//!   [`metrics`]: the Prometheus exposition;
//! - [`web`]: the web view at `/` (server-rendered pages over the same
//!   query layer, sign-in with the admin credential, quarantine and
//!   release); [`instructions`]: what a person asks of a host through the
//!   server, and how it reaches the host;
//! - [`mod@serve`]: TLS, HTTP and the `init` / `enroll` / `serve` commands.
//!
//! The server keeps no state but the store: several processes on one
//! PostgreSQL are interchangeable. It never reads a managed host: it knows
//! only what reports say, and a report never carries a sensitive value.

pub mod api;
pub mod cache;
pub mod config;
pub mod fleet;
pub mod ingest;
pub mod init;
pub mod instructions;
pub mod metrics;
pub mod openapi;
pub mod serve;
pub mod store;
pub mod views;
pub mod web;

pub use config::ServerConfig;
pub use init::{InitOptions, Initialised, ServerDir};
pub use serve::{
    AnyFleet, ServeOptions, enroll_command, init_command, open_store, remove_command,
    rotate_admin_command, serve,
};
