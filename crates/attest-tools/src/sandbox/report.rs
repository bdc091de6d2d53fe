//! What the sandbox confines on this machine, and what it does not, in
//! fields and in one plain sentence for the user (SPEC F4, F14).

use super::{Mechanism, SandboxMode};
use serde::{Deserialize, Serialize};

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

/// How `.attest/`, `attest.toml` and `.git/` are kept from commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathProtection {
    /// Each one that exists when a command starts is mounted read-only
    /// over the writable workspace. One that does not exist yet can be
    /// created by the command.
    ReadOnlyMounts,
    /// Landlock alone: writes are granted beneath the workspace's other
    /// entries only, so the protected ones stay read-only and no entry can
    /// be created, removed or renamed directly in the workspace root.
    FixedTopLevel,
    /// The whole workspace is read-only (read-only mode).
    WholeWorkspace,
    /// Commands run unconfined: nothing is protected from them.
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
    pub protected_paths: PathProtection,
    /// True only for [`NetworkIsolation::Full`].
    pub network_isolated: bool,
    pub network: NetworkIsolation,
    /// The network was left on by configuration.
    pub network_allowed: bool,
    /// Abstract Unix sockets outside the sandbox are out of reach (a
    /// network namespace, or Landlock's scoping, ABI 6).
    pub abstract_sockets_confined: bool,
    /// Signals cannot reach processes outside the sandbox (a pid
    /// namespace, or Landlock's scoping, ABI 6).
    pub signals_confined: bool,
    /// The kernel's Landlock ABI version, when it has Landlock.
    pub landlock_abi: Option<u32>,
    /// What commands can still do, in plain words.
    pub not_confined: Vec<String>,
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

/// What `choose` found, for the report.
pub(super) struct Facts {
    pub mode: SandboxMode,
    pub network: NetworkIsolation,
    pub network_allowed: bool,
    pub landlock_abi: Option<u32>,
}

const READS: &str = "reads anywhere on the file system";
const PATH_SOCKETS: &str = "Unix sockets reachable by a path (a Docker or X11 socket, for one)";
const MISSING_PROTECTED: &str = "a protected entry that does not exist when a command starts \
                                 (it can create an `attest.toml` or `.git` where there is none)";

impl SandboxReport {
    /// The report of a sandbox switched off by configuration (nothing is
    /// probed).
    pub fn switched_off() -> Self {
        Self::off(None)
    }

    pub(super) fn off(landlock_abi: Option<u32>) -> Self {
        SandboxReport {
            mode: SandboxMode::Off,
            mechanism: None,
            filesystem_confined: false,
            protected_paths: PathProtection::None,
            network_isolated: false,
            network: NetworkIsolation::None,
            network_allowed: false,
            abstract_sockets_confined: false,
            signals_confined: false,
            landlock_abi,
            not_confined: vec!["everything: shell and command tools run unconfined".to_string()],
            note: "sandbox off by configuration: shell commands run unconfined".to_string(),
        }
    }

    pub(super) fn unconfined(f: Facts) -> Self {
        SandboxReport {
            mode: f.mode,
            network_allowed: f.network_allowed,
            note: "no sandbox available (no working bubblewrap, no Landlock): shell commands run \
                   unconfined, so each one needs approval"
                .to_string(),
            ..SandboxReport::off(f.landlock_abi)
        }
    }

    /// bubblewrap: a read-only root with writable binds, protected paths
    /// bound read-only, new pid, ipc and (unless allowed) network
    /// namespaces.
    pub(super) fn bubblewrap(f: Facts) -> Self {
        let net_ns = f.network == NetworkIsolation::Full;
        let protection = match f.mode {
            SandboxMode::ReadOnly => PathProtection::WholeWorkspace,
            _ => PathProtection::ReadOnlyMounts,
        };
        let mut gaps = vec![READS.to_string(), PATH_SOCKETS.to_string()];
        if !net_ns {
            gaps.push("abstract Unix sockets".to_string());
        }
        if protection == PathProtection::ReadOnlyMounts {
            gaps.push(MISSING_PROTECTED.to_string());
        }
        Self::finish(f, Mechanism::Bubblewrap, protection, net_ns, true, gaps)
    }

