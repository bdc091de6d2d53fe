//! bubblewrap: finding a working `bwrap` and its arguments.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// `bwrap` in a directory of `search_path` (a `PATH`-style list the caller
/// passes: this crate reads no environment variables), if it can actually
/// start a sandbox here (it may be installed where user namespaces are
/// disabled).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(super) fn find_working(search_path: &OsStr) -> Option<PathBuf> {
    let bwrap = find_in(search_path, "bwrap")?;
    let root = Path::new("/");
    let ok = std::process::Command::new(&bwrap)
        .args(arguments(&[], &[], true, root))
        .args(["--", "sh", "-c", ":"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(bwrap)
}

/// The first `program` that is a file in an absolute directory of
/// `search_path` (a relative entry, `.` or an empty one, would make a file
/// in the current directory, perhaps a workspace's, the sandbox).
fn find_in(search_path: &OsStr, program: &str) -> Option<PathBuf> {
    std::env::split_paths(search_path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The arguments before `--`: `/` read-only, fresh `/dev` and `/proc`,
/// `writable` bound read-write at the same paths, then `read_only` (the
/// protected paths inside them) bound read-only over that, new namespaces.
pub(super) fn arguments(
    writable: &[PathBuf],
    read_only: &[PathBuf],
    no_network: bool,
    cwd: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    if no_network {
        args.push("--unshare-net".to_string());
    }
    // Run as root, bwrap keeps every capability unless told otherwise, and
    // with them a command could remount `/` writable.
    #[cfg(unix)]
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        args.extend(["--cap-drop".to_string(), "ALL".to_string()]);
    }
    for path in writable {
        let p = path.to_string_lossy().into_owned();
        args.extend(["--bind".to_string(), p.clone(), p]);
    }
    for path in read_only {
        let p = path.to_string_lossy().into_owned();
        args.extend(["--ro-bind".to_string(), p.clone(), p]);
    }
    args.extend(["--chdir".to_string(), cwd.to_string_lossy().into_owned()]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_bind_writable_paths_after_the_read_only_root() {
        let args = arguments(
            &[PathBuf::from("/w s"), PathBuf::from("/t")],
            &[
                PathBuf::from("/w s/.git"),
                PathBuf::from("/w s/attest.toml"),
            ],
            true,
            Path::new("/w s"),
        );
        let joined = args.join(" ");
        let ro = joined.find("--ro-bind / /").unwrap();
        let rw = joined.find("--bind /w s /w s").unwrap();
        assert!(ro < rw, "{joined}");
        // Protected paths are bound read-only after (over) the workspace.
        let git = joined.find("--ro-bind /w s/.git /w s/.git").unwrap();
        assert!(rw < git, "{joined}");
        assert!(joined.contains("--ro-bind /w s/attest.toml /w s/attest.toml"));
        assert!(joined.contains("--bind /t /t"));
        assert!(joined.contains("--unshare-net"));
        assert!(joined.ends_with("--chdir /w s"), "{joined}");
        assert!(!arguments(&[], &[], false, Path::new("/")).contains(&"--unshare-net".to_string()));
    }

    #[test]
    fn bwrap_is_looked_for_only_on_the_search_path_given() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(b.path().join("bwrap"), "").unwrap();
        let both = std::env::join_paths([a.path(), b.path()]).unwrap();
        assert_eq!(find_in(&both, "bwrap"), Some(b.path().join("bwrap")));
        assert_eq!(find_in(a.path().as_os_str(), "bwrap"), None);
        // A relative entry (here one that leads to `b` from the current
        // directory) is never searched.
        let up = std::env::current_dir().unwrap().components().count() - 1;
        let relative: PathBuf = std::iter::repeat_n(Path::new(".."), up)
            .collect::<PathBuf>()
            .join(b.path().strip_prefix("/").unwrap());
        assert!(relative.join("bwrap").is_file(), "{}", relative.display());
        assert_eq!(find_in(relative.as_os_str(), "bwrap"), None);
        // Found, but not a working bubblewrap: not used.
        assert_eq!(find_working(&both), None);
    }
}
