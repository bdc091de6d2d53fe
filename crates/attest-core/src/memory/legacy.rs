//! Import of memory kept by other tools (SPEC G4): everything imported is
//! `legacy_unverified` — a candidate, never injected as a fact — because
//! nothing says where it came from. Seed 000 §6.2 is why: the wrong domain
//! lived in exactly such a file.

/// Entries of an old memory file: a JSON array (of strings, or of objects
/// with `content`/`text`/`memory`/`fact`), an object holding such an array
/// (`memories`, `items`, `facts`), or Markdown/plain text (bullet and
/// numbered lines, else non-empty lines; headings and comments skipped).
pub fn parse_legacy(text: &str) -> Vec<String> {
    let entries = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => from_json(&value),
        Err(_) => from_text(text),
    };
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let e = e.split_whitespace().collect::<Vec<_>>().join(" ");
        if !e.is_empty() && !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

fn from_json(value: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Object(map) => ["content", "text", "memory", "fact"]
                    .iter()
                    .find_map(|k| map.get(*k).and_then(Value::as_str))
                    .map(String::from),
                _ => None,
            })
            .collect(),
        Value::Object(map) => ["memories", "items", "facts"]
            .iter()
            .find_map(|k| map.get(*k))
            .map(from_json)
            .unwrap_or_default(),
        Value::String(s) => vec![s.clone()],
        _ => Vec::new(),
    }
}

fn from_text(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("<!--"))
        .collect();
    let bullet = |l: &str| -> Option<String> {
        for marker in ["- ", "* ", "+ "] {
            if let Some(rest) = l.strip_prefix(marker) {
                return Some(rest.to_string());
            }
        }
        let (num, rest) = l.split_once(['.', ')'])?;
        (!num.is_empty() && num.len() <= 3 && num.chars().all(|c| c.is_ascii_digit()))
            .then(|| rest.trim().to_string())
    };
    let bullets: Vec<String> = lines.iter().filter_map(|l| bullet(l)).collect();
    if bullets.is_empty() {
        lines.into_iter().map(String::from).collect()
    } else {
        bullets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_markdown_text_and_json() {
        assert_eq!(
            parse_legacy("# Memory\n\n- The API lives at api.wrong-example.com\n* Deploy   with make\n1. Port 8080\nprose line\n- The API lives at api.wrong-example.com\n"),
            ["The API lives at api.wrong-example.com", "Deploy with make", "Port 8080"]
        );
        assert_eq!(parse_legacy("one\n\ntwo\n"), ["one", "two"]);
        assert_eq!(
            parse_legacy(r#"[{"content": "a"}, "b", {"text": "c"}, 3]"#),
            ["a", "b", "c"]
        );
        assert_eq!(parse_legacy(r#"{"memories": [{"memory": "m"}]}"#), ["m"]);
        assert!(parse_legacy("").is_empty());
    }
}
