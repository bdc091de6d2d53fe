//! The README's "Embedding" section shows `examples/embed.rs` as it is, and
//! the command that runs it.

use std::path::Path;

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
}

/// The README's `## Embedding` section, up to the next `## ` heading.
fn embedding_section() -> String {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let start = readme
        .find("\n## Embedding\n")
        .expect("README.md has an \"Embedding\" section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 4);
    rest[..end].to_string()
}

/// The body of the section's first fenced block of `lang`.
fn fenced(section: &str, lang: &str) -> String {
    let open = format!("```{lang}\n");
    let start = section
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{lang} block in the section"))
        + open.len();
    let len = section[start..]
        .find("\n```\n")
        .expect("the block is closed")
        + 1;
    section[start..start + len].to_string()
}

#[test]
fn the_readme_snippet_is_the_example() {
    let example = std::fs::read_to_string(repository().join("examples/embed.rs")).unwrap();
    let snippet = fenced(&embedding_section(), "rust");
    assert!(
        snippet == example,
        "README.md's Embedding snippet differs from examples/embed.rs; copy the file into the \
         README's ```rust block"
    );
}

#[test]
fn the_readme_says_how_to_depend_on_it_and_run_it() {
    let section = embedding_section();
    let toml = fenced(&section, "toml");
    let manifest: toml::Value = toml::from_str(&toml).expect("the dependency block is TOML");
    let deps = manifest["dependencies"].as_table().unwrap();
    assert!(deps.contains_key("attest"), "{toml}");
    // Every crate the example uses is among the dependencies shown.
    let example = std::fs::read_to_string(repository().join("examples/embed.rs")).unwrap();
    for (used, name) in [
        ("async_trait", "async-trait"),
        ("serde_json", "serde_json"),
        ("tokio", "tokio"),
    ] {
        if example.contains(&format!("{used}::")) {
            assert!(deps.contains_key(name), "{name} missing from:\n{toml}");
        }
    }
    let sh = fenced(&section, "sh");
    assert!(
        sh.lines().next() == Some("cargo run -p attest --example embed"),
        "{sh}"
    );
}
