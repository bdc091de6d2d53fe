//! The eval scheduler: every case K times per group, `-j N` at a time, each
//! attempt in a fresh copy of its fixture, the result file rewritten after
//! each finished attempt. Finished attempts of an earlier, partial result
//! are not run again; cancelling (Ctrl-C) stops new attempts, lets the
//! running ones end as cancelled, and leaves a result marked `partial`.
//!
//! The engine is behind [`AttemptRunner`]: the scheduler knows suites,
//! workspaces and results, the runner knows how to turn one attempt into a
//! run.

use super::boundary::{grade, AnswerGrader};
use super::expect::evaluate;
use super::group::{Group, GroupSwitches};
use super::metrics;
use super::record::AttemptRecord;
use super::report_json::{
    AttemptResult, CaseResult, EvalResult, GroupResult, ResultError, ResultStatus, SCHEMA,
};
use super::suite::{Case, Suite};
use super::workspace::materialize;
use async_trait::async_trait;
use attest_protocol::TerminalReason;
use chrono::Utc;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// One attempt to run.
#[derive(Debug, Clone)]
pub struct AttemptRequest {
    pub case: Arc<Case>,
    pub group: Group,
    pub switches: GroupSwitches,
    /// 0-based, below the eval's repeat count.
    pub attempt: u32,
    /// A fresh copy of the case's fixture, for this attempt only.
    pub workspace_dir: PathBuf,
    /// Cancelled when the eval is: end the run as `cancelled` and return
    /// [`AttemptOutcome::Interrupted`].
    pub cancel: CancellationToken,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    Finished(Box<AttemptRecord>),
    /// Stopped by the eval's cancellation; run again on resume.
    Interrupted,
}

/// Turns one attempt into a run. The engine's implementation lives with
/// the binary; tests use fakes.
#[async_trait]
pub trait AttemptRunner: Send + Sync {
    /// The model as the result file names it.
    fn model_name(&self) -> String;
    async fn run_attempt(&self, request: AttemptRequest) -> AttemptOutcome;
}

/// What to run.
#[derive(Debug, Clone)]
pub struct EvalPlan {
    pub suite: Arc<Suite>,
    pub groups: Vec<Group>,
    pub repeat: u32,
    /// The `k` of pass@k and pass^k (at most `repeat`).
    pub k: u32,
    pub jobs: usize,
    /// Attempt workspaces go to `work_dir/<group>/<case>/<attempt>`.
    pub work_dir: PathBuf,
    /// Rewritten after every attempt when set.
    pub result_path: Option<PathBuf>,
    /// On resume, run infra-failed attempts again instead of keeping them.
    pub retry_infra: bool,
}

/// Where the eval stands, for a progress line.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub done: u32,
    pub total: u32,
    /// Done attempts carried over from an earlier result.
    pub resumed: u32,
    pub running: u32,
    pub elapsed: Duration,
    /// Estimated time left, from this session's pace.
    pub eta: Option<Duration>,
    /// The attempt that just finished: `group/case#n state`.
    pub last: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Result(#[from] ResultError),
    #[error("{path} was produced by a different suite (sha256 {found}, this suite is {expected}); remove it or write to another file")]
    SuiteChanged {
        path: String,
        found: String,
        expected: String,
    },
    #[error("cannot create the eval's work directory {path}: {source}")]
    WorkDir {
        path: String,
        source: std::io::Error,
    },
    #[error("nothing to run: {0}")]
    Empty(String),
    #[error("{path} holds {what}, which this run does not plan; {fix}, or write to another file")]
    NotPlanned {
        path: String,
        what: String,
        fix: String,
    },
}

struct Job {
    group_index: usize,
    case_index: usize,
    attempt: u32,
}

fn skeleton(plan: &EvalPlan, model: String) -> EvalResult {
    let now = Utc::now();
    EvalResult {
        schema: SCHEMA.into(),
        suite: plan.suite.name.clone(),
        suite_path: plan.suite.path.display().to_string(),
        suite_sha256: plan.suite.sha256.clone(),
        model,
        status: ResultStatus::Partial,
        partial_reason: None,
        repeat: plan.repeat,
        k: plan.k,
        loop_version: attest_protocol::LOOP_VERSION.into(),
        started_at: now,
        updated_at: now,
        estimators: metrics::estimators(),
        groups: plan
            .groups
            .iter()
            .map(|&g| GroupResult {
                name: g,
                switches: g.switches(),
                attempts_planned: plan.repeat * plan.suite.cases.len() as u32,
                attempts_done: 0,
                infra_failures: 0,
                cases: plan
                    .suite
                    .cases
                    .iter()
                    .map(|c| CaseResult {
                        id: c.id.clone(),
                        contract: c.contract.clone(),
                        boundary_fixture: c.boundary.as_ref().map(|b| b.fixture.id.clone()),
                        attempts: Vec::new(),
                        metrics: Default::default(),
                    })
                    .collect(),
                metrics: Default::default(),
            })
            .collect(),
    }
}

