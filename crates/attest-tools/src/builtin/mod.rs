//! The built-in workspace tools. Each lives in its own file; this module
//! holds what they share: spec construction, argument decoding and the
//! "observed absence" result.

mod edit_file;
mod grep;
mod list_dir;
mod read_file;
mod shell;
mod write_file;

use crate::{Sandbox, Tool, ToolOutput, Workspace, WorkspaceError};
use attest_protocol::Evidence;
use std::path::Path;
use std::sync::Arc;

pub(crate) use attest_core::tool::{decode_args as parse_args, OUTPUT_LIMIT};

/// The built-in tools, in the order they are offered to the model. `shell`
/// runs its commands in `sandbox` (unconfined when `None`).
pub fn builtin_tools(sandbox: Option<Arc<Sandbox>>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(read_file::ReadFile::new()),
        Arc::new(list_dir::ListDir::new()),
        Arc::new(grep::Grep::new()),
        Arc::new(write_file::WriteFile::new()),
        Arc::new(edit_file::EditFile::new()),
        Arc::new(shell::Shell::new(sandbox)),
    ]
}

/// A successful observation that `what` does not exist at `resolved`.
fn absence(what: &str, workspace: &Workspace, resolved: &Path) -> ToolOutput {
    let rel = workspace.display(resolved);
    ToolOutput::ok(
        format!("{what} not found: {rel}"),
        Evidence {
            path: Some(rel),
            absent: Some(true),
            ..Evidence::default()
        },
    )
}

/// Resolves a path that should exist; a missing one becomes an observed
/// absence and anything else an error result, both as the `Err` output.
fn resolve_observed(
    workspace: &Workspace,
    rel: &str,
    what: &str,
) -> Result<std::path::PathBuf, Box<ToolOutput>> {
    match workspace.resolve_existing(rel) {
        Ok(path) => Ok(path),
        Err(WorkspaceError::NotFound { resolved, .. }) => {
            Err(Box::new(absence(what, workspace, &resolved)))
        }
        Err(e) => Err(Box::new(ToolOutput::error(e.to_string()))),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::{ToolContext, Workspace};

    pub(crate) fn context() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        (dir, ToolContext::new(workspace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{EffectClass, Permission};

    #[test]
    fn tools_are_offered_in_a_fixed_order_with_strict_schemas() {
        let tools = builtin_tools(None);
        let names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
        assert_eq!(
            names,
            [
                "read_file",
                "list_dir",
                "grep",
                "write_file",
                "edit_file",
                "shell"
            ]
        );
        for tool in &tools {
            let spec = tool.spec();
            let p = &spec.parameters;
            assert_eq!(p["type"], "object", "{}", spec.name);
            assert!(p["properties"].is_object(), "{}", spec.name);
            assert!(p["required"].is_array(), "{}", spec.name);
            assert_eq!(p["additionalProperties"], false, "{}", spec.name);
            assert!(jsonschema::validator_for(p).is_ok(), "{}", spec.name);
            assert!(!spec.description.is_empty());
        }
    }

    #[test]
    fn effects_and_permissions() {
        let tools = builtin_tools(None);
        let got: Vec<(EffectClass, Permission)> = tools
            .iter()
            .map(|t| (t.spec().effect, t.default_permission()))
            .collect();
        use EffectClass::*;
        use Permission::*;
        assert_eq!(
            got,
            [
                (Observe, Allow),
                (Observe, Allow),
                (Observe, Allow),
                (Mutate, Ask),
                (Mutate, Ask),
                (Mutate, Ask),
            ]
        );
    }

    #[test]
    fn specs_serialize_deterministically() {
        let a = serde_json::to_string(
            &builtin_tools(None)
                .iter()
                .map(|t| t.spec().clone())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let b = serde_json::to_string(
            &builtin_tools(None)
                .iter()
                .map(|t| t.spec().clone())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(a, b);
    }
}
