//! Escape attempts through the `shell` tool under each mechanism this
//! machine has. Every attempt must fail *and* leave no trace outside; a
//! control run without the sandbox shows the same attempts would succeed,
//! so the checks can see an escape.

use super::*;
use crate::{builtin_tools, Tool, ToolContext, ToolOutput, Workspace};
use serde_json::json;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Fixture {
    _base: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    ctx: ToolContext,
    sandbox: Option<Arc<Sandbox>>,
    label: String,
}

fn shell_tool(sandbox: Option<Arc<Sandbox>>) -> Arc<dyn Tool> {
    builtin_tools(sandbox)
        .into_iter()
        .find(|t| t.spec().name == "shell")
        .expect("the shell tool is built in")
}

fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

impl Fixture {
    fn new(mode: SandboxMode, caps: Option<(&Capabilities, Mechanism)>) -> Fixture {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let outside = base.path().join("outside");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(ws.join("inside.txt"), "inside").unwrap();
        std::fs::write(outside.join("target.txt"), "original").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        let workspace = Workspace::new(&ws).unwrap();
        let ws = workspace.root().to_path_buf();
        let outside = outside.canonicalize().unwrap();
        let (sandbox, label) = match caps {
            Some((caps, mechanism)) => {
                let sandbox =
                    Sandbox::build(SandboxOptions::new(mode), &ws, caps, Some(mechanism)).unwrap();
                let label = format!(
                    "{} ({:?}, netns {:?}, mountns {:?})",
                    mechanism.as_str(),
                    mode,
                    caps.netns,
                    caps.mountns
                );
                assert_eq!(sandbox.report().mechanism, Some(mechanism.as_str()));
                (Some(Arc::new(sandbox)), label)
            }
            None => (None, "no sandbox (control)".to_string()),
        };
        let ctx = ToolContext::new(workspace);
        Fixture {
            _base: base,
            ws,
            outside,
            ctx,
            sandbox,
            label,
        }
    }

    async fn run(&self, command: &str) -> ToolOutput {
        shell_tool(self.sandbox.clone())
            .execute(json!({ "command": command }), &self.ctx)
            .await
    }

    fn target(&self) -> String {
        std::fs::read_to_string(self.outside.join("target.txt")).unwrap()
    }
}

/// The mechanisms to test here, each with the capabilities to force it.
fn mechanisms() -> Vec<(Capabilities, Mechanism)> {
    let caps = capabilities(&default_search_path());
    let mut out = Vec::new();
    if caps.bwrap.is_some() {
        out.push((caps.clone(), Mechanism::Bubblewrap));
    }
    if caps.landlock_abi > 0 {
        out.push((caps.clone(), Mechanism::Landlock));
        if caps.netns != Netns::Unavailable && caps.landlock_abi >= 4 {
            // Landlock alone must hold the network (TCP) and the
            // protected paths too.
            out.push((
                Capabilities {
                    netns: Netns::Unavailable,
                    mountns: Netns::Unavailable,
                    ..caps.clone()
                },
                Mechanism::Landlock,
            ));
        }
    }
    out
}

/// Asserts on `detect` and says why, when there is nothing to test.
fn nothing_to_test() -> bool {
    if !mechanisms().is_empty() {
        return false;
    }
    let report = Sandbox::detect(SandboxMode::WorkspaceWrite);
    println!(
        "skipping the sandbox escape battery: no sandbox mechanism on this machine ({})",
        report.note
    );
    assert_eq!(report.mechanism, None);
    assert!(!report.filesystem_confined);
    assert!(report.shell_requires_approval());
    true
}

fn assert_blocked(f: &Fixture, what: &str, out: &ToolOutput) {
    assert!(
        !out.success,
        "{}: {what} succeeded: {}",
        f.label, out.output
    );
}

