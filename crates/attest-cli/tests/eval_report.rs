//! The eval pipeline end to end on the boundary pack (scheduler, grader,
//! metrics, result file), then `attest eval report` and `attest eval
//! compare` through the binary, and the HTML checked in headless Chromium:
//! it renders without console messages, shows the result file's numbers in
//! its DOM, and a `<script>` in a model answer stays text. The screenshot
//! is kept under the test's target directory.
//!
//! Chromium is required: the test installs Debian's `chromium` with apt
//! when it is missing (`.ci/run` does too); `ATTEST_CHROMIUM` names another
//! binary.

mod eval_support;

use assert_cmd::Command;
use attest_cli::eval::boundary::RuleGrader;
use attest_cli::eval::group::Group;
use attest_cli::eval::report_json::{EvalResult, ResultStatus};
use attest_cli::eval::scheduler::{run_eval, EvalPlan};
use attest_cli::eval::suite::Suite;
use attest_cli::eval::table::cell;
use eval_support::{repo_root, ScriptRunner};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

const HOSTILE: &str = "<script>document.title='pwned';console.error('injected')</script><img src=x onerror=\"document.title='pwned'\">";

/// Run the boundary pack with the script runner into `dir/r.json`, then
/// plant a hostile answer in one attempt.
async fn boundary_result(dir: &Path) -> (PathBuf, EvalResult) {
    let suite = Suite::load(&repo_root().join("examples/eval/boundary/suite.yaml")).unwrap();
    let path = dir.join("r.json");
    let plan = EvalPlan {
        groups: suite.groups.clone(),
        repeat: suite.repeat,
        k: 2,
        jobs: 4,
        work_dir: dir.join("work"),
        result_path: Some(path.clone()),
        retry_infra: false,
        suite: Arc::new(suite),
    };
    let mut result = run_eval(
        &plan,
        Arc::new(ScriptRunner),
        Arc::new(RuleGrader),
        None,
        CancellationToken::new(),
        &|_| {},
    )
    .await
    .unwrap();
    let answer = result.groups[1].cases[0].attempts[1]
        .record
        .answer
        .as_mut()
        .unwrap();
    answer.push_str(HOSTILE);
    result.write(&path).unwrap();
    (path, result)
}

#[tokio::test]
async fn boundary_pack_metrics_from_the_offline_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_, result) = boundary_result(dir.path()).await;
    assert_eq!(result.status, ResultStatus::Complete);
    let full = result.group(Group::Full).unwrap();
    assert_eq!(full.attempts_done, 16);
    let m = |name: &str| full.metrics[name].clone();
    // Six of the seven reckless answers make a forbidden claim; the careful
    // ones make none.
    let safety = m("financial_safety_regression");
    assert_eq!((safety.successes, safety.n), (Some(6), 16));
    // Expected disclosures: the 9 careful answers (trading_halt has no
    // reckless attempt) make them, no reckless one does.
    let disclosure = m("data_limitation_disclosure_rate");
    assert_eq!(
        (disclosure.successes, disclosure.n),
        (Some(9), 16),
        "{disclosure:?}"
    );
    // Provider failure fixtures (provider_failure, fallback_news) × 2.
    let no_data = m("false_no_data_rate");
    assert_eq!((no_data.successes, no_data.n), (Some(1), 4));
    let fallback = m("fallback_disclosure_rate");
    assert_eq!((fallback.successes, fallback.n), (Some(1), 2));
    let stale = m("stale_data_misuse_rate");
    assert_eq!(stale.successes, Some(2), "{stale:?}");
    assert_eq!(m("pass_rate").successes, Some(9));
    // Every case called get_quote and got a receipt.
    assert_eq!(m("receipt_backed_completion_rate").value, Some(1.0));
    assert_eq!(m("first_turn_tool_call_rate").value, Some(1.0));
    assert_eq!(m("ungrounded_value_rate").value, None);
    assert_eq!(m("pass_hat_k").k, Some(2));
    // The same answers in baseline: the harness guard does not change what
    // the model said, so the boundary numbers match.
    let baseline = result.group(Group::Baseline).unwrap();
    assert_eq!(
        baseline.metrics["financial_safety_regression"].successes,
        Some(6)
    );
}

/// Headless Chromium: `ATTEST_CHROMIUM`, or Debian's, installed with apt
/// when missing (as the MCP tests install their servers with npm), once
/// per test binary.
fn chromium() -> PathBuf {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("ATTEST_CHROMIUM") {
                return PathBuf::from(path);
            }
            let installed = || {
                ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
                    .into_iter()
                    .map(PathBuf::from)
                    .find(|p| p.is_file())
            };
            if let Some(path) = installed() {
                return path;
            }
            let root = std::process::Command::new("id")
                .arg("-u")
                .output()
                .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
            let apt = |args: &[&str]| {
                let mut cmd = if root {
                    std::process::Command::new("apt-get")
                } else {
                    let mut c = std::process::Command::new("sudo");
                    c.arg("apt-get");
                    c
                };
                cmd.args(args).status().is_ok_and(|s| s.success())
            };
            let _ = apt(&["update", "-qq"]);
            let _ = apt(&["install", "-y", "-qq", "chromium"]);
            installed().unwrap_or_else(|| {
                panic!(
                    "headless Chromium is required for the HTML report check and was not found \
                     (looked for ATTEST_CHROMIUM, /usr/bin/chromium, /usr/bin/chromium-browser) \
                     and `apt-get install -y chromium` did not provide it"
                )
            })
        })
        .clone()
}

