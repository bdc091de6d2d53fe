//! The permission policy (SPEC F2): `allow | ask | deny` per tool and per
//! argument pattern, from config, over built-in defaults.
//!
//! How a call is decided:
//! 1. The fallback: the tool's entry in config (`tool = "ask"` or its
//!    `default`), else the config `default`, else the tool's own default.
//! 2. Rules: the tool's config rules, plus for `shell` the built-in rules
//!    (see `builtin.rs`). A `shell` command is split into the simple
//!    commands it runs (`a && b`, pipes, `$(…)`, `sh -c "…"`, …) and each is
//!    judged on its own words; other tools match the argument's text.
//! 3. Among the rules that match, the most specific wins (most literal
//!    characters); at equal specificity deny beats allow beats ask. No
//!    match: the fallback.
//! 4. A command's decision is its most dangerous part's (deny > ask >
//!    allow). A command that cannot be parsed, or whose program is computed
//!    at run time, is asked at least.
//! 5. Allow rules match only the command as it runs (`rm` in
//!    `timeout 5 rm x`, by its full path); deny and ask rules also match it
//!    as written and by the program's base name, so `/bin/sudo` is `sudo`.
//! 6. Tools marked with [`PermissionPolicy::require_approval_for`] (the
//!    shell when there is no sandbox) never get more than ask.
//! 7. Whatever the rules say, a part is asked at least when the policy
//!    cannot see what it runs: a program read from its input (`… | sh`,
//!    `sh <<EOF`), a variable assignment that changes what runs
//!    (`PATH=. ls`, `LD_PRELOAD=…`, `GIT_*`), or a git command in a
//!    repository whose own config or hooks name programs
//!    (`core.fsmonitor`, `diff.external`, …; see `git_config.rs`).

mod builtin;
mod config;
mod git_config;
mod glob;
mod read_only;
mod shell;
#[cfg(test)]
mod shell_battery;

pub use config::{PermissionRule, PermissionsConfig, ToolPermission, ToolRules};
pub use read_only::ShellContext;

use attest_protocol::Permission;
use glob::Glob;
use serde::{Deserialize, Serialize};
use shell::Part;
use std::collections::{BTreeMap, HashMap};

/// The tool whose `command` argument is a shell command line.
pub const SHELL_TOOL: &str = "shell";

/// The decision for one call, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDecision {
    pub permission: Permission,
    /// The rule that decided, for people: e.g. "built-in shell rule
    /// `rm -rf /`" or "config rule `git status*` for `shell`". `None` when
    /// the fallback decided.
    pub matched_rule: Option<String>,
    pub reason: String,
}

/// Why a permissions config was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("permissions for `{tool}`: rule {index} has an empty `match`")]
    EmptyPattern { tool: String, index: usize },
    #[error("permissions for `{tool}`: rule {index} has an empty `arg`")]
    EmptyArg { tool: String, index: usize },
}

struct CompiledRule {
    glob: Glob,
    decision: Permission,
    arg: Option<String>,
}

/// A permissions config compiled for deciding calls.
pub struct PermissionPolicy {
    config: PermissionsConfig,
    rules: HashMap<String, Vec<CompiledRule>>,
    approval_required: BTreeMap<String, String>,
    shell: ShellContext,
}

impl std::fmt::Debug for PermissionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionPolicy")
            .field("config", &self.config)
            .field("approval_required", &self.approval_required)
            .field("shell", &self.shell)
            .finish()
    }
}

impl Default for PermissionPolicy {
    /// Built-in rules and each tool's own default.
    fn default() -> Self {
        PermissionPolicy {
            config: PermissionsConfig::default(),
            rules: HashMap::new(),
            approval_required: BTreeMap::new(),
            shell: ShellContext::default(),
        }
    }
}

/// One rule that matched a command or call.
#[derive(Clone)]
struct Candidate {
    specificity: usize,
    decision: Permission,
    label: String,
    /// From config: wins a full tie with a built-in rule.
    config: bool,
}

/// The decision for one part of a command.
struct Verdict {
    permission: Permission,
    matched_rule: Option<String>,
    reason: String,
}

