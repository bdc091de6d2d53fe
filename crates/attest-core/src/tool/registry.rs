//! The tool registry: the only way a tool runs.
//!
//! A call goes `prepare` (look up, parse, validate against the schema) then
//! `execute` (run under a timeout, write the receipt). Anything that stops a
//! call before it runs gets a receipt from `refusal_receipt`, so every call
//! the model makes leaves one.

use crate::text::{sha256_hex, truncate_with_note};
use crate::tool::middleware::Middleware;
use crate::tool::{Tool, ToolContext, ToolOutput};
use attest_protocol::{
    DataSource, EffectClass, Evidence, Permission, Receipt, ReceiptStatus, ToolSpec,
    VerificationStatus,
};
use chrono::Utc;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Most bytes of tool output handed to the model, whatever the tool did.
pub const MODEL_OUTPUT_LIMIT: usize = 64 * 1024;
/// Most bytes of a failure reason kept in a receipt; receipts are repeated
/// in events and traces, the full text is in the tool result.
pub const RECEIPT_ERROR_LIMIT: usize = 4 * 1024;
/// Most bytes of one schema error message (they quote the offending value).
const SCHEMA_ERROR_LIMIT: usize = 300;

/// Why a registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("two tools are named `{name}`; tool names must be unique")]
    DuplicateName { name: String },
    #[error("tool `{name}` has an invalid parameters schema: {reason}")]
    InvalidSchema { name: String, reason: String },
}

/// Why a call was refused before running. The message is what the model sees.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("unknown tool `{name}`; available tools: {}", available.join(", "))]
    UnknownTool {
        name: String,
        available: Vec<String>,
    },
    #[error("arguments are not valid JSON: {error}")]
    InvalidJson { error: String },
    #[error("arguments do not match the tool's schema: {}", errors.join("; "))]
    SchemaViolation { errors: Vec<String> },
}

impl PrepareError {
    /// The receipt status for a call refused this way.
    pub fn status(&self) -> ReceiptStatus {
        match self {
            PrepareError::UnknownTool { .. } => ReceiptStatus::UnknownTool,
            PrepareError::InvalidJson { .. } | PrepareError::SchemaViolation { .. } => {
                ReceiptStatus::InvalidArguments
            }
        }
    }
}

/// A call whose arguments passed validation, ready for a permission
/// decision and [`ToolRegistry::execute`].
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedCall {
    pub name: String,
    pub arguments: serde_json::Value,
    pub effect: EffectClass,
    /// The effective permission (config override, else the tool's default).
    /// The permission policy middleware treats it as the tool's default.
    pub permission: Permission,
    pub input_fingerprint: String,
    /// Who serves the call (`local` for built-in tools), for failure records.
    pub provider: String,
    /// What kind of data the call supplies, for `data_impact`.
    pub source: DataSource,
}

struct Entry {
    tool: Arc<dyn Tool>,
    /// Compiled once; the schema never changes during a run.
    validator: jsonschema::Validator,
}

/// The tools offered in a run, in a fixed order.
pub struct ToolRegistry {
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    overrides: HashMap<String, Permission>,
    middleware: Vec<Arc<dyn Middleware>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .field("overrides", &self.overrides)
            .field("middleware", &self.middleware_names())
            .finish()
    }
}

/// Builds the meta-validator that checks each tool's schema (once per
/// process, and the largest part of a new registry's cost) ahead of the
/// first registry.
pub(crate) fn warm_up() {
    let _ = jsonschema::validator_for(&serde_json::json!({ "type": "object" }));
}