#[tokio::test]
async fn writes_outside_the_workspace_fail() {
    if nothing_to_test() {
        return;
    }
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::WorkspaceWrite, Some((&caps, mechanism)));
        let out_abs = f.outside.join("abs.txt");
        let root_probe = PathBuf::from("/").join(unique("attest-sandbox-probe"));
        let tmp_probe = PathBuf::from("/tmp").join(unique("attest-sandbox-probe"));
        let attempts: Vec<(&str, String, Vec<PathBuf>)> = vec![
            (
                "absolute path",
                format!("echo pwn > '{}'", out_abs.display()),
                vec![out_abs.clone()],
            ),
            (
                "../",
                "echo pwn > ../outside/dotdot.txt".into(),
                vec![f.outside.join("dotdot.txt")],
            ),
            (
                "../ beside the workspace",
                "echo pwn > ../escape.txt".into(),
                vec![f.ws.parent().unwrap().join("escape.txt")],
            ),
            (
                "symlink out of the workspace",
                "echo pwn > link/sym.txt".into(),
                vec![f.outside.join("sym.txt")],
            ),
            (
                "cd /",
                format!(
                    "cd / && touch {}",
                    root_probe.file_name().unwrap().to_string_lossy()
                ),
                vec![root_probe.clone()],
            ),
            (
                "/tmp",
                format!("echo pwn > {}", tmp_probe.display()),
                vec![tmp_probe.clone()],
            ),
            (
                "mv out",
                format!("mv inside.txt '{}'", f.outside.join("moved.txt").display()),
                vec![f.outside.join("moved.txt")],
            ),
            (
                "cp out",
                format!("cp inside.txt '{}'", f.outside.join("copied.txt").display()),
                vec![f.outside.join("copied.txt")],
            ),
            (
                "mkdir out",
                format!("mkdir '{}'", f.outside.join("dir").display()),
                vec![f.outside.join("dir")],
            ),
            (
                "overwrite outside",
                format!("echo pwn > '{}'", f.outside.join("target.txt").display()),
                vec![],
            ),
            (
                "delete outside",
                format!("rm -f '{}'", f.outside.join("target.txt").display()),
                vec![],
            ),
            (
                "hard link then write",
                format!(
                    "ln '{}' hl && echo pwn >> hl",
                    f.outside.join("target.txt").display()
                ),
                vec![],
            ),
        ];
        for (what, command, must_not_exist) in attempts {
            let out = f.run(&command).await;
            let escaped: Vec<&PathBuf> = must_not_exist.iter().filter(|p| p.exists()).collect();
            for p in &escaped {
                // Clean up before failing, so one bad run leaves no litter.
                let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
            }
            assert!(
                escaped.is_empty(),
                "{}: {what} escaped: {escaped:?}",
                f.label
            );
            assert_blocked(&f, what, &out);
            assert_eq!(
                f.target(),
                "original",
                "{}: {what} changed a file outside",
                f.label
            );
            assert!(f.outside.join("target.txt").exists(), "{}: {what}", f.label);
        }
        assert!(f.ws.join("inside.txt").exists(), "{}", f.label);
        // The model is told why.
        let out = f.run(&format!("echo pwn > '{}'", out_abs.display())).await;
        assert!(
            out.output.contains("[attest] Commands run in a sandbox"),
            "{}: {}",
            f.label,
            out.output
        );
    }
}

