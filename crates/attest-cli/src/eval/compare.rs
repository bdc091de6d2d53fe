//! `attest eval compare A.json B.json`: per group and metric, `B - A` with
//! a 95% interval and whether it excludes zero. Rates use Newcombe's hybrid
//! score interval for a difference of proportions; means and pass@k use a
//! Welch normal interval.

use super::group::Group;
use super::metrics::{IntervalMethod, Metric, METRICS};
use super::report_json::{EvalResult, ResultStatus};
use super::stats::{self, Summary};
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricDiff {
    pub group_a: Group,
    pub group_b: Group,
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// `b - a`.
    pub difference: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    /// `newcombe`, `welch`, or `none`.
    pub method: &'static str,
    /// The interval excludes 0; `None` without an interval.
    pub significant: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    /// Things to know before trusting the numbers (different suites,
    /// partial results).
    pub warnings: Vec<String>,
    pub diffs: Vec<MetricDiff>,
}

fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn diff_one(
    a: &Metric,
    b: &Metric,
) -> (Option<f64>, Option<[f64; 2]>, &'static str, Option<String>) {
    let (Some(va), Some(vb)) = (a.value, b.value) else {
        let side = if a.value.is_none() { "A" } else { "B" };
        return (None, None, "none", Some(format!("unavailable in {side}")));
    };
    let plain = Some(round(vb - va));
    match (a.interval, b.interval) {
        (IntervalMethod::Wilson, IntervalMethod::Wilson) => {
            let (Some(sa), Some(sb)) = (a.successes, b.successes) else {
                return (plain, None, "none", Some("counts missing".into()));
            };
            match stats::newcombe_difference((sa, a.n), (sb, b.n)) {
                Some((d, ci)) => (
                    Some(round(d)),
                    Some([round(ci.lo), round(ci.hi)]),
                    "newcombe",
                    None,
                ),
                None => (plain, None, "none", Some("an empty sample".into())),
            }
        }
        _ => {
            let summary = |m: &Metric, v: f64| Summary {
                mean: v,
                sd: m.sd,
                n: m.n,
            };
            match stats::mean_difference(&summary(a, va), &summary(b, vb)) {
                Some((d, ci)) => (
                    Some(round(d)),
                    Some([round(ci.lo), round(ci.hi)]),
                    "welch",
                    None,
                ),
                None => (
                    plain,
                    None,
                    "none",
                    Some("fewer than two values on a side".into()),
                ),
            }
        }
    }
}

/// Compare each pair `(group in A, group in B)`.
pub fn compare(
    a: &EvalResult,
    a_name: &str,
    b: &EvalResult,
    b_name: &str,
    pairs: &[(Group, Group)],
) -> Result<Comparison, String> {
    let mut warnings = Vec::new();
    if a.suite_sha256 != b.suite_sha256 {
        warnings.push(format!(
            "the results come from different suites ({} `{}` vs {} `{}`)",
            a_name, a.suite, b_name, b.suite
        ));
    }
    for (name, r) in [(a_name, a), (b_name, b)] {
        if r.status == ResultStatus::Partial {
            warnings.push(format!("{name} is a partial result"));
        }
    }
    if a.model != b.model {
        warnings.push(format!("different models: `{}` vs `{}`", a.model, b.model));
    }
    let mut diffs = Vec::new();
    for &(ga, gb) in pairs {
        let group_a = a
            .group(ga)
            .ok_or_else(|| format!("{a_name} has no group `{ga}`"))?;
        let group_b = b
            .group(gb)
            .ok_or_else(|| format!("{b_name} has no group `{gb}`"))?;
        for def in METRICS {
            let (Some(ma), Some(mb)) =
                (group_a.metrics.get(def.name), group_b.metrics.get(def.name))
            else {
                continue;
            };
            let (difference, ci95, method, note) = diff_one(ma, mb);
            diffs.push(MetricDiff {
                group_a: ga,
                group_b: gb,
                metric: def.name.to_string(),
                a: ma.value,
                b: mb.value,
                difference,
                ci95,
                method,
                significant: ci95.map(|[lo, hi]| lo > 0.0 || hi < 0.0),
                note,
            });
        }
    }
    Ok(Comparison {
        a: a_name.to_string(),
        b: b_name.to_string(),
        warnings,
        diffs,
    })
}