impl PermissionPolicy {
    pub fn new(config: PermissionsConfig) -> Result<Self, PolicyError> {
        let mut rules = HashMap::new();
        for (tool, entry) in &config.tools {
            let mut compiled = Vec::new();
            for (index, rule) in entry.rules().iter().enumerate() {
                if rule.pattern.trim().is_empty() {
                    return Err(PolicyError::EmptyPattern {
                        tool: tool.clone(),
                        index,
                    });
                }
                if rule.arg.as_deref().is_some_and(|a| a.trim().is_empty()) {
                    return Err(PolicyError::EmptyArg {
                        tool: tool.clone(),
                        index,
                    });
                }
                compiled.push(CompiledRule {
                    glob: Glob::new(&rule.pattern),
                    decision: rule.decision,
                    arg: rule.arg.clone(),
                });
            }
            rules.insert(tool.clone(), compiled);
        }
        Ok(PermissionPolicy {
            config,
            rules,
            approval_required: BTreeMap::new(),
            shell: ShellContext::default(),
        })
    }

    /// Judges shell commands against `shell`: the workspace they run in
    /// (its git config, where relative paths and globs lead) and their
    /// search path. Without it, only the command line is looked at.
    pub fn with_shell_context(mut self, shell: ShellContext) -> Self {
        self.shell = shell;
        self
    }

    /// Caps `tool` at ask: allow decisions become ask, with `reason` (e.g.
    /// "no sandbox is available, so every shell command needs approval").
    pub fn require_approval_for(
        mut self,
        tool: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        self.approval_required.insert(tool.into(), reason.into());
        self
    }

    pub fn config(&self) -> &PermissionsConfig {
        &self.config
    }

    /// Tools named in config that are not in `known`, for a startup error.
    pub fn unknown_tools<'a>(&'a self, known: &[String]) -> Vec<&'a str> {
        self.config
            .tools
            .keys()
            .filter(|t| !known.contains(t))
            .map(String::as_str)
            .collect()
    }

    /// Decides a call to `tool` with validated `arguments`; `tool_default`
    /// is the tool's own default permission.
    pub fn decide(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
        tool_default: Permission,
    ) -> PolicyDecision {
        let entry = self.config.tools.get(tool);
        let (fallback, fallback_src) = match (
            entry.and_then(ToolPermission::default_permission),
            self.config.default,
        ) {
            (Some(p), _) => (p, format!("the configured permission for `{tool}`")),
            (None, Some(p)) => (p, "the configured default".to_string()),
            (None, None) => (tool_default, format!("the default for `{tool}`")),
        };
        let user_rules: &[CompiledRule] = self.rules.get(tool).map_or(&[], Vec::as_slice);
        let ctx = Ctx {
            tool,
            fallback,
            fallback_src: &fallback_src,
            user_rules,
            // Built-in read-only allows refine the tool's own default; once
            // config sets a default, they would override the user's choice.
            builtin_allows: entry.and_then(ToolPermission::default_permission).is_none()
                && self.config.default.is_none(),
            shell: &self.shell,
            git_concern: std::cell::OnceCell::new(),
        };
        let command = (tool == SHELL_TOOL)
            .then(|| arguments.get("command").and_then(|c| c.as_str()))
            .flatten();
        let call_level = ctx.call_level_matches(arguments, command.is_some());
        let verdict = match command {
            Some(command) => ctx.judge_command(command, &call_level),
            None => ctx.pick(call_level, "this call"),
        };
        let mut decision = PolicyDecision {
            permission: verdict.permission,
            matched_rule: verdict.matched_rule,
            reason: verdict.reason,
        };
        if let Some(why) = self.approval_required.get(tool) {
            if decision.permission == Permission::Allow {
                decision.permission = Permission::Ask;
                decision.reason = format!("{}; but {why}", decision.reason);
            }
        }
        decision
    }
}

struct Ctx<'a> {
    tool: &'a str,
    fallback: Permission,
    fallback_src: &'a str,
    user_rules: &'a [CompiledRule],
    builtin_allows: bool,
    shell: &'a ShellContext,
    /// Read once per decision, when a git part needs it.
    git_concern: std::cell::OnceCell<Option<String>>,
}

