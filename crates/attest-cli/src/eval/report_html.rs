//! `attest eval report RESULT.json --html out.html`: one self-contained
//! HTML file, from the result file alone. No script, no network: a
//! Content-Security-Policy forbids both, and every value is HTML-escaped by
//! the template engine (answers and traces are untrusted model text).

use super::metrics::{metric_def, METRICS};
use super::report_json::{EvalResult, ResultStatus};
use super::table::cell;
use minijinja::value::Serde;
use minijinja::{context, Environment, Value};
use serde::Serialize;

const TEMPLATE: &str = include_str!("report.html");

#[derive(Serialize)]
struct Bar {
    group: String,
    has_value: bool,
    has_ci: bool,
    width: String,
    lo: String,
    span: String,
    text: String,
}

#[derive(Serialize)]
struct RateMetric {
    name: &'static str,
    what: &'static str,
    groups: Vec<Bar>,
}

#[derive(Serialize)]
struct Cell {
    group: String,
    text: String,
}

#[derive(Serialize)]
struct Row {
    name: &'static str,
    what: &'static str,
    cells: Vec<Cell>,
}

#[derive(Serialize)]
struct AttemptView {
    attempt: u32,
    anchor: String,
    run_id: String,
    state: String,
    reason: String,
    pass_class: &'static str,
    pass_text: &'static str,
    failed: String,
    infra: Option<String>,
    answer: String,
    grader: Option<String>,
    decision: Option<String>,
    checks: String,
    trace: String,
}

#[derive(Serialize)]
struct CaseView {
    id: String,
    fixture: Option<String>,
    passed: usize,
    done: usize,
    attempts: Vec<AttemptView>,
}

#[derive(Serialize)]
struct GroupView {
    name: String,
    done: u32,
    planned: u32,
    infra: u32,
    cases: Vec<CaseView>,
}

#[derive(Serialize)]
struct Estimator {
    name: String,
    how: String,
}

fn pct(x: f64) -> String {
    format!("{:.2}", (x * 100.0).clamp(0.0, 100.0))
}