/// The groups present in both results, paired by name.
pub fn same_name_pairs(a: &EvalResult, b: &EvalResult) -> Vec<(Group, Group)> {
    a.groups
        .iter()
        .filter(|g| b.group(g.name).is_some())
        .map(|g| (g.name, g.name))
        .collect()
}

pub fn render(c: &Comparison) -> String {
    let mut out = format!("A = {}\nB = {}\n", c.a, c.b);
    for w in &c.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    let mut rows = vec![vec![
        "groups (A→B)".to_string(),
        "metric".into(),
        "A".into(),
        "B".into(),
        "B-A [95% CI]".into(),
        "significant".into(),
    ]];
    let num = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    for d in &c.diffs {
        let diff = match (d.difference, d.ci95) {
            (Some(v), Some([lo, hi])) => format!("{v:+.3} [{lo:+.3}, {hi:+.3}]"),
            (Some(v), None) => format!("{v:+.3}"),
            _ => "-".into(),
        };
        rows.push(vec![
            format!("{}→{}", d.group_a, d.group_b),
            d.metric.clone(),
            num(d.a),
            num(d.b),
            diff,
            match (d.significant, &d.note) {
                (Some(true), _) => "yes".into(),
                (Some(false), _) => "no".into(),
                (None, Some(n)) => format!("n/a ({n})"),
                (None, None) => "n/a".into(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report_json::tests::sample;

    #[test]
    fn a_large_change_is_significant_and_no_change_is_not() {
        let a = sample();
        let mut b = sample();
        // B: 10 of 10 backed completions out of 10, A: 2 of 3.
        let m = b.groups[0]
            .metrics
            .get_mut("receipt_backed_completion_rate")
            .unwrap();
        *m = Metric::rate(10, 10);
        let c = compare(&a, "a.json", &b, "b.json", &same_name_pairs(&a, &b)).unwrap();
        let d = c
            .diffs
            .iter()
            .find(|d| d.metric == "receipt_backed_completion_rate")
            .unwrap();
        assert_eq!(d.method, "newcombe");
        assert_eq!(d.difference, Some(round(1.0 - 2.0 / 3.0)));
        let [lo, hi] = d.ci95.unwrap();
        assert!(lo < d.difference.unwrap() && d.difference.unwrap() <= hi);
        // 2/3 vs 10/10 is not enough evidence.
        assert_eq!(d.significant, Some(false));
        *b.groups[0]
            .metrics
            .get_mut("receipt_backed_completion_rate")
            .unwrap() = Metric::rate(100, 100);
        let mut a2 = a.clone();
        *a2.groups[0]
            .metrics
            .get_mut("receipt_backed_completion_rate")
            .unwrap() = Metric::rate(20, 100);
        let c = compare(&a2, "a", &b, "b", &[(Group::Full, Group::Full)]).unwrap();
        let d = c
            .diffs
            .iter()
            .find(|d| d.metric == "receipt_backed_completion_rate")
            .unwrap();
        assert_eq!(d.significant, Some(true));
        let same = compare(&a, "a", &a, "a", &[(Group::Full, Group::Full)]).unwrap();
        assert!(same.diffs.iter().all(|d| d.significant != Some(true)));
        assert!(same.warnings.is_empty());
    }

    #[test]
    fn means_use_welch_and_unavailable_metrics_say_so() {
        let a = sample();
        let c = compare(&a, "a", &a, "a", &[(Group::Full, Group::Full)]).unwrap();
        let steps = c.diffs.iter().find(|d| d.metric == "mean_steps").unwrap();
        assert_eq!(steps.method, "welch");
        assert_eq!(steps.difference, Some(0.0));
        let g = c
            .diffs
            .iter()
            .find(|d| d.metric == "ungrounded_value_rate")
            .unwrap();
        assert_eq!(g.significant, None);
        assert_eq!(g.note.as_deref(), Some("unavailable in A"));
        let text = render(&c);
        assert!(text.contains("n/a (unavailable in A)"), "{text}");
        assert!(compare(&a, "a", &a, "a", &[(Group::Baseline, Group::Full)])
            .unwrap_err()
            .contains("no group `baseline`"));
    }
}
