//! The shell sandbox (SPEC F4): commands write only inside the workspace
//! (and a private temporary directory, exported as `TMPDIR`), and have no
//! network unless allowed.
//!
//! Mechanisms, in order of preference:
//! 1. bubblewrap (`bwrap` on the search path the caller gives, by default
//!    the usual system directories, and able to start here): a read-only
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
//! Protected paths (SPEC F14): `.attest/`, `attest.toml` and `.git/` under
//! the workspace are read-only to commands: bubblewrap binds them
//! read-only over the writable workspace; Landlock does the same with
//! bind mounts in a mount namespace of the child's (see `linux.rs`), and
//! where the kernel gives no mount namespace it grants writes only beneath
//! the workspace's other entries, so the root's own entries are fixed.
//!
//! What is and is not confined, per mechanism, is in [`SandboxReport`]
//! (`report.rs`); reads are never confined.

mod bwrap;
#[cfg(target_os = "linux")]
mod linux;
mod report;

pub use report::{NetworkIsolation, PathProtection, SandboxReport};
#[cfg(all(test, target_os = "linux"))]
mod tests;

use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

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

/// Options beyond the mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxOptions {
    pub mode: SandboxMode,
    /// Leave the network reachable.
    pub allow_network: bool,
    /// More directories commands may write (a build cache, say).
    pub writable_roots: Vec<PathBuf>,
    /// Where to look for `bwrap`: a `PATH`-style list, the `PATH` commands
    /// will run with (the front end passes it; nothing here reads the
    /// environment). `None`: [`default_search_path`].
    pub search_path: Option<OsString>,
}

/// The search path when the caller gives none: the `PATH` of a minimal
/// tool environment ([`attest_core::tool::ToolEnv::minimal`]), the usual
/// system directories.
pub fn default_search_path() -> OsString {
    attest_core::tool::ToolEnv::minimal()
        .get("PATH")
        .map(OsStr::to_os_string)
        .unwrap_or_default()
}

impl SandboxOptions {
    pub fn new(mode: SandboxMode) -> Self {
        SandboxOptions {
            mode,
            ..SandboxOptions::default()
        }
    }

    /// Where `bwrap` is looked for: `search_path`, else the default.
    fn search_path(&self) -> OsString {
        self.search_path.clone().unwrap_or_else(default_search_path)
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
    /// How a child gets a mount namespace for read-only bind mounts
    /// (Landlock's way to protect paths).
    pub mountns: Netns,
}

/// Each search path probed for a working `bwrap`, with the answer.
#[cfg(target_os = "linux")]
static BWRAP: std::sync::Mutex<Vec<(OsString, Option<PathBuf>)>> =
    std::sync::Mutex::new(Vec::new());

/// Whether `bwrap` has been looked for on `search_path` in this process.
#[cfg(all(test, target_os = "linux"))]
fn bwrap_probed(search_path: &OsStr) -> bool {
    BWRAP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(p, _)| p == search_path)
}

