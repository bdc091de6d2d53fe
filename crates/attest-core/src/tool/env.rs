//! The environment tools' child processes get (SPEC F14): an allow list
//! plus the names the user passes through, never the whole environment of
//! the harness (where API keys and cloud credentials live).

use std::ffi::{OsStr, OsString};
use std::sync::Arc;

/// Variables every tool process gets when the harness has them.
pub const ALLOWED_VARS: [&str; 7] = ["PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER", "SHELL"];

/// True for the allow list: [`ALLOWED_VARS`] and the locale's `LC_*`.
pub fn is_allowed(name: &str) -> bool {
    ALLOWED_VARS.contains(&name) || name.starts_with("LC_")
}

/// The variables tool processes run with, fixed for a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolEnv {
    vars: Arc<Vec<(OsString, OsString)>>,
}

impl ToolEnv {
    /// From `vars` (the harness's environment), the allowed ones and those
    /// named in `passthrough` (`NAME`, or `PREFIX_*` for a family).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        passthrough: &[String],
    ) -> Self {
        let passed = |name: &str| {
            passthrough.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => !prefix.is_empty() && name.starts_with(prefix),
                None => p == name,
            })
        };
        let mut kept: Vec<(OsString, OsString)> = vars
            .into_iter()
            .filter(|(name, _)| name.to_str().is_some_and(|n| is_allowed(n) || passed(n)))
            .collect();
        kept.sort();
        ToolEnv {
            vars: Arc::new(kept),
        }
    }

    /// Only a `PATH` of the usual system directories: what a tool process
    /// gets when the front end passes no environment (an embedder's engine,
    /// tests). The CLI passes its own environment through [`Self::from_vars`].
    pub fn minimal() -> Self {
        Self::from_vars(
            [(
                OsString::from("PATH"),
                OsString::from("/usr/local/bin:/usr/bin:/bin"),
            )],
            &[],
        )
    }

    pub fn vars(&self) -> &[(OsString, OsString)] {
        &self.vars
    }

    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// Replaces `cmd`'s environment with these variables, less `hidden`.
    pub fn apply(&self, cmd: &mut tokio::process::Command, hidden: &[String]) {
        cmd.env_clear();
        for (name, value) in self.vars.iter() {
            if !hidden.iter().any(|h| h.as_str() == name) {
                cmd.env(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_the_allow_list_and_the_pass_through_names_are_kept() {
        let env = ToolEnv::from_vars(
            vars(&[
                ("PATH", "/usr/bin"),
                ("HOME", "/home/u"),
                ("LC_ALL", "C"),
                ("AWS_SECRET_ACCESS_KEY", "canary"),
                ("GITHUB_TOKEN", "canary"),
                ("LD_PRELOAD", "/x.so"),
                ("CARGO_HOME", "/c"),
                ("CARGO_TARGET_DIR", "/t"),
                ("MY_TOOL_URL", "http://x"),
            ]),
            &[
                "MY_TOOL_URL".to_string(),
                "CARGO_*".to_string(),
                "*".to_string(),
            ],
        );
        let names: Vec<&str> = env
            .vars()
            .iter()
            .map(|(n, _)| n.to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "CARGO_HOME",
                "CARGO_TARGET_DIR",
                "HOME",
                "LC_ALL",
                "MY_TOOL_URL",
                "PATH"
            ]
        );
        assert_eq!(env.get("PATH"), Some(OsStr::new("/usr/bin")));
        assert_eq!(env.get("GITHUB_TOKEN"), None);
    }

    #[tokio::test]
    async fn a_child_sees_nothing_else() {
        let env = ToolEnv::from_vars(
            vars(&[("PATH", "/usr/bin:/bin"), ("KEEP", "1"), ("API_KEY", "k")]),
            &["KEEP".to_string(), "API_KEY".to_string()],
        );
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "env"]);
        env.apply(&mut cmd, &["API_KEY".to_string()]);
        let out = cmd.output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once('=').map(|(n, _)| n))
            .filter(|n| !matches!(*n, "PWD" | "SHLVL" | "_" | "OLDPWD"))
            .collect();
        assert_eq!(names.len(), 2, "{text}");
        assert!(
            text.contains("KEEP=1") && text.contains("PATH=/usr/bin:/bin"),
            "{text}"
        );
        assert!(
            !text.contains("API_KEY"),
            "hidden wins over pass-through: {text}"
        );
    }
}
