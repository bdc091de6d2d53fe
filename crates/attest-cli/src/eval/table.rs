//! Terminal output: the progress line while an eval runs, and the group ×
//! metric table and per-case pass counts at the end.

use super::metrics::{Metric, METRICS};
use super::report_json::{EvalResult, ResultStatus};
use super::scheduler::Progress;
use std::fmt::Write;
use std::time::Duration;

pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// One line, for redrawing in place (`\r`) on a terminal.
pub fn progress_line(p: &Progress) -> String {
    let pct = (p.done * 100).checked_div(p.total).unwrap_or(100);
    let width = p.total.to_string().len();
    let mut line = format!(
        "[{:>width$}/{}] {pct:>3}%  elapsed {}  eta {}",
        p.done,
        p.total,
        duration(p.elapsed),
        p.eta.map_or_else(|| "?".to_string(), duration),
    );
    if p.running > 0 {
        let _ = write!(line, "  running {}", p.running);
    }
    if p.resumed > 0 {
        let _ = write!(line, "  ({} resumed)", p.resumed);
    }
    if let Some(last) = &p.last {
        let _ = write!(line, "  · {last}");
    }
    line
}

/// A metric as a table cell: `0.800 [0.490, 0.943] n=10`.
pub fn cell(m: &Metric, is_rate: bool) -> String {
    let Some(v) = m.value else {
        return "unavailable".to_string();
    };
    let num = |x: f64| {
        if is_rate {
            format!("{x:.3}")
        } else {
            format!("{x:.1}")
        }
    };
    match m.ci95 {
        Some([lo, hi]) => format!("{} [{}, {}] n={}", num(v), num(lo), num(hi), m.n),
        None => format!("{} n={}", num(v), m.n),
    }
}

fn pad(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The end-of-run summary.
pub fn render(result: &EvalResult) -> String {
    let mut out = format!(
        "suite {} · model {} · {} groups · k={} · {}\n",
        result.suite,
        result.model,
        result.groups.len(),
        result.k,
        match result.status {
            ResultStatus::Complete => "complete".to_string(),
            ResultStatus::Partial => format!(
                "PARTIAL ({})",
                result.partial_reason.as_deref().unwrap_or("not finished")
            ),
        }
    );
    let mut rows = vec![std::iter::once("metric".to_string())
        .chain(result.groups.iter().map(|g| g.name.to_string()))
        .collect::<Vec<_>>()];
    let mut reasons = Vec::new();
    for def in METRICS {
        if !result
            .groups
            .iter()
            .any(|g| g.metrics.contains_key(def.name))
        {
            continue;
        }
        let mut row = vec![def.name.to_string()];
        for g in &result.groups {
            row.push(match g.metrics.get(def.name) {
                Some(m) => {
                    if let Some(why) = &m.unavailable {
                        let note = format!("{}: {why}", def.name);
                        if !reasons.contains(&note) {
                            reasons.push(note);
                        }
                    }
                    cell(m, def.is_rate)
                }
                None => "-".to_string(),
            });
        }
        rows.push(row);
    }
    out.push_str(&pad(&rows));
    for r in reasons {
        let _ = writeln!(out, "  unavailable: {r}");
    }
    out.push('\n');
    let mut cases = vec![std::iter::once("case (passed/done)".to_string())
        .chain(result.groups.iter().map(|g| g.name.to_string()))
        .collect::<Vec<_>>()];
    if let Some(first) = result.groups.first() {
        for (i, c) in first.cases.iter().enumerate() {
            let mut row = vec![c.id.clone()];
            for g in &result.groups {
                row.push(match g.cases.get(i) {
                    Some(gc) => {
                        let passed = gc.attempts.iter().filter(|a| a.verdict.pass).count();
                        let infra = gc
                            .attempts
                            .iter()
                            .filter(|a| a.record.is_infra_failure())
                            .count();
                        let mut s = format!("{passed}/{}", gc.attempts.len());
                        if infra > 0 {
                            let _ = write!(s, " ({infra} infra)");
                        }
                        s
                    }
                    None => "-".to_string(),
                });
            }
            cases.push(row);
        }
    }
    out.push_str(&pad(&cases));
    for (name, how) in &result.estimators {
        let _ = writeln!(out, "  {name}: {how}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report_json::tests::sample;

    #[test]
    fn progress_line_shows_count_eta_and_last_attempt() {
        let line = progress_line(&Progress {
            done: 12,
            total: 40,
            resumed: 2,
            running: 4,
            elapsed: Duration::from_secs(42),
            eta: Some(Duration::from_secs(98)),
            last: Some("full/read-port#3 completed".into()),
        });
        assert_eq!(
            line,
            "[12/40]  30%  elapsed 0:42  eta 1:38  running 4  (2 resumed)  · full/read-port#3 completed"
        );
        assert_eq!(duration(Duration::from_secs(3725)), "1:02:05");
    }

    #[test]
    fn table_lists_groups_metrics_and_cases() {
        let text = render(&sample());
        assert!(
            text.starts_with("suite demo · model scripted · 1 groups · k=2 · complete"),
            "{text}"
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("receipt_backed_completion_rate"))
            .unwrap();
        assert!(line.contains("0.667 [") && line.ends_with("n=3"), "{line}");
        assert!(
            text.contains("unavailable: ungrounded_value_rate: grounding was not recorded"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("read-port") && l.ends_with("2/3")),
            "{text}"
        );
        assert!(text.contains("pass_hat_k: tau-bench"), "{text}");
    }
}
