//! The text tool-call parser ([`attest_providers::tool_call_format`]) against
//! the `canitoolcall` conformance fixtures (PyPI package `canitoolcall`
//! 0.1.1, Apache-2.0 code; the fixtures carry their own licences, so they
//! are fetched, never committed).
//!
//! Where the fixtures come from: `ATTEST_CANITOOLCALL_DIR` (the unpacked
//! wheel, as `.ci/run` leaves it), else the cache
//! (`~/.cache/attest/canitoolcall-0.1.1`), fetched on first run with
//! `pip download --no-deps canitoolcall==0.1.1`.
//!
//! Families claimed: `qwen3-hermes` (all fixtures) and the JSON format of
//! `llama` (fixtures tagged `x-llama-json`). Every claimed fixture must pass
//! (a soft pass — equal after trimming whitespace — counts as a pass); the
//! others are counted and printed, not asserted. A protocol violation
//! returns no calls and no content, so it satisfies `no_tool_calls` and
//! `exception`.

use attest_local::fetch::default_cache_dir;
use attest_protocol::{EffectClass, ToolSpec};
use attest_providers::tool_call_format::{parse, ParseOptions};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "0.1.1";

fn fixtures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ATTEST_CANITOOLCALL_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        let fixtures = dir.join("canitoolcall/_data/fixtures");
        assert!(
            fixtures.is_dir(),
            "ATTEST_CANITOOLCALL_DIR={} holds no canitoolcall/_data/fixtures; unpack the wheel there:\n  {}",
            dir.display(),
            manual(&dir)
        );
        return fixtures;
    }
    let models = default_cache_dir(&|v| std::env::var(v).ok());
    let dir = models
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| models.clone())
        .join(format!("canitoolcall-{VERSION}"));
    let fixtures = dir.join("canitoolcall/_data/fixtures");
    if !fixtures.is_dir() {
        if let Err(e) = fetch(&dir) {
            panic!(
                "the canitoolcall fixtures are not in {} and could not be fetched: {e}\nFetch them by hand:\n  {}",
                dir.display(),
                manual(&dir)
            );
        }
    }
    fixtures
}

fn manual(dir: &Path) -> String {
    format!(
        "pip download --no-deps canitoolcall=={VERSION} -d /tmp/cit && python3 -m zipfile -e /tmp/cit/canitoolcall-{VERSION}-py3-none-any.whl {}",
        dir.display()
    )
}

fn fetch(dir: &Path) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let run = |cmd: &mut Command| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{cmd:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "-q", "-d"])
        .arg(tmp.path())
        .arg(format!("canitoolcall=={VERSION}")))?;
    let wheel = tmp
        .path()
        .join(format!("canitoolcall-{VERSION}-py3-none-any.whl"));
    let staging = dir.with_extension(format!("partial.{}", std::process::id()));
    run(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&staging))?;
    std::fs::rename(&staging, dir).map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Pass,
    SoftPass,
    Fail,
}

/// JSON equality where `1` and `1.0` are the same number.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// `null` and `""` are both "absent".
fn text_status(expected: &Value, got: &str) -> Status {
    let want = expected.as_str().unwrap_or("");
    if want == got {
        Status::Pass
    } else if want.trim() == got.trim() {
        Status::SoftPass
    } else {
        Status::Fail
    }
}

fn tools_of(fixture: &Value) -> Vec<ToolSpec> {
    fixture["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let f = &t["function"];
            Some(ToolSpec {
                name: f["name"].as_str()?.to_string(),
                description: f["description"].as_str().unwrap_or("").to_string(),
                parameters: f["parameters"].clone(),
                effect: EffectClass::Observe,
            })
        })
        .collect()
}