impl ToolRegistry {
    /// Registers `tools` in the given order. Names must be unique and each
    /// schema must compile.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Result<Self, RegistryError> {
        let mut entries = Vec::with_capacity(tools.len());
        let mut index = HashMap::with_capacity(tools.len());
        for tool in tools {
            let name = tool.spec().name.clone();
            if index.contains_key(&name) {
                return Err(RegistryError::DuplicateName { name });
            }
            let validator = jsonschema::validator_for(&tool.spec().parameters).map_err(|e| {
                RegistryError::InvalidSchema {
                    name: name.clone(),
                    reason: e.to_string(),
                }
            })?;
            index.insert(name, entries.len());
            entries.push(Entry { tool, validator });
        }
        Ok(ToolRegistry {
            entries,
            index,
            overrides: HashMap::new(),
            middleware: Vec::new(),
        })
    }

    /// Appends a middleware to the chain [`ToolRegistry::check`] runs.
    pub fn push_middleware(&mut self, middleware: Arc<dyn Middleware>) {
        self.middleware.push(middleware);
    }

    /// Builder form of [`ToolRegistry::push_middleware`].
    pub fn with_middleware(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.push_middleware(middleware);
        self
    }

    /// The chain's middleware names, in order.
    pub fn middleware_names(&self) -> Vec<String> {
        self.middleware
            .iter()
            .map(|m| m.name().to_string())
            .collect()
    }

    pub(crate) fn middleware(&self) -> &[Arc<dyn Middleware>] {
        &self.middleware
    }

    /// Overrides the permission of one tool (from config). It wins over the
    /// tool's own default. A name that is not registered has no effect.
    pub fn set_permission(&mut self, tool: &str, p: Permission) {
        self.overrides.insert(tool.to_string(), p);
    }

    /// The specs, in registration order: the same list, serialized the same
    /// way, on every step.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.entries.iter().map(|e| e.tool.spec().clone()).collect()
    }

    /// Tool names in registration order.
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| e.tool.spec().name.clone())
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.entry(name).map(|e| &e.tool)
    }

    pub fn effect_of(&self, name: &str) -> Option<EffectClass> {
        self.get(name).map(|t| t.spec().effect)
    }

    /// The effective permission: the config override, else the tool's
    /// default. An unknown tool is denied.
    pub fn permission(&self, name: &str) -> Permission {
        match self.get(name) {
            None => Permission::Deny,
            Some(tool) => self
                .overrides
                .get(name)
                .copied()
                .unwrap_or_else(|| tool.default_permission()),
        }
    }

    /// Looks the tool up and validates the raw arguments. Empty arguments
    /// mean `{}` (some providers send "" for a call without arguments).
    pub fn prepare(&self, name: &str, raw_arguments: &str) -> Result<PreparedCall, PrepareError> {
        let Some(entry) = self.entry(name) else {
            return Err(PrepareError::UnknownTool {
                name: name.to_string(),
                available: self.names(),
            });
        };
        let arguments = parse_arguments(raw_arguments).map_err(|e| PrepareError::InvalidJson {
            error: e.to_string(),
        })?;
        if !arguments.is_object() {
            return Err(PrepareError::SchemaViolation {
                errors: vec![format!(
                    "(root): arguments must be a JSON object, got {}",
                    json_type(&arguments)
                )],
            });
        }
        let errors: Vec<String> = entry
            .validator
            .iter_errors(&arguments)
            .map(|e| {
                let path = e.instance_path().as_str();
                let path = if path.is_empty() { "(root)" } else { path };
                truncate_with_note(&format!("{path}: {e}"), SCHEMA_ERROR_LIMIT)
            })
            .collect();
        if !errors.is_empty() {
            return Err(PrepareError::SchemaViolation { errors });
        }
        Ok(PreparedCall {
            name: name.to_string(),
            effect: entry.tool.spec().effect,
            permission: self.permission(name),
            input_fingerprint: fingerprint_arguments(&arguments),
            provider: entry.tool.provider().to_string(),
            source: entry.tool.data_source(),
            arguments,
        })
    }

    /// Runs a prepared call under the tool's timeout and writes its receipt.
    /// The permission decision is the caller's, made before this; callers
    /// with a middleware chain use [`ToolRegistry::execute_cleared`], which
    /// only takes a call the chain (or an approval) cleared.
    pub async fn execute(
        &self,
        call_id: &str,
        call: &PreparedCall,
        ctx: &ToolContext,
    ) -> (ToolOutput, Receipt) {
        let started_at = Utc::now();
        let output = match self.get(&call.name) {
            Some(tool) => run_isolated(Arc::clone(tool), call.arguments.clone(), ctx).await,
            // Only if the call was prepared by another registry.
            None => ToolOutput::error(format!("unknown tool `{}`", call.name)),
        };
        let finished_at = Utc::now();
        let mut output = output;
        output.output = truncate_with_note(&output.output, MODEL_OUTPUT_LIMIT);

        let status = if output.success {
            ReceiptStatus::Ok
        } else if output.timed_out {
            ReceiptStatus::Timeout
        } else {
            ReceiptStatus::Error
        };
        let declared = self.effect_of(&call.name).unwrap_or(call.effect);
        // Effect is judged per call: a call may report that it only read,
        // never that it did more than its tool declares.
        let effect = match output.effect {
            Some(EffectClass::Observe) if declared != EffectClass::Internal => EffectClass::Observe,
            _ => declared,
        };
        let verification_status = match (output.success, output.evidence_present) {
            (true, true) if output.no_effect && effect != EffectClass::Observe => {
                VerificationStatus::NoEffect
            }
            (true, true) => VerificationStatus::Verified,
            (true, false) => VerificationStatus::MissingEvidence,
            (false, _) => VerificationStatus::NotApplicable,
        };
        let receipt = Receipt {
            call_id: call_id.to_string(),
            tool_name: call.name.clone(),
            effect,
            status,
            started_at,
            finished_at,
            input_fingerprint: call.input_fingerprint.clone(),
            evidence: output.evidence.clone(),
            verification_status,
            error: (!output.success)
                .then(|| truncate_with_note(&output.output, RECEIPT_ERROR_LIMIT)),
        };
        (output, receipt)
    }

    /// The receipt of a call that did not run: denied, invalid arguments,
    /// unknown tool, interrupted.
    pub fn refusal_receipt(
        &self,
        call_id: &str,
        name: &str,
        raw_arguments: &str,
        status: ReceiptStatus,
        reason: &str,
    ) -> Receipt {
        let now = Utc::now();
        // The same fingerprint as a prepared call when the arguments parse,
        // so a refused call and its retry can be matched.
        let input_fingerprint = match parse_arguments(raw_arguments) {
            Ok(value) => fingerprint_arguments(&value),
            Err(_) => sha256_hex(raw_arguments.as_bytes()),
        };
        Receipt {
            call_id: call_id.to_string(),
            tool_name: name.to_string(),
            effect: self.effect_of(name).unwrap_or(EffectClass::Observe),
            status,
            started_at: now,
            finished_at: now,
            input_fingerprint,
            evidence: Evidence::default(),
            verification_status: VerificationStatus::NotApplicable,
            error: Some(truncate_with_note(reason, RECEIPT_ERROR_LIMIT)),
        }
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.index.get(name).and_then(|&i| self.entries.get(i))
    }
}

