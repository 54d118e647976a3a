//! The OpenAPI 3.0 document of the API, served at `/openapi.json`.
//!
//! Written here beside the handlers and checked two ways: a unit test that
//! every route of the router is described (and nothing else), and
//! Schemathesis in the test suite, which sends generated requests to a
//! running server and checks every answer against these schemas.
//!
//! Owns: [`document`]. Must not: describe anything the router does not
//! serve.

use serde_json::{Value, json};

fn s(t: &str) -> Value {
    json!({"type": t})
}

fn nullable(t: &str) -> Value {
    json!({"type": t, "nullable": true})
}

/// A report's text: any string without a NUL character (the stores cannot
/// hold one; the handler refuses it, in a map's keys too, which OpenAPI 3.0
/// cannot describe).
fn text() -> Value {
    json!({"type": "string", "pattern": "^[^\\u0000]*$"})
}

fn nullable_text() -> Value {
    json!({"type": "string", "pattern": "^[^\\u0000]*$", "nullable": true})
}

/// A count or duration: the handler reads it as a `u64`.
fn int() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
}

/// A time in Unix seconds (or any signed value the handler reads as `i64`).
fn i64_int() -> Value {
    json!({"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX})
}

/// An exit status: the handler reads it as an `i32`.
fn i32_int(nullable: bool) -> Value {
    json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX, "nullable": nullable})
}

/// A view's `format_version`: the string every Datum JSON document carries.
fn view_version() -> Value {
    json!({"type": "string", "enum": [crate::views::VIEW_FORMAT_VERSION]})
}

fn map_of(v: Value) -> Value {
    json!({"type": "object", "additionalProperties": v})
}

fn list(v: Value) -> Value {
    json!({"type": "array", "items": v})
}

fn object(required: &[&str], props: Value) -> Value {
    json!({"type": "object", "required": required, "properties": props})
}

/// An object of a report: the handler refuses members it does not know.
fn strict(required: &[&str], props: Value) -> Value {
    json!({"type": "object", "additionalProperties": false, "required": required, "properties": props})
}

/// Who changed a finding's resource (its own function, as [`field_change`]).
fn writer() -> Value {
    strict(
        &["kind", "via", "at"],
        json!({
            "kind": text(), "via": text(), "user": text(),
            "login_user": text(), "unit": text(), "at": i64_int()
        }),
    )
}

/// One field of a finding (its own function: `json!` nests only so deep).
fn field_change() -> Value {
    strict(
        &["path", "observed", "declared"],
        json!({
            "path": text(), "observed": nullable_text(), "declared": nullable_text(),
            "sensitive": s("boolean")
        }),
    )
}