impl Ctx<'_> {
    /// Matches of config rules that look at an argument other than the
    /// shell command line: they apply to the call as a whole.
    fn call_level_matches(
        &self,
        arguments: &serde_json::Value,
        has_command: bool,
    ) -> Vec<Candidate> {
        let default_arg = ["command", "path"]
            .into_iter()
            .find(|a| arguments.get(a).is_some_and(|v| v.is_string()));
        self.user_rules
            .iter()
            .filter_map(|rule| {
                let arg = rule.arg.as_deref().or(default_arg)?;
                if has_command && arg == "command" {
                    return None;
                }
                let value = arguments.get(arg)?;
                let text = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_string);
                rule.glob.matches(&text).then(|| self.user_candidate(rule))
            })
            .collect()
    }

    fn user_candidate(&self, rule: &CompiledRule) -> Candidate {
        Candidate {
            specificity: rule.glob.specificity(),
            decision: rule.decision,
            label: format!("config rule `{}` for `{}`", rule.glob.as_str(), self.tool),
            config: true,
        }
    }

    /// The best candidate, or the fallback; `subject` names what was judged.
    fn pick(&self, candidates: Vec<Candidate>, subject: &str) -> Verdict {
        // Most specific first; at equal specificity deny, then allow, then
        // ask; then config over built-in.
        let tie = |p: Permission| match p {
            Permission::Deny => 2,
            Permission::Allow => 1,
            Permission::Ask => 0,
        };
        match candidates
            .into_iter()
            .max_by_key(|c| (c.specificity, tie(c.decision), c.config))
        {
            Some(c) => Verdict {
                permission: c.decision,
                reason: format!("{subject} matches {}: {}", c.label, c.decision),
                matched_rule: Some(c.label),
            },
            None => Verdict {
                permission: self.fallback,
                matched_rule: None,
                reason: format!(
                    "no rule matches {subject}; {} is {}",
                    self.fallback_src, self.fallback
                ),
            },
        }
    }

    fn judge_command(&self, command: &str, call_level: &[Candidate]) -> Verdict {
        let parts = match shell::split(command) {
            Ok(parts) => parts,
            Err(e) => return self.judge_unparsable(command, &e.to_string(), call_level),
        };
        let total = parts.len();
        let mut worst: Option<Verdict> = None;
        for (i, part) in parts.iter().enumerate() {
            let Some(mut v) = self.judge_part(part, call_level) else {
                continue;
            };
            if total > 1 {
                v.reason = format!("part {} of {total}: {}", i + 1, v.reason);
            }
            if worst
                .as_ref()
                .is_none_or(|w| danger(v.permission) > danger(w.permission))
            {
                worst = Some(v);
            }
        }
        if let Some(i) = builtin::pipe_to_shell(&parts) {
            let label = format!("built-in shell rule `{}`", builtin::PIPE_TO_SHELL);
            return Verdict {
                permission: Permission::Deny,
                reason: format!(
                    "`{}` runs downloaded code: matches {label}: deny",
                    parts[i].text()
                ),
                matched_rule: Some(label),
            };
        }
        worst.unwrap_or_else(|| self.pick(call_level.to_vec(), &format!("`{command}`")))
    }

    /// One simple command; `None` for a transparent wrapper no deny or ask
    /// rule matched (its script's commands decide).
    fn judge_part(&self, part: &Part, call_level: &[Candidate]) -> Option<Verdict> {
        let text = part.text();
        if part.words.is_empty() && part.redirects.is_empty() && !part.complex {
            // `NAME=value` alone: it runs nothing, but changes what the
            // commands after it run, and its value is expanded.
            if part.evaluates {
                return Some(Verdict {
                    permission: Permission::Ask,
                    matched_rule: None,
                    reason: format!(
                        "`{}` evaluates a value as arithmetic, which can run the commands it holds; asking",
                        part.raw_text().unwrap_or_default()
                    ),
                });
            }
            return part
                .assignments
                .iter()
                .find(|(n, v)| read_only::assignment_changes_what_runs(n, v))
                .map(|(name, _)| Verdict {
                    permission: Permission::Ask,
                    matched_rule: None,
                    reason: format!("setting `{name}` can change what later commands run; asking"),
                });
        }
        let mut forms = vec![text.clone()];
        forms.extend(part.raw_text());
        if let Some(first) = part.words.first().filter(|w| w.contains('/')) {
            let mut words = part.words.clone();
            words[0] = shell::basename(first).to_string();
            forms.push(
                shell::Part {
                    words,
                    ..part.clone()
                }
                .text(),
            );
        }
        let mut candidates = call_level.to_vec();
        for rule in self
            .user_rules
            .iter()
            .filter(|r| r.arg.as_deref().is_none_or(|a| a == "command"))
        {
            let hit = if rule.decision == Permission::Allow {
                !part.transparent && rule.glob.matches(&text)
            } else {
                forms.iter().any(|f| rule.glob.matches(f))
            };
            if hit {
                candidates.push(self.user_candidate(rule));
            }
        }
        let word_forms = std::iter::once(&part.words).chain(part.raw_words.as_ref());
        for words in word_forms {
            for rule in builtin::SHELL_RULES.iter().filter(|r| r.matches(words)) {
                candidates.push(builtin_candidate(rule.pattern, rule.decision));
            }
        }
        if builtin::redirects_into_device(part) {
            candidates.push(builtin_candidate(
                builtin::DEVICE_REDIRECT,
                Permission::Deny,
            ));
        }
        if self.builtin_allows {
            if let Some(pattern) = read_only::read_only(part, self.shell) {
                candidates.push(builtin_candidate(&pattern, Permission::Allow));
            }
        }
        if part.transparent && !candidates.iter().any(|c| c.decision != Permission::Allow) {
            return None;
        }
        let mut v = self.pick(candidates, &format!("`{text}`"));
        if v.permission == Permission::Allow {
            if let Some(why) = self.unseen(part) {
                v.permission = Permission::Ask;
                v.reason = format!("`{text}` {why}; asking");
            }
        }
        Some(v)
    }

    /// Why the policy cannot see what a part runs, if it cannot: such a
    /// part is never allowed without approval, whatever the rules say.
    fn unseen(&self, part: &Part) -> Option<String> {
        if part.dynamic {
            return Some("runs a program chosen at run time".to_string());
        }
        if part.complex {
            return Some("uses shell syntax the policy does not follow".to_string());
        }
        if part.reads_program {
            return Some("runs a program read from its input".to_string());
        }
        if part.evaluates {
            return Some(
                "evaluates a value as arithmetic, which can run the commands it holds".to_string(),
            );
        }
        if let Some((name, _)) = part
            .assignments
            .iter()
            .find(|(n, v)| read_only::assignment_changes_what_runs(n, v))
        {
            return Some(format!("sets `{name}`, which can change what runs"));
        }
        if part.program() == Some("git") {
            let concern = self.git_concern.get_or_init(|| self.shell.git_concern());
            if let Some(why) = concern {
                return Some(format!(
                    "runs git in a repository whose own config may run programs ({why})"
                ));
            }
        }
        None
    }

    /// A command that cannot be split: deny and ask rules are tried on its
    /// raw text, and it is never allowed.
    fn judge_unparsable(&self, command: &str, why: &str, call_level: &[Candidate]) -> Verdict {
        let words: Vec<String> = command.split_whitespace().map(str::to_string).collect();
        let mut candidates: Vec<Candidate> = call_level
            .iter()
            .filter(|c| c.decision != Permission::Allow)
            .cloned()
            .collect();
        for rule in self
            .user_rules
            .iter()
            .filter(|r| r.decision != Permission::Allow)
        {
            if rule.arg.as_deref().is_none_or(|a| a == "command") && rule.glob.matches(command) {
                candidates.push(self.user_candidate(rule));
            }
        }
        for rule in builtin::SHELL_RULES.iter().filter(|r| r.matches(&words)) {
            candidates.push(builtin_candidate(rule.pattern, rule.decision));
        }
        let mut v = self.pick(candidates, "the command");
        if v.permission == Permission::Allow {
            v.permission = Permission::Ask;
        }
        v.reason = format!("the command could not be parsed ({why}); {}", v.reason);
        v
    }
}

