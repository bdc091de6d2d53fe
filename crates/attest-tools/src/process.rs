//! Running a child process for the `shell` tool and command tools.
//!
//! The child runs in a session (and so a process group) of its own so that
//! everything it starts (`sh -c "a | b"`, `x &`) can be killed together: on
//! timeout, when the future running it is dropped (the registry's timeout,
//! a cancelled run), and once the main process has exited, so that a
//! leftover background job neither outlives the call nor holds the output
//! pipes open. A new session also has no controlling terminal: a command
//! cannot prompt on the user's terminal (`sudo`, `ssh`) or push input into
//! it.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// A child process for a tool, in the workspace root: inside `sandbox`
/// when given one, with the tools' environment (and the sandbox's private
/// `TMPDIR`). The one place a tool's process is built.
pub fn tool_command(
    ctx: &attest_core::tool::ToolContext,
    sandbox: Option<&crate::Sandbox>,
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
) -> Result<Command, crate::sandbox::SandboxError> {
    let root = ctx.workspace.root();
    let mut cmd = match sandbox {
        Some(sandbox) => sandbox.command(program, args, root)?,
        None => {
            let mut cmd = Command::new(program);
            cmd.args(args).current_dir(root);
            cmd
        }
    };
    ctx.apply_env(&mut cmd);
    if let Some(tmp) = sandbox.and_then(|s| s.tmp_dir()) {
        for var in ["TMPDIR", "TMP", "TEMP"] {
            cmd.env(var, tmp);
        }
    }
    Ok(cmd)
}

/// Start `cmd` in a session (and process group) of its own, so that
/// [`GroupKill`] ends everything it starts.
pub(crate) fn in_new_session(cmd: &mut Command) {
    #[cfg(unix)]
    // SAFETY: setsid is async-signal-safe and touches no memory. It runs
    // after any sandbox setup the caller registered.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    #[cfg(not(unix))]
    let _ = cmd;
}

/// How long [`spawn`] waits before each new try while the program is busy.
const BUSY_RETRY_DELAYS_MS: [u64; 7] = [1, 2, 4, 8, 16, 32, 64];

/// `cmd.spawn()`, tried again while Linux says the program is busy
/// (`ETXTBSY`). A script that was just written (a tool wrote it, a test set
/// it up) is busy for as long as any process still has it open for writing,
/// and a child forked at that moment by another thread of this process
/// inherits that descriptor until it execs. That window is short, so a few
/// tries within about 130 ms outlast it; anything else fails at once.
pub(crate) async fn spawn(cmd: &mut Command) -> io::Result<tokio::process::Child> {
    let mut delays = BUSY_RETRY_DELAYS_MS.iter();
    loop {
        match cmd.spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy => match delays.next() {
                Some(&ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                None => return Err(e),
            },
            other => return other,
        }
    }
}

/// Output of a process that exited.
#[derive(Debug)]
pub(crate) struct Finished {
    pub status: ExitStatus,
    /// At most the cap given to [`run`].
    pub stdout: Vec<u8>,
    pub stdout_total: u64,
    pub stderr: Vec<u8>,
    pub stderr_total: u64,
}

#[derive(Debug)]
pub(crate) enum RunResult {
    Finished(Finished),
    TimedOut,
    /// The process could not be started (program missing, not executable).
    SpawnFailed(io::Error),
    /// Waiting for it failed; rare, an OS-level fault.
    WaitFailed(io::Error),
}

/// Runs `cmd` to completion. `stdin` is written then closed (null when
/// `None`); each output stream keeps at most `cap` bytes but is drained to
/// the end so the child never blocks on a full pipe.
pub(crate) async fn run(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    cap: usize,
) -> RunResult {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    in_new_session(&mut cmd);

    let mut child = match spawn(&mut cmd).await {
        Ok(child) => child,
        Err(e) => return RunResult::SpawnFailed(e),
    };
    let group = GroupKill::new(child.id());
    let stdin_pipe = child.stdin.take();
    let stdout_pipe = child.stdout.take();
    let stderr_pipe = child.stderr.take();

    let write_stdin = async move {
        if let (Some(mut pipe), Some(data)) = (stdin_pipe, stdin) {
            // A child that exits without reading gives a broken pipe; its
            // exit status says what happened, so the write error is moot.
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        }
    };
    let wait = async {
        let status = child.wait().await;
        // The main process is done: end whatever it left behind so the
        // pipes close and the readers finish.
        group.kill();
        status
    };
    let all = async {
        tokio::join!(
            wait,
            read_capped(stdout_pipe, cap),
            read_capped(stderr_pipe, cap),
            write_stdin
        )
    };
    let joined = match timeout {
        Some(limit) => match tokio::time::timeout(limit, all).await {
            Ok(joined) => joined,
            // `group` is dropped on return and kills the whole group.
            Err(_) => return RunResult::TimedOut,
        },
        None => all.await,
    };
    let (status, (stdout, stdout_total), (stderr, stderr_total), ()) = joined;
    match status {
        Ok(status) => RunResult::Finished(Finished {
            status,
            stdout,
            stdout_total,
            stderr,
            stderr_total,
        }),
        Err(e) => RunResult::WaitFailed(e),
    }
}

