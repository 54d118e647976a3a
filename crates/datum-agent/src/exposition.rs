//! The two text formats a scrape may ask for, negotiated on `Accept`.
//!
//! `prometheus-client` writes OpenMetrics 1.0 only. Prometheus itself asks
//! for OpenMetrics first, but `promtool check metrics`, `curl` and many
//! scrapers and proxies read the classic text exposition format 0.0.4, where
//! OpenMetrics' `info` type and `# UNIT`/`# EOF` lines are errors and a
//! counter family is named by its sample (`x_total`), not by its stem (`x`).
//! [`to_prometheus_text`] rewrites the encoder's OpenMetrics output into
//! 0.0.4 family by family; [`Format::negotiate`] picks one for a request.
//!
//! The rewrite relies only on what the encoder writes (one `# HELP`,
//! `# TYPE`, optional `# UNIT` per family, then its samples; no exemplars or
//! timestamps, which the agent never sets), and is tested against it.

/// A text exposition format the agent serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`, the classic Prometheus text format.
    PrometheusText,
}

impl Format {
    /// The format for a request's `Accept` header: OpenMetrics when the
    /// client lists it with a non-zero quality (as Prometheus does), else the
    /// classic text format (no header, `*/*`, `text/plain`).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::PrometheusText;
        };
        let wants_openmetrics = accept.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !zero
        });
        if wants_openmetrics {
            Format::OpenMetrics
        } else {
            Format::PrometheusText
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// One metric family's header lines as the encoder wrote them.
#[derive(Default)]
struct Family<'a> {
    name: &'a str,
    help: Option<&'a str>,
    kind: Option<&'a str>,
}

impl Family<'_> {
    /// The family's name and type in the 0.0.4 format.
    fn renamed(&self) -> (String, &str) {
        match self.kind {
            Some("counter") => (format!("{}_total", self.name), "counter"),
            Some("info") => (format!("{}_info", self.name), "gauge"),
            Some("unknown") | None => (self.name.to_owned(), "untyped"),
            // gauge, histogram, summary: the same in both.
            Some(other) => (self.name.to_owned(), other),
        }
    }

    fn write_header(&self, out: &mut String) {
        let (name, kind) = self.renamed();
        if let Some(help) = self.help {
            // OpenMetrics escapes `"` in HELP too; 0.0.4 only `\` and newline.
            out.push_str(&format!("# HELP {name} {}\n", help.replace("\\\"", "\"")));
        }
        out.push_str(&format!("# TYPE {name} {kind}\n"));
    }
}

/// Rewrites OpenMetrics text (as `prometheus-client` encodes it) into the
/// Prometheus text exposition format 0.0.4.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut family: Option<Family<'_>> = None;
    let mut header_written = false;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let (keyword, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
            match keyword {
                "HELP" | "TYPE" | "UNIT" => {
                    let current = match family.as_mut() {
                        Some(f) if f.name == name && !header_written => f,
                        _ => {
                            // The previous family had no samples (an empty
                            // label family): it still says it exists.
                            if let Some(previous) = &family
                                && !header_written
                            {
                                previous.write_header(&mut out);
                            }
                            header_written = false;
                            family.insert(Family {
                                name,
                                ..Family::default()
                            })
                        }
                    };
                    match keyword {
                        "HELP" => current.help = Some(value),
                        "TYPE" => current.kind = Some(value),
                        // 0.0.4 has no units: the name carries it already.
                        _ => {}
                    }
                }
                // `# EOF` and anything else OpenMetrics-only.
                _ => {}
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if let Some(f) = &family {
            if !header_written {
                f.write_header(&mut out);
                header_written = true;
            }
            // A counter's creation time has no place in 0.0.4.
            if f.kind == Some("counter") && sample_name(line).ends_with("_created") {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some(f) = &family
        && !header_written
    {
        f.write_header(&mut out);
    }
    out
}

fn sample_name(line: &str) -> &str {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENMETRICS: &str = "\
# HELP datum_build Build of the running datum agent.
# TYPE datum_build info
datum_build_info{version=\"0.1.0\"} 1
# HELP datum_checks Completed checks by class and trigger.
# TYPE datum_checks counter
datum_checks_total{class=\"critical\",trigger=\"watch\"} 1
datum_checks_created{class=\"critical\",trigger=\"watch\"} 1700000000.0
# HELP datum_validation_failures Validations that failed.
# TYPE datum_validation_failures counter
# HELP datum_agent_start_time_seconds Unix time the agent started.
# TYPE datum_agent_start_time_seconds gauge
# UNIT datum_agent_start_time_seconds seconds
datum_agent_start_time_seconds 1700000000.0
# HELP datum_check_duration_seconds Time to inspect a class.
# TYPE datum_check_duration_seconds histogram
datum_check_duration_seconds_sum{class=\"critical\"} 0.5
datum_check_duration_seconds_count{class=\"critical\"} 1
datum_check_duration_seconds_bucket{le=\"+Inf\",class=\"critical\"} 1
# HELP datum_note Says \\\"hi\\\".
# TYPE datum_note unknown
datum_note 1
# EOF
";

    #[test]
    fn families_are_renamed_and_openmetrics_lines_dropped() {
        let text = to_prometheus_text(OPENMETRICS);
        assert_eq!(
            text,
            "\
# HELP datum_build_info Build of the running datum agent.
# TYPE datum_build_info gauge
datum_build_info{version=\"0.1.0\"} 1
# HELP datum_checks_total Completed checks by class and trigger.
# TYPE datum_checks_total counter
datum_checks_total{class=\"critical\",trigger=\"watch\"} 1
# HELP datum_validation_failures_total Validations that failed.
# TYPE datum_validation_failures_total counter
# HELP datum_agent_start_time_seconds Unix time the agent started.
# TYPE datum_agent_start_time_seconds gauge
datum_agent_start_time_seconds 1700000000.0
# HELP datum_check_duration_seconds Time to inspect a class.
# TYPE datum_check_duration_seconds histogram
datum_check_duration_seconds_sum{class=\"critical\"} 0.5
datum_check_duration_seconds_count{class=\"critical\"} 1
datum_check_duration_seconds_bucket{le=\"+Inf\",class=\"critical\"} 1
# HELP datum_note Says \"hi\".
# TYPE datum_note untyped
datum_note 1
"
        );
    }

    #[test]
    fn prometheus_gets_openmetrics_and_everything_else_gets_text() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text")),
            Format::OpenMetrics
        );
        for other in [
            None,
            Some("*/*"),
            Some("text/plain"),
            Some("text/plain;version=0.0.4"),
            Some("application/openmetrics-text;q=0, text/plain"),
            Some(""),
        ] {
            assert_eq!(
                Format::negotiate(other),
                Format::PrometheusText,
                "{other:?}"
            );
        }
    }
}