/// True when every command `command` runs is read-only by the built-in
/// rule (listing, reading and searching tools with local arguments, no
/// output written, nothing the policy cannot see), judged against `shell`.
/// Config plays no part: this says what the command does, not whether it
/// may run.
pub fn shell_command_is_read_only(command: &str, shell: &ShellContext) -> bool {
    let Ok(parts) = shell::split(command) else {
        return false;
    };
    let policy = PermissionPolicy::default().with_shell_context(shell.clone());
    let ctx = Ctx {
        tool: SHELL_TOOL,
        fallback: Permission::Ask,
        fallback_src: "the default",
        user_rules: &[],
        builtin_allows: true,
        shell: &policy.shell,
        git_concern: std::cell::OnceCell::new(),
    };
    if builtin::pipe_to_shell(&parts).is_some() {
        return false;
    }
    // Like `decide`: parts that decide nothing themselves (a bare
    // assignment, a transparent `sh -c`) leave it to the others, and a
    // command of only such parts gets the fallback, never allow.
    let mut allowed_any = false;
    for part in &parts {
        match ctx.judge_part(part, &[]) {
            Some(v) if v.permission == Permission::Allow => allowed_any = true,
            Some(_) => return false,
            None => {}
        }
    }
    allowed_any
}

fn builtin_candidate(pattern: &str, decision: Permission) -> Candidate {
    Candidate {
        specificity: Glob::new(pattern).specificity(),
        decision,
        label: format!("built-in shell rule `{pattern}`"),
        config: false,
    }
}

fn danger(p: Permission) -> u8 {
    match p {
        Permission::Allow => 0,
        Permission::Ask => 1,
        Permission::Deny => 2,
    }
}

#[cfg(test)]
mod tests;