#[tokio::test]
async fn the_workspace_and_tmpdir_stay_writable() {
    if nothing_to_test() {
        return;
    }
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::WorkspaceWrite, Some((&caps, mechanism)));
        let fixed_top =
            f.sandbox.as_ref().unwrap().report().protected_paths == PathProtection::FixedTopLevel;
        // Without a mount namespace, Landlock keeps the root's own entries
        // fixed (the report says so): work one level down there.
        let base = if fixed_top {
            std::fs::create_dir(f.ws.join("work")).unwrap();
            std::fs::write(f.ws.join("work/inside.txt"), "inside").unwrap();
            f.ws.join("work")
        } else {
            f.ws.clone()
        };
        let out = f
            .run(&format!(
                "cd '{}' && mkdir -p sub && echo made > sub/new.txt && mv sub/new.txt moved.txt && rm inside.txt && cat moved.txt",
                base.display()
            ))
            .await;
        assert!(out.success, "{}: {}", f.label, out.output);
        assert!(
            out.output.starts_with("made"),
            "{}: {}",
            f.label,
            out.output
        );
        assert!(base.join("moved.txt").exists());
        assert!(!base.join("inside.txt").exists());
        if capabilities_has("git") {
            // Ids map to themselves, so git's ownership check still passes.
            let out = f
                .run(&format!(
                    "cd '{}' && git init -q . && git add moved.txt && git status --short",
                    base.display()
                ))
                .await;
            assert!(out.success, "{}: {}", f.label, out.output);
            assert!(
                out.output.contains("A  moved.txt"),
                "{}: {}",
                f.label,
                out.output
            );
        }
        let out = f
            .run(r#"echo scratch > "$TMPDIR/s.txt" && cat "$TMPDIR/s.txt" && echo "$TMPDIR" && echo x > /dev/null && echo e > /dev/stderr"#)
            .await;
        assert!(out.success, "{}: {}", f.label, out.output);
        let lines: Vec<&str> = out.output.lines().collect();
        assert_eq!(lines[0], "scratch");
        let sandbox = f.sandbox.as_ref().unwrap();
        let tmp = sandbox.tmp_dir().unwrap();
        assert_eq!(Path::new(lines[1]), tmp, "{}", f.label);
        assert!(
            tmp.join("s.txt").exists(),
            "{}: TMPDIR write did not land in the private dir",
            f.label
        );
    }
}

#[tokio::test]
async fn a_dropped_call_still_kills_the_sandboxed_command() {
    if nothing_to_test() {
        return;
    }
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::WorkspaceWrite, Some((&caps, mechanism)));
        let run = f.run("sleep 1; touch marker");
        let cancelled = tokio::time::timeout(std::time::Duration::from_millis(300), run).await;
        assert!(cancelled.is_err(), "{}", f.label);
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        assert!(
            !f.ws.join("marker").exists(),
            "{}: the command outlived its call",
            f.label
        );
    }
}

#[tokio::test]
async fn read_only_mode_refuses_workspace_writes() {
    if nothing_to_test() {
        return;
    }
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::ReadOnly, Some((&caps, mechanism)));
        let out = f.run("echo pwn > inside.txt").await;
        assert_blocked(&f, "workspace write in read-only mode", &out);
        assert_eq!(
            std::fs::read_to_string(f.ws.join("inside.txt")).unwrap(),
            "inside"
        );
        let out = f.run("cat inside.txt && echo t > \"$TMPDIR/t\"").await;
        assert!(out.success, "{}: {}", f.label, out.output);
    }
}

#[tokio::test]
async fn network_is_off() {
    if nothing_to_test() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let has_bash = Path::new("/bin/bash").exists() || Path::new("/usr/bin/bash").exists();
    let has_curl = capabilities_has("curl");
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::WorkspaceWrite, Some((&caps, mechanism)));
        if has_bash {
            let out = f
                .run(&format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'"))
                .await;
            assert_blocked(&f, "bash /dev/tcp connect", &out);
        }
        if has_curl {
            let out = f
                .run(&format!("curl -sS -m 5 http://127.0.0.1:{port}/"))
                .await;
            assert_blocked(&f, "curl to loopback", &out);
        }
        let out = f
            .run(&format!(
                "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5)'"
            ))
            .await;
        if out.output.contains("not found") {
            continue;
        }
        assert_blocked(&f, "python connect", &out);
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener outside the sandbox got a connection: {other:?}"),
    }
}