    /// Landlock: writes beneath the writable paths only; protected paths
    /// by read-only mounts in a mount namespace (`mounts`) or by leaving
    /// the workspace root itself ungranted; TCP off (ABI 4) or a network
    /// namespace; signals and abstract sockets scoped (ABI 6).
    pub(super) fn landlock(f: Facts, mounts: bool) -> Self {
        let abi = f.landlock_abi.unwrap_or(0);
        let scoped = abi >= 6;
        let net_ns = f.network == NetworkIsolation::Full;
        let protection = match (f.mode, mounts) {
            (SandboxMode::ReadOnly, _) => PathProtection::WholeWorkspace,
            (_, true) => PathProtection::ReadOnlyMounts,
            (_, false) => PathProtection::FixedTopLevel,
        };
        let mut gaps = vec![READS.to_string(), PATH_SOCKETS.to_string()];
        if !net_ns && !scoped {
            gaps.push("abstract Unix sockets (Landlock before ABI 6)".to_string());
        }
        if !scoped {
            gaps.push("signals to your other processes (Landlock before ABI 6)".to_string());
        }
        gaps.push("System V IPC and shared memory".to_string());
        gaps.push(match protection {
            PathProtection::ReadOnlyMounts => {
                "permission, owner and timestamp changes of your files outside the workspace \
                 (Landlock does not cover them; the protected paths are mounted read-only)"
                    .to_string()
            }
            _ => "permission, owner and timestamp changes of your files, the protected ones \
                  included (Landlock does not cover them)"
                .to_string(),
        });
        if protection == PathProtection::ReadOnlyMounts {
            gaps.push(MISSING_PROTECTED.to_string());
        }
        Self::finish(
            f,
            Mechanism::Landlock,
            protection,
            net_ns || scoped,
            scoped,
            gaps,
        )
    }