/// What this machine offers with `bwrap` looked for on `search_path`. The
/// kernel's features are probed once per process, `bwrap` once per search
/// path.
#[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
pub(crate) fn capabilities(search_path: &OsStr) -> Capabilities {
    #[cfg(target_os = "linux")]
    {
        use std::sync::OnceLock;
        static KERNEL: OnceLock<(u32, Netns, Netns)> = OnceLock::new();
        let find_bwrap = || {
            // Held while probing: a search path is probed once.
            let mut found = BWRAP.lock().unwrap_or_else(|e| e.into_inner());
            match found.iter().find(|(p, _)| p == search_path) {
                Some((_, bwrap)) => bwrap.clone(),
                None => {
                    let bwrap = bwrap::find_working(search_path);
                    found.push((search_path.to_os_string(), bwrap.clone()));
                    bwrap
                }
            }
        };
        let known_bwrap = BWRAP
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(p, _)| p == search_path)
            .map(|(_, bwrap)| bwrap.clone());
        if let (Some(&(landlock_abi, netns, mountns)), Some(bwrap)) = (KERNEL.get(), known_bwrap) {
            return Capabilities {
                bwrap,
                landlock_abi,
                netns,
                mountns,
            };
        }
        // Each probe waits on a throwaway child of its own, so they run side
        // by side: start-up waited for them one after another. A probe
        // thread that panicked counts as the mechanism being unavailable.
        let ((landlock_abi, netns, mountns), bwrap) = std::thread::scope(|s| {
            let bwrap = s.spawn(find_bwrap);
            let kernel = *KERNEL.get_or_init(|| {
                let landlock = s.spawn(linux::probe_landlock);
                let netns = s.spawn(linux::probe_netns);
                let mountns = linux::probe_mountns();
                (
                    landlock.join().unwrap_or(0),
                    netns.join().unwrap_or(Netns::Unavailable),
                    mountns,
                )
            });
            (kernel, bwrap.join().unwrap_or(None))
        });
        Capabilities {
            bwrap,
            landlock_abi,
            netns,
            mountns,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Capabilities {
            bwrap: None,
            landlock_abi: 0,
            netns: Netns::Unavailable,
            mountns: Netns::Unavailable,
        }
    }
}

#[derive(Debug, Clone)]
enum Plan {
    Unconfined,
    Bubblewrap(PathBuf),
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Landlock {
        abi: u32,
        netns: Netns,
        mountns: Netns,
    },
}

/// A probe started by [`Sandbox::probe_in_background`]; waits for it when
/// dropped.
#[derive(Debug)]
#[must_use = "dropping the handle waits for the probe"]
pub struct BackgroundProbe(Option<std::thread::JoinHandle<()>>);

impl Drop for BackgroundProbe {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            // A probe that panicked cached nothing: `Sandbox::new` probes
            // again.
            let _ = thread.join();
        }
    }
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
    /// What a sandbox in `mode` would use on this machine, network off,
    /// `bwrap` looked for on [`default_search_path`].
    pub fn detect(mode: SandboxMode) -> SandboxReport {
        Self::detect_with(&SandboxOptions::new(mode))
    }

    /// What a sandbox with `options` would use on this machine.
    pub fn detect_with(options: &SandboxOptions) -> SandboxReport {
        let (_, report) = choose(options, &capabilities(&options.search_path()), None);
        report
    }

    /// Probes what a sandbox with `options` would use on a thread of its
    /// own, so that the caller can do other work while the probe's
    /// throwaway children run; [`Sandbox::new`] with the same search path
    /// then finds the answer, or waits for it. Dropping the handle waits
    /// for the probe, so its children and directory never outlive it.
    pub fn probe_in_background(options: &SandboxOptions) -> BackgroundProbe {
        let search_path = options.search_path();
        let thread = std::thread::Builder::new()
            .name("sandbox-probe".into())
            .spawn(move || {
                capabilities(&search_path);
            });
        // Without a thread, `Sandbox::new` probes as it always did.
        BackgroundProbe(thread.ok())
    }

    /// A sandbox for commands run in `workspace`.
    pub fn new(options: SandboxOptions, workspace: &Path) -> Result<Self, SandboxError> {
        let caps = capabilities(&options.search_path());
        Self::build(options, workspace, &caps, None)
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

    /// The protected entries of the workspace that exist now (SPEC F14),
    /// resolved when they are symlinks and kept only where commands could
    /// otherwise write. Empty unless the workspace is writable.
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        if self.options.mode != SandboxMode::WorkspaceWrite {
            return Vec::new();
        }
        let writable = self.writable_paths();
        let mut out: Vec<PathBuf> = Vec::new();
        for path in attest_core::tool::protected::existing_protected_paths(&self.workspace) {
            let real = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => match path.canonicalize() {
                    Ok(real) => real,
                    Err(_) => continue,
                },
                Ok(_) => path,
                Err(_) => continue,
            };
            if writable.iter().any(|w| real.starts_with(w)) && !out.contains(&real) {
                out.push(real);
            }
        }
        out
    }

    /// A command running `program args` in `cwd` under this sandbox.
    /// Environment scrubbing, stdio and timeouts stay the caller's.
    pub fn command(
        &self,
        program: impl AsRef<std::ffi::OsStr>,
        args: &[&str],
        cwd: &Path,
    ) -> Result<tokio::process::Command, SandboxError> {
        let program = program.as_ref();
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
                    &self.protected_paths(),
                    !self.options.allow_network,
                    cwd,
                ));
                cmd.arg("--").arg(program).args(args);
                cmd
            }
            #[cfg(target_os = "linux")]
            Plan::Landlock {
                abi,
                netns,
                mountns,
            } => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args);
                let netns = if self.options.allow_network {
                    Netns::Unavailable
                } else {
                    *netns
                };
                let protected = self.protected_paths();
                let (writable, read_only) = if *mountns != Netns::Unavailable {
                    (self.writable_paths(), protected)
                } else {
                    (self.landlock_grants_without_mounts(&protected), Vec::new())
                };
                linux::apply(
                    &mut cmd,
                    *abi,
                    netns,
                    !self.options.allow_network,
                    &writable,
                    *mountns,
                    &read_only,
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

    /// Landlock without a mount namespace cannot make a path under a
    /// writable one read-only, so the workspace itself is not granted:
    /// each of its entries is, except the protected ones and symlinks
    /// (whose rule would land on their target). The workspace root's own
    /// entries then cannot be created, removed or renamed.
    fn landlock_grants_without_mounts(&self, protected: &[PathBuf]) -> Vec<PathBuf> {
        let mut grants: Vec<PathBuf> = self
            .writable_paths()
            .into_iter()
            .filter(|p| *p != self.workspace || self.options.mode != SandboxMode::WorkspaceWrite)
            .collect();
        if self.options.mode != SandboxMode::WorkspaceWrite {
            return grants;
        }
        let Ok(entries) = std::fs::read_dir(&self.workspace) else {
            return grants;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_symlink = entry.file_type().is_ok_and(|t| t.is_symlink());
            let is_protected =
                attest_core::tool::protected::protected_entry(&self.workspace, &path).is_some()
                    || protected
                        .iter()
                        .any(|p| p.starts_with(&path) || path.starts_with(p));
            if !is_symlink && !is_protected {
                grants.push(path);
            }
        }
        grants
    }
}