/// A report as the handler reads it: every bound and every refused member
/// the handler has, so a report this document calls valid is accepted.
fn report() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["format_version", "key", "seq", "kind", "host", "labels", "datum_version", "revision",
                     "catalogue", "started_at", "finished_at", "duration_ms", "exit_code", "counts",
                     "resources", "expected_interval_s"],
        "properties": {
            "format_version": {"type": "integer", "enum": [datum_fleet::FORMAT_VERSION]},
            "key": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            "seq": int(),
            "kind": {"type": "string", "enum": ["apply", "check", "agent", "stack"]},
            "host": text(),
            "labels": map_of(text()),
            "datum_version": text(),
            "revision": text(),
            "catalogue": text(),
            "started_at": i64_int(),
            // Refused before 1970 (`api::check_numbers`).
            "finished_at": {"type": "integer", "minimum": 0, "maximum": i64::MAX},
            "duration_ms": int(),
            "exit_code": i32_int(false),
            "classes_checked": list(text()),
            "counts": counts(),
            "resources": int(),
            "classes": list(class_bound()),
            "expected_interval_s": interval(),
            "validators": map_of(text()),
            "trees": list(strict(&["resource", "declared"], json!({
                "resource": text(), "declared": text(), "observed": nullable_text()
            }))),
            "failures": list(strict(&["resource", "phase", "message", "signature"], json!({
                "resource": text(), "phase": text(), "validator": nullable_text(),
                "validator_version": nullable_text(), "exit_status": i32_int(true),
                "message": text(), "signature": text()
            }))),
            "findings": list(finding()),
            "changed": list(text()),
            "changed_total": int(),
            "quarantined": list(strict(&["target", "source"], json!({
                "target": text(), "source": text(), "reason": text(), "since": i64_int()
            }))),
            "instructions": list(strict(&["key", "outcome", "at"], json!({
                "key": text(), "outcome": text(), "at": i64_int()
            }))),
            "pending": list(strict(&["address", "action"], json!({"address": text(), "action": text()}))),
            "sampling": {"type": "object", "nullable": true, "additionalProperties": false, "required": ["round", "deep"],
                         "properties": {"round": int(), "deep": s("boolean")}},
            "trusted_by_metadata": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "nullable": true,
                                    "description": "An apply that trusted metadata: its unchanged resources not read"},
            "warnings": {"type": "array", "items": text(),
                         "description": "What the pass warned of although it went on; sent only to a server whose reply names `warnings` in `takes`"},
            "verified_except": {"type": "array", "items": text(), "nullable": true,
                                "description": "An apply of the whole catalogue: the declared resources it did not verify (failed, blocked, held); the host's open findings of every other resource close. Absent for a partial apply, one that trusted metadata, or one with more than 1000 not verified; sent only to a server whose reply names `verified_except` in `takes`"}
        }
    })
}

/// One drift finding of a report.
fn finding() -> Value {
    strict(
        &[
            "subject",
            "category",
            "class",
            "paths",
            "signature",
            "first_seen",
        ],
        json!({
            "subject": text(), "category": text(), "class": text(),
            "paths": list(text()), "signature": text(), "observed": nullable_text(),
            "first_seen": i64_int(), "checks": int(),
            "changes": list(field_change()),
            "content_diff": text(),
            "changed_by": list(writer())
        }),
    )
}

/// An interval a report states: a century at most (`api::INTERVAL_MAX_S`).
fn interval() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": crate::api::INTERVAL_MAX_S})
}

/// One drift class of a report, with its detection bound.
fn class_bound() -> Value {
    strict(
        &["class", "interval_s", "resources"],
        json!({
            "class": text(), "interval_s": interval(), "bound_ms": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "nullable": true}, "resources": int(),
            "policy": {"type": "string", "enum": ["report", "revert", "accept", "quarantine"]}
        }),
    )
}

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn labels() -> Value {
    map_of(s("string"))
}

fn counts() -> Value {
    map_of(int())
}

fn answer(schema: &str, description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": r(schema)}}
    })
}

fn errors(codes: &[&str]) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for c in codes {
        let what = match *c {
            "400" => "Malformed request",
            "401" => "Missing or unknown token",
            "403" => "The token may not do this",
            "404" => "Not found",
            "408" => "The request took too long",
            "413" => "The report is too large",
            "429" => "Too many reports; see Retry-After",
            _ => "The store is unavailable",
        };
        m.insert((*c).to_owned(), answer("Error", what));
    }
    m
}

fn read(op: &str, summary: &str, schema: &str, params: Value) -> Value {
    let mut responses = errors(&["400", "401", "403", "408", "503"]);
    responses.insert("200".to_owned(), answer(schema, summary));
    json!({"get": {
        "operationId": op,
        "summary": summary,
        "security": [{"bearer": []}],
        "parameters": params,
        "responses": responses,
    }})
}