    fn finish(
        f: Facts,
        mechanism: Mechanism,
        protection: PathProtection,
        abstract_sockets_confined: bool,
        signals_confined: bool,
        not_confined: Vec<String>,
    ) -> Self {
        let name = match mechanism {
            Mechanism::Bubblewrap => "bubblewrap".to_string(),
            Mechanism::Landlock => format!("Landlock ABI {}", f.landlock_abi.unwrap_or(0)),
        };
        let writes = match protection {
            PathProtection::WholeWorkspace => "writes only to a private temp dir".to_string(),
            PathProtection::FixedTopLevel => {
                "writes confined to the workspace and a private temp dir (`.attest/`, \
                 `attest.toml` and `.git/` read-only; without a mount namespace, no entry can \
                 be created, removed or renamed directly in the workspace root)"
                    .to_string()
            }
            _ => "writes confined to the workspace and a private temp dir (`.attest/`, \
                  `attest.toml` and `.git/` read-only)"
                .to_string(),
        };
        let network = match (f.network, f.network_allowed) {
            (_, true) => "network allowed by configuration",
            (NetworkIsolation::Full, _) => "network off",
            (NetworkIsolation::TcpOnly, _) => "TCP off (UDP, including DNS, still reachable)",
            (NetworkIsolation::None, _) => "network NOT isolated (no mechanism for it here)",
        };
        let scoped = match (abstract_sockets_confined, signals_confined) {
            (true, true) => ", abstract Unix sockets and signals kept inside",
            (true, false) => ", abstract Unix sockets kept inside",
            (false, true) => ", signals kept inside",
            (false, false) => "",
        };
        let note = format!(
            "sandbox: {name}, {writes}, {network}{scoped}; not confined: {}",
            not_confined.join(", ")
        );
        SandboxReport {
            mode: f.mode,
            mechanism: Some(mechanism.as_str()),
            filesystem_confined: true,
            protected_paths: protection,
            network_isolated: f.network == NetworkIsolation::Full,
            network: f.network,
            network_allowed: f.network_allowed,
            abstract_sockets_confined,
            signals_confined,
            landlock_abi: f.landlock_abi,
            not_confined,
            note,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(mode: SandboxMode, network: NetworkIsolation, abi: Option<u32>) -> Facts {
        Facts {
            mode,
            network,
            network_allowed: false,
            landlock_abi: abi,
        }
    }

    #[test]
    fn bubblewrap_says_what_it_confines_and_what_it_does_not() {
        let r = SandboxReport::bubblewrap(facts(
            SandboxMode::WorkspaceWrite,
            NetworkIsolation::Full,
            Some(7),
        ));
        assert_eq!(
            r.note,
            "sandbox: bubblewrap, writes confined to the workspace and a private temp dir \
             (`.attest/`, `attest.toml` and `.git/` read-only), network off, abstract Unix \
             sockets and signals kept inside; not confined: reads anywhere on the file system, \
             Unix sockets reachable by a path (a Docker or X11 socket, for one), a protected \
             entry that does not exist when a command starts (it can create an `attest.toml` \
             or `.git` where there is none)"
        );
        assert_eq!(r.protected_paths, PathProtection::ReadOnlyMounts);
        assert!(r.abstract_sockets_confined && r.signals_confined);
        let open = SandboxReport::bubblewrap(Facts {
            network_allowed: true,
            ..facts(SandboxMode::ReadOnly, NetworkIsolation::None, None)
        });
        assert!(
            open.note.contains("writes only to a private temp dir"),
            "{}",
            open.note
        );
        assert!(open.note.contains("network allowed by configuration"));
        assert!(open
            .not_confined
            .contains(&"abstract Unix sockets".to_string()));
        assert!(!open.abstract_sockets_confined);
        assert_eq!(open.protected_paths, PathProtection::WholeWorkspace);
        assert!(!open.note.contains("does not exist"), "{}", open.note);
    }

    #[test]
    fn landlock_with_abi_6_and_mounts() {
        let r = SandboxReport::landlock(
            facts(SandboxMode::WorkspaceWrite, NetworkIsolation::Full, Some(7)),
            true,
        );
        assert_eq!(
            r.note,
            "sandbox: Landlock ABI 7, writes confined to the workspace and a private temp dir \
             (`.attest/`, `attest.toml` and `.git/` read-only), network off, abstract Unix \
             sockets and signals kept inside; not confined: reads anywhere on the file system, \
             Unix sockets reachable by a path (a Docker or X11 socket, for one), System V IPC \
             and shared memory, permission, owner and timestamp changes of your files outside \
             the workspace (Landlock does not cover them; the protected paths are mounted \
             read-only), a protected entry that does not exist when a command starts (it can \
             create an `attest.toml` or `.git` where there is none)"
        );
        assert_eq!(r.protected_paths, PathProtection::ReadOnlyMounts);
    }

    #[test]
    fn older_landlock_without_namespaces_says_more_is_open() {
        let r = SandboxReport::landlock(
            facts(
                SandboxMode::WorkspaceWrite,
                NetworkIsolation::TcpOnly,
                Some(4),
            ),
            false,
        );
        assert_eq!(
            r.note,
            "sandbox: Landlock ABI 4, writes confined to the workspace and a private temp dir \
             (`.attest/`, `attest.toml` and `.git/` read-only; without a mount namespace, no \
             entry can be created, removed or renamed directly in the workspace root), TCP off \
             (UDP, including DNS, still reachable); not confined: reads anywhere on the file \
             system, Unix sockets reachable by a path (a Docker or X11 socket, for one), \
             abstract Unix sockets (Landlock before ABI 6), signals to your other processes \
             (Landlock before ABI 6), System V IPC and shared memory, permission, owner and \
             timestamp changes of your files, the protected ones included (Landlock does not \
             cover them)"
        );
        assert_eq!(r.protected_paths, PathProtection::FixedTopLevel);
        assert!(!r.abstract_sockets_confined && !r.signals_confined);
        // A network namespace covers abstract sockets even before ABI 6.
        let r = SandboxReport::landlock(
            facts(SandboxMode::WorkspaceWrite, NetworkIsolation::Full, Some(5)),
            true,
        );
        assert!(r.abstract_sockets_confined && !r.signals_confined);
        assert!(
            r.note.contains(", abstract Unix sockets kept inside;"),
            "{}",
            r.note
        );
    }

    #[test]
    fn unconfined_and_off() {
        let r = SandboxReport::unconfined(facts(
            SandboxMode::WorkspaceWrite,
            NetworkIsolation::None,
            None,
        ));
        assert!(r.note.starts_with("no sandbox available"), "{}", r.note);
        assert!(r.shell_requires_approval());
        assert_eq!(r.protected_paths, PathProtection::None);
        let off = SandboxReport::off(Some(7));
        assert!(!off.shell_requires_approval());
        assert_eq!(
            off.note,
            "sandbox off by configuration: shell commands run unconfined"
        );
    }
}
