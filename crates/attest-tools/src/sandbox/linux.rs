//! Landlock and network namespaces, applied in the child between fork and
//! exec.
//!
//! Everything that allocates or opens files is prepared in the parent: the
//! Landlock ruleset (its fd and path fds), the uid/gid map lines and the
//! `/proc` paths. The child then only makes system calls, which is what is
//! safe after `fork` in a multi-threaded program.

use super::{Netns, SandboxError};
use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::ffi::CString;
use std::io;
use std::path::PathBuf;

/// Device files every command may write (discarding output, mostly).
const WRITABLE_DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// The kernel's Landlock ABI version (0 without Landlock), confirmed by
/// restricting a throwaway child.
pub(super) fn probe_landlock() -> u32 {
    // SAFETY: a query-only landlock_create_ruleset call (null attr, size 0,
    // the VERSION flag) touches no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    let Ok(abi) = u32::try_from(v) else { return 0 };
    if abi == 0 {
        return 0;
    }
    let works = probe(|cmd| apply_std(cmd, abi, Netns::Unavailable, true, &[]).is_ok());
    if works {
        abi
    } else {
        0
    }
}

/// Which kind of network namespace a child can get.
pub(super) fn probe_netns() -> Netns {
    for netns in [Netns::WithUserNs, Netns::Plain] {
        if probe(|cmd| {
            let plan = NetnsPlan::new(netns);
            // SAFETY: the closure only makes async-signal-safe system calls
            // on data prepared before the fork.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(cmd, move || plan.enter());
            }
            true
        }) {
            return netns;
        }
    }
    Netns::Unavailable
}

/// Runs `sh -c :` after `setup` prepared the command; true when it exited 0.
fn probe(setup: impl FnOnce(&mut std::process::Command) -> bool) -> bool {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", ":"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    setup(&mut cmd) && cmd.status().is_ok_and(|s| s.success())
}

/// Arranges for the child of `cmd` to enter a network namespace (unless
/// `netns` is unavailable) and restrict itself with Landlock.
pub(super) fn apply(
    cmd: &mut tokio::process::Command,
    abi: u32,
    netns: Netns,
    no_network: bool,
    writable: &[PathBuf],
) -> Result<(), SandboxError> {
    let pre_exec = prepare(abi, netns, no_network, writable)?;
    // SAFETY: see `prepare`: the closure only makes system calls.
    unsafe {
        cmd.pre_exec(pre_exec);
    }
    Ok(())
}

fn apply_std(
    cmd: &mut std::process::Command,
    abi: u32,
    netns: Netns,
    no_network: bool,
    writable: &[PathBuf],
) -> Result<(), SandboxError> {
    let pre_exec = prepare(abi, netns, no_network, writable)?;
    // SAFETY: see `prepare`.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, pre_exec);
    }
    Ok(())
}

/// Builds the ruleset in the parent and returns what the child runs.
fn prepare(
    abi: u32,
    netns: Netns,
    no_network: bool,
    writable: &[PathBuf],
) -> Result<impl FnMut() -> io::Result<()> + Send + Sync + 'static, SandboxError> {
    let ruleset = ruleset(abi, no_network, writable).map_err(SandboxError::Landlock)?;
    let mut ruleset = Some(ruleset);
    let plan = NetnsPlan::new(netns);
    Ok(move || {
        plan.enter()?;
        let Some(ruleset) = ruleset.take() else {
            return Err(io::Error::other("the sandbox was already applied"));
        };
        let status = ruleset.restrict_self().map_err(io::Error::other)?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(io::Error::other("Landlock is not enforced"));
        }
        Ok(())
    })
}

/// Read and execute everywhere; everything beneath `writable`; TCP off
/// when `no_network` and the kernel can (ABI 4); signals and abstract
/// sockets scoped to the sandbox when it can (ABI 6). Rights the kernel
/// lacks are dropped (the crate's best-effort mode); the report says what
/// remains.
fn ruleset(abi: u32, no_network: bool, writable: &[PathBuf]) -> Result<RulesetCreated, String> {
    let fs_abi = ABI::V5;
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(fs_abi))
        .map_err(err)?;
    if no_network && abi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(err)?;
    }
    if abi >= 6 {
        ruleset = ruleset.scope(Scope::from_all(ABI::V6)).map_err(err)?;
    }
    let root = PathFd::new("/").map_err(err)?;
    let mut created = ruleset
        .create()
        .map_err(err)?
        .add_rule(PathBeneath::new(root, AccessFs::from_read(fs_abi)))
        .map_err(err)?;
    for device in WRITABLE_DEVICES {
        // A missing device (no /dev/tty in a container) is simply skipped.
        if let Ok(fd) = PathFd::new(device) {
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::from_file(fs_abi)))
                .map_err(err)?;
        }
    }
    for path in writable {
        let fd = PathFd::new(path).map_err(err)?;
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::from_all(fs_abi)))
            .map_err(err)?;
    }
    Ok(created)
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A network namespace to enter in the child, with everything it needs
/// prepared beforehand.
struct NetnsPlan {
    netns: Netns,
    setgroups: CString,
    uid_map_path: CString,
    gid_map_path: CString,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl NetnsPlan {
    fn new(netns: Netns) -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let c = |s: &str| CString::new(s).unwrap_or_default();
        NetnsPlan {
            netns,
            setgroups: c("/proc/self/setgroups"),
            uid_map_path: c("/proc/self/uid_map"),
            gid_map_path: c("/proc/self/gid_map"),
            // Our own ids map to themselves, so files keep their owners
            // and tools that check ownership (git) see the same user.
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// In the child: unshare, then write the id maps.
    fn enter(&self) -> io::Result<()> {
        match self.netns {
            Netns::Unavailable => Ok(()),
            Netns::Plain => unshare(libc::CLONE_NEWNET),
            Netns::WithUserNs => {
                unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET)?;
                // `deny` must precede gid_map for an unprivileged writer;
                // the file is missing on old kernels, which is fine.
                match write_file(&self.setgroups, b"deny") {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
                write_file(&self.uid_map_path, &self.uid_map)?;
                write_file(&self.gid_map_path, &self.gid_map)
            }
        }
    }
}

fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// open/write/close with no allocation.
fn write_file(path: &CString, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a valid C string; `data` outlives the call.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if written < 0 || written as usize != data.len() {
            return Err(err);
        }
    }
    Ok(())
}