/// The whole document.
pub fn document() -> Value {
    let mut post_responses = errors(&["400", "401", "403", "408", "413", "429", "503"]);
    post_responses.insert(
        "200".to_owned(),
        answer(
            "Reply",
            "Stored now, or already held under this key (duplicate)",
        ),
    );
    let mut history_responses = errors(&["400", "401", "403", "404", "408", "503"]);
    history_responses.insert(
        "200".to_owned(),
        answer("HistoryView", "The host's history"),
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "datum server",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Fleet reports in; hosts, rollouts, drift clusters, staleness and sampling out. Reports take a host's (or stack's) token; reads take the admin token (admin.yaml)."
        },
        "paths": {
            "/v1/reports": {"post": {
                "operationId": "postReport",
                "summary": "Deliver one report (idempotent by its key)",
                "description": "No string of a report, a map's keys included, may hold a NUL character (400).",
                "security": [{"bearer": []}],
                "parameters": [
                    {"name": "Idempotency-Key", "in": "header", "required": false, "description": "The report's `key`; when sent, it must equal it (400 otherwise)", "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"}},
                    {"name": "Datum-Outbox-Depth", "in": "header", "required": false, "schema": int()},
                    {"name": "Datum-Outbox-Dropped", "in": "header", "required": false, "description": "Reports the host's outbox dropped (full) that no report it sent before announced; added to the host's total only when this report is stored, and ignored with a duplicate, so a report sent again (its reply lost) carries the count it carried first", "schema": int()}
                ],
                "requestBody": {"required": true, "content": {"application/json": {"schema": r("Report")}}},
                "responses": post_responses
            }},
            "/v1/hosts": read("listHosts", "Every host and stack with its state", "HostsView", json!([])),
            "/v1/hosts/{name}/reports": {"get": {
                "operationId": "hostHistory",
                "summary": "A host's newest reports and daily aggregates",
                "security": [{"bearer": []}],
                "parameters": [
                    {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}
                ],
                "responses": history_responses
            }},
            "/v1/rollout": read("rollout", "Which hosts converged, failed or have not applied a revision", "RolloutView",
                json!([{"name": "revision", "in": "query", "required": false, "description": "The revision, or the start of one a host applied (`git:5954ab558278`, as the views show it cut short): that one; several beginning so are a 400 naming them. Default: the revision applied most recently", "schema": {"type": "string"}}])),
            "/v1/drift": read("drift", "Drift findings across hosts, clustered (most hosts first): a page at a time when `page` or `per` is given, else every cluster in one answer", "DriftView",
                json!([
                    {"name": "page", "in": "query", "required": false, "description": "The page, from 1 (default 1; past the last: the last)", "schema": {"type": "integer", "minimum": 1}},
                    {"name": "per", "in": "query", "required": false, "description": "Clusters per page (default 100 when only `page` is given, at most 1000), as the web view's hosts table and drift page take it. Without `page` and `per`, every cluster in one answer, unpaged (as before paging)", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}
                ])),
            "/v1/stale": read("stale", "Hosts whose last report is overdue", "StaleView", json!([])),
            "/v1/sampling": read("sampling", "The sampling plan, deep checks and detection bounds", "SamplingView", json!([])),
            "/metrics": {"get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics of the fleet",
                "security": [{"bearer": []}],
                "responses": {
                    "200": {"description": "OpenMetrics text", "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}},
                    "401": answer("Error", "Missing or unknown token"),
                    "403": answer("Error", "The token may not do this"),
                    "503": answer("Error", "The store is unavailable")
                }
            }},
            "/openapi.json": {"get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {"200": {"description": "The OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}}}
            }},
            "/healthz": {"get": {
                "operationId": "healthz",
                "summary": "Whether the server can reach its store",
                "responses": {
                    "200": {"description": "Healthy", "content": {"application/json": {"schema": object(&["status", "store"], json!({"status": s("string"), "store": s("string")}))}}},
                    "503": {"description": "The store is unavailable", "content": {"application/json": {"schema": object(&["status"], json!({"status": s("string"), "error": s("string")}))}}}
                }
            }}
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas()
        }
    })
}

