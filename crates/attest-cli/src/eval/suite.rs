//! The suite file (YAML): cases, each with a prompt, a workspace fixture, a
//! contract, tools, a model (a script, a recorded run, or the eval's
//! provider) and expectations. Loading validates everything a run would
//! trip over later and names the file, the case and the field of each
//! problem. The format is documented in `docs/eval.md`.

use super::boundary::serve::{fixture_tool_names, fixture_tools};
use super::boundary::BoundaryCaseFixture;
use super::group::Group;
use super::record::ToolCallRecord;
use attest::providers::scripted::ScriptedResponse;
use attest::tools::{CommandTool, CommandToolConfig};
use attest_protocol::{CompletionContract, ContractKind, TerminalState};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// A loaded, validated suite.
#[derive(Debug, Clone)]
pub struct Suite {
    pub name: String,
    pub description: Option<String>,
    /// The file as given on the command line.
    pub path: PathBuf,
    /// sha256 over the suite file and every file it references, in load
    /// order: a resumed eval must run the same suite.
    pub sha256: String,
    /// Attempts per case and group unless `--repeat` says otherwise.
    pub repeat: u32,
    /// Groups unless `--groups` says otherwise.
    pub groups: Vec<Group>,
    pub cases: Vec<Arc<Case>>,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub prompt: String,
    pub workspace: WorkspaceFixture,
    pub contract: CompletionContract,
    /// Built-in tools offered, by name.
    pub builtin_tools: Vec<String>,
    /// Command tools from the suite, in the `[[tools]]` shape of `attest.toml`.
    pub tools: Vec<CommandToolConfig>,
    pub protocol: Protocol,
    pub model: CaseModel,
    pub max_steps: Option<u32>,
    pub boundary: Option<BoundaryCase>,
    pub expect: Expectations,
}

/// The boundary fixture of a case and where it lives (outside any
/// attempt's workspace).
#[derive(Debug, Clone)]
pub struct BoundaryCase {
    pub path: PathBuf,
    pub fixture: BoundaryCaseFixture,
}

/// Files an attempt's fresh workspace starts with: a copy of `dir`, then
/// `files` written over it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspaceFixture {
    pub dir: Option<PathBuf>,
    pub files: BTreeMap<String, String>,
}

/// How tools are offered: native tool calling, the text (ReAct) protocol,
/// or whatever the provider supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    #[default]
    Auto,
    Native,
    Text,
}

/// Where an attempt's model responses come from.
#[derive(Debug, Clone)]
pub enum CaseModel {
    /// The eval's `--provider`.
    Provider,
    /// A script in `attest::providers::scripted`'s format; `per_attempt`
    /// replaces it for the attempts it names (0-based).
    Scripted {
        default: Vec<ScriptedResponse>,
        per_attempt: BTreeMap<u32, Vec<ScriptedResponse>>,
    },
    /// A recorded run's raw model outputs, replayed through today's engine.
    Replay { run_id: String },
}

impl CaseModel {
    /// The script attempt `attempt` replays, if this is a scripted model.
    pub fn script_for(&self, attempt: u32) -> Option<&[ScriptedResponse]> {
        match self {
            CaseModel::Scripted {
                default,
                per_attempt,
            } => Some(per_attempt.get(&attempt).unwrap_or(default)),
            _ => None,
        }
    }
}

/// What an attempt must do to pass.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// Terminal states that count as a pass (default: `completed`).
    #[serde(default = "default_states")]
    pub states: Vec<TerminalState>,
    /// Calls that must appear (name, and a subset of the arguments).
    #[serde(default)]
    pub required_calls: Vec<CallPattern>,
    /// Calls that must not appear.
    #[serde(default)]
    pub forbidden_calls: Vec<CallPattern>,
    /// The run is started with `require_grounding` and must come out with
    /// every checkable value grounded.
    #[serde(default)]
    pub require_grounding: bool,
    /// The known answer: each of these appears in the run's answer
    /// (case-insensitive).
    #[serde(default)]
    pub answer_contains: Vec<String>,
}

