//! The arrows of ARCHITECTURE.md, checked against the real dependency
//! graph: each crate's normal (non-dev) dependencies must not include what
//! its invariant says it must not depend on.

use std::collections::BTreeSet;
use std::process::Command;

/// Every crate `package` depends on (normal edges, all features of the
/// workspace as built), by name.
fn dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .args(["--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deps: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    // The listing starts with the package itself; anything else means the
    // output format changed and every check below would pass vacuously.
    assert!(
        deps.contains(package),
        "unexpected cargo tree output: {deps:?}"
    );
    deps
}

fn assert_absent(package: &str, forbidden: &[&str], why: &str) {
    let deps = dependencies(package);
    let found: Vec<&&str> = forbidden.iter().filter(|f| deps.contains(**f)).collect();
    assert!(
        found.is_empty(),
        "{package} must not depend on {found:?}: {why}"
    );
}

const HTTP: &[&str] = &["reqwest", "hyper", "axum", "eventsource-stream", "wiremock"];
const SQL: &[&str] = &["rusqlite", "libsqlite3-sys", "sqlx", "tokio-postgres"];
const SANDBOX: &[&str] = &["landlock"];
const MODEL: &[&str] = &["candle-core", "tokenizers"];

#[test]
fn the_engine_depends_on_traits_only() {
    let mut forbidden = Vec::new();
    forbidden.extend_from_slice(HTTP);
    forbidden.extend_from_slice(SQL);
    forbidden.extend_from_slice(SANDBOX);
    forbidden.extend_from_slice(MODEL);
    forbidden.extend_from_slice(&[
        "attest-providers",
        "attest-tools",
        "attest-store",
        "attest-local",
        "clap",
    ]);
    assert_absent(
        "attest-core",
        &forbidden,
        "the engine knows no wire format, SQL, sandbox, model runtime or terminal",
    );
}

#[test]
fn the_protocol_crate_is_plain_data() {
    let deps = dependencies("attest-protocol");
    let allowed: BTreeSet<&str> = [
        "attest-protocol",
        "serde",
        "serde_derive",
        "serde_json",
        "chrono",
    ]
    .into_iter()
    .collect();
    let attest_crates: Vec<&String> = deps
        .iter()
        .filter(|d| d.starts_with("attest") && !allowed.contains(d.as_str()))
        .collect();
    assert!(
        attest_crates.is_empty(),
        "attest-protocol depends on {attest_crates:?}"
    );
    for heavy in ["tokio", "async-trait", "reqwest", "rusqlite"] {
        assert!(!deps.contains(heavy), "attest-protocol depends on {heavy}");
    }
}

#[test]
fn implementations_stay_in_their_lanes() {
    let mut not_providers = Vec::new();
    not_providers.extend_from_slice(SQL);
    not_providers.extend_from_slice(SANDBOX);
    not_providers.extend_from_slice(&["attest-tools", "attest-store"]);
    assert_absent(
        "attest-providers",
        &not_providers,
        "providers know wire formats only",
    );

    let mut not_tools = Vec::new();
    not_tools.extend_from_slice(HTTP);
    not_tools.extend_from_slice(SQL);
    not_tools.extend_from_slice(MODEL);
    not_tools.extend_from_slice(&["attest-providers", "attest-store", "attest-local", "attest"]);
    assert_absent(
        "attest-tools",
        &not_tools,
        "tools know no wire format, SQL or model runtime",
    );

    let mut not_store = Vec::new();
    not_store.extend_from_slice(HTTP);
    not_store.extend_from_slice(SANDBOX);
    not_store.extend_from_slice(MODEL);
    not_store.extend_from_slice(&[
        "attest-core",
        "attest-providers",
        "attest-tools",
        "attest-local",
    ]);
    assert_absent(
        "attest-store",
        &not_store,
        "the store stores; it knows no engine",
    );

    assert_absent(
        "attest-local",
        &[SQL, SANDBOX, &["attest-tools", "attest-store"]].concat(),
        "the embedded model is a provider",
    );
}

/// ARCHITECTURE.md's list of each crate's attest dependencies is what the
/// `Cargo.toml` files say.
#[test]
fn the_documented_arrows_are_the_manifests() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(|p| p.parent())
        .unwrap();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut documented = std::collections::BTreeMap::new();
    for line in doc.lines() {
        let Some((from, to)) = line.strip_prefix("- `").and_then(|l| l.split_once(" → ")) else {
            continue;
        };
        let Some(from) = from.strip_suffix('`') else {
            continue;
        };
        let deps: BTreeSet<String> = to
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|name| name.starts_with("attest"))
            .map(str::to_string)
            .collect();
        documented.insert(from.to_string(), deps);
    }
    let mut actual = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let manifest: toml::Value = toml::from_str(&text).unwrap();
        let name = manifest["package"]["name"].as_str().unwrap().to_string();
        let mut tables = vec![manifest.get("dependencies")];
        if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
            tables.extend(targets.values().map(|t| t.get("dependencies")));
        }
        let deps: BTreeSet<String> = tables
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_table())
            .flat_map(|t| t.keys())
            .filter(|k| k.starts_with("attest"))
            .cloned()
            .collect();
        actual.insert(name, deps);
    }
    assert!(actual.len() >= 9, "{actual:?}");
    assert_eq!(
        documented, actual,
        "ARCHITECTURE.md (left) and the Cargo.toml files (right) disagree"
    );
}