/// Render the report.
pub fn render(result: &EvalResult) -> Result<String, minijinja::Error> {
    let mut rate_metrics = Vec::new();
    let mut table = Vec::new();
    let mut unavailable = Vec::new();
    for def in METRICS {
        if !result
            .groups
            .iter()
            .any(|g| g.metrics.contains_key(def.name))
        {
            continue;
        }
        let mut bars = Vec::new();
        let mut cells = Vec::new();
        for g in &result.groups {
            let Some(m) = g.metrics.get(def.name) else {
                cells.push(Cell {
                    group: g.name.to_string(),
                    text: "-".into(),
                });
                continue;
            };
            if let Some(why) = &m.unavailable {
                let note = format!("{} ({}): {why}", def.name, g.name);
                unavailable.push(note);
            }
            let text = cell(m, def.is_rate);
            bars.push(Bar {
                group: g.name.to_string(),
                has_value: m.value.is_some(),
                has_ci: m.ci95.is_some(),
                width: pct(m.value.unwrap_or(0.0)),
                lo: pct(m.ci95.map_or(0.0, |c| c[0])),
                span: pct(m.ci95.map_or(0.0, |c| c[1] - c[0])),
                text: text.clone(),
            });
            cells.push(Cell {
                group: g.name.to_string(),
                text,
            });
        }
        if def.is_rate {
            rate_metrics.push(RateMetric {
                name: def.name,
                what: def.what,
                groups: bars,
            });
        }
        table.push(Row {
            name: def.name,
            what: def.what,
            cells,
        });
    }
    let groups: Vec<GroupView> = result
        .groups
        .iter()
        .map(|g| GroupView {
            name: g.name.to_string(),
            done: g.attempts_done,
            planned: g.attempts_planned,
            infra: g.infra_failures,
            cases: g
                .cases
                .iter()
                .map(|c| CaseView {
                    id: c.id.clone(),
                    fixture: c.boundary_fixture.clone(),
                    passed: c.attempts.iter().filter(|a| a.verdict.pass).count(),
                    done: c.attempts.len(),
                    attempts: c
                        .attempts
                        .iter()
                        .map(|a| {
                            let r = &a.record;
                            let failed: Vec<&str> = a
                                .verdict
                                .checks
                                .iter()
                                .filter(|ch| ch.outcome == super::expect::CheckOutcome::Fail)
                                .map(|ch| ch.name.as_str())
                                .collect();
                            AttemptView {
                                attempt: r.attempt,
                                anchor: format!("trace-{}-{}-{}", g.name, c.id, r.attempt),
                                run_id: r.run_id.clone().unwrap_or_else(|| "(no run)".into()),
                                state: r.state.map_or("-".into(), |s| s.to_string()),
                                reason: r.reason.map_or("-".into(), |s| s.to_string()),
                                pass_class: if a.verdict.pass { "pass" } else { "fail" },
                                pass_text: if r.is_infra_failure() {
                                    "infra"
                                } else if a.verdict.pass {
                                    "pass"
                                } else {
                                    "fail"
                                },
                                failed: failed.join(", "),
                                infra: r.infra_failure.clone(),
                                answer: r.answer.clone().unwrap_or_else(|| "(no answer)".into()),
                                grader: a.boundary.as_ref().map(|b| b.grader.clone()),
                                decision: a.boundary.as_ref().map(|b| {
                                    serde_json::to_string(&b.decision).unwrap_or_default()
                                }),
                                checks: a
                                    .verdict
                                    .checks
                                    .iter()
                                    .map(|ch| {
                                        format!(
                                            "{:<12} {}: {}",
                                            format!("{:?}", ch.outcome).to_lowercase(),
                                            ch.name,
                                            ch.detail
                                        )
                                    })
                                    .collect::<Vec<_>>()
                                    .join("\n"),
                                trace: r.trace_text.clone().unwrap_or_else(|| {
                                    "(the result file carries no trace for this attempt)".into()
                                }),
                            }
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let estimators: Vec<Estimator> = result
        .estimators
        .iter()
        .map(|(k, v)| Estimator {
            name: k.clone(),
            how: v.clone(),
        })
        .collect();
    debug_assert!(METRICS.iter().all(|d| metric_def(d.name).is_some()));

    let mut env = Environment::new();
    env.add_template("report.html", TEMPLATE)?;
    env.get_template("report.html")?.render(context! {
        suite => result.suite.clone(),
        suite_path => result.suite_path.clone(),
        suite_sha256 => result.suite_sha256.clone(),
        model => result.model.clone(),
        schema => result.schema.clone(),
        k => result.k,
        repeat => result.repeat,
        loop_version => result.loop_version.clone(),
        updated_at => result.updated_at.to_rfc3339(),
        partial => result.status == ResultStatus::Partial,
        partial_reason => result.partial_reason.clone().unwrap_or_else(|| "not finished".into()),
        rate_metrics => Value::from(Serde(&rate_metrics)),
        table => Value::from(Serde(&table)),
        unavailable => Value::from(Serde(&unavailable)),
        groups => Value::from(Serde(&groups)),
        estimators => Value::from(Serde(&estimators)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report_json::tests::sample;

    #[test]
    fn untrusted_text_is_escaped() {
        let mut r = sample();
        r.groups[0].cases[0].attempts[1].record.trace_text =
            Some("<img src=x onerror=alert(1)> & \"quoted\"".into());
        let html = render(&r).unwrap();
        assert!(!html.contains("<script"), "no script element may appear");
        assert!(html.contains("&lt;script&gt;document.title="), "{html}");
        assert!(!html.contains("<img"));
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt; &amp; &quot;quoted&quot;"));
        assert!(html.contains("Content-Security-Policy"));
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "nothing fetched"
        );
    }

    #[test]
    fn shows_numbers_drilldown_and_partial_marker() {
        let mut r = sample();
        let html = render(&r).unwrap();
        assert!(
            html.contains(
                r#"<td data-metric="receipt_backed_completion_rate" data-group="full">0.667 ["#
            ),
            "{html}"
        );
        assert!(html.contains(r##"<a href="#trace-full-read-port-2">run_2</a>"##));
        assert!(html.contains(r#"id="trace-full-read-port-2""#));
        assert!(html.contains("run run_2\n  done: unverified"));
        assert!(html.contains(r#"id="complete""#));
        r.status = ResultStatus::Partial;
        r.partial_reason = Some("interrupted: 2 of 12 attempts have no result".into());
        let html = render(&r).unwrap();
        assert!(html.contains("PARTIAL RESULT: interrupted: 2 of 12"));
    }
}
