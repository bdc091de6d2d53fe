//! The shell sandbox (SPEC F4): commands write only inside the workspace
//! (and a private temporary directory, exported as `TMPDIR`), and have no
//! network unless allowed.
//!
//! Mechanisms, in order of preference:
//! 1. bubblewrap (`bwrap` on `PATH`, and able to start here): a read-only
//!    view of `/` with the workspace and the temp dir bound writable, new
//!    pid/ipc/uts/network namespaces, capabilities dropped.
//! 2. Landlock, applied to the child between fork and exec: read and
//!    execute everywhere, write only beneath the workspace and the temp
//!    dir. Network: a new network namespace (with a user namespace when
//!    unprivileged) if the kernel allows one, else Landlock's TCP
//!    restriction (ABI 4+), which leaves UDP (DNS) open.
//! 3. None: commands run unconfined, the report says so plainly, and
//!    [`SandboxReport::shell_requires_approval`] is true so the policy can
//!    ask for every shell command.
//!
//! Detection runs a trivial command under each mechanism once per process
//! (a few milliseconds) rather than trusting version numbers: containers
//! and seccomp filters often forbid what the kernel supports.
//!
//! Not covered: reads (the whole filesystem stays readable), Unix sockets
//! reachable by path (a Docker socket, for one), and the `.git` directory
//! inside the workspace, which stays writable.

mod bwrap;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(all(test, target_os = "linux"))]
mod tests;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How much the shell may write (SPEC F4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Write inside the workspace and the private temp dir only.
    #[default]
    WorkspaceWrite,
    /// Write only in the private temp dir.
    ReadOnly,
    /// No sandbox, by choice.
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => "off",
        }
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "workspace-write" => Ok(SandboxMode::WorkspaceWrite),
            "read-only" => Ok(SandboxMode::ReadOnly),
            "off" => Ok(SandboxMode::Off),
            other => Err(format!(
                "unknown sandbox mode `{other}` (expected workspace-write, read-only or off)"
            )),
        }
    }
}

/// What network access sandboxed commands have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkIsolation {
    /// A network namespace of their own: nothing outside is reachable.
    Full,
    /// TCP connect and bind are refused; UDP (DNS) is not.
    TcpOnly,
    None,
}

/// What the sandbox does on this machine, said once at the start of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxReport {
    pub mode: SandboxMode,
    /// `bubblewrap` or `landlock`; `None` when commands run unconfined.
    pub mechanism: Option<&'static str>,
    /// Writes outside the workspace and the temp dir fail.
    pub filesystem_confined: bool,
    /// True only for [`NetworkIsolation::Full`].
    pub network_isolated: bool,
    pub network: NetworkIsolation,
    /// The network was left on by configuration.
    pub network_allowed: bool,
    /// The kernel's Landlock ABI version, when it has Landlock.
    pub landlock_abi: Option<u32>,
    /// One plain sentence for the user.
    pub note: String,
}

impl SandboxReport {
    /// True when shell commands should each need approval: a sandbox was
    /// wanted (the mode is not `off`) but writes are not confined, or the
    /// network was to be off and is not.
    pub fn shell_requires_approval(&self) -> bool {
        self.mode != SandboxMode::Off
            && (!self.filesystem_confined
                || (!self.network_allowed && self.network == NetworkIsolation::None))
    }
}

/// Options beyond the mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxOptions {
    pub mode: SandboxMode,
    /// Leave the network reachable.
    pub allow_network: bool,
    /// More directories commands may write (a build cache, say).
    pub writable_roots: Vec<PathBuf>,
}

impl SandboxOptions {
    pub fn new(mode: SandboxMode) -> Self {
        SandboxOptions {
            mode,
            ..SandboxOptions::default()
        }
    }
}

/// Why a sandbox could not be set up or applied.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot create the sandbox's temporary directory: {0}")]
    TempDir(std::io::Error),
    #[error("cannot use `{path}` as a writable root: {source}")]
    WritableRoot {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot build the Landlock rules: {0}")]
    Landlock(String),
}

/// The mechanism a sandbox uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Bubblewrap,
    Landlock,
}

impl Mechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Bubblewrap => "bubblewrap",
            Mechanism::Landlock => "landlock",
        }
    }
}