#[tokio::test]
async fn udp_is_off_where_the_report_says_the_network_is() {
    if nothing_to_test() {
        return;
    }
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let port = socket.local_addr().unwrap().port();
    if !capabilities_has("python3") {
        println!("skipping the UDP check: no python3 to send with");
        return;
    }
    let send = format!(
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", {port}))'"
    );
    let mut buf = [0u8; 8];
    // Control: unconfined, the datagram arrives.
    let out = Fixture::new(SandboxMode::Off, None).run(&send).await;
    assert!(out.success, "{}", out.output);
    assert!(
        socket.recv_from(&mut buf).is_ok(),
        "the control datagram did not arrive"
    );
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::WorkspaceWrite, Some((&caps, mechanism)));
        let report = f.sandbox.as_ref().unwrap().report().clone();
        if !report.network_isolated {
            // Landlock alone covers TCP only, and says so.
            assert_eq!(report.network, NetworkIsolation::TcpOnly, "{}", f.label);
            continue;
        }
        let _ = f.run(&send).await;
        match socket.recv_from(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("{}: a datagram left the sandbox: {other:?}", f.label),
        }
    }
}

fn capabilities_has(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[tokio::test]
async fn without_a_sandbox_the_same_attempts_succeed() {
    // The control: shows the battery's checks would notice an escape.
    let f = Fixture::new(SandboxMode::Off, None);
    let out = f
        .run("echo pwn > link/sym.txt && echo pwn > ../escape.txt")
        .await;
    assert!(out.success, "{}", out.output);
    assert!(f.outside.join("sym.txt").exists());
    assert!(f.ws.parent().unwrap().join("escape.txt").exists());
}

#[test]
fn detect_matches_the_machine() {
    let caps = capabilities(&default_search_path());
    let report = Sandbox::detect(SandboxMode::WorkspaceWrite);
    println!("sandbox on this machine: {} ({caps:?})", report.note);
    match (&caps.bwrap, caps.landlock_abi) {
        (Some(_), _) => assert_eq!(report.mechanism, Some("bubblewrap")),
        (None, abi) if abi > 0 => assert_eq!(report.mechanism, Some("landlock")),
        _ => {
            assert_eq!(report.mechanism, None);
            assert!(report.shell_requires_approval());
        }
    }
    assert_eq!(report.filesystem_confined, report.mechanism.is_some());
    let off = Sandbox::detect(SandboxMode::Off);
    assert_eq!(off.mechanism, None);
    assert!(!off.shell_requires_approval());
}

#[test]
fn bubblewrap_is_found_only_on_the_search_path_given() {
    let empty = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        search_path: Some(empty.path().as_os_str().to_os_string()),
        ..SandboxOptions::new(SandboxMode::WorkspaceWrite)
    };
    assert_ne!(Sandbox::detect_with(&options).mechanism, Some("bubblewrap"));
    let caps = capabilities(&default_search_path());
    let report = Sandbox::detect_with(&SandboxOptions::new(SandboxMode::WorkspaceWrite));
    assert_eq!(
        report.mechanism == Some("bubblewrap"),
        caps.bwrap.is_some(),
        "{}",
        report.note
    );
    if let Some(bwrap) = &caps.bwrap {
        // Its own directory is enough to find it.
        let dir = bwrap.parent().unwrap().as_os_str().to_os_string();
        let only = SandboxOptions {
            search_path: Some(dir),
            ..SandboxOptions::new(SandboxMode::WorkspaceWrite)
        };
        assert_eq!(Sandbox::detect_with(&only).mechanism, Some("bubblewrap"));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_background_probe_answers_for_its_search_path() {
    // Search paths no other test uses, so no earlier probe answered them.
    let first = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        search_path: Some(first.path().as_os_str().to_os_string()),
        ..SandboxOptions::new(SandboxMode::WorkspaceWrite)
    };
    drop(Sandbox::probe_in_background(&options));
    assert!(super::bwrap_probed(first.path().as_os_str()));

    // A sandbox made while a probe runs waits for it and agrees with it.
    let second = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        search_path: Some(second.path().as_os_str().to_os_string()),
        ..options
    };
    let probe = Sandbox::probe_in_background(&options);
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(options.clone(), ws.path()).unwrap();
    drop(probe);
    assert_eq!(sandbox.report(), &Sandbox::detect_with(&options));
}