/// Hex sha256 of the canonical JSON of `value`: object keys sorted at every
/// level, no whitespace. Equal arguments give equal fingerprints whatever
/// the key order the model wrote them in.
pub fn fingerprint_arguments(value: &serde_json::Value) -> String {
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    sha256_hex(canonical.as_bytes())
}

/// Writes sorted-key JSON explicitly rather than trusting
/// `serde_json::to_string`, whose key order depends on whether some crate in
/// the build enabled serde_json's `preserve_order` feature. The result equals
/// `to_string` with the default (sorted) map.
pub(crate) fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&attest_protocol::json::value_text(&Value::String(
                    key.clone(),
                )));
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&attest_protocol::json::value_text(scalar)),
    }
}

fn parse_arguments(raw: &str) -> Result<serde_json::Value, serde_json::Error> {
    if raw.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    attest_protocol::json::parse_value(raw)
}

fn json_type(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Runs the tool on its own task so that a panic becomes an error result
/// instead of taking the run down, under the tool's timeout. The task is
/// aborted if it times out or if this future is dropped (a cancelled run);
/// the tool's own drop handlers (process group kill) then clean up.
async fn run_isolated(
    tool: Arc<dyn Tool>,
    arguments: serde_json::Value,
    ctx: &ToolContext,
) -> ToolOutput {
    let limit = tool.timeout();
    let ctx = ctx.clone();
    let mut handle = AbortOnDrop(tokio::spawn(
        async move { tool.execute(arguments, &ctx).await },
    ));
    match tokio::time::timeout(limit, &mut handle.0).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) if e.is_panic() => {
            ToolOutput::error("the tool crashed (panicked); this is a bug in the tool")
        }
        Ok(Err(e)) => ToolOutput::error(format!("the tool did not finish: {e}")),
        Err(_) => ToolOutput::timeout(format!("timed out after {}", human_duration(limit))),
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `120 s` for whole seconds, `1500 ms` otherwise.
fn human_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(120)), "120 s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1500 ms");
    }
}
