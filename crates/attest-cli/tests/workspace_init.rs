//! `attest init` and `attest doctor` through the real binary: bootstrap
//! creates the workspace files once and never overwrites the user's; outdated
//! defaults are reported and migrated only on request; the skill catalog and
//! the `skill` tool agree on what the init-made example skill is.

use attest_core::context::bootstrap::{current_default, defaults_for};
use attest_core::context::skill_tool::skill_tool;
use attest_core::context::skills::SkillCatalog;
use attest_core::tool::{ToolContext, Workspace};
use std::collections::BTreeMap;
use std::path::Path;

const FILES: [&str; 5] = [
    "AGENTS.md",
    "SOUL.md",
    "USER.md",
    "skills/example/SKILL.md",
    "attest.toml",
];

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn attest(args: &[&str], dir: &Path) -> Out {
    let out = assert_cmd::Command::cargo_bin("attest")
        .unwrap()
        .args(args)
        .arg("-C")
        .arg(dir)
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("attest-test-config-home"),
        )
        .output()
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every file under `dir` with its bytes: "changes nothing" is checked on
/// the whole tree, not just the managed files.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn old_agents() -> &'static str {
    defaults_for("AGENTS.md").next().unwrap().content
}

#[test]
fn init_creates_the_files_once_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let out = attest(&["init"], &ws);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for file in FILES {
        assert_eq!(
            std::fs::read_to_string(ws.join(file)).unwrap(),
            current_default(file).unwrap().content,
            "{file}"
        );
        assert!(
            out.stdout.contains(&format!("created {file}")),
            "{}",
            out.stdout
        );
    }
    let doctor = attest(&["doctor"], &ws);
    assert_eq!(doctor.code, 0, "{}{}", doctor.stdout, doctor.stderr);
    assert!(
        doctor.stdout.contains("skills: example"),
        "{}",
        doctor.stdout
    );

    // A second init changes nothing.
    let before = snapshot(&ws);
    let out = attest(&["init"], &ws);
    assert_eq!(out.code, 0);
    assert!(!out.stdout.contains("created"), "{}", out.stdout);
    assert_eq!(snapshot(&ws), before);

    // User edits survive init, byte for byte, with or without --migrate.
    let mine = "# My project\n\nRun `just test`.\n";
    std::fs::write(ws.join("AGENTS.md"), mine).unwrap();
    std::fs::write(ws.join("SOUL.md"), "").unwrap();
    std::fs::remove_file(ws.join("USER.md")).unwrap();
    for args in [&["init"][..], &["init", "--migrate", "--yes"][..]] {
        let out = attest(args, &ws);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        assert_eq!(
            std::fs::read(ws.join("AGENTS.md")).unwrap(),
            mine.as_bytes()
        );
    }
    // The empty file was filled and the missing one recreated.
    for file in ["SOUL.md", "USER.md"] {
        assert_eq!(
            std::fs::read_to_string(ws.join(file)).unwrap(),
            current_default(file).unwrap().content
        );
    }
    let doctor = attest(&["doctor"], &ws);
    assert_eq!(doctor.code, 0, "{}", doctor.stdout);
    assert!(doctor.stdout.contains("AGENTS.md"), "{}", doctor.stdout);
    assert!(doctor.stdout.contains("customized"), "{}", doctor.stdout);
}

#[test]
fn outdated_default_is_reported_and_migrated_only_with_yes() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    assert_eq!(attest(&["init"], ws).code, 0);
    std::fs::write(ws.join("AGENTS.md"), old_agents()).unwrap();
    let user = "I prefer tabs.\n";
    std::fs::write(ws.join("USER.md"), user).unwrap();

    let doctor = attest(&["doctor"], ws);
    assert_eq!(doctor.code, 1, "{}{}", doctor.stdout, doctor.stderr);
    let line = doctor
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("AGENTS.md"))
        .unwrap();
    assert!(line.contains("outdated default (2026.10.1"), "{line}");
    assert!(line.contains("attest init --migrate"), "{line}");
    // Plain init leaves it, and says so.
    let before = snapshot(ws);
    let out = attest(&["init"], ws);
    assert_eq!(out.code, 0);
    assert!(
        out.stdout.contains("older attest default"),
        "{}",
        out.stdout
    );
    assert_eq!(snapshot(ws), before);

    // --migrate without --yes and without a terminal: the diff, no change.
    let out = attest(&["init", "--migrate"], ws);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("--- AGENTS.md (default 2026.10.1)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("+++ AGENTS.md (default 2026.11.1)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\n+- Lint and format"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("re-run with `attest init --migrate --yes`"),
        "{}",
        out.stdout
    );
    assert_eq!(snapshot(ws), before);

    // With --yes: that file only.
    let out = attest(&["init", "--migrate", "--yes"], ws);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("updated AGENTS.md (default 2026.10.1 -> 2026.11.1)"),
        "{}",
        out.stdout
    );
    let after = snapshot(ws);
    let changed: Vec<&String> = after
        .keys()
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert_eq!(changed, ["AGENTS.md"]);
    assert_eq!(before.len(), after.len());
    assert_eq!(
        std::fs::read_to_string(ws.join("AGENTS.md")).unwrap(),
        current_default("AGENTS.md").unwrap().content
    );
    assert_eq!(std::fs::read_to_string(ws.join("USER.md")).unwrap(), user);
    assert_eq!(attest(&["doctor"], ws).code, 0);
}