fn schemas() -> Value {
    json!({
        "Error": object(&["error"], json!({"error": s("string")})),
        "Report": report(),
        "Reply": object(&["format_version", "accepted", "duplicate", "sampling"], json!({
            "format_version": s("integer"),
            "accepted": s("boolean"),
            "duplicate": s("boolean"),
            "sampling": {"type": "object", "nullable": true, "required": ["fraction", "round_s", "seed", "round"],
                         "properties": {"fraction": s("number"), "round_s": int(), "seed": int(), "round": int()}},
            "instructions": list(object(&["key", "action", "target", "reason", "by", "at"], json!({
                "key": s("string"), "action": {"type": "string", "enum": ["quarantine", "release"]},
                "target": s("string"), "reason": s("string"), "by": s("string"), "at": s("integer")
            }))),
            "takes": {"type": "array", "items": s("string"),
                      "description": "The optional report fields this server takes (`warnings`, `verified_except`)"}
        })),
        "HostsView": object(&["format_version", "generated_at", "states", "hosts"], json!({
            "format_version": view_version(),
            "generated_at": s("string"),
            "states": counts(),
            "hosts": list(object(&["name", "kind", "labels", "state", "last_report", "revision", "reports"], json!({
                "name": s("string"), "kind": s("string"), "labels": labels(),
                "state": {"type": "string", "enum": crate::views::STATES},
                "last_report": nullable("string"), "age_s": nullable("integer"),
                "last_report_kind": nullable("string"), "revision": nullable("string"),
                "last_applied_revision": nullable("string"),
                "reports": int(), "counts": counts(), "resources": int(), "findings": int(),
                "quarantined": int(), "trees": int(), "trees_differing": int(),
                "expected_interval_s": int(), "outbox_depth": int(), "datum_version": nullable("string")
            })))
        })),
        "RolloutView": object(&["format_version", "revision", "hosts_total", "converged", "failed", "pending", "groups"], json!({
            "format_version": view_version(),
            "revision": nullable("string"),
            "hosts_total": int(),
            "converged": list(s("string")),
            "converged_labels": map_of(list(s("string"))),
            "failed": list(s("string")),
            "pending": list(object(&["name"], json!({"name": s("string"), "revision": nullable("string")}))),
            "groups": list(object(&["resource", "phase", "signature", "message", "hosts", "labels"], json!({
                "resource": s("string"), "phase": s("string"), "validator": nullable("string"),
                "validator_versions": list(s("string")), "exit_status": nullable("integer"),
                "signature": s("string"), "message": s("string"), "hosts": list(s("string")),
                "labels": map_of(list(s("string")))
            })))
        })),
        "DriftView": object(&["format_version", "generated_at", "hosts_total", "hosts_drifted", "clusters_total", "clusters"], json!({
            "format_version": view_version(),
            "generated_at": s("string"),
            "hosts_total": int(),
            "hosts_drifted": int(),
            "clusters_total": int(),
            "page": {"type": "integer", "minimum": 1},
            "pages": {"type": "integer", "minimum": 1},
            "per": {"type": "integer", "minimum": 1, "maximum": 1000},
            "clusters": list(object(&["subject", "category", "signature", "hosts", "spread", "first_seen"], json!({
                "subject": s("string"), "category": s("string"), "class": s("string"),
                "paths": list(s("string")), "signature": s("string"), "observed": nullable("string"),
                "hosts": int(), "sample_hosts": list(s("string")), "changed_by": list(s("string")), "variants": int(),
                "spread": {"type": "string", "enum": ["many hosts", "one host"]},
                "first_seen": s("string"), "last_seen": s("string")
            })))
        })),
        "StaleView": object(&["format_version", "generated_at", "factor", "hosts"], json!({
            "format_version": view_version(),
            "generated_at": s("string"),
            "factor": s("number"),
            "hosts": list(object(&["name", "age_s", "allowed_s", "overdue_s", "never_reported"], json!({
                "name": s("string"), "kind": s("string"), "labels": labels(),
                "last_report": nullable("string"), "age_s": s("integer"), "expected_interval_s": int(),
                "allowed_s": s("integer"), "overdue_s": s("integer"), "never_reported": s("boolean")
            })))
        })),
        "SamplingView": object(&["format_version", "enabled", "hosts_total", "deep_in_period", "overdue", "classes"], json!({
            "format_version": view_version(),
            "enabled": s("boolean"),
            "fraction": nullable("number"),
            "round_s": {"type": "integer", "nullable": true},
            "period_rounds": {"type": "integer", "nullable": true},
            "current_round": {"type": "integer", "nullable": true},
            "hosts_total": int(),
            "deep_in_period": int(),
            "overdue": list(s("string")),
            "rounds": list(object(&["round", "deep_hosts"], json!({"round": int(), "deep_hosts": int()}))),
            "classes": list(object(&["class", "interval_s", "hosts"], json!({
                "class": s("string"), "interval_s": int(), "hosts": int(), "bound_unsampled_s": int(),
                "bound_guaranteed_s": {"type": "integer", "nullable": true},
                "bound_expected_s": {"type": "integer", "nullable": true}
            })))
        })),
        "HistoryView": object(&["format_version", "name", "reports", "daily"], json!({
            "format_version": view_version(),
            "name": s("string"),
            "reports": list(object(&["seq", "kind", "received_at", "finished_at", "revision", "exit_code"], json!({
                "seq": int(), "kind": s("string"), "received_at": s("string"), "finished_at": s("string"),
                "revision": s("string"), "exit_code": s("integer"), "counts": counts(),
                "findings": int(), "failures": int(), "trusted_by_metadata": int(),
                "warnings": list(s("string"))
            }))),
            "daily": list(object(&["day", "reports"], json!({
                "day": s("string"), "reports": int(), "applies": int(), "failed": int(), "max_findings": int()
            })))
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_reference_resolves() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let text = doc.to_string();
        for part in text.split("#/components/schemas/").skip(1) {
            let name: String = part.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(schemas.contains_key(&name), "{name}");
        }
        let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
        assert_eq!(paths.len(), 10);
    }

    #[test]
    fn a_report_made_by_the_wire_model_has_every_required_field() {
        let doc = document();
        let required = doc["components"]["schemas"]["Report"]["required"]
            .as_array()
            .unwrap()
            .clone();
        let report = datum_fleet::Report {
            format_version: 1,
            key: "0".repeat(32),
            seq: 1,
            kind: datum_fleet::ReportKind::Check,
            host: "h".into(),
            labels: Default::default(),
            datum_version: "0.1.0".into(),
            revision: "git:x".into(),
            catalogue: "c".into(),
            started_at: 0,
            finished_at: 0,
            duration_ms: 0,
            exit_code: 0,
            classes_checked: vec![],
            counts: Default::default(),
            resources: 0,
            classes: vec![],
            expected_interval_s: 0,
            validators: Default::default(),
            trees: vec![],
            failures: vec![],
            findings: vec![],
            changed: vec![],
            changed_total: 0,
            quarantined: vec![],
            sampling: None,
            trusted_by_metadata: None,
            instructions: vec![],
            pending: vec![],
            warnings: vec!["User[w1]: usermod succeeded and said: ...".into()],
            verified_except: Some(vec!["File[a]".into()]),
        };
        let value = serde_json::to_value(&report).unwrap();
        let props = doc["components"]["schemas"]["Report"]["properties"]
            .as_object()
            .unwrap();
        for field in value.as_object().unwrap().keys() {
            assert!(props.contains_key(field), "{field} is not described");
        }
        for field in required {
            assert!(value.get(field.as_str().unwrap()).is_some(), "{field}");
        }
    }
}