fn default_states() -> Vec<TerminalState> {
    vec![TerminalState::Completed]
}

impl Default for Expectations {
    fn default() -> Self {
        Expectations {
            states: default_states(),
            required_calls: Vec::new(),
            forbidden_calls: Vec::new(),
            require_grounding: false,
            answer_contains: Vec::new(),
        }
    }
}

/// A tool call by name, with an optional subset of its arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallPattern {
    pub name: String,
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
}

impl CallPattern {
    /// Same name, and every given argument present with an equal value
    /// (objects compared as subsets, recursively; everything else exactly).
    pub fn matches(&self, call: &ToolCallRecord) -> bool {
        if call.name != self.name {
            return false;
        }
        match &self.arguments {
            None => true,
            Some(expected) => contains(
                &call.arguments,
                &serde_json::Value::Object(expected.clone()),
            ),
        }
    }
}

fn contains(actual: &serde_json::Value, expected: &serde_json::Value) -> bool {
    match (actual, expected) {
        (serde_json::Value::Object(a), serde_json::Value::Object(e)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| contains(av, ev))),
        (a, e) => a == e,
    }
}

impl fmt::Display for CallPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.arguments {
            None => write!(f, "{}", self.name),
            Some(a) => write!(f, "{}({})", self.name, serde_json::Value::Object(a.clone())),
        }
    }
}

impl Case {
    /// Every command tool of an attempt: the suite's, then the boundary
    /// fixture's data tools, which run `attest_exe`.
    pub fn command_tools(&self, attest_exe: &Path) -> Vec<CommandToolConfig> {
        let mut tools = self.tools.clone();
        if let Some(b) = &self.boundary {
            tools.extend(fixture_tools(&b.path, attest_exe));
        }
        tools
    }

    /// The names of every tool offered.
    pub fn tool_names(&self) -> Vec<String> {
        let mut names = self.builtin_tools.clone();
        names.extend(self.tools.iter().map(|t| t.name.clone()));
        if self.boundary.is_some() {
            names.extend(fixture_tool_names().map(str::to_string));
        }
        names
    }
}