/// Carry over the attempts of `previous`. Every one must fit the plan: a
/// rewrite must not silently drop results.
fn carry_over(
    result: &mut EvalResult,
    previous: EvalResult,
    path: &Path,
    retry_infra: bool,
) -> Result<u32, EvalError> {
    let shown = path.display().to_string();
    if previous.suite_sha256 != result.suite_sha256 {
        return Err(EvalError::SuiteChanged {
            path: shown,
            found: previous.suite_sha256,
            expected: result.suite_sha256.clone(),
        });
    }
    result.started_at = previous.started_at;
    let mut carried = 0;
    for old_group in previous.groups {
        let has_attempts = old_group.cases.iter().any(|c| !c.attempts.is_empty());
        let Some(group) = result.groups.iter_mut().find(|g| g.name == old_group.name) else {
            if has_attempts {
                return Err(EvalError::NotPlanned {
                    path: shown,
                    what: format!("results of group `{}`", old_group.name),
                    fix: "add it to --groups".into(),
                });
            }
            continue;
        };
        for old_case in old_group.cases {
            let Some(case) = group.cases.iter_mut().find(|c| c.id == old_case.id) else {
                continue;
            };
            let mut seen = BTreeSet::new();
            for a in old_case.attempts {
                if a.record.attempt >= result.repeat {
                    return Err(EvalError::NotPlanned {
                        path: shown,
                        what: format!(
                            "attempt {} of case `{}` in group `{}`",
                            a.record.attempt, case.id, group.name
                        ),
                        fix: format!("pass --repeat {} or more", a.record.attempt + 1),
                    });
                }
                if retry_infra && a.record.is_infra_failure() {
                    continue;
                }
                if seen.insert(a.record.attempt) {
                    case.attempts.push(a);
                    carried += 1;
                }
            }
        }
    }
    Ok(carried)
}

/// Run one job: a fresh workspace, the runner (a panic in it is an infra
/// failure, not a crash of the eval), then grading and checks.
async fn run_job(
    request: AttemptRequest,
    runner: Arc<dyn AttemptRunner>,
    grader: Arc<dyn AnswerGrader>,
) -> Option<AttemptResult> {
    let attempt = request.attempt;
    let case = request.case.clone();
    let fixture = case.workspace.clone();
    let dir = request.workspace_dir.clone();
    let prepared = tokio::task::spawn_blocking(move || materialize(&fixture, &dir)).await;
    let mut record = match prepared {
        Ok(Ok(())) => match tokio::spawn(async move { runner.run_attempt(request).await }).await {
            Ok(AttemptOutcome::Finished(record)) => *record,
            Ok(AttemptOutcome::Interrupted) => return None,
            Err(e) => AttemptRecord::infra(attempt, format!("the attempt runner crashed: {e}")),
        },
        Ok(Err(e)) => AttemptRecord::infra(attempt, format!("cannot prepare the workspace: {e}")),
        Err(e) => AttemptRecord::infra(attempt, format!("cannot prepare the workspace: {e}")),
    };
    record.attempt = attempt;
    if record.infra_failure.is_none() && record.reason == Some(TerminalReason::ProviderError) {
        // The endpoint failed after the engine's retries: nothing the model
        // or the harness did.
        record.infra_failure =
            Some("provider_error: the model endpoint failed after retries".into());
    }
    let boundary = match (&case.boundary, record.answered(), &record.infra_failure) {
        (Some(b), Some(answer), None) => match grade(grader.as_ref(), &b.fixture, answer).await {
            Ok(v) => Some(v),
            Err(e) => {
                record.infra_failure = Some(e.to_string());
                None
            }
        },
        _ => None,
    };
    let verdict = evaluate(&case, &record, boundary.as_ref());
    Some(AttemptResult {
        record,
        verdict,
        boundary,
    })
}