#[test]
fn the_checks_see_real_edges() {
    let tools = dependencies("attest-tools");
    assert!(
        tools.contains("attest-core") && tools.contains("landlock"),
        "{tools:?}"
    );
}

#[test]
fn the_facade_knows_no_terminal_or_http_server() {
    assert_absent(
        "attest",
        &["clap", "axum", "attest-server"],
        "front ends own flags and HTTP",
    );
}

/// Reading the environment is the front end's business: below the CLI,
/// settings come from the env lookup and the tool environment a caller
/// passes. What counts as a read: `env::var`, `var_os`, `vars`, `vars_os`
/// and their setters, and `use std::env::{…}` of them. Allowed: `env!` and
/// `option_env!` (compile time), code under `#[cfg(test)]`, and the crates'
/// `tests/`, `examples/` and `benches/` (not scanned).
/// `std::env::temp_dir()` is allowed too: it is the platform's temporary
/// directory (`TMPDIR` on Unix), where every process puts temporary files
/// and the `tempfile` crate does anyway, not a setting of attest.
#[test]
fn nothing_below_the_cli_reads_environment_variables() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let mut scanned = Vec::new();
    let mut reads = Vec::new();
    for entry in std::fs::read_dir(crates).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if name == "attest-cli" || !dir.join("Cargo.toml").is_file() {
            continue;
        }
        for file in rust_files(&dir.join("src")) {
            reads.extend(env_reads(&file));
            scanned.push(name.clone());
        }
    }
    for expected in ["attest", "attest-core", "attest-tools", "attest-local"] {
        assert!(
            scanned.iter().any(|n| n == expected),
            "{expected} was not scanned"
        );
    }
    assert!(
        reads.is_empty(),
        "environment read below the CLI: {reads:#?}"
    );
    // The scan sees the CLI's reads, so it is not passing vacuously.
    let cli = crates.join("attest-cli/src/setup.rs");
    assert!(!env_reads(&cli).is_empty(), "{}", cli.display());
}

#[test]
fn the_environment_scan_skips_test_code_strings_and_comments() {
    let src = r##"
fn live() { let _ = std::env::var_os("A"); }
// std::env::var("IN A COMMENT")
const S: &str = "env::var(";
const R: &str = r#"env::vars()"#;
const C: char = '{';
#[cfg(test)]
mod tests {
    fn t() { std::env::var("T").unwrap(); if true { } }
}
#[cfg(all(test, target_os = "linux"))]
fn helper() { let _ = std::env::vars(); }
fn after<'a>(x: &'a str) -> &'a str { let _ = env::vars_os(); x }
#[cfg(not(test))]
fn release() { let _ = std::env::var("R"); }
pub use env::{ToolEnv, ALLOWED_VARS};
use std::env::{split_paths, vars_os};
#[cfg(test)]
fn array() -> [u8; 4] { let _ = std::env::var("T"); [0; 4] }
"##;
    let found: Vec<usize> = env_reads_in(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, [2, 13, 15, 17], "{found:?}");
    assert_eq!(test_modules(src), Vec::<String>::new());
    assert_eq!(
        test_modules("#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub(crate) mod more;\nmod live;"),
        ["tests", "more"]
    );
}

/// `.rs` files under `dir`, less those only compiled for tests (declared
/// `#[cfg(test)] mod NAME;`).
fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut test_only = BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let src = std::fs::read_to_string(&path).unwrap();
                let stem = path.file_stem().unwrap().to_string_lossy();
                let base = if ["mod", "lib", "main"].contains(&stem.as_ref()) {
                    path.parent().unwrap().to_path_buf()
                } else {
                    path.with_extension("")
                };
                for module in test_modules(&src) {
                    test_only.insert(base.join(format!("{module}.rs")));
                    test_only.insert(base.join(&module));
                }
                files.push(path);
            }
        }
    }
    files
        .into_iter()
        .filter(|f| !test_only.iter().any(|t| f.starts_with(t)))
        .collect()
}