/// A problem with a suite: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SuiteError {
    pub file: PathBuf,
    pub case: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for SuiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(case) = &self.case {
            write!(f, ": case `{case}`")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// 1 to 64 letters, digits, `_`, `-` or `.`, not starting with `.`: safe as
/// a directory name.
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    suite: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    repeat: Option<u32>,
    #[serde(default)]
    groups: Option<Vec<Group>>,
    #[serde(default)]
    max_steps: Option<u32>,
    cases: Vec<CaseFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    id: String,
    prompt: String,
    #[serde(default)]
    workspace: WorkspaceFile,
    #[serde(default)]
    contract: ContractKind,
    #[serde(default)]
    required_tools: Vec<String>,
    #[serde(default)]
    builtin_tools: Option<Vec<String>>,
    #[serde(default)]
    tools: Vec<CommandToolConfig>,
    #[serde(default)]
    protocol: Protocol,
    #[serde(default)]
    model: Option<ModelFile>,
    #[serde(default)]
    max_steps: Option<u32>,
    #[serde(default)]
    boundary: Option<PathBuf>,
    #[serde(default)]
    expect: Expectations,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceFile {
    #[serde(default)]
    dir: Option<PathBuf>,
    #[serde(default)]
    files: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    #[serde(default)]
    script: Option<Vec<ScriptedResponse>>,
    #[serde(default)]
    script_file: Option<PathBuf>,
    #[serde(default)]
    attempt_scripts: BTreeMap<u32, Vec<ScriptedResponse>>,
    #[serde(default)]
    replay: Option<String>,
}

/// A script file: a list of responses or `{responses: [...]}`, as
/// `--provider scripted --script` reads it.
#[derive(Deserialize)]
#[serde(untagged)]
enum ScriptFile {
    List(Vec<ScriptedResponse>),
    Wrapped { responses: Vec<ScriptedResponse> },
}

struct Loader {
    file: PathBuf,
    dir: PathBuf,
    hasher: Sha256,
}

impl Loader {
    fn err(
        &self,
        case: Option<&str>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> SuiteError {
        SuiteError {
            file: self.file.clone(),
            case: case.map(str::to_string),
            field: field.map(str::to_string),
            message: message.into(),
        }
    }

    /// A referenced path, relative to the suite's directory; it must exist.
    fn resolve(&self, case: &str, field: &str, rel: &Path) -> Result<PathBuf, SuiteError> {
        let path = self.dir.join(rel);
        if !path.exists() {
            return Err(self.err(
                Some(case),
                Some(field),
                format!("{} does not exist", path.display()),
            ));
        }
        Ok(path)
    }

    fn read(&mut self, case: &str, field: &str, path: &Path) -> Result<String, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            self.err(
                Some(case),
                Some(field),
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        self.hasher.update(path.display().to_string().as_bytes());
        self.hasher.update(text.as_bytes());
        Ok(text)
    }
}

/// Turn a serde_yaml_ng message (`cases[2].expect.states[0]: unknown
/// variant …`) into case and field.
fn serde_error(loader: &Loader, text: &str, err: serde_yaml_ng::Error) -> SuiteError {
    let message = err.to_string();
    let (path, rest) = match message.split_once(": ") {
        Some((p, rest))
            if !p.is_empty()
                && p.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '-')
                }) =>
        {
            (Some(p.to_string()), rest.to_string())
        }
        _ => (None, message.clone()),
    };
    let Some(path) = path else {
        return loader.err(None, None, rest);
    };
    let case_index = path
        .strip_prefix("cases[")
        .and_then(|p| p.split_once(']'))
        .and_then(|(i, tail)| Some((i.parse::<usize>().ok()?, tail.trim_start_matches('.'))));
    match case_index {
        Some((i, field)) => {
            let id = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text)
                .ok()
                .and_then(|v| {
                    v.get("cases")?
                        .get(i)?
                        .get("id")?
                        .as_str()
                        .map(str::to_string)
                })
                .unwrap_or_else(|| format!("cases[{i}]"));
            let field = (!field.is_empty()).then_some(field);
            loader.err(Some(&id), field, rest)
        }
        None => loader.err(None, Some(&path), rest),
    }
}

fn check_relative(rel: &str) -> Result<(), String> {
    let path = Path::new(rel);
    if rel.is_empty() || path.is_absolute() {
        return Err(format!(
            "`{rel}` must be a relative path inside the workspace"
        ));
    }
    for c in path.components() {
        match c {
            Component::Normal(part) if part == ".attest" => {
                return Err(format!("`{rel}`: `.attest/` belongs to the harness"))
            }
            Component::Normal(_) | Component::CurDir => {}
            _ => return Err(format!("`{rel}` must not leave the workspace (`..`)")),
        }
    }
    Ok(())
}

fn builtin_names() -> Vec<String> {
    attest::tools::builtin_tools(None)
        .iter()
        .map(|t| t.spec().name.clone())
        .collect()
}