/// Run `plan`, resuming from `previous` when given.
pub async fn run_eval(
    plan: &EvalPlan,
    runner: Arc<dyn AttemptRunner>,
    grader: Arc<dyn AnswerGrader>,
    previous: Option<EvalResult>,
    cancel: CancellationToken,
    progress: &(dyn Fn(&Progress) + Send + Sync),
) -> Result<EvalResult, EvalError> {
    if plan.groups.is_empty() || plan.repeat == 0 || plan.suite.cases.is_empty() {
        return Err(EvalError::Empty("no groups, cases or attempts".into()));
    }
    std::fs::create_dir_all(&plan.work_dir).map_err(|source| EvalError::WorkDir {
        path: plan.work_dir.display().to_string(),
        source,
    })?;
    let mut result = skeleton(plan, runner.model_name());
    let resumed = match previous {
        Some(prev) => {
            let path = plan.result_path.clone().unwrap_or_default();
            carry_over(&mut result, prev, &path, plan.retry_infra)?
        }
        None => 0,
    };
    let mut jobs = Vec::new();
    for (gi, group) in result.groups.iter().enumerate() {
        for (ci, case) in group.cases.iter().enumerate() {
            let done: BTreeSet<u32> = case.attempts.iter().map(|a| a.record.attempt).collect();
            for attempt in (0..plan.repeat).filter(|a| !done.contains(a)) {
                jobs.push(Job {
                    group_index: gi,
                    case_index: ci,
                    attempt,
                });
            }
        }
    }
    let total = plan.repeat * plan.suite.cases.len() as u32 * plan.groups.len() as u32;
    let save = |result: &mut EvalResult, status: ResultStatus, reason: Option<String>| {
        result.status = status;
        result.partial_reason = reason;
        result.updated_at = Utc::now();
        result.refresh_metrics();
        match &plan.result_path {
            Some(path) => result.write(path),
            None => Ok(()),
        }
    };
    save(&mut result, ResultStatus::Partial, None)?;

    let started = Instant::now();
    let mut done_here = 0u32;
    let mut done = resumed;
    let mut interrupted = 0u32;
    let mut queue = jobs.into_iter();
    let mut running: JoinSet<(usize, usize, u32, Option<AttemptResult>)> = JoinSet::new();
    let report = |done: u32, done_here: u32, running: u32, last: Option<String>| {
        let elapsed = started.elapsed();
        let remaining = total - done;
        let eta =
            (done_here > 0).then(|| elapsed.mul_f64(f64::from(remaining) / f64::from(done_here)));
        progress(&Progress {
            done,
            total,
            resumed,
            running,
            elapsed,
            eta,
            last,
        });
    };
    loop {
        while running.len() < plan.jobs.max(1) && !cancel.is_cancelled() {
            let Some(job) = queue.next() else { break };
            let group = plan.groups[job.group_index];
            let case = plan.suite.cases[job.case_index].clone();
            let request = AttemptRequest {
                workspace_dir: plan
                    .work_dir
                    .join(group.as_str())
                    .join(&case.id)
                    .join(job.attempt.to_string()),
                case,
                group,
                switches: group.switches(),
                attempt: job.attempt,
                cancel: cancel.child_token(),
            };
            let (runner, grader) = (runner.clone(), grader.clone());
            let (gi, ci, n) = (job.group_index, job.case_index, job.attempt);
            running.spawn(async move { (gi, ci, n, run_job(request, runner, grader).await) });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (gi, ci, n, outcome) = match joined {
            Ok(x) => x,
            // run_job itself does not panic; a join error means the
            // runtime is shutting down.
            Err(_) => {
                interrupted += 1;
                continue;
            }
        };
        let Some(attempt) = outcome else {
            interrupted += 1;
            continue;
        };
        let label = format!(
            "{}/{}#{} {}",
            plan.groups[gi],
            plan.suite.cases[ci].id,
            n,
            attempt
                .record
                .infra_failure
                .as_ref()
                .map(|_| "infra failure")
                .or(attempt.record.state.map(|s| s.as_str()))
                .unwrap_or("no state")
        );
        result.groups[gi].cases[ci].attempts.push(attempt);
        done += 1;
        done_here += 1;
        save(&mut result, ResultStatus::Partial, None)?;
        report(done, done_here, running.len() as u32, Some(label));
    }
    let missing = total - done;
    if missing == 0 {
        save(&mut result, ResultStatus::Complete, None)?;
    } else {
        let why = if cancel.is_cancelled() {
            "interrupted"
        } else {
            "stopped"
        };
        save(
            &mut result,
            ResultStatus::Partial,
            Some(format!(
                "{why}: {missing} of {total} attempts have no result ({interrupted} were cancelled while running); run the same command again to resume"
            )),
        )?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::boundary::RuleGrader;
    use crate::eval::expect::tests::receipt;
    use crate::eval::record::ToolCallRecord;
    use attest_protocol::{ReceiptStatus, TerminalState};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// A runner that completes with a receipt, except attempts listed in
    /// `unbacked`, and records what it was asked to run.
    struct FakeRunner {
        unbacked: Vec<u32>,
        seen: Mutex<Vec<(Group, String, u32, PathBuf)>>,
        in_flight: AtomicU32,
        max_in_flight: AtomicU32,
        /// Cancel the eval when this many attempts have started.
        cancel_after: Option<(u32, CancellationToken)>,
        started: AtomicU32,
        panic_on: Option<u32>,
        /// Hold each attempt until another is in flight too (for at most
        /// half a second), so that a test of `-j` sees them overlap however
        /// slowly a loaded machine starts them.
        wait_for_company: bool,
    }

    impl FakeRunner {
        fn new(unbacked: Vec<u32>) -> Self {
            FakeRunner {
                unbacked,
                seen: Mutex::new(Vec::new()),
                in_flight: AtomicU32::new(0),
                max_in_flight: AtomicU32::new(0),
                cancel_after: None,
                started: AtomicU32::new(0),
                panic_on: None,
                wait_for_company: false,
            }
        }
    }

    #[async_trait]
    impl AttemptRunner for FakeRunner {
        fn model_name(&self) -> String {
            "fake".into()
        }

        async fn run_attempt(&self, request: AttemptRequest) -> AttemptOutcome {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let started = self.started.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(
                request.workspace_dir.join("config.toml").is_file(),
                "the fixture is in place"
            );
            self.seen.lock().unwrap().push((
                request.group,
                request.case.id.clone(),
                request.attempt,
                request.workspace_dir.clone(),
            ));
            if self.panic_on == Some(request.attempt) {
                panic!("runner bug");
            }
            if let Some((after, token)) = &self.cancel_after {
                if started == *after {
                    token.cancel();
                }
            }
            let company = async {
                let alone_until = tokio::time::Instant::now() + Duration::from_millis(500);
                tokio::time::sleep(Duration::from_millis(20)).await;
                while self.wait_for_company
                    && self.in_flight.load(Ordering::SeqCst) < 2
                    && tokio::time::Instant::now() < alone_until
                {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            tokio::select! {
                _ = company => {}
                _ = request.cancel.cancelled() => {
                    self.in_flight.fetch_sub(1, Ordering::SeqCst);
                    return AttemptOutcome::Interrupted;
                }
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let backed = !self.unbacked.contains(&request.attempt);
            let mut r = AttemptRecord::empty(request.attempt);
            r.run_id = Some(format!("run_{}_{}", request.group, request.attempt));
            r.answer = Some("The port is 8080.".into());
            r.steps = 2;
            if backed {
                r.state = Some(TerminalState::Completed);
                r.reason = Some(TerminalReason::ContractSatisfied);
                r.receipts.push(receipt("read_file", ReceiptStatus::Ok));
                r.tool_calls.push(ToolCallRecord {
                    call_id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: serde_json::json!({"path": "config.toml"}),
                });
                r.first_turn_tool_call = true;
            } else {
                r.state = Some(TerminalState::Unverified);
                r.reason = Some(TerminalReason::MissingReceipt);
            }
            AttemptOutcome::Finished(Box::new(r))
        }
    }

    const SUITE: &str = r#"
suite: fake
repeat: 10
groups: [full]
cases:
  - id: read-port
    prompt: What port?
    workspace: {files: {config.toml: "port = 8080\n"}}
    contract: observe
    builtin_tools: [read_file]
"#;

    struct Setup {
        dir: tempfile::TempDir,
        plan: EvalPlan,
    }

    fn setup(suite: &str, jobs: usize) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite.yaml");
        std::fs::write(&path, suite).unwrap();
        let suite = Suite::load(&path).unwrap();
        let plan = EvalPlan {
            groups: suite.groups.clone(),
            repeat: suite.repeat,
            k: 3,
            jobs,
            work_dir: dir.path().join("work"),
            result_path: Some(dir.path().join("r.json")),
            retry_infra: false,
            suite: Arc::new(suite),
        };
        Setup { dir, plan }
    }

    async fn run(
        plan: &EvalPlan,
        runner: Arc<FakeRunner>,
        previous: Option<EvalResult>,
        cancel: CancellationToken,
    ) -> (EvalResult, Vec<Progress>) {
        let seen = Mutex::new(Vec::new());
        let result = run_eval(plan, runner, Arc::new(RuleGrader), previous, cancel, &|p| {
            seen.lock().unwrap().push(p.clone())
        })
        .await
        .unwrap();
        (result, seen.into_inner().unwrap())
    }

    #[tokio::test]
    async fn runs_every_attempt_concurrently_and_counts_them() {
        let s = setup(SUITE, 4);
        let runner = Arc::new(FakeRunner {
            wait_for_company: true,
            ..FakeRunner::new(vec![3, 7])
        });
        let (result, progress) = run(&s.plan, runner.clone(), None, CancellationToken::new()).await;
        assert_eq!(result.status, ResultStatus::Complete);
        let g = &result.groups[0];
        assert_eq!((g.attempts_planned, g.attempts_done), (10, 10));
        let m = &g.metrics["receipt_backed_completion_rate"];
        assert_eq!((m.successes, m.n), (Some(8), 10));
        let attempts: Vec<u32> = g.cases[0]
            .attempts
            .iter()
            .map(|a| a.record.attempt)
            .collect();
        assert_eq!(attempts, (0..10).collect::<Vec<_>>());
        assert!(
            runner.max_in_flight.load(Ordering::SeqCst) > 1,
            "-j 4 ran attempts together"
        );
        assert!(runner.max_in_flight.load(Ordering::SeqCst) <= 4);
        // Fresh, separate workspaces.
        let seen = runner.seen.lock().unwrap();
        let dirs: BTreeSet<_> = seen.iter().map(|s| s.3.clone()).collect();
        assert_eq!(dirs.len(), 10);
        assert!(seen[0]
            .3
            .starts_with(s.dir.path().join("work/full/read-port")));
        // The file on disk is the final result; progress counted to the end.
        assert_eq!(
            EvalResult::read(s.plan.result_path.as_ref().unwrap()).unwrap(),
            result
        );
        let last = progress.last().unwrap();
        assert_eq!((last.done, last.total), (10, 10));
        assert_eq!(last.eta, Some(Duration::ZERO));
        assert_eq!(progress.len(), 10);
    }

    #[tokio::test]
    async fn cancel_leaves_a_partial_result_that_resumes_without_rerunning() {
        let s = setup(SUITE, 2);
        let cancel = CancellationToken::new();
        let mut runner = FakeRunner::new(vec![]);
        runner.cancel_after = Some((5, cancel.clone()));
        let runner = Arc::new(runner);
        let (partial, _) = run(&s.plan, runner.clone(), None, cancel).await;
        assert_eq!(partial.status, ResultStatus::Partial);
        let reason = partial.partial_reason.clone().unwrap();
        assert!(reason.starts_with("interrupted:"), "{reason}");
        let finished: BTreeSet<u32> = partial.groups[0].cases[0]
            .attempts
            .iter()
            .map(|a| a.record.attempt)
            .collect();
        assert!(!finished.is_empty() && finished.len() < 10, "{finished:?}");
        // No cancelled attempt is recorded as a result.
        assert!(partial.groups[0].cases[0]
            .attempts
            .iter()
            .all(|a| a.record.state == Some(TerminalState::Completed)));
        let on_disk = EvalResult::read(s.plan.result_path.as_ref().unwrap()).unwrap();
        assert_eq!(on_disk.status, ResultStatus::Partial);

        let again = Arc::new(FakeRunner::new(vec![]));
        let (complete, progress) = run(
            &s.plan,
            again.clone(),
            Some(on_disk),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(complete.status, ResultStatus::Complete);
        assert_eq!(complete.groups[0].attempts_done, 10);
        let rerun: BTreeSet<u32> = again.seen.lock().unwrap().iter().map(|s| s.2).collect();
        assert!(
            rerun.is_disjoint(&finished),
            "finished attempts ran again: {rerun:?}"
        );
        assert_eq!(rerun.len() + finished.len(), 10);
        assert_eq!(progress[0].resumed, finished.len() as u32);
        assert_eq!(complete.started_at, partial.started_at);
    }

    #[tokio::test]
    async fn a_changed_suite_is_not_resumed() {
        let s = setup(SUITE, 1);
        let (mut done, _) = run(
            &s.plan,
            Arc::new(FakeRunner::new(vec![])),
            None,
            CancellationToken::new(),
        )
        .await;
        done.suite_sha256 = "f".repeat(64);
        let err = run_eval(
            &s.plan,
            Arc::new(FakeRunner::new(vec![])),
            Arc::new(RuleGrader),
            Some(done),
            CancellationToken::new(),
            &|_| {},
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("different suite"), "{err}");
    }

    #[tokio::test]
    async fn resume_refuses_to_drop_results_and_can_retry_infra_failures() {
        let s = setup(&SUITE.replace("repeat: 10", "repeat: 3"), 1);
        let mut runner = FakeRunner::new(vec![]);
        runner.panic_on = Some(1);
        let (done, _) = run(&s.plan, Arc::new(runner), None, CancellationToken::new()).await;
        assert_eq!(done.groups[0].infra_failures, 1);

        let mut fewer = s.plan.clone();
        fewer.repeat = 2;
        let err = run_eval(
            &fewer,
            Arc::new(FakeRunner::new(vec![])),
            Arc::new(RuleGrader),
            Some(done.clone()),
            CancellationToken::new(),
            &|_| {},
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("pass --repeat 3 or more"), "{err}");
        let mut other = s.plan.clone();
        other.groups = vec![Group::Baseline];
        let err = run_eval(
            &other,
            Arc::new(FakeRunner::new(vec![])),
            Arc::new(RuleGrader),
            Some(done.clone()),
            CancellationToken::new(),
            &|_| {},
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("group `full`"), "{err}");

        // Kept by default: nothing runs again.
        let again = Arc::new(FakeRunner::new(vec![]));
        let (kept, _) = run(
            &s.plan,
            again.clone(),
            Some(done.clone()),
            CancellationToken::new(),
        )
        .await;
        assert!(again.seen.lock().unwrap().is_empty());
        assert_eq!(kept.groups[0].infra_failures, 1);
        // With retry_infra, only the infra failure runs again.
        let mut retry = s.plan.clone();
        retry.retry_infra = true;
        let again = Arc::new(FakeRunner::new(vec![]));
        let (fixed, _) = run(&retry, again.clone(), Some(done), CancellationToken::new()).await;
        let rerun: Vec<u32> = again.seen.lock().unwrap().iter().map(|s| s.2).collect();
        assert_eq!(rerun, [1]);
        assert_eq!(fixed.groups[0].infra_failures, 0);
        assert_eq!(fixed.status, ResultStatus::Complete);
    }

    #[tokio::test]
    async fn a_runner_panic_is_an_infra_failure_kept_in_the_result() {
        let s = setup(&SUITE.replace("repeat: 10", "repeat: 3"), 1);
        let mut runner = FakeRunner::new(vec![]);
        runner.panic_on = Some(1);
        let (result, _) = run(&s.plan, Arc::new(runner), None, CancellationToken::new()).await;
        assert_eq!(result.status, ResultStatus::Complete);
        let g = &result.groups[0];
        assert_eq!(g.infra_failures, 1);
        let infra = &g.cases[0].attempts[1];
        assert!(infra
            .record
            .infra_failure
            .as_deref()
            .unwrap()
            .contains("crashed"));
        assert_eq!(g.metrics["infra_failure_rate"].successes, Some(1));
        assert_eq!(g.metrics["pass_rate"].n, 2);
    }

    #[tokio::test]
    async fn provider_errors_count_as_infra() {
        struct Down;
        #[async_trait]
        impl AttemptRunner for Down {
            fn model_name(&self) -> String {
                "down".into()
            }
            async fn run_attempt(&self, request: AttemptRequest) -> AttemptOutcome {
                let mut r = AttemptRecord::empty(request.attempt);
                r.state = Some(TerminalState::Failed);
                r.reason = Some(TerminalReason::ProviderError);
                AttemptOutcome::Finished(Box::new(r))
            }
        }
        let s = setup(&SUITE.replace("repeat: 10", "repeat: 2"), 2);
        let result = run_eval(
            &s.plan,
            Arc::new(Down),
            Arc::new(RuleGrader),
            None,
            CancellationToken::new(),
            &|_| {},
        )
        .await
        .unwrap();
        assert_eq!(result.groups[0].infra_failures, 2);
        assert_eq!(result.groups[0].metrics["pass_rate"].value, None);
    }
}