/// How a new network namespace can be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Netns {
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNET)`, mapping our ids to themselves.
    WithUserNs,
    /// `unshare(CLONE_NEWNET)` alone (we are privileged).
    Plain,
    Unavailable,
}

/// What this machine offers, probed once.
#[derive(Debug, Clone)]
pub(crate) struct Capabilities {
    pub bwrap: Option<PathBuf>,
    pub landlock_abi: u32,
    pub netns: Netns,
}

pub(crate) fn capabilities() -> &'static Capabilities {
    static CAPS: OnceLock<Capabilities> = OnceLock::new();
    CAPS.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            let landlock_abi = linux::probe_landlock();
            Capabilities {
                bwrap: bwrap::find_working(),
                landlock_abi,
                netns: linux::probe_netns(),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            Capabilities {
                bwrap: None,
                landlock_abi: 0,
                netns: Netns::Unavailable,
            }
        }
    })
}

#[derive(Debug, Clone)]
enum Plan {
    Unconfined,
    Bubblewrap(PathBuf),
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Landlock {
        abi: u32,
        netns: Netns,
    },
}

/// A sandbox for one run: its plan, its report and its private temp dir
/// (deleted when the sandbox is dropped).
#[derive(Debug)]
pub struct Sandbox {
    options: SandboxOptions,
    workspace: PathBuf,
    writable_roots: Vec<PathBuf>,
    tmp: Option<tempfile::TempDir>,
    plan: Plan,
    report: SandboxReport,
}

/// Prefix of a sandbox's private temp dir, followed by the owning process id.
const TEMP_PREFIX: &str = "attest-sandbox-";

/// Remove the private temp dirs of attest processes that no longer run (a
/// killed process cannot remove its own). Linux only: liveness is read from
/// `/proc`. Best effort: errors are ignored.
fn sweep_stale_temp_dirs(parent: &Path) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Sandbox {
    /// What a sandbox in `mode` would use on this machine, network off.
    pub fn detect(mode: SandboxMode) -> SandboxReport {
        let options = SandboxOptions::new(mode);
        let (_, report) = choose(&options, capabilities(), None);
        report
    }

    /// A sandbox for commands run in `workspace`.
    pub fn new(options: SandboxOptions, workspace: &Path) -> Result<Self, SandboxError> {
        Self::build(options, workspace, capabilities(), None)
    }

    fn build(
        options: SandboxOptions,
        workspace: &Path,
        caps: &Capabilities,
        force: Option<Mechanism>,
    ) -> Result<Self, SandboxError> {
        let (plan, report) = choose(&options, caps, force);
        let tmp = match options.mode {
            SandboxMode::Off => None,
            _ => {
                let parent = std::env::temp_dir();
                sweep_stale_temp_dirs(&parent);
                Some(
                    tempfile::Builder::new()
                        .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
                        .tempdir_in(&parent)
                        .map_err(SandboxError::TempDir)?,
                )
            }
        };
        // Canonical paths: bind mounts and Landlock rules resolve symlinks.
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let mut writable_roots = Vec::new();
        for root in &options.writable_roots {
            let path = root
                .canonicalize()
                .map_err(|source| SandboxError::WritableRoot {
                    path: root.clone(),
                    source,
                })?;
            writable_roots.push(path);
        }
        Ok(Sandbox {
            workspace: canonical(workspace),
            writable_roots,
            tmp,
            plan,
            report,
            options,
        })
    }

    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    pub fn mode(&self) -> SandboxMode {
        self.options.mode
    }

    /// The private temp dir (`TMPDIR` of sandboxed commands).
    pub fn tmp_dir(&self) -> Option<&Path> {
        self.tmp.as_ref().map(|t| t.path())
    }

    /// The directories commands may write.
    pub fn writable_paths(&self) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        if self.options.mode == SandboxMode::WorkspaceWrite {
            paths.push(self.workspace.clone());
        }
        if let Some(tmp) = self.tmp_dir() {
            paths.push(tmp.canonicalize().unwrap_or_else(|_| tmp.to_path_buf()));
        }
        if self.options.mode != SandboxMode::Off {
            paths.extend(self.writable_roots.iter().cloned());
        }
        paths
    }

    /// A command running `program args` in `cwd` under this sandbox.
    /// Environment scrubbing, stdio and timeouts stay the caller's.
    pub fn command(
        &self,
        program: &str,
        args: &[&str],
        cwd: &Path,
    ) -> Result<tokio::process::Command, SandboxError> {
        let mut cmd = match &self.plan {
            Plan::Unconfined => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args);
                cmd
            }
            Plan::Bubblewrap(bwrap) => {
                let mut cmd = tokio::process::Command::new(bwrap);
                cmd.args(bwrap::arguments(
                    &self.writable_paths(),
                    !self.options.allow_network,
                    cwd,
                ));
                cmd.arg("--").arg(program).args(args);
                cmd
            }
            #[cfg(target_os = "linux")]
            Plan::Landlock { abi, netns } => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args);
                let netns = if self.options.allow_network {
                    Netns::Unavailable
                } else {
                    *netns
                };
                linux::apply(
                    &mut cmd,
                    *abi,
                    netns,
                    !self.options.allow_network,
                    &self.writable_paths(),
                )?;
                cmd
            }
            #[cfg(not(target_os = "linux"))]
            Plan::Landlock { .. } => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args);
                cmd
            }
        };
        cmd.current_dir(cwd);
        if let Some(tmp) = self.tmp_dir() {
            for var in ["TMPDIR", "TMP", "TEMP"] {
                cmd.env(var, tmp);
            }
        }
        Ok(cmd)
    }
}

/// Picks the mechanism and writes the report.
fn choose(
    options: &SandboxOptions,
    caps: &Capabilities,
    force: Option<Mechanism>,
) -> (Plan, SandboxReport) {
    let abi = (caps.landlock_abi > 0).then_some(caps.landlock_abi);
    let mut report = SandboxReport {
        mode: options.mode,
        mechanism: None,
        filesystem_confined: false,
        network_isolated: false,
        network: NetworkIsolation::None,
        network_allowed: options.allow_network,
        landlock_abi: abi,
        note: String::new(),
    };
    if options.mode == SandboxMode::Off {
        report.note = "sandbox off by configuration: shell commands run unconfined".to_string();
        return (Plan::Unconfined, report);
    }
    let use_bwrap = match force {
        Some(Mechanism::Bubblewrap) => true,
        Some(Mechanism::Landlock) => false,
        None => caps.bwrap.is_some(),
    };
    let plan = match (&caps.bwrap, abi) {
        (Some(path), _) if use_bwrap => Plan::Bubblewrap(path.clone()),
        (_, Some(abi)) => Plan::Landlock {
            abi,
            netns: caps.netns,
        },
        _ => Plan::Unconfined,
    };
    let writes = match options.mode {
        SandboxMode::ReadOnly => "writes only to a private temp dir",
        _ => "writes confined to the workspace and a private temp dir",
    };
    let network = match (&plan, caps.netns, abi) {
        _ if options.allow_network => NetworkIsolation::None,
        (Plan::Bubblewrap(_), _, _) => NetworkIsolation::Full,
        (Plan::Landlock { .. }, Netns::WithUserNs | Netns::Plain, _) => NetworkIsolation::Full,
        (Plan::Landlock { .. }, Netns::Unavailable, Some(abi)) if abi >= 4 => {
            NetworkIsolation::TcpOnly
        }
        _ => NetworkIsolation::None,
    };
    let network_text = match (network, options.allow_network) {
        (_, true) => "network allowed by configuration",
        (NetworkIsolation::Full, _) => "network off",
        (NetworkIsolation::TcpOnly, _) => "TCP off (UDP, including DNS, still reachable)",
        (NetworkIsolation::None, _) => "network NOT isolated (no mechanism for it here)",
    };
    report.network = network;
    report.network_isolated = network == NetworkIsolation::Full;
    report.note = match &plan {
        Plan::Unconfined => {
            "no sandbox available (no working bubblewrap, no Landlock): shell commands run \
             unconfined, so each one needs approval"
                .to_string()
        }
        Plan::Bubblewrap(_) => format!("sandbox: bubblewrap, {writes}, {network_text}"),
        Plan::Landlock { abi, .. } => {
            format!("sandbox: Landlock ABI {abi}, {writes}, {network_text}")
        }
    };
    report.mechanism = match plan {
        Plan::Unconfined => None,
        Plan::Bubblewrap(_) => Some(Mechanism::Bubblewrap.as_str()),
        Plan::Landlock { .. } => Some(Mechanism::Landlock.as_str()),
    };
    report.filesystem_confined = report.mechanism.is_some();
    (plan, report)
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    #[test]
    fn temp_dirs_of_dead_processes_are_removed_and_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        // Above Linux's largest pid: never a live process.
        let dead = parent.path().join(format!("{TEMP_PREFIX}999999999-abc"));
        let mine = parent
            .path()
            .join(format!("{TEMP_PREFIX}{}-def", std::process::id()));
        let unrelated = parent.path().join("attest-sandbox-nopid");
        for d in [&dead, &mine, &unrelated] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("f"), "x").unwrap();
        }
        sweep_stale_temp_dirs(parent.path());
        assert!(!dead.exists());
        assert!(mine.exists());
        assert!(
            unrelated.exists(),
            "names without a pid are not ours to judge"
        );
    }
}

#[cfg(test)]
mod choose_tests {
    use super::*;

    fn caps(bwrap: bool, abi: u32, netns: Netns) -> Capabilities {
        Capabilities {
            bwrap: bwrap.then(|| PathBuf::from("/usr/bin/bwrap")),
            landlock_abi: abi,
            netns,
        }
    }

    #[test]
    fn prefers_bubblewrap_then_landlock_then_nothing() {
        let o = SandboxOptions::new(SandboxMode::WorkspaceWrite);
        let (_, r) = choose(&o, &caps(true, 6, Netns::WithUserNs), None);
        assert_eq!(r.mechanism, Some("bubblewrap"));
        assert!(r.filesystem_confined && r.network_isolated);
        assert!(!r.shell_requires_approval());
        assert_eq!(r.note, "sandbox: bubblewrap, writes confined to the workspace and a private temp dir, network off");

        let (_, r) = choose(&o, &caps(false, 6, Netns::Unavailable), None);
        assert_eq!(r.mechanism, Some("landlock"));
        assert_eq!(r.network, NetworkIsolation::TcpOnly);
        assert!(!r.network_isolated);
        assert!(!r.shell_requires_approval());
        assert!(r.note.contains("UDP"), "{}", r.note);

        let (_, r) = choose(&o, &caps(false, 3, Netns::Unavailable), None);
        assert_eq!(r.network, NetworkIsolation::None);
        assert!(r.shell_requires_approval(), "no network isolation");

        let (_, r) = choose(&o, &caps(false, 0, Netns::WithUserNs), None);
        assert_eq!(r.mechanism, None);
        assert!(!r.filesystem_confined);
        assert!(r.shell_requires_approval());
        assert!(r.note.starts_with("no sandbox available"), "{}", r.note);
    }

    #[test]
    fn off_is_a_choice_not_a_gap() {
        let (_, r) = choose(
            &SandboxOptions::new(SandboxMode::Off),
            &caps(true, 6, Netns::Plain),
            None,
        );
        assert_eq!(r.mechanism, None);
        assert!(!r.shell_requires_approval());
        assert!(r.note.contains("off by configuration"));
    }

    #[test]
    fn network_allowed_is_reported() {
        let o = SandboxOptions {
            allow_network: true,
            ..SandboxOptions::new(SandboxMode::ReadOnly)
        };
        let (_, r) = choose(&o, &caps(false, 6, Netns::Plain), None);
        assert_eq!(r.network, NetworkIsolation::None);
        assert!(
            r.note.contains("writes only to a private temp dir"),
            "{}",
            r.note
        );
        assert!(
            r.note.contains("network allowed by configuration"),
            "{}",
            r.note
        );
        assert!(!r.shell_requires_approval());
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [
            SandboxMode::WorkspaceWrite,
            SandboxMode::ReadOnly,
            SandboxMode::Off,
        ] {
            assert_eq!(m.as_str().parse::<SandboxMode>().unwrap(), m);
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
        assert!("none".parse::<SandboxMode>().is_err());
        assert_eq!(SandboxMode::default(), SandboxMode::WorkspaceWrite);
    }
}