/// Picks the mechanism and writes the report.
fn choose(
    options: &SandboxOptions,
    caps: &Capabilities,
    force: Option<Mechanism>,
) -> (Plan, SandboxReport) {
    let abi = (caps.landlock_abi > 0).then_some(caps.landlock_abi);
    if options.mode == SandboxMode::Off {
        return (Plan::Unconfined, SandboxReport::off(abi));
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
            mountns: caps.mountns,
        },
        _ => Plan::Unconfined,
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
    let facts = report::Facts {
        mode: options.mode,
        network,
        network_allowed: options.allow_network,
        landlock_abi: abi,
    };
    let report = match &plan {
        Plan::Unconfined => SandboxReport::unconfined(facts),
        Plan::Bubblewrap(_) => SandboxReport::bubblewrap(facts),
        Plan::Landlock { mountns, .. } => {
            SandboxReport::landlock(facts, *mountns != Netns::Unavailable)
        }
    };
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
            mountns: netns,
        }
    }

    #[test]
    fn prefers_bubblewrap_then_landlock_then_nothing() {
        let o = SandboxOptions::new(SandboxMode::WorkspaceWrite);
        let (_, r) = choose(&o, &caps(true, 6, Netns::WithUserNs), None);
        assert_eq!(r.mechanism, Some("bubblewrap"));
        assert!(r.filesystem_confined && r.network_isolated);
        assert!(!r.shell_requires_approval());
        assert!(
            r.note.starts_with(
                "sandbox: bubblewrap, writes confined to the workspace and a private temp dir \
                 (`.attest/`, `attest.toml` and `.git/` read-only), network off"
            ),
            "{}",
            r.note
        );

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