#[test]
fn the_temp_dir_goes_with_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox =
        Sandbox::new(SandboxOptions::new(SandboxMode::WorkspaceWrite), dir.path()).unwrap();
    let tmp = sandbox.tmp_dir().unwrap().to_path_buf();
    assert!(tmp.is_dir());
    assert!(sandbox
        .writable_paths()
        .contains(&dir.path().canonicalize().unwrap()));
    drop(sandbox);
    assert!(!tmp.exists());
    let off = Sandbox::new(SandboxOptions::new(SandboxMode::Off), dir.path()).unwrap();
    assert!(off.tmp_dir().is_none());
    assert!(off.writable_paths().is_empty());
    let err = Sandbox::new(
        SandboxOptions {
            writable_roots: vec![dir.path().join("missing")],
            ..SandboxOptions::new(SandboxMode::WorkspaceWrite)
        },
        dir.path(),
    )
    .unwrap_err();
    assert!(matches!(err, SandboxError::WritableRoot { .. }));
}

#[tokio::test]
async fn protected_paths_are_read_only_inside_a_writable_workspace() {
    if nothing_to_test() {
        return;
    }
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::WorkspaceWrite, Some((&caps, mechanism)));
        std::fs::create_dir_all(f.ws.join(".attest")).unwrap();
        std::fs::write(f.ws.join(".attest/attest.db"), "store").unwrap();
        std::fs::write(f.ws.join("attest.toml"), "[run]\n").unwrap();
        std::fs::create_dir_all(f.ws.join(".git/hooks")).unwrap();
        std::fs::write(f.ws.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir(f.ws.join("sub")).unwrap();
        let report = f.sandbox.as_ref().unwrap().report().clone();
        for (what, command) in [
            ("overwrite the store", "echo pwn > .attest/attest.db"),
            ("append to the store", "echo pwn >> ./.attest/attest.db"),
            ("truncate the store", ": > .attest/attest.db"),
            ("delete the store", "rm -f .attest/attest.db"),
            ("add a file to .attest", "echo x > .attest/forged.json"),
            ("move .attest away", "mv .attest gone"),
            ("append to attest.toml", "echo '[sandbox]' >> attest.toml"),
            (
                "replace attest.toml",
                "echo x > new.toml && mv new.toml attest.toml",
            ),
            ("delete attest.toml", "rm -f attest.toml"),
            (
                "write .git/config",
                "echo '[core] fsmonitor = x' >> .git/config",
            ),
            ("add a hook", "echo 'touch pwned' > .git/hooks/pre-commit"),
            ("remove .git", "rm -rf .git"),
        ] {
            let _ = f.run(command).await;
            assert_eq!(
                std::fs::read_to_string(f.ws.join(".attest/attest.db"))
                    .ok()
                    .as_deref(),
                Some("store"),
                "{}: {what}",
                f.label
            );
            assert!(
                !f.ws.join(".attest/forged.json").exists(),
                "{}: {what}",
                f.label
            );
            assert_eq!(
                std::fs::read_to_string(f.ws.join("attest.toml"))
                    .ok()
                    .as_deref(),
                Some("[run]\n"),
                "{}: {what}",
                f.label
            );
            assert_eq!(
                std::fs::read_to_string(f.ws.join(".git/config"))
                    .ok()
                    .as_deref(),
                Some("[core]\n"),
                "{}: {what}",
                f.label
            );
            assert!(
                !f.ws.join(".git/hooks/pre-commit").exists(),
                "{}: {what}",
                f.label
            );
        }
        // Permission changes: a read-only mount refuses them; Landlock
        // alone does not cover them, and the report says so.
        let _ = f.run("chmod 000 .attest/attest.db").await;
        let mode = std::fs::metadata(f.ws.join(".attest/attest.db"))
            .unwrap()
            .permissions();
        let changed = std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777 == 0;
        match report.protected_paths {
            PathProtection::ReadOnlyMounts => {
                assert!(!changed, "{}: chmod changed the store", f.label)
            }
            _ => assert!(
                report
                    .note
                    .contains("permission, owner and timestamp changes"),
                "{}: {}",
                f.label,
                report.note
            ),
        }
        std::fs::set_permissions(
            f.ws.join(".attest/attest.db"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        // The rest of the workspace stays writable.
        let out = f.run("echo ok > sub/new.txt && cat sub/new.txt").await;
        assert!(out.success, "{}: {}", f.label, out.output);
        let out = f.run("echo ok > top.txt").await;
        match report.protected_paths {
            PathProtection::ReadOnlyMounts => {
                assert!(out.success, "{}: {}", f.label, out.output)
            }
            PathProtection::FixedTopLevel => assert!(
                !out.success && !f.ws.join("top.txt").exists(),
                "{}: the report says the root's entries are fixed: {}",
                f.label,
                out.output
            ),
            other => panic!("{}: unexpected protection {other:?}", f.label),
        }
        // The model is told why a write failed.
        let out = f.run("echo pwn > .attest/attest.db").await;
        assert!(
            out.output.contains("read-only"),
            "{}: {}",
            f.label,
            out.output
        );
        // The read-only mounts stayed in the command's own namespace.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(&f.ws.display().to_string()),
            "{}: a mount leaked out: {mounts}",
            f.label
        );
    }
}