struct Rendered {
    stdout: String,
    console: Vec<String>,
}

/// Run headless Chromium on `page` with `extra` flags (as root it needs
/// --no-sandbox; the background-networking flags keep it off the closed
/// network). Console messages are logged to stderr as `CONSOLE` lines.
fn run_chromium(page: &Path, extra: &[String]) -> Rendered {
    let profile = tempfile::tempdir().unwrap();
    // `timeout` (coreutils) bounds a hung browser; output() reads both
    // pipes while waiting, so a large DOM cannot block it.
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .output()
        .expect("start chromium");
    assert_ne!(
        out.status.code(),
        Some(124),
        "chromium did not finish within 120 s"
    );
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    Rendered {
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        console: stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(str::to_string)
            .collect(),
    }
}

#[test]
fn console_messages_are_detected() {
    // The check below relies on Chromium logging console output; prove it
    // does, with a page that logs an error and one that breaks its CSP.
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("canary.html");
    std::fs::write(
        &page,
        "<!doctype html><html><body><script>console.error('canary-error')</script></body></html>",
    )
    .unwrap();
    let r = run_chromium(&page, &["--dump-dom".into()]);
    assert!(
        r.console.iter().any(|l| l.contains("canary-error")),
        "{:?}",
        r.console
    );
    let csp = dir.path().join("csp.html");
    std::fs::write(
        &csp,
        "<!doctype html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\"></head><body><script>1</script></body></html>",
    )
    .unwrap();
    let r = run_chromium(&csp, &["--dump-dom".into()]);
    assert!(
        r.console
            .iter()
            .any(|l| l.contains("Content Security Policy")),
        "{:?}",
        r.console
    );
}

#[tokio::test]
async fn html_report_renders_in_chromium_with_the_result_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let (path, result) = boundary_result(dir.path()).await;
    let html = dir.path().join("report.html");
    let out = Command::cargo_bin("attest")
        .unwrap()
        .args(["eval", "report"])
        .arg(&path)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("report.html"));

    let dom = run_chromium(&html, &["--dump-dom".into()]);
    assert!(dom.console.is_empty(), "console output: {:#?}", dom.console);
    let text = dom.stdout;
    assert!(
        text.contains("<title>attest eval: financial-boundary</title>"),
        "the hostile answer must not retitle the page"
    );
    assert!(text.contains(r#"id="complete""#));
    for group in &result.groups {
        for (name, metric) in &group.metrics {
            let is_rate = attest_cli::eval::metrics::metric_def(name).unwrap().is_rate;
            let expected = format!(
                r#"<td data-metric="{name}" data-group="{}">{}</td>"#,
                group.name,
                cell(metric, is_rate)
            );
            assert!(text.contains(&expected), "missing from the DOM: {expected}");
        }
    }
    assert!(
        text.contains(r#"<td data-metric="financial_safety_regression" data-group="full">0.375 ["#)
    );
    // The hostile answer is text in the DOM, not elements.
    assert!(
        text.contains(
            "&lt;script&gt;document.title='pwned';console.error('injected')&lt;/script&gt;"
        ),
        "escaped answer missing"
    );
    assert!(
        !text.contains("<script"),
        "a script element reached the DOM"
    );
    assert!(!text.contains("<img"), "an img element reached the DOM");
    // Drill-down: each attempt with its state, reason and trace.
    assert!(text.contains(r#"id="trace-full-stale_quote-1""#));
    assert!(text.contains("run run-full-stale_quote-1"));
    assert!(text.contains("tool get_quote {\"symbol\":\"600519.SH\"} -&gt; \"stale\""));

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("eval_report");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let r = run_chromium(
        &html,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,2400".into(),
        ],
    );
    assert!(r.console.is_empty(), "console output: {:#?}", r.console);
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(
        png.len() > 10_000 && png.starts_with(b"\x89PNG"),
        "{} bytes",
        png.len()
    );
}

#[tokio::test]
async fn compare_reports_differences_with_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = boundary_result(dir.path()).await;
    let json = dir.path().join("cmp.json");
    let out = Command::cargo_bin("attest")
        .unwrap()
        .args(["eval", "compare"])
        .arg(&path)
        .arg(&path)
        .args(["--a-group", "baseline", "--b-group", "full", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("financial_safety_regression"))
        .unwrap();
    assert!(line.starts_with("baseline→full"), "{line}");
    assert!(
        line.contains("+0.000 [") && line.trim_end().ends_with("no"),
        "{line}"
    );
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let d = c["diffs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["metric"] == "receipt_backed_completion_rate")
        .unwrap();
    assert_eq!(d["method"], "newcombe");
    assert_eq!(d["significant"], false);

    let out = Command::cargo_bin("attest")
        .unwrap()
        .args(["eval", "compare"])
        .arg(&path)
        .arg(dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn report_refuses_a_file_that_is_not_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"schema": "something-else/2"}"#).unwrap();
    let out = Command::cargo_bin("attest")
        .unwrap()
        .args(["eval", "report"])
        .arg(&bad)
        .arg("--html")
        .arg(dir.path().join("o.html"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("something-else/2"));
    assert!(!dir.path().join("o.html").exists());
}
