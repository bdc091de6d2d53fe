//! Landlock, network and mount namespaces, applied in the child between
//! fork and exec.
//!
//! Everything that allocates or opens files is prepared in the parent: the
//! Landlock ruleset (its fd and path fds), the uid/gid map lines, the
//! `/proc` paths and the paths to mount read-only. The child then only
//! makes system calls, which is what is safe after `fork` in a
//! multi-threaded program.
//!
//! Protected paths (`.attest/`, `attest.toml`, `.git/`) cannot be carved
//! out of a writable tree with Landlock, which only adds rights. So the
//! child enters a mount namespace of its own, makes every mount private
//! (nothing propagates back), bind-mounts each protected path onto itself
//! and remounts it read-only, and only then restricts itself with
//! Landlock, which from then on forbids any mount change (and mounts
//! copied into a less privileged namespace are locked together, so an
//! unmount cannot uncover the writable path either).

use super::{Netns, SandboxError};
use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
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
    let works = probe(|cmd| {
        apply_std(
            cmd,
            abi,
            Netns::Unavailable,
            true,
            &[],
            Netns::Unavailable,
            &[],
        )
        .is_ok()
    });
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
            let plan = NamespacePlan::new(netns, Netns::Unavailable, &[]);
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

/// How a child can get a mount namespace in which a bind mount can be made
/// read-only: tried for real on a throwaway directory, whose write must
/// then fail.
pub(super) fn probe_mountns() -> Netns {
    let Ok(dir) = tempfile::Builder::new()
        .prefix("attest-mount-probe-")
        .tempdir()
    else {
        return Netns::Unavailable;
    };
    let target = dir.path().join("probe");
    for kind in [Netns::WithUserNs, Netns::Plain] {
        let plan = NamespacePlan::new(Netns::Unavailable, kind, &[dir.path().to_path_buf()]);
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg("echo x > \"$0\"")
            .arg(&target)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: the closure only makes system calls on data prepared
        // before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || plan.enter());
        }
        // A failed unshare or mount fails the spawn; a working one makes
        // the write fail.
        let refused = cmd.status().is_ok_and(|s| !s.success());
        if refused && !target.exists() {
            return kind;
        }
        let _ = std::fs::remove_file(&target);
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
/// `netns` is unavailable), mount `read_only` read-only in a mount
/// namespace got as `mountns` says (when there are any), and restrict
/// itself with Landlock to writing beneath `writable`.
pub(super) fn apply(
    cmd: &mut tokio::process::Command,
    abi: u32,
    netns: Netns,
    no_network: bool,
    writable: &[PathBuf],
    mountns: Netns,
    read_only: &[PathBuf],
) -> Result<(), SandboxError> {
    let pre_exec = prepare(abi, netns, no_network, writable, mountns, read_only)?;
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
    mountns: Netns,
    read_only: &[PathBuf],
) -> Result<(), SandboxError> {
    let pre_exec = prepare(abi, netns, no_network, writable, mountns, read_only)?;
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
    mountns: Netns,
    read_only: &[PathBuf],
) -> Result<impl FnMut() -> io::Result<()> + Send + Sync + 'static, SandboxError> {
    if !read_only.is_empty() && mountns == Netns::Unavailable {
        return Err(SandboxError::Landlock(
            "read-only mounts need a mount namespace, which is unavailable here".to_string(),
        ));
    }
    let ruleset = ruleset(abi, no_network, writable).map_err(SandboxError::Landlock)?;
    let mut ruleset = Some(ruleset);
    let plan = NamespacePlan::new(netns, mountns, read_only);
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

/// Read and execute everywhere; everything beneath each of `writable`
/// (file rights only, for a file); TCP off when `no_network` and the
/// kernel can (ABI 4); signals and abstract sockets scoped to the sandbox
/// when it can (ABI 6). Rights the kernel lacks are dropped (the crate's
/// best-effort mode); the report says what remains.
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
        let access = if path.is_dir() {
            AccessFs::from_all(fs_abi)
        } else {
            AccessFs::from_file(fs_abi)
        };
        let fd = PathFd::new(path).map_err(err)?;
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(err)?;
    }
    Ok(created)
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The namespaces to enter in the child, with everything they need
/// prepared beforehand.
struct NamespacePlan {
    flags: libc::c_int,
    user: bool,
    setgroups: CString,
    uid_map_path: CString,
    gid_map_path: CString,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    root: CString,
    /// Paths to bind-mount read-only, each with the flags its mount
    /// already has (a remount in a user namespace must keep them).
    read_only: Vec<(CString, libc::c_ulong)>,
}