fn env_reads(file: &std::path::Path) -> Vec<String> {
    let src = std::fs::read_to_string(file).unwrap();
    env_reads_in(&src)
        .into_iter()
        .map(|(line, text)| format!("{}:{line}: {text}", file.display()))
        .collect()
}

const ENV_READS: &[&str] = &[
    "env::var(",
    "env::var_os(",
    "env::vars(",
    "env::vars_os(",
    "env::set_var(",
    "env::remove_var(",
    // Imported, to be called bare.
    "std::env::var",
    "std::env::set_var",
    "std::env::remove_var",
];

fn reads_env(line: &str) -> bool {
    let line = line.replace(' ', "");
    ENV_READS.iter().any(|p| line.contains(p))
        || line
            .split_once("std::env::{")
            .is_some_and(|(_, names)| names.contains("var"))
}

/// `(line, text)` of each environment read outside test code.
fn env_reads_in(src: &str) -> Vec<(usize, String)> {
    let mut live = code_only(src).into_bytes();
    for (start, end, _) in test_items(&String::from_utf8_lossy(&live)) {
        for b in &mut live[start..end] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    let live = String::from_utf8_lossy(&live).into_owned();
    let lines: Vec<&str> = src.lines().collect();
    live.lines()
        .enumerate()
        .filter(|(_, l)| reads_env(l))
        .map(|(i, _)| (i + 1, lines.get(i).unwrap_or(&"").trim().to_string()))
        .collect()
}

/// The modules declared `#[cfg(test)] mod NAME;` (their own files).
fn test_modules(src: &str) -> Vec<String> {
    test_items(&code_only(src))
        .into_iter()
        .filter_map(|(_, _, item)| {
            let item = item.trim().strip_suffix(';')?;
            let name = item.split_whitespace().skip_while(|w| *w != "mod").nth(1)?;
            Some(name.to_string())
        })
        .collect()
}

/// `src` with comments removed and string and char literals blanked,
/// newlines kept (so lines still match).
fn code_only(src: &str) -> String {
    let s: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < s.len() && !(s[i] == '*' && s.get(i + 1) == Some(&'/')) {
                out.push(blank(s[i]));
                i += 1;
            }
            i += 2;
        } else if c == 'r' && matches!(next, Some('#' | '"')) {
            // A raw string (`r#ident` is a raw identifier: kept).
            let hashes = s[i + 1..].iter().take_while(|c| **c == '#').count();
            if s.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            i += 2 + hashes;
            while i < s.len() && !s[i..].starts_with(&close) {
                out.push(blank(s[i]));
                i += 1;
            }
            i += close.len();
            out.push('"');
        } else if c == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < s.len() {
                    out.push(blank(s[i]));
                }
                i += 1;
            }
            i += 1;
            out.push('"');
        } else if c == '\'' && next == Some('\\') {
            // An escaped char literal: up to its closing quote.
            i += 2;
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else if c == '\'' && s.get(i + 2) == Some(&'\'') {
            // A char literal (a lifetime has no closing quote).
            i += 3;
            out.push(' ');
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `(start, end, text)` (byte offsets) of each item under a `#[cfg(...)]`
/// that enables it for tests only (`test`, `all(test, …)`; not
/// `not(test)`), in code from [`code_only`].
fn test_items(code: &str) -> Vec<(usize, usize, String)> {
    let b = code.as_bytes();
    let mut items = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(") {
        let start = from + found;
        let Some(attr_len) = code[start..].find(']') else {
            break;
        };
        let attr_end = start + attr_len + 1;
        let cond = code[start..attr_end].replace(' ', "");
        from = attr_end;
        if !(cond == "#[cfg(test)]" || cond.starts_with("#[cfg(all(test,")) {
            continue;
        }
        // Further attributes, then the item: to its `;` or its closing brace.
        let mut i = attr_end;
        loop {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            match code[i..].starts_with("#[") {
                true => i += code[i..].find(']').map_or(b.len() - i, |e| e + 1),
                false => break,
            }
        }
        let item_start = i;
        // Braces close the item; `;` ends it outside braces, brackets and
        // parentheses (`[u8; 4]`).
        let (mut depth, mut nest) = (0usize, 0usize);
        while i < b.len() {
            match b[i] {
                b';' if depth == 0 && nest == 0 => {
                    i += 1;
                    break;
                }
                b'(' | b'[' => nest += 1,
                b')' | b']' => nest = nest.saturating_sub(1),
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        items.push((start, i, code[item_start..i].to_string()));
        from = i;
    }
    items
}