impl Suite {
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|e| SuiteError {
            file: path.to_path_buf(),
            case: None,
            field: None,
            message: format!("cannot read the suite: {e}"),
        })?;
        let dir = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."));
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let mut loader = Loader {
            file: path.to_path_buf(),
            dir,
            hasher: Sha256::new(),
        };
        loader.hasher.update(text.as_bytes());
        let file: SuiteFile =
            serde_yaml_ng::from_str(&text).map_err(|e| serde_error(&loader, &text, e))?;
        Self::build(&mut loader, file)
    }

    fn build(loader: &mut Loader, file: SuiteFile) -> Result<Suite, SuiteError> {
        if file.suite.trim().is_empty() {
            return Err(loader.err(None, Some("suite"), "give the suite a name"));
        }
        let repeat = file.repeat.unwrap_or(1);
        if repeat == 0 {
            return Err(loader.err(None, Some("repeat"), "must be at least 1"));
        }
        let groups = file.groups.unwrap_or_else(|| Group::ALL.to_vec());
        if groups.is_empty() {
            return Err(loader.err(None, Some("groups"), "name at least one group"));
        }
        let mut seen_groups = BTreeSet::new();
        for g in &groups {
            if !seen_groups.insert(*g) {
                return Err(loader.err(None, Some("groups"), format!("`{g}` is listed twice")));
            }
        }
        if file.cases.is_empty() {
            return Err(loader.err(None, Some("cases"), "the suite has no cases"));
        }
        if file.max_steps == Some(0) {
            return Err(loader.err(None, Some("max_steps"), "must be at least 1"));
        }
        let builtins = builtin_names();
        let mut ids = BTreeSet::new();
        let mut cases = Vec::new();
        for c in file.cases {
            if !valid_id(&c.id) {
                return Err(loader.err(
                    Some(&c.id),
                    Some("id"),
                    "use 1 to 64 letters, digits, `_`, `-` or `.` (it names a directory)",
                ));
            }
            if !ids.insert(c.id.clone()) {
                return Err(loader.err(Some(&c.id), Some("id"), "two cases have this id"));
            }
            let case = Self::build_case(loader, c, &builtins, file.max_steps)?;
            cases.push(Arc::new(case));
        }
        let sha256 = hex::encode(loader.hasher.clone().finalize());
        Ok(Suite {
            name: file.suite,
            description: file.description,
            path: loader.file.clone(),
            sha256,
            repeat,
            groups,
            cases,
        })
    }

    fn build_case(
        loader: &mut Loader,
        c: CaseFile,
        builtins: &[String],
        suite_max_steps: Option<u32>,
    ) -> Result<Case, SuiteError> {
        let id = c.id.as_str();
        let err = |l: &Loader, field: &str, msg: String| l.err(Some(id), Some(field), msg);
        if c.prompt.trim().is_empty() {
            return Err(err(loader, "prompt", "the prompt is empty".into()));
        }
        if c.max_steps == Some(0) {
            return Err(err(loader, "max_steps", "must be at least 1".into()));
        }

        let dir = match &c.workspace.dir {
            Some(rel) => {
                let path = loader.resolve(id, "workspace.dir", rel)?;
                if !path.is_dir() {
                    return Err(err(
                        loader,
                        "workspace.dir",
                        format!("{} is not a directory", path.display()),
                    ));
                }
                Some(path)
            }
            None => None,
        };
        for name in c.workspace.files.keys() {
            check_relative(name).map_err(|m| err(loader, &format!("workspace.files.{name}"), m))?;
        }

        let builtin_tools = c.builtin_tools.unwrap_or_else(|| builtins.to_vec());
        for (i, name) in builtin_tools.iter().enumerate() {
            if !builtins.contains(name) {
                return Err(err(
                    loader,
                    &format!("builtin_tools[{i}]"),
                    format!(
                        "unknown built-in tool `{name}` (known: {})",
                        builtins.join(", ")
                    ),
                ));
            }
        }
        for (i, tool) in c.tools.iter().enumerate() {
            CommandTool::new(tool.clone(), &loader.dir)
                .map_err(|e| err(loader, &format!("tools[{i}]"), e.to_string()))?;
        }

        let boundary = match &c.boundary {
            Some(rel) => {
                let path = loader.resolve(id, "boundary", rel)?;
                let text = loader.read(id, "boundary", &path)?;
                let fixture = BoundaryCaseFixture::from_yaml(&text)
                    .map_err(|m| err(loader, "boundary", format!("{}: {m}", path.display())))?;
                Some(BoundaryCase { path, fixture })
            }
            None => None,
        };

        let model = Self::build_model(loader, id, c.model)?;

        let mut case = Case {
            id: c.id.clone(),
            prompt: c.prompt,
            workspace: WorkspaceFixture {
                dir,
                files: c.workspace.files,
            },
            contract: CompletionContract {
                kind: c.contract,
                required_tools: c.required_tools,
            },
            builtin_tools,
            tools: c.tools,
            protocol: c.protocol,
            model,
            max_steps: c.max_steps.or(suite_max_steps),
            boundary,
            expect: c.expect,
        };

        let offered = case.tool_names();
        let mut unique = BTreeSet::new();
        for name in &offered {
            if !unique.insert(name.as_str()) {
                return Err(err(
                    loader,
                    "tools",
                    format!("two tools are named `{name}`"),
                ));
            }
        }
        for (i, name) in case.contract.required_tools.iter().enumerate() {
            if !offered.contains(name) {
                return Err(err(
                    loader,
                    &format!("required_tools[{i}]"),
                    format!(
                        "`{name}` is not among the case's tools ({})",
                        offered.join(", ")
                    ),
                ));
            }
        }
        for (i, call) in case.expect.required_calls.iter().enumerate() {
            if !offered.contains(&call.name) {
                return Err(err(
                    loader,
                    &format!("expect.required_calls[{i}]"),
                    format!("`{}` is not among the case's tools", call.name),
                ));
            }
        }
        if case.expect.states.is_empty() {
            return Err(err(
                loader,
                "expect.states",
                "name at least one terminal state".into(),
            ));
        }
        case.expect.states.dedup();
        Ok(case)
    }

    fn build_model(
        loader: &mut Loader,
        id: &str,
        model: Option<ModelFile>,
    ) -> Result<CaseModel, SuiteError> {
        let Some(m) = model else {
            return Ok(CaseModel::Provider);
        };
        let given = [
            m.script.is_some(),
            m.script_file.is_some(),
            m.replay.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if given != 1 {
            return Err(loader.err(
                Some(id),
                Some("model"),
                "give exactly one of `script`, `script_file` or `replay` (or leave `model` out to use --provider)",
            ));
        }
        if let Some(run_id) = m.replay {
            if !m.attempt_scripts.is_empty() {
                return Err(loader.err(
                    Some(id),
                    Some("model.attempt_scripts"),
                    "a replayed run has no scripts to replace",
                ));
            }
            if run_id.trim().is_empty() {
                return Err(loader.err(Some(id), Some("model.replay"), "the run id is empty"));
            }
            return Ok(CaseModel::Replay { run_id });
        }
        let default = match (m.script, m.script_file) {
            (Some(script), _) => script,
            (None, Some(rel)) => {
                let path = loader.resolve(id, "model.script_file", &rel)?;
                let text = loader.read(id, "model.script_file", &path)?;
                let parsed: ScriptFile = serde_yaml_ng::from_str(&text).map_err(|e| {
                    loader.err(
                        Some(id),
                        Some("model.script_file"),
                        format!("{}: not a script ({e})", path.display()),
                    )
                })?;
                match parsed {
                    ScriptFile::List(r) | ScriptFile::Wrapped { responses: r } => r,
                }
            }
            (None, None) => unreachable!("exactly one source was checked above"),
        };
        if default.is_empty() {
            return Err(loader.err(
                Some(id),
                Some("model.script"),
                "the script has no responses",
            ));
        }
        for (attempt, script) in &m.attempt_scripts {
            if script.is_empty() {
                return Err(loader.err(
                    Some(id),
                    Some(&format!("model.attempt_scripts.{attempt}")),
                    "the script has no responses",
                ));
            }
        }
        Ok(CaseModel::Scripted {
            default,
            per_attempt: m.attempt_scripts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    const SUITE: &str = r#"
suite: demo
repeat: 3
groups: [baseline, full]
cases:
  - id: read-port
    prompt: What port does config.toml set?
    workspace:
      files: {config.toml: "port = 8080\n"}
    contract: observe
    required_tools: [read_file]
    builtin_tools: [read_file, grep]
    model:
      script:
        - tool_calls: [{name: read_file, arguments: {path: config.toml}}]
        - text: The port is 8080.
      attempt_scripts:
        2:
          - text: The port is 8080.
    expect:
      states: [completed]
      required_calls: [{name: read_file, arguments: {path: config.toml}}]
      forbidden_calls: [{name: shell}]
"#;

    fn load(text: &str) -> Result<Suite, SuiteError> {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "suite.yaml", text);
        Suite::load(&path)
    }

    #[test]
    fn loads_a_suite() {
        let s = load(SUITE).unwrap();
        assert_eq!(s.name, "demo");
        assert_eq!(s.repeat, 3);
        assert_eq!(s.groups, [Group::Baseline, Group::Full]);
        let c = &s.cases[0];
        assert_eq!(c.contract.kind, ContractKind::Observe);
        assert_eq!(c.tool_names(), ["read_file", "grep"]);
        assert_eq!(c.workspace.files["config.toml"], "port = 8080\n");
        assert_eq!(c.model.script_for(0).unwrap().len(), 2);
        assert_eq!(c.model.script_for(2).unwrap().len(), 1);
        assert_eq!(c.expect.states, [TerminalState::Completed]);
        assert_eq!(s.sha256.len(), 64);
    }

    #[test]
    fn defaults() {
        let s = load("suite: d\ncases:\n  - id: a\n    prompt: hi\n").unwrap();
        assert_eq!(s.repeat, 1);
        assert_eq!(s.groups, Group::ALL);
        let c = &s.cases[0];
        assert!(matches!(c.model, CaseModel::Provider));
        assert_eq!(c.builtin_tools, builtin_names());
        assert_eq!(c.expect, Expectations::default());
        assert_eq!(c.contract, CompletionContract::default());
    }

    fn error_of(text: &str) -> SuiteError {
        load(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_case_and_field() {
        let e = error_of(&SUITE.replace("states: [completed]", "states: [complete]"));
        assert_eq!(e.case.as_deref(), Some("read-port"), "{e}");
        assert_eq!(e.field.as_deref(), Some("expect.states[0]"), "{e}");
        assert!(e.message.contains("unknown variant `complete`"), "{e}");
        assert!(
            e.to_string()
                .contains("suite.yaml: case `read-port`: field `expect.states[0]`"),
            "{e}"
        );

        let e = error_of(&SUITE.replace("    prompt:", "    promt:"));
        assert_eq!(e.case.as_deref(), Some("read-port"), "{e}");
        assert!(e.message.contains("promt"), "{e}");

        let e = error_of(&SUITE.replace(
            "builtin_tools: [read_file, grep]",
            "builtin_tools: [read_fil]",
        ));
        assert_eq!(e.field.as_deref(), Some("builtin_tools[0]"), "{e}");
        assert!(
            e.message.contains("unknown built-in tool `read_fil`"),
            "{e}"
        );

        let e = error_of(&SUITE.replace("required_tools: [read_file]", "required_tools: [send]"));
        assert_eq!(e.field.as_deref(), Some("required_tools[0]"), "{e}");

        let e = error_of(&SUITE.replace("config.toml: \"port", "../x: \"port"));
        assert_eq!(e.field.as_deref(), Some("workspace.files.../x"), "{e}");
        assert!(e.message.contains("must not leave the workspace"), "{e}");

        let e = error_of(&SUITE.replace(
            "- text: The port is 8080.\n      attempt",
            "- txt: The port is 8080.\n      attempt",
        ));
        assert_eq!(e.case.as_deref(), Some("read-port"), "{e}");
        assert!(
            e.field.as_deref().unwrap().starts_with("model.script"),
            "{e}"
        );

        let e =
            error_of(&SUITE.replace("groups: [baseline, full]", "groups: [baseline, baseline]"));
        assert_eq!(e.field.as_deref(), Some("groups"), "{e}");
        assert_eq!(e.case, None);

        let e = error_of(&SUITE.replace("id: read-port", "id: ../up"));
        assert_eq!(e.field.as_deref(), Some("id"), "{e}");

        let e = error_of(&format!("{SUITE}  - id: read-port\n    prompt: again\n"));
        assert!(e.message.contains("two cases"), "{e}");

        let e = error_of(&SUITE.replace("      script:\n", "      replay: run_1\n      script:\n"));
        assert_eq!(e.field.as_deref(), Some("model"), "{e}");

        let e =
            error_of("suite: x\ncases:\n  - id: a\n    prompt: p\n    workspace: {dir: nowhere}\n");
        assert_eq!(e.field.as_deref(), Some("workspace.dir"), "{e}");
        assert!(e.message.contains("does not exist"), "{e}");

        let e = error_of("suite: x\ncases:\n  - id: a\n    prompt: p\n    tools:\n      - {name: 'bad name', description: d, effect: observe, command: [x]}\n");
        assert_eq!(e.field.as_deref(), Some("tools[0]"), "{e}");
        assert!(e.message.contains("invalid tool name"), "{e}");

        let e = error_of("suite: x\ncases: []\n");
        assert_eq!(e.field.as_deref(), Some("cases"), "{e}");
    }

    #[test]
    fn a_boundary_case_gets_its_data_tools() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "fx/f.yaml",
            "id: f\nmarket_identity: {symbol: X}\nscenario_tags: [stale_quote]\nprovided_context: {}\n",
        );
        let path = write(
            dir.path(),
            "suite.yaml",
            "suite: b\ncases:\n  - id: a\n    prompt: p\n    builtin_tools: []\n    boundary: fx/f.yaml\n    required_tools: [get_quote]\n",
        );
        let s = Suite::load(&path).unwrap();
        let c = &s.cases[0];
        assert_eq!(
            c.tool_names(),
            ["get_quote", "get_news", "get_financials", "get_technicals"]
        );
        let tools = c.command_tools(Path::new("/usr/bin/attest"));
        assert_eq!(tools[0].command[0], "/usr/bin/attest");
        assert!(Path::new(&tools[0].command[3]).is_absolute());
        // The fixture is part of the digest.
        let before = s.sha256.clone();
        write(
            dir.path(),
            "fx/f.yaml",
            "id: f\nmarket_identity: {symbol: Y}\nscenario_tags: [stale_quote]\nprovided_context: {}\n",
        );
        assert_ne!(Suite::load(&path).unwrap().sha256, before);

        write(
            dir.path(),
            "fx/bad.yaml",
            "id: f\nmarket_identity: {}\nscenario_tags: [nope]\nprovided_context: {}\n",
        );
        let bad = write(
            dir.path(),
            "bad.yaml",
            "suite: b\ncases:\n  - id: a\n    prompt: p\n    boundary: fx/bad.yaml\n",
        );
        let e = Suite::load(&bad).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("boundary"), "{e}");
        assert!(e.message.contains("scenario_tags[0]"), "{e}");
    }

    #[test]
    fn call_patterns_match_argument_subsets() {
        let call = ToolCallRecord {
            call_id: "c1".into(),
            name: "scan_term".into(),
            arguments: json!({"term": "MCP", "opts": {"case": false, "limit": 3}}),
        };
        let p = |v: serde_json::Value| CallPattern {
            name: "scan_term".into(),
            arguments: v.as_object().cloned(),
        };
        assert!(p(json!({"term": "MCP"})).matches(&call));
        assert!(p(json!({"opts": {"case": false}})).matches(&call));
        assert!(!p(json!({"term": "mcp"})).matches(&call));
        assert!(!p(json!({"missing": 1})).matches(&call));
        assert!(CallPattern {
            name: "scan_term".into(),
            arguments: None
        }
        .matches(&call));
        assert!(!CallPattern {
            name: "grep".into(),
            arguments: None
        }
        .matches(&call));
    }
}