/// Reads a stream to its end, keeping the first `cap` bytes.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, cap: usize) -> (Vec<u8>, u64) {
    let Some(mut pipe) = pipe else {
        return (Vec::new(), 0);
    };
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n as u64;
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, total)
}

/// Kills a child's process group, on demand and on drop.
pub(crate) struct GroupKill {
    pgid: Option<u32>,
    done: std::sync::atomic::AtomicBool,
}

impl GroupKill {
    pub(crate) fn new(pgid: Option<u32>) -> Self {
        GroupKill {
            pgid,
            done: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn kill(&self) {
        if self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        #[cfg(unix)]
        if let Some(pgid) = self.pgid {
            // No libc dependency here, so the shell's `kill` builtin does
            // it; a group that is already gone makes it fail harmlessly.
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("kill -KILL -{pgid} 2>/dev/null"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A short description of how a process ended, for messages.
pub(crate) fn describe_status(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("signal {signal}");
        }
    }
    status.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        cmd
    }

    #[tokio::test]
    async fn captures_both_streams_and_status() {
        let RunResult::Finished(f) =
            run(sh("echo out; echo err >&2; exit 3"), None, None, 100).await
        else {
            panic!("expected finished");
        };
        assert_eq!(f.status.code(), Some(3));
        assert_eq!(f.stdout, b"out\n");
        assert_eq!(f.stderr, b"err\n");
    }

    #[tokio::test]
    async fn caps_output_but_counts_all_of_it() {
        let RunResult::Finished(f) = run(sh("yes | head -c 100000"), None, None, 10).await else {
            panic!("expected finished");
        };
        assert_eq!(f.stdout.len(), 10);
        assert_eq!(f.stdout_total, 100000);
    }

    #[tokio::test]
    async fn feeds_stdin() {
        let RunResult::Finished(f) = run(sh("cat"), Some(b"hello".to_vec()), None, 100).await
        else {
            panic!("expected finished");
        };
        assert_eq!(f.stdout, b"hello");
    }

    #[tokio::test]
    async fn background_job_does_not_hold_the_call_open() {
        let start = Instant::now();
        let r = run(
            sh("sleep 30 & echo done"),
            None,
            Some(Duration::from_secs(10)),
            100,
        )
        .await;
        let RunResult::Finished(f) = r else {
            panic!("expected finished, got {r:?}");
        };
        assert_eq!(f.stdout, b"done\n");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn times_out() {
        let start = Instant::now();
        let r = run(sh("sleep 30"), None, Some(Duration::from_millis(200)), 100).await;
        assert!(matches!(r, RunResult::TimedOut), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn timeout_kills_grandchildren_too() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        let script = format!("(sleep 1; touch '{}') & wait", marker.display());
        let r = run(sh(&script), None, Some(Duration::from_millis(200)), 100).await;
        assert!(matches!(r, RunResult::TimedOut), "{r:?}");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !marker.exists(),
            "the background subshell survived the timeout"
        );
    }

    /// A script that prints "started", still open for writing as a child
    /// forked by another thread would hold it: exec fails with ETXTBSY
    /// until the returned handle is gone.
    #[cfg(target_os = "linux")]
    fn busy_script() -> (tempfile::TempDir, std::path::PathBuf, std::fs::File) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\necho started\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let writer = std::fs::OpenOptions::new()
            .append(true)
            .open(&script)
            .unwrap();
        (dir, script, writer)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_program_busy_for_a_moment_still_starts() {
        let (_dir, script, writer) = busy_script();
        let err = std::process::Command::new(&script).output().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ExecutableFileBusy);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(writer);
        });
        let r = run(Command::new(&script), None, None, 100).await;
        release.join().unwrap();
        let RunResult::Finished(f) = r else {
            panic!("expected finished, got {r:?}");
        };
        assert_eq!(f.stdout, b"started\n");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_program_that_stays_busy_is_reported() {
        let (_dir, script, _writer) = busy_script();
        let r = run(Command::new(&script), None, None, 100).await;
        let RunResult::SpawnFailed(e) = r else {
            panic!("expected a spawn failure, got {r:?}");
        };
        assert_eq!(e.kind(), io::ErrorKind::ExecutableFileBusy);
    }

    #[tokio::test]
    async fn spawn_failure_is_reported() {
        let r = run(Command::new("/nonexistent/program"), None, None, 100).await;
        assert!(matches!(r, RunResult::SpawnFailed(_)), "{r:?}");
    }
}
