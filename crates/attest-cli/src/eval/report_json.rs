//! The result file (`--json FILE`, schema `attest-eval/1`, documented in
//! `docs/eval.md`): every attempt with its verdict, and the metrics per
//! case and group. It is written after every finished attempt, atomically,
//! and marked `partial` until the last one; the HTML report and `compare`
//! read it alone.

use super::boundary::BoundaryVerdict;
use super::expect::Verdict;
use super::group::{Group, GroupSwitches};
use super::metrics::{self, MetricMap};
use super::record::AttemptRecord;
use attest_protocol::CompletionContract;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

pub const SCHEMA: &str = "attest-eval/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    pub schema: String,
    /// The suite's name.
    pub suite: String,
    pub suite_path: String,
    pub suite_sha256: String,
    /// The model, as the runner names it (provider and model id, or
    /// `scripted`).
    pub model: String,
    pub status: ResultStatus,
    /// Why a partial result stopped (`interrupted`, `crashed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reason: Option<String>,
    /// Attempts per case and group.
    pub repeat: u32,
    /// The `k` of pass@k and pass^k.
    pub k: u32,
    pub loop_version: String,
    pub started_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// How each kind of number was estimated.
    pub estimators: BTreeMap<String, String>,
    pub groups: Vec<GroupResult>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    /// Every planned attempt has a result.
    Complete,
    /// Some attempts have no result yet: resumable.
    Partial,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupResult {
    pub name: Group,
    pub switches: GroupSwitches,
    /// Attempts planned, and attempts with a result.
    pub attempts_planned: u32,
    pub attempts_done: u32,
    /// Infra failures among the done attempts (also in
    /// `metrics.infra_failure_rate`).
    pub infra_failures: u32,
    pub cases: Vec<CaseResult>,
    pub metrics: MetricMap,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub contract: CompletionContract,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary_fixture: Option<String>,
    pub attempts: Vec<AttemptResult>,
    pub metrics: MetricMap,
}

/// An attempt's record plus what the eval concluded about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptResult {
    #[serde(flatten)]
    pub record: AttemptRecord,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary: Option<BoundaryVerdict>,
}

