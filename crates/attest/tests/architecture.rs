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
    not_tools.extend_from_slice(&["attest-providers", "attest-store"]);
    assert_absent(
        "attest-tools",
        &not_tools,
        "tools know no wire format or SQL",
    );

    let mut not_store = Vec::new();
    not_store.extend_from_slice(HTTP);
    not_store.extend_from_slice(SANDBOX);
    not_store.extend_from_slice(&["attest-core", "attest-providers", "attest-tools"]);
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