fn judge(fixture: &Value) -> (Status, String) {
    let tags: Vec<&str> = fixture["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let raw = fixture["raw_output"].as_str().unwrap_or("");
    let prefilled = tags.contains(&"reasoning-prefilled")
        || fixture["generation_prompt"]
            .as_str()
            .is_some_and(|g| g.trim_end().ends_with("<think>"));
    let opts = ParseOptions {
        truncated: tags.contains(&"truncated"),
        reasoning_prefilled: prefilled,
    };
    let result = parse(raw, &tools_of(fixture), opts);
    if let Some(err) = fixture.get("expected_error").filter(|v| !v.is_null()) {
        let accept: Vec<&str> = err["accept"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        return match &result {
            Err(v) if accept.contains(&"no_tool_calls") || accept.contains(&"exception") => {
                (Status::Pass, format!("violation: {}", v.detail))
            }
            Err(v) => (
                Status::Fail,
                format!("violation, accepts {accept:?}: {}", v.detail),
            ),
            Ok(p) if !p.calls.is_empty() => (Status::Fail, format!("returned calls {:?}", p.calls)),
            Ok(p) if accept.contains(&"content_passthrough") && p.content == raw => {
                (Status::Pass, "passthrough".into())
            }
            Ok(p) if accept.contains(&"content_passthrough") && p.content.trim() == raw.trim() => {
                (Status::SoftPass, "passthrough (trimmed)".into())
            }
            Ok(_) if accept.contains(&"no_tool_calls") => (Status::Pass, "no calls".into()),
            Ok(p) => (
                Status::Fail,
                format!("content {:?}, accepts {accept:?}", p.content),
            ),
        };
    }
    let expected = &fixture["expected"];
    let parsed = match result {
        Ok(p) => p,
        Err(v) => return (Status::Fail, format!("violation: {}", v.detail)),
    };
    let want_calls = expected["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if want_calls.len() != parsed.calls.len() {
        return (
            Status::Fail,
            format!(
                "{} calls, expected {}: {:?}",
                parsed.calls.len(),
                want_calls.len(),
                parsed.calls
            ),
        );
    }
    for (want, got) in want_calls.iter().zip(&parsed.calls) {
        let args: Value = serde_json::from_str(&got.arguments).unwrap_or(Value::Null);
        if want["name"].as_str() != Some(got.name.as_str()) || !json_eq(&want["arguments"], &args) {
            return (Status::Fail, format!("call {got:?}, expected {want}"));
        }
    }
    let content = text_status(&expected["content"], &parsed.content);
    let reasoning = text_status(
        &expected["reasoning_content"],
        parsed.reasoning.as_deref().unwrap_or(""),
    );
    let status = content.max(reasoning);
    (
        status,
        format!(
            "content {:?} reasoning {:?}",
            parsed.content, parsed.reasoning
        ),
    )
}

fn claimed(family: &str, fixture: &Value) -> bool {
    let tags: Vec<&str> = fixture["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match family {
        "qwen3-hermes" => true,
        "llama" => tags.contains(&"x-llama-json"),
        _ => false,
    }
}

#[test]
fn canitoolcall_fixtures_of_the_claimed_families_pass() {
    let dir = fixtures_dir();
    // family -> [pass, soft, fail] for claimed and other fixtures
    let mut counts: BTreeMap<(String, bool), [usize; 3]> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut families: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    families.sort();
    let mut total = 0;
    for fam_dir in families {
        let family = fam_dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&fam_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        for file in files {
            for line in std::fs::read_to_string(&file)
                .unwrap()
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                let fixture: Value = serde_json::from_str(line).unwrap();
                total += 1;
                let is_claimed = claimed(&family, &fixture);
                let (status, note) = judge(&fixture);
                let c = counts.entry((family.clone(), is_claimed)).or_default();
                c[status as usize] += 1;
                if is_claimed && status == Status::Fail {
                    failures.push(format!("{}: {note}", fixture["id"].as_str().unwrap_or("?")));
                }
            }
        }
    }
    eprintln!("canitoolcall {VERSION}: {total} fixtures");
    eprintln!(
        "{:<14} {:<8} {:>5} {:>5} {:>5}",
        "family", "claimed", "pass", "soft", "fail"
    );
    for ((family, is_claimed), [p, s, f]) in &counts {
        eprintln!(
            "{family:<14} {:<8} {p:>5} {s:>5} {f:>5}",
            if *is_claimed { "yes" } else { "no" }
        );
    }
    assert!(
        total >= 400,
        "only {total} fixtures found in {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} claimed fixtures fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