impl NamespacePlan {
    /// `netns`: how to get a network namespace (`Unavailable`: none);
    /// `mountns`: how to get the mount namespace for `read_only` mounts.
    fn new(netns: Netns, mountns: Netns, read_only: &[PathBuf]) -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let c = |s: &str| CString::new(s).unwrap_or_default();
        let mut flags = 0;
        let mut user = false;
        if netns != Netns::Unavailable {
            flags |= libc::CLONE_NEWNET;
            user |= netns == Netns::WithUserNs;
        }
        let mounts = !read_only.is_empty() && mountns != Netns::Unavailable;
        if mounts {
            flags |= libc::CLONE_NEWNS;
            user |= mountns == Netns::WithUserNs;
        }
        if user {
            flags |= libc::CLONE_NEWUSER;
        }
        let read_only = if mounts {
            read_only
                .iter()
                .filter_map(|p| {
                    let path = CString::new(p.as_os_str().as_bytes()).ok()?;
                    Some((path.clone(), locked_mount_flags(&path)))
                })
                .collect()
        } else {
            Vec::new()
        };
        NamespacePlan {
            flags,
            user,
            setgroups: c("/proc/self/setgroups"),
            uid_map_path: c("/proc/self/uid_map"),
            gid_map_path: c("/proc/self/gid_map"),
            // Our own ids map to themselves, so files keep their owners
            // and tools that check ownership (git) see the same user.
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            root: c("/"),
            read_only,
        }
    }

    /// In the child: unshare, write the id maps, mount.
    fn enter(&self) -> io::Result<()> {
        if self.flags == 0 {
            return Ok(());
        }
        unshare(self.flags)?;
        if self.user {
            // `deny` must precede gid_map for an unprivileged writer;
            // the file is missing on old kernels, which is fine.
            match write_file(&self.setgroups, b"deny") {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            write_file(&self.uid_map_path, &self.uid_map)?;
            write_file(&self.gid_map_path, &self.gid_map)?;
        }
        if self.read_only.is_empty() {
            return Ok(());
        }
        // Private first, so no mount made here shows up outside.
        mount(
            None,
            &self.root,
            (libc::MS_REC | libc::MS_PRIVATE) as libc::c_ulong,
        )?;
        for (path, locked) in &self.read_only {
            mount(
                Some(path),
                path,
                (libc::MS_BIND | libc::MS_REC) as libc::c_ulong,
            )?;
            mount(
                None,
                path,
                (libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY) as libc::c_ulong | locked,
            )?;
        }
        Ok(())
    }
}

/// The flags of the mount `path` is on that a remount must keep
/// (`nosuid`, `nodev`, …): in a user namespace they are locked, and a
/// remount without them is refused.
fn locked_mount_flags(path: &CString) -> libc::c_ulong {
    // SAFETY: statvfs writes into the zeroed struct we own; `path` is a
    // valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    pairs
        .iter()
        .filter(|(st_flag, _)| st.f_flag & *st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | *ms as libc::c_ulong)
}

/// mount(2) with no file system type and no data.
fn mount(source: Option<&CString>, target: &CString, flags: libc::c_ulong) -> io::Result<()> {
    let source = source.map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: the pointers are valid C strings or null, as mount allows
    // for bind mounts, remounts and propagation changes.
    if unsafe {
        libc::mount(
            source,
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    } == 0
    {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
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