/// Why a result file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not an eval result: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path} has schema `{found}`; this attest reads `{SCHEMA}`")]
    Schema { path: String, found: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl EvalResult {
    pub fn read(path: &Path) -> Result<EvalResult, ResultError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ResultError::Read {
            path: shown.clone(),
            source,
        })?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ResultError::Invalid {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
        match value.get("schema").and_then(|s| s.as_str()) {
            Some(SCHEMA) => {}
            Some(other) => {
                return Err(ResultError::Schema {
                    path: shown,
                    found: other.to_string(),
                })
            }
            None => {
                return Err(ResultError::Invalid {
                    path: shown,
                    reason: "no `schema` field".into(),
                })
            }
        }
        serde_json::from_value(value).map_err(|e| ResultError::Invalid {
            path: shown,
            reason: e.to_string(),
        })
    }

    /// Write to a temporary file beside `path`, then rename: a crash
    /// leaves the previous complete file, never half of one.
    pub fn write(&self, path: &Path) -> Result<(), ResultError> {
        let err = |source| ResultError::Write {
            path: path.display().to_string(),
            source,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| err(std::io::Error::other(e)))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        std::fs::write(&tmp, text + "\n").map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
    }

    /// Recompute every case's and group's metrics and counters from the
    /// attempts.
    pub fn refresh_metrics(&mut self) {
        let k = self.k;
        for g in &mut self.groups {
            for c in &mut g.cases {
                c.attempts.sort_by_key(|a| a.record.attempt);
                c.metrics = metrics::compute(&[&*c], k);
            }
            let cases: Vec<&CaseResult> = g.cases.iter().collect();
            g.metrics = metrics::compute(&cases, k);
            g.attempts_done = g.cases.iter().map(|c| c.attempts.len() as u32).sum();
            g.infra_failures = g
                .cases
                .iter()
                .flat_map(|c| &c.attempts)
                .filter(|a| a.record.is_infra_failure())
                .count() as u32;
        }
    }

    pub fn group(&self, name: Group) -> Option<&GroupResult> {
        self.groups.iter().find(|g| g.name == name)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::eval::expect::evaluate;
    use crate::eval::expect::tests::{case, record};
    use attest_protocol::{ContractKind, TerminalState};
    use chrono::TimeZone;

    /// A small result: one group, one case, three attempts (two backed
    /// completions, one unverified), with a hostile answer in the last.
    pub(crate) fn sample() -> EvalResult {
        let c = case(ContractKind::Observe);
        let t = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let mut records = vec![
            record(TerminalState::Completed, true),
            record(TerminalState::Completed, true),
            record(TerminalState::Unverified, false),
        ];
        for (i, r) in records.iter_mut().enumerate() {
            r.attempt = i as u32;
            r.run_id = Some(format!("run_{i}"));
            r.steps = 2 + i as u32;
            r.latency_ms = 100 * (i as u64 + 1);
            r.input_tokens = 50;
            r.output_tokens = 10;
            r.trace_text = Some(format!("run run_{i}\n  done: {}", r.state.unwrap()));
        }
        records[2].answer = Some("<script>document.title='pwned'</script>I read it.".into());
        let attempts = records
            .into_iter()
            .map(|r| AttemptResult {
                verdict: evaluate(&c, &r, None),
                boundary: None,
                record: r,
            })
            .collect();
        let mut result = EvalResult {
            schema: SCHEMA.into(),
            suite: "demo".into(),
            suite_path: "examples/eval/demo.yaml".into(),
            suite_sha256: "0".repeat(64),
            model: "scripted".into(),
            status: ResultStatus::Complete,
            partial_reason: None,
            repeat: 3,
            k: 2,
            loop_version: "loop-test".into(),
            started_at: t,
            updated_at: t,
            estimators: metrics::estimators(),
            groups: vec![GroupResult {
                name: Group::Full,
                switches: Group::Full.switches(),
                attempts_planned: 3,
                attempts_done: 0,
                infra_failures: 0,
                cases: vec![CaseResult {
                    id: "read-port".into(),
                    contract: c.contract.clone(),
                    boundary_fixture: None,
                    attempts,
                    metrics: MetricMap::new(),
                }],
                metrics: MetricMap::new(),
            }],
        };
        result.refresh_metrics();
        result
    }

    #[test]
    fn result_file_snapshot() {
        insta::assert_json_snapshot!("eval_result_file", sample());
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let r = sample();
        r.write(&path).unwrap();
        assert!(!dir.path().join("r.json.tmp").exists());
        assert_eq!(EvalResult::read(&path).unwrap(), r);
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The documented shape.
        assert_eq!(v["schema"], SCHEMA);
        let attempt = &v["groups"][0]["cases"][0]["attempts"][0];
        assert_eq!(attempt["run_id"], "run_0");
        assert_eq!(attempt["state"], "completed");
        assert_eq!(attempt["reason"], "contract_satisfied");
        let m = &v["groups"][0]["metrics"]["receipt_backed_completion_rate"];
        assert!(
            m["value"].is_number() && m["ci95"].is_array() && m["n"] == 3,
            "{m}"
        );
    }

    #[test]
    fn bad_files_are_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, r#"{"schema": "attest-eval/9"}"#).unwrap();
        let e = EvalResult::read(&path).unwrap_err().to_string();
        assert!(e.contains("attest-eval/9") && e.contains(SCHEMA), "{e}");
        std::fs::write(&path, "not json").unwrap();
        assert!(EvalResult::read(&path)
            .unwrap_err()
            .to_string()
            .contains("not an eval result"));
        std::fs::write(&path, r#"{"schema": "attest-eval/1", "suite": 3}"#).unwrap();
        assert!(EvalResult::read(&path)
            .unwrap_err()
            .to_string()
            .contains("not an eval result"));
        assert!(EvalResult::read(&dir.path().join("none.json")).is_err());
    }
}