#[test]
fn the_report_names_the_protection_this_machine_gives() {
    for (caps, mechanism) in mechanisms() {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::build(
            SandboxOptions::new(SandboxMode::WorkspaceWrite),
            dir.path(),
            &caps,
            Some(mechanism),
        )
        .unwrap();
        let r = sandbox.report();
        println!("{}", r.note);
        let expected = match (mechanism, caps.mountns) {
            (Mechanism::Landlock, Netns::Unavailable) => PathProtection::FixedTopLevel,
            _ => PathProtection::ReadOnlyMounts,
        };
        assert_eq!(r.protected_paths, expected, "{}", r.note);
        assert!(r.note.contains("`.git/` read-only"), "{}", r.note);
        assert!(
            r.note.contains("not confined: reads anywhere"),
            "{}",
            r.note
        );
        let scoped = caps.landlock_abi >= 6 || mechanism == Mechanism::Bubblewrap;
        assert_eq!(r.signals_confined, scoped, "{}", r.note);
    }
}

#[tokio::test]
async fn signals_and_abstract_sockets_stay_inside_where_the_report_says_so() {
    if nothing_to_test() || !capabilities_has("python3") {
        return;
    }
    // A process outside the sandbox that a command must not be able to
    // signal.
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = victim.id();
    let name = unique("attest-abstract");
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    for (caps, mechanism) in mechanisms() {
        let f = Fixture::new(SandboxMode::WorkspaceWrite, Some((&caps, mechanism)));
        let report = f.sandbox.as_ref().unwrap().report().clone();
        if report.signals_confined {
            let out = f.run(&format!("kill -0 {pid}")).await;
            assert!(!out.success, "{}: signalled a process outside", f.label);
        }
        if report.abstract_sockets_confined {
            let out = f
                .run(&format!(
                    "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\")'"
                ))
                .await;
            assert!(
                !out.success,
                "{}: reached an abstract socket: {}",
                f.label, out.output
            );
        }
    }
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the abstract socket outside got a connection"
    );
    let _ = victim.kill();
    let _ = victim.wait();
}
