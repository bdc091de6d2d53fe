//! The tool registry: the only way a tool runs.
//!
//! A call goes `prepare` (look up, parse, validate against the schema) then
//! `execute` (run under a timeout, write the receipt). Anything that stops a
//! call before it runs gets a receipt from `refusal_receipt`, so every call
//! the model makes leaves one.

use crate::middleware::Middleware;
use crate::text::{sha256_hex, truncate_with_note};
use crate::{Tool, ToolContext, ToolOutput};
use attest_protocol::{
    DataSource, EffectClass, Evidence, Permission, Receipt, ReceiptStatus, ToolSpec,
    VerificationStatus,
};
use chrono::Utc;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Most bytes of tool output handed to the model, whatever the tool did.
const MODEL_OUTPUT_LIMIT: usize = 64 * 1024;
/// Most bytes of a failure reason kept in a receipt; receipts are repeated
/// in events and traces, the full text is in the tool result.
const RECEIPT_ERROR_LIMIT: usize = 4 * 1024;
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
                let path = e.instance_path.as_str();
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
        let verification_status = match (output.success, output.evidence_present) {
            (true, true) => VerificationStatus::Verified,
            (true, false) => VerificationStatus::MissingEvidence,
            (false, _) => VerificationStatus::NotApplicable,
        };
        let receipt = Receipt {
            call_id: call_id.to_string(),
            tool_name: call.name.clone(),
            effect: self.effect_of(&call.name).unwrap_or(call.effect),
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
                out.push_str(&Value::String(key.clone()).to_string());
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
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn parse_arguments(raw: &str) -> Result<serde_json::Value, serde_json::Error> {
    if raw.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(raw)
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
    use crate::{builtin_tools, CommandTool, CommandToolConfig, Workspace};
    use async_trait::async_trait;
    use serde_json::json;

    /// A tool whose behaviour the test picks.
    struct Mock {
        spec: ToolSpec,
        behaviour: Behaviour,
        timeout: Duration,
    }

    #[derive(Clone)]
    enum Behaviour {
        Output(ToolOutput),
        Sleep(Duration),
        Panic,
    }

    fn mock(name: &str, behaviour: Behaviour) -> Arc<dyn Tool> {
        Arc::new(Mock {
            spec: ToolSpec {
                name: name.to_string(),
                description: "test tool".to_string(),
                parameters: json!({"type": "object", "properties": {}}),
                effect: EffectClass::Deliver,
            },
            behaviour,
            timeout: Duration::from_millis(100),
        })
    }

    #[async_trait]
    impl Tool for Mock {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }
        fn default_permission(&self) -> Permission {
            Permission::Ask
        }
        fn timeout(&self) -> Duration {
            self.timeout
        }
        async fn execute(&self, _args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
            match &self.behaviour {
                Behaviour::Output(out) => out.clone(),
                Behaviour::Sleep(d) => {
                    tokio::time::sleep(*d).await;
                    ToolOutput::ok("woke", Evidence::default())
                }
                Behaviour::Panic => panic!("boom"),
            }
        }
    }

    fn builtins() -> ToolRegistry {
        ToolRegistry::new(builtin_tools()).unwrap()
    }

    fn context() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        (dir, ToolContext::new(workspace))
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut tools = builtin_tools();
        tools.push(mock("read_file", Behaviour::Panic));
        let err = ToolRegistry::new(tools).unwrap_err();
        assert!(matches!(&err, RegistryError::DuplicateName { name } if name == "read_file"));
    }

    #[test]
    fn uncompilable_schema_is_refused() {
        let tool = Arc::new(Mock {
            spec: ToolSpec {
                name: "bad".to_string(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {"a": {"type": 12}}}),
                effect: EffectClass::Observe,
            },
            behaviour: Behaviour::Panic,
            timeout: Duration::from_secs(1),
        });
        assert!(matches!(
            ToolRegistry::new(vec![tool]),
            Err(RegistryError::InvalidSchema { .. })
        ));
    }

    #[test]
    fn specs_keep_registration_order() {
        let mut tools = builtin_tools();
        tools.insert(0, mock("zzz", Behaviour::Panic));
        let reg = ToolRegistry::new(tools).unwrap();
        let names: Vec<String> = reg.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "zzz",
                "read_file",
                "list_dir",
                "grep",
                "write_file",
                "edit_file",
                "shell"
            ]
        );
        assert_eq!(reg.names(), names);
        assert_eq!(
            serde_json::to_string(&reg.specs()).unwrap(),
            serde_json::to_string(&reg.specs()).unwrap()
        );
    }

    #[test]
    fn lookups_and_permissions() {
        let mut reg = builtins();
        assert!(reg.get("grep").is_some());
        assert!(reg.get("nope").is_none());
        assert_eq!(reg.effect_of("shell"), Some(EffectClass::Mutate));
        assert_eq!(reg.effect_of("nope"), None);
        assert_eq!(reg.permission("read_file"), Permission::Allow);
        assert_eq!(reg.permission("shell"), Permission::Ask);
        assert_eq!(reg.permission("nope"), Permission::Deny);
        reg.set_permission("shell", Permission::Allow);
        reg.set_permission("read_file", Permission::Deny);
        reg.set_permission("nope", Permission::Allow);
        assert_eq!(reg.permission("shell"), Permission::Allow);
        assert_eq!(reg.permission("read_file"), Permission::Deny);
        assert_eq!(reg.permission("nope"), Permission::Deny);
        let call = reg.prepare("shell", r#"{"command": "true"}"#).unwrap();
        assert_eq!(call.permission, Permission::Allow);
        assert_eq!(call.effect, EffectClass::Mutate);
    }

    #[test]
    fn unknown_tool() {
        let reg = builtins();
        let err = reg.prepare("read_files", "{}").unwrap_err();
        assert_eq!(err.status(), ReceiptStatus::UnknownTool);
        match &err {
            PrepareError::UnknownTool { name, available } => {
                assert_eq!(name, "read_files");
                assert_eq!(available.len(), 6);
            }
            other => panic!("{other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.starts_with("unknown tool `read_files`"), "{msg}");
        assert!(msg.contains("read_file, list_dir, grep"), "{msg}");
    }

    #[test]
    fn invalid_json() {
        let reg = builtins();
        let err = reg.prepare("read_file", r#"{"path": "a""#).unwrap_err();
        assert_eq!(err.status(), ReceiptStatus::InvalidArguments);
        assert!(matches!(err, PrepareError::InvalidJson { .. }));
        let msg = err.to_string();
        assert!(msg.starts_with("arguments are not valid JSON: "), "{msg}");
        assert!(msg.contains("EOF while parsing"), "{msg}");
    }

    #[test]
    fn empty_arguments_mean_an_empty_object() {
        let reg = builtins();
        for raw in ["", "   ", "\n"] {
            let call = reg.prepare("list_dir", raw).unwrap();
            assert_eq!(call.arguments, json!({}));
            assert_eq!(call.input_fingerprint, fingerprint_arguments(&json!({})));
        }
        // ...which still has to satisfy the schema.
        let err = reg.prepare("read_file", "").unwrap_err();
        assert!(
            err.to_string().contains("\"path\" is a required property"),
            "{err}"
        );
    }

    #[test]
    fn non_object_arguments_are_refused() {
        let reg = builtins();
        for raw in ["[1]", "\"x\"", "null", "3"] {
            let err = reg.prepare("list_dir", raw).unwrap_err();
            assert!(matches!(err, PrepareError::SchemaViolation { .. }), "{raw}");
            assert_eq!(err.status(), ReceiptStatus::InvalidArguments);
            assert!(err.to_string().contains("must be a JSON object"), "{err}");
        }
    }

    #[test]
    fn schema_violation_lists_every_error_with_its_path() {
        let reg = builtins();
        let err = reg
            .prepare(
                "edit_file",
                r#"{"path": 3, "old_string": "a", "extra": true}"#,
            )
            .unwrap_err();
        let PrepareError::SchemaViolation { errors } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("/path: ") && e.contains("\"string\"")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("(root): ") && e.contains("new_string")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("(root): ") && e.contains("extra")),
            "{errors:?}"
        );
        assert!(err
            .to_string()
            .starts_with("arguments do not match the tool's schema: "));
    }

    #[test]
    fn long_schema_errors_are_cut() {
        let reg = builtins();
        let huge = "x".repeat(10_000);
        let err = reg
            .prepare("read_file", &json!({"path": [huge]}).to_string())
            .unwrap_err();
        assert!(err.to_string().len() < 1000, "{}", err.to_string().len());
    }

    #[test]
    fn fingerprint_is_stable_under_key_order() {
        let reg = builtins();
        let a = reg
            .prepare("write_file", r#"{"path": "a.txt", "content": "x"}"#)
            .unwrap();
        let b = reg
            .prepare("write_file", r#"{ "content" : "x", "path":"a.txt" }"#)
            .unwrap();
        assert_eq!(a.input_fingerprint, b.input_fingerprint);
        let c = reg
            .prepare("write_file", r#"{"path": "a.txt", "content": "y"}"#)
            .unwrap();
        assert_ne!(a.input_fingerprint, c.input_fingerprint);
        // Nested objects too, and the exact canonical form is pinned.
        let x: serde_json::Value =
            serde_json::from_str(r#"{"b": {"y": [2, {"q": 1, "p": "é"}], "x": 1}, "a": null}"#)
                .unwrap();
        assert_eq!(
            fingerprint_arguments(&x),
            fingerprint_of(r#"{"a":null,"b":{"x":1,"y":[2,{"p":"é","q":1}]}}"#)
        );
    }

    fn fingerprint_of(canonical: &str) -> String {
        sha256_hex(canonical.as_bytes())
    }

    #[tokio::test]
    async fn execute_ok_is_verified() {
        let reg = builtins();
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("f.txt"), "content").unwrap();
        let call = reg.prepare("read_file", r#"{"path": "f.txt"}"#).unwrap();
        let (out, receipt) = reg.execute("call-1", &call, &ctx).await;
        assert!(out.success);
        assert_eq!(out.output, "content");
        assert_eq!(receipt.call_id, "call-1");
        assert_eq!(receipt.tool_name, "read_file");
        assert_eq!(receipt.effect, EffectClass::Observe);
        assert_eq!(receipt.status, ReceiptStatus::Ok);
        assert_eq!(receipt.verification_status, VerificationStatus::Verified);
        assert!(receipt.is_satisfying());
        assert_eq!(receipt.input_fingerprint, call.input_fingerprint);
        assert_eq!(receipt.evidence, out.evidence);
        assert_eq!(receipt.evidence.size_bytes, Some(7));
        assert_eq!(receipt.error, None);
        assert!(receipt.finished_at >= receipt.started_at);
    }

    #[tokio::test]
    async fn execute_failure_is_an_error_receipt() {
        let reg = builtins();
        let (_dir, ctx) = context();
        let call = reg.prepare("read_file", r#"{"path": "../x"}"#).unwrap();
        let (out, receipt) = reg.execute("c", &call, &ctx).await;
        assert!(!out.success);
        assert_eq!(receipt.status, ReceiptStatus::Error);
        assert_eq!(
            receipt.verification_status,
            VerificationStatus::NotApplicable
        );
        assert_eq!(receipt.error.as_deref(), Some(out.output.as_str()));
        assert!(!receipt.is_satisfying());
    }

    #[tokio::test]
    async fn success_without_evidence_is_missing_evidence() {
        let out = ToolOutput {
            evidence_present: false,
            ..ToolOutput::ok("sent", Evidence::default())
        };
        let reg = ToolRegistry::new(vec![mock("send", Behaviour::Output(out))]).unwrap();
        let (_dir, ctx) = context();
        let call = reg.prepare("send", "{}").unwrap();
        let (out, receipt) = reg.execute("c", &call, &ctx).await;
        assert!(out.success);
        assert_eq!(receipt.status, ReceiptStatus::Ok);
        assert_eq!(
            receipt.verification_status,
            VerificationStatus::MissingEvidence
        );
        assert_eq!(receipt.effect, EffectClass::Deliver);
        assert!(!receipt.is_satisfying());
        assert_eq!(receipt.error, None);
    }

    #[tokio::test]
    async fn registry_timeout_gives_a_timeout_receipt() {
        let reg = ToolRegistry::new(vec![mock(
            "slow",
            Behaviour::Sleep(Duration::from_secs(10)),
        )])
        .unwrap();
        let (_dir, ctx) = context();
        let call = reg.prepare("slow", "").unwrap();
        let start = std::time::Instant::now();
        let (out, receipt) = reg.execute("c", &call, &ctx).await;
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(!out.success);
        assert!(out.timed_out);
        assert_eq!(out.output, "timed out after 100 ms");
        assert_eq!(receipt.status, ReceiptStatus::Timeout);
        assert_eq!(
            receipt.verification_status,
            VerificationStatus::NotApplicable
        );
        assert_eq!(receipt.error.as_deref(), Some("timed out after 100 ms"));
    }

    #[tokio::test]
    async fn tool_timeout_gives_a_timeout_receipt() {
        let (dir, ctx) = context();
        let cfg: CommandToolConfig = serde_json::from_value(json!({
            "name": "hang",
            "description": "hangs",
            "effect": "observe",
            "command": ["sleep", "30"],
            "timeout_ms": 150
        }))
        .unwrap();
        let tool = CommandTool::new(cfg, dir.path()).unwrap();
        let reg = ToolRegistry::new(vec![Arc::new(tool)]).unwrap();
        let call = reg.prepare("hang", "{}").unwrap();
        let (out, receipt) = reg.execute("c", &call, &ctx).await;
        assert_eq!(out.output, "timed out after 150 ms");
        assert_eq!(receipt.status, ReceiptStatus::Timeout);
    }

    #[tokio::test]
    async fn a_panicking_tool_is_an_error_not_a_crash() {
        let reg = ToolRegistry::new(vec![mock("bad", Behaviour::Panic)]).unwrap();
        let (_dir, ctx) = context();
        let call = reg.prepare("bad", "{}").unwrap();
        let (out, receipt) = reg.execute("c", &call, &ctx).await;
        assert!(!out.success);
        assert!(out.output.contains("panicked"));
        assert_eq!(receipt.status, ReceiptStatus::Error);
    }

    #[tokio::test]
    async fn output_and_receipt_error_are_capped() {
        let big = "e".repeat(200 * 1024);
        let reg = ToolRegistry::new(vec![
            mock(
                "loud",
                Behaviour::Output(ToolOutput::ok(big.clone(), Evidence::default())),
            ),
            mock("loudfail", Behaviour::Output(ToolOutput::error(big))),
        ])
        .unwrap();
        let (_dir, ctx) = context();
        let (out, _) = reg
            .execute("c", &reg.prepare("loud", "{}").unwrap(), &ctx)
            .await;
        assert!(out.output.len() < MODEL_OUTPUT_LIMIT + 100);
        assert!(out.output.contains("[truncated"));
        let (out, receipt) = reg
            .execute("c", &reg.prepare("loudfail", "{}").unwrap(), &ctx)
            .await;
        assert!(out.output.len() < MODEL_OUTPUT_LIMIT + 100);
        let error = receipt.error.unwrap();
        assert!(error.len() < RECEIPT_ERROR_LIMIT + 100);
        assert!(error.contains("[truncated"));
    }

    #[tokio::test]
    async fn dropping_execute_kills_the_command() {
        let reg = builtins();
        let (dir, ctx) = context();
        let call = reg
            .prepare("shell", r#"{"command": "sleep 1; touch marker"}"#)
            .unwrap();
        let cancelled =
            tokio::time::timeout(Duration::from_millis(200), reg.execute("c", &call, &ctx)).await;
        assert!(cancelled.is_err());
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !dir.path().join("marker").exists(),
            "the command outlived its call"
        );
    }

    #[test]
    fn refusal_receipts() {
        let reg = builtins();
        let raw = r#"{"command": "rm -rf /", "x": 1}"#;
        let r = reg.refusal_receipt(
            "c1",
            "shell",
            raw,
            ReceiptStatus::Denied,
            "denied by policy",
        );
        assert_eq!(r.call_id, "c1");
        assert_eq!(r.tool_name, "shell");
        assert_eq!(r.effect, EffectClass::Mutate);
        assert_eq!(r.status, ReceiptStatus::Denied);
        assert_eq!(r.started_at, r.finished_at);
        assert_eq!(r.verification_status, VerificationStatus::NotApplicable);
        assert_eq!(r.error.as_deref(), Some("denied by policy"));
        assert_eq!(r.evidence, Evidence::default());
        let reordered: serde_json::Value =
            serde_json::from_str(r#"{"x": 1, "command": "rm -rf /"}"#).unwrap();
        assert_eq!(r.input_fingerprint, fingerprint_arguments(&reordered));

        let r = reg.refusal_receipt("c2", "nope", "{bad", ReceiptStatus::UnknownTool, "unknown");
        assert_eq!(r.effect, EffectClass::Observe);
        assert_eq!(r.status, ReceiptStatus::UnknownTool);
        assert_eq!(r.input_fingerprint, sha256_hex(b"{bad"));

        let r = reg.refusal_receipt("c3", "grep", "", ReceiptStatus::Interrupted, "cancelled");
        assert_eq!(r.input_fingerprint, fingerprint_arguments(&json!({})));
        assert_eq!(r.status, ReceiptStatus::Interrupted);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(120)), "120 s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1500 ms");
    }
}