#[test]
fn doctor_flags_missing_files_and_broken_skills_and_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let doctor = attest(&["doctor"], ws);
    assert_eq!(doctor.code, 1, "{}", doctor.stdout);
    assert!(
        doctor.stdout.contains("`attest init` would create it"),
        "{}",
        doctor.stdout
    );

    assert_eq!(attest(&["init"], ws).code, 0);
    std::fs::create_dir_all(ws.join("skills/broken")).unwrap();
    std::fs::write(ws.join("skills/broken/SKILL.md"), "no front matter\n").unwrap();
    let doctor = attest(&["doctor"], ws);
    assert_eq!(doctor.code, 1, "{}", doctor.stdout);
    assert!(
        doctor
            .stdout
            .contains("problem: `skills/broken/SKILL.md` is malformed"),
        "{}",
        doctor.stdout
    );
    assert!(
        doctor.stdout.contains("skills: example"),
        "{}",
        doctor.stdout
    );

    let missing = ws.join("a-file");
    std::fs::write(&missing, "x").unwrap();
    let out = attest(&["doctor"], &missing);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("not usable"), "{}", out.stderr);
    let out = attest(&["init"], &missing);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);

    let out = attest(&["init", "--yes"], ws);
    assert_eq!(out.code, 2, "--yes needs --migrate: {}", out.stderr);
}

#[tokio::test]
async fn skill_tool_returns_the_body_and_the_catalog_never_does() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    assert_eq!(attest(&["init"], ws).code, 0);
    std::fs::create_dir_all(ws.join("skills/deploy")).unwrap();
    let deploy = "---\nname: deploy\ndescription: Deploy the web app to production.\n---\n# Deploy\nssh deploy@prod-7.internal.example 'make release'\n";
    std::fs::write(ws.join("skills/deploy/SKILL.md"), deploy).unwrap();

    let catalog = SkillCatalog::load(ws);
    assert!(catalog.problems.is_empty(), "{:?}", catalog.problems);
    let text = catalog.render();
    assert!(
        text.contains("- deploy: Deploy the web app to production.\n"),
        "{text}"
    );
    assert!(text.contains("- example: "), "{text}");
    assert!(text.contains("load it with the `skill` tool"), "{text}");
    assert!(!text.contains("prod-7.internal.example"), "{text}");
    assert!(!text.contains("# Example skill"), "{text}");

    let ctx = ToolContext::new(Workspace::new(ws).unwrap());
    let tool = skill_tool();
    let out = tool
        .execute(serde_json::json!({"name": "deploy"}), &ctx)
        .await;
    assert!(out.success, "{out:?}");
    assert_eq!(
        out.output,
        "# Deploy\nssh deploy@prod-7.internal.example 'make release'\n"
    );
    assert_eq!(out.evidence.path.as_deref(), Some("skills/deploy/SKILL.md"));
    assert_eq!(out.evidence.size_bytes, Some(deploy.len() as u64));
    let body = SkillCatalog::body(ws, "deploy").unwrap();
    assert_eq!(out.evidence.sha256.as_deref(), Some(body.sha256.as_str()));
    assert_eq!(out.output, body.body);

    let out = tool
        .execute(serde_json::json!({"name": "example"}), &ctx)
        .await;
    assert!(out.success);
    assert!(
        out.output
            .starts_with("<!-- attest-default skills/example/SKILL.md"),
        "{}",
        out.output
    );

    let out = tool
        .execute(serde_json::json!({"name": "nope"}), &ctx)
        .await;
    assert!(!out.success);
    assert_eq!(
        out.output,
        "unknown skill `nope`; available skills: deploy, example"
    );
}
