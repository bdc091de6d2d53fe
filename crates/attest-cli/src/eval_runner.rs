//! The engine behind `attest eval`: each attempt is an ordinary run in the
//! attempt's own workspace and store, started through the facade's
//! builder with the case's tools, contract and model and the group's
//! switches (SPEC I2), and read back from its log into an
//! [`AttemptRecord`].

use crate::inspect::timeline;
use crate::setup::process_env;
use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use attest::config::{ConfigFile, Profile};
use attest::providers::replay::ReplayProvider;
use attest::providers::scripted::ScriptedProvider;
use attest::providers::text_protocol::TextProtocolProvider;
use attest::store::Store;
use attest::{
    ApprovalMode, Engine, ModelProvider, ProtocolMode, ProviderKind, ProviderSpec, RunRequest,
};
use attest_cli::eval::cli::{EvalModelArgs, RunEvalArgs};
use attest_cli::eval::record::{
    AttemptRecord, GroundingRecord, MemoryCandidateRecord, ToolCallRecord,
};
use attest_cli::eval::scheduler::{AttemptOutcome, AttemptRequest, AttemptRunner};
use attest_cli::eval::suite::{CaseModel, Protocol, Suite};
use attest_protocol::{
    CheckableKind, EvalGroup, EventBody, Grounding, LogEntry, MemoryDecision, MemoryProvenance,
    TerminalState, TraceRecord, TranscriptItem,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Where the models of a suite's cases come from.
pub struct EngineRunner {
    /// The eval's model (`--provider`), built once and shared by every
    /// attempt that does not script its own; `None` when no case needs it.
    shared: Option<Arc<dyn ModelProvider>>,
    label: String,
    /// Where recorded runs are looked up for replay.
    runs_in: PathBuf,
    max_tokens: Option<u32>,
    /// Sampling temperature; with it, attempt i is sent seed i.
    temperature: Option<f32>,
    attest_exe: PathBuf,
}

/// What the runner makes for `attest eval` (see [`attest_cli::eval::cli::RunnerFactory`]).
pub fn runner(args: &RunEvalArgs, suite: &Suite) -> Result<Arc<dyn AttemptRunner>> {
    let m = &args.model;
    let needs_provider = suite
        .cases
        .iter()
        .any(|c| matches!(c.model, CaseModel::Provider));
    let attest_exe =
        std::env::current_exe().context("cannot locate the attest binary for command tools")?;
    let runs_in = m.runs_in.clone();
    let (shared, label) = match m.provider.as_deref() {
        _ if !needs_provider => (None, "scripted (the suite's own)".to_string()),
        Some("replay") => {
            let from = m
                .from
                .as_deref()
                .ok_or_else(|| anyhow!("--provider replay needs --from RUN_ID"))?;
            let (p, label) = replay_provider(&runs_in, from)?;
            (Some(p), label)
        }
        _ => {
            if m.from.is_some() {
                bail!("--from names a run to replay: use it with --provider replay");
            }
            let built = attest::build_provider(
                &spec_of(m)?,
                &ConfigFile::default(),
                Path::new("."),
                &process_env(),
                None,
            )?;
            (Some(built.provider), built.label)
        }
    };
    let label = match m.temperature {
        Some(t) => format!("{label}, temperature {t}, seed = attempt number"),
        None => label,
    };
    Ok(Arc::new(EngineRunner {
        shared,
        label,
        runs_in,
        max_tokens: m.max_tokens,
        temperature: m.temperature,
        attest_exe,
    }))
}

fn spec_of(m: &EvalModelArgs) -> Result<ProviderSpec> {
    let kind = match m.provider.as_deref() {
        None => ProviderKind::Local,
        Some(name) => name
            .parse::<ProviderKind>()
            .map_err(|e| anyhow!("--provider: {e}"))?,
    };
    if kind == ProviderKind::Scripted {
        bail!("--provider scripted: give the script in the suite (`model: {{script: …}}`)");
    }
    Ok(ProviderSpec {
        kind: Some(kind),
        base_url: m.base_url.clone(),
        model: m.model.clone(),
        api_key_env: m.api_key_env.clone(),
        script: None,
        model_path: m.model_path.clone(),
        threads: m.threads,
        // Each case chooses its protocol; the text protocol wraps this one.
        protocol: Some(ProtocolMode::Native),
    })
}

/// A recorded run's raw outputs as a provider, and whether the run used
/// the text protocol (its outputs are then the inner model's).
fn replay_provider(runs_in: &Path, run: &str) -> Result<(Arc<dyn ModelProvider>, String)> {
    let store = attest::open_store(runs_in)
        .with_context(|| format!("cannot open the run store of {}", runs_in.display()))?;
    let record = store.run(run)?;
    let entries = store.entries(&record.id)?;
    let (family, model) = entries
        .iter()
        .find_map(|e| match e {
            LogEntry::Trace {
                trace:
                    TraceRecord::Request {
                        api_family, model, ..
                    },
            } => Some((api_family.clone(), model.clone())),
            _ => None,
        })
        .ok_or_else(|| anyhow!("run {} made no model request to replay", record.id))?;
    let outputs: Vec<String> = store
        .artifacts(&record.id)?
        .into_iter()
        .filter(|a| a.kind == "raw_output")
        .map(|a| a.body)
        .collect();
    let (inner, text) = match family.strip_prefix("text_protocol+") {
        Some(inner) => (inner, true),
        None => (family.as_str(), false),
    };
    let replay: Arc<dyn ModelProvider> = Arc::new(ReplayProvider::new(inner, &model, outputs)?);
    let label = format!("replay of run {} ({family} {model})", record.id);
    Ok(if text {
        (Arc::new(TextProtocolProvider::new(replay)), label)
    } else {
        (replay, label)
    })
}

/// The model of one attempt, with the scripted provider when the case
/// scripts it (to save what it was sent).
struct AttemptModel {
    provider: Arc<dyn ModelProvider>,
    scripted: Option<Arc<ScriptedProvider>>,
}

impl EngineRunner {
    fn model_for(&self, req: &AttemptRequest) -> Result<AttemptModel> {
        let case = &req.case;
        let (base, scripted): (Arc<dyn ModelProvider>, _) = match &case.model {
            CaseModel::Provider => (
                self.shared
                    .clone()
                    .ok_or_else(|| anyhow!("no --provider model was built"))?,
                None,
            ),
            CaseModel::Scripted { .. } => {
                let script = case.model.script_for(req.attempt).unwrap_or_default();
                let p = Arc::new(ScriptedProvider::new(script.to_vec()));
                (p.clone() as Arc<dyn ModelProvider>, Some(p))
            }
            CaseModel::Replay { run_id } => {
                // A replayed run brings its own protocol.
                return Ok(AttemptModel {
                    provider: replay_provider(&self.runs_in, run_id)?.0,
                    scripted: None,
                });
            }
        };
        let wrapped: Arc<dyn ModelProvider> = match case.protocol {
            Protocol::Text => Arc::new(TextProtocolProvider::new(base)),
            Protocol::Native | Protocol::Auto => base,
        };
        Ok(AttemptModel {
            provider: wrapped,
            scripted,
        })
    }

    fn engine_for(&self, req: &AttemptRequest, provider: Arc<dyn ModelProvider>) -> Result<Engine> {
        let case = &req.case;
        let dir = &req.workspace_dir;
        let mut config = ConfigFile {
            tools: case.command_tools(&self.attest_exe),
            ..ConfigFile::default()
        };
        config.provider.max_tokens = self.max_tokens;
        if let Some(t) = self.temperature {
            // The same seed for attempt i of every group: paired samples.
            config.provider.temperature = Some(t);
            config.provider.seed = Some(u64::from(req.attempt));
        }
        // Exactly the case's tools (built-in and command), whatever the defaults.
        config.profiles.insert(
            "eval".to_string(),
            Profile {
                tools: case.tool_names(),
            },
        );
        let mut builder = Engine::builder()
            .config(config, format!("eval case `{}`", case.id))
            .profile("eval")
            .workspace(dir)
            .provider_arc(provider)
            .env(process_env())
            .tool_env_source(std::env::vars_os())
            .store_path(attest::store_path(dir))
            .memory(true)
            .approval_mode(ApprovalMode::Deny)
            .require_grounding(case.expect.require_grounding)
            .notices(Arc::new(|_: &str| {}));
        if let Some(key) = attest_core::failure::default_key_path(
            std::env::var_os("XDG_CONFIG_HOME").as_deref(),
            std::env::var_os("HOME").as_deref(),
        ) {
            builder = builder.fingerprint_key_path(key);
        }
        Ok(builder.build()?)
    }

    async fn attempt(&self, req: &AttemptRequest) -> Result<AttemptOutcome> {
        let AttemptModel { provider, scripted } = self.model_for(req)?;
        let engine = self.engine_for(req, provider)?;
        let case = &req.case;
        let request = RunRequest {
            contract: Some(case.contract.clone()),
            max_steps: case.max_steps,
            eval_group: Some(EvalGroup {
                name: req.group.as_str().to_string(),
                switches: req.switches,
            }),
            ..RunRequest::new(case.prompt.clone())
        };
        let started = Instant::now();
        let outcome = engine
            .run_observed(request, &mut |_| {}, req.cancel.clone())
            .await;
        let latency_ms = started.elapsed().as_millis() as u64;
        if let Some(p) = &scripted {
            save_requests(&req.workspace_dir, p)?;
        }
        let outcome = outcome?;
        if outcome.state == TerminalState::Cancelled && req.cancel.is_cancelled() {
            return Ok(AttemptOutcome::Interrupted);
        }
        let store = engine.store().lock();
        let run = store.run(&outcome.run_id)?;
        let entries = store.entries(&outcome.run_id)?;
        let mut record = record_of(req, &entries);
        record.run_id = Some(outcome.run_id.clone());
        record.state = Some(outcome.state);
        record.reason = Some(outcome.reason);
        record.answer = outcome.answer.clone();
        record.receipts = outcome.receipts.clone();
        record.steps = outcome.steps;
        record.latency_ms = latency_ms;
        record.input_tokens = outcome.usage.input_tokens;
        record.output_tokens = outcome.usage.output_tokens;
        record.trace_text = Some(timeline(&run, &entries));
        Ok(AttemptOutcome::Finished(Box::new(record)))
    }
}

/// What a scripted model was sent, request by request, beside the run's
/// store (`.attest/model-requests.json`): the eval's own evidence of what
/// reached the model.
fn save_requests(dir: &Path, p: &ScriptedProvider) -> Result<()> {
    let requests: Vec<serde_json::Value> = p
        .requests()
        .iter()
        .map(|r| {
            serde_json::json!({
                "system": r.system,
                "tools": r.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
                "history": r.history,
            })
        })
        .collect();
    let path = dir.join(".attest").join("model-requests.json");
    std::fs::write(&path, serde_json::to_string_pretty(&requests)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The facts of a run read from its log: calls, parse anomalies, the first
/// turn, memory candidates, the answer's grounding.
fn record_of(req: &AttemptRequest, entries: &[LogEntry]) -> AttemptRecord {
    let mut r = AttemptRecord::empty(req.attempt);
    let mut anomalous_steps = BTreeSet::new();
    let mut invalid_arguments = 0;
    let mut first_response: Option<bool> = None;
    let mut violated_steps = BTreeSet::new();
    for entry in entries {
        match entry {
            LogEntry::Item {
                item:
                    TranscriptItem::ToolCall {
                        call_id,
                        name,
                        arguments,
                    },
            } => r.tool_calls.push(ToolCallRecord {
                call_id: call_id.clone(),
                name: name.clone(),
                arguments: serde_json::from_str(arguments)
                    .unwrap_or_else(|_| serde_json::Value::String(arguments.clone())),
            }),
            LogEntry::Event { event } => {
                if let EventBody::ProtocolError { step, .. } = &event.body {
                    anomalous_steps.insert(*step);
                    violated_steps.insert(*step);
                }
            }
            LogEntry::Trace { trace } => match trace {
                TraceRecord::Response {
                    step,
                    parsed_calls,
                    parse_failures,
                    ..
                } => {
                    if !parse_failures.is_empty() {
                        anomalous_steps.insert(*step);
                    }
                    if first_response.is_none() {
                        first_response = Some(!parsed_calls.is_empty());
                    }
                }
                TraceRecord::InvalidArguments { .. } => invalid_arguments += 1,
                // The last answer's grounding is the run's.
                TraceRecord::Grounding { grounding, .. } => r.grounding = Some(summary(grounding)),
                TraceRecord::MemoryDecision {
                    content_preview,
                    provenance,
                    decision,
                    ..
                } if matches!(
                    decision,
                    MemoryDecision::Promoted | MemoryDecision::KeptCandidate
                ) =>
                {
                    r.memory_candidates.push(MemoryCandidateRecord {
                        content: content_preview.clone(),
                        provenance: *provenance,
                        receipt_backed: *provenance == MemoryProvenance::ToolReceipt,
                        // Without the gate every candidate would have been promoted.
                        promoted: !req.switches.memory_gate
                            || *decision == MemoryDecision::Promoted,
                    })
                }
                _ => {}
            },
            _ => {}
        }
    }
    // A valid first-turn call: the first response parsed one and did not
    // break the protocol at step 1.
    r.first_turn_tool_call = first_response == Some(true) && !violated_steps.contains(&1);
    r.parse_anomalies = anomalous_steps.len() as u32 + invalid_arguments;
    r
}

/// A grounding's counts: values, ungrounded ones, and of those the paths
/// and URLs or domains (asserted, found in no evidence).
fn summary(g: &Grounding) -> GroundingRecord {
    let ungrounded = |kinds: &[CheckableKind]| {
        (g.values.iter())
            .filter(|v| !v.is_grounded() && kinds.contains(&v.kind))
            .count() as u32
    };
    GroundingRecord {
        values: g.values.len() as u32,
        ungrounded: g.values.iter().filter(|v| !v.is_grounded()).count() as u32,
        wrong_paths: ungrounded(&[CheckableKind::Path]),
        wrong_urls: ungrounded(&[CheckableKind::Url, CheckableKind::Domain]),
    }
}

#[async_trait]
impl AttemptRunner for EngineRunner {
    fn model_name(&self) -> String {
        self.label.clone()
    }

    async fn run_attempt(&self, req: AttemptRequest) -> AttemptOutcome {
        match self.attempt(&req).await {
            Ok(outcome) => outcome,
            Err(e) => AttemptOutcome::Finished(Box::new(AttemptRecord::infra(
                req.attempt,
                format!("{e:#}"),
            ))),
        }
    }
}
