//! Distinctive values in a sentence — URLs, domains, paths, commands,
//! numbers, identifiers, quoted strings — and whether one appears verbatim
//! in a tool's output. A fact is only as good as the values it names: "the
//! port is 8080" is backed by a receipt exactly when `8080` is in one.

use crate::grounding::spans::{spans, Delimiter};
use regex::Regex;
use std::sync::OnceLock;

/// What kind of value a token is. URLs, domains, paths and commands are the
/// risky kinds (seed 000 §9.4): wrong ones send work to the wrong place, so
/// they never become active memory without a receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueKind {
    Url,
    Domain,
    Path,
    Command,
    Number,
    Identifier,
    Quoted,
}

impl ValueKind {
    pub fn is_risky(self) -> bool {
        matches!(
            self,
            ValueKind::Url | ValueKind::Domain | ValueKind::Path | ValueKind::Command
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ValueKind::Url => "URL",
            ValueKind::Domain => "domain",
            ValueKind::Path => "path",
            ValueKind::Command => "command",
            ValueKind::Number => "number",
            ValueKind::Identifier => "identifier",
            ValueKind::Quoted => "quoted string",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Value {
    pub text: String,
    pub kind: ValueKind,
}

/// File extensions that make `name.ext` a file name rather than a domain.
const FILE_EXTENSIONS: &[&str] = &[
    "c", "cfg", "conf", "cpp", "csv", "env", "go", "h", "html", "ini", "java", "js", "json", "jsx",
    "lock", "log", "md", "mjs", "py", "rb", "rs", "sh", "sql", "toml", "ts", "tsx", "txt", "xml",
    "yaml", "yml", "css", "pdf", "png", "jpg", "zip", "gz", "tar", "db",
];

pub(crate) fn url_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r#"(?i)\b[a-z][a-z0-9+.-]*://[^\s<>"'`]+"#)
            .unwrap_or_else(|e| panic!("built-in pattern must compile: {e}"))
    })
}

fn domain_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+([a-z]{2,24})(?::\d{1,5})?$")
            .unwrap_or_else(|e| panic!("built-in pattern must compile: {e}"))
    })
}

fn ip_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?$")
            .unwrap_or_else(|e| panic!("built-in pattern must compile: {e}"))
    })
}

fn number_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^-?\d+(?:[.,:]\d+)*%?$")
            .unwrap_or_else(|e| panic!("built-in pattern must compile: {e}"))
    })
}

pub(crate) const TRIM: &[char] = &[
    '.', ',', ';', ':', '!', '?', '(', ')', '[', ']', '{', '}', '"', '\'', '`', '*', '<', '>', '“',
    '”', '‘', '’', '。', '，', '；', '：', '！', '？', '（', '）',
];

/// The distinctive values of `sentence`, each once, in order of appearance.
pub fn distinctive_values(sentence: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let push = |v: Value, out: &mut Vec<Value>| {
        if !out.iter().any(|o| o.text == v.text) {
            out.push(v);
        }
    };
    // Quoted and backticked spans first, blanked out afterwards so their
    // inner words are not taken again as separate values.
    let mut rest = sentence.to_string();
    const DELIMITERS: &[Delimiter] = &[Delimiter::Backtick, Delimiter::Straight, Delimiter::Curly];
    for span in spans(sentence, DELIMITERS) {
        let inner = sentence[span.inner].trim();
        let backtick = span.delimiter == Delimiter::Backtick;
        if inner.is_empty() {
            continue;
        }
        let kind = classify(inner).unwrap_or(if inner.contains(char::is_whitespace) {
            if backtick {
                ValueKind::Command
            } else {
                ValueKind::Quoted
            }
        } else if backtick {
            ValueKind::Identifier
        } else {
            ValueKind::Quoted
        });
        push(
            Value {
                text: inner.to_string(),
                kind,
            },
            &mut out,
        );
        let whole = &sentence[span.whole];
        rest = rest.replacen(whole, &" ".repeat(whole.len()), 1);
    }
    for m in url_re().find_iter(&rest.clone()) {
        let url = m.as_str().trim_end_matches(TRIM);
        push(
            Value {
                text: url.to_string(),
                kind: ValueKind::Url,
            },
            &mut out,
        );
        rest = rest.replacen(m.as_str(), &" ".repeat(m.as_str().len()), 1);
    }
    for token in rest.split_whitespace() {
        let token = token.trim_matches(TRIM);
        if let Some(kind) = classify(token) {
            push(
                Value {
                    text: token.to_string(),
                    kind,
                },
                &mut out,
            );
        }
    }
    out
}

/// The kind of a bare token, or `None` for an ordinary word.
pub(crate) fn classify(token: &str) -> Option<ValueKind> {
    if token.is_empty() || token.contains(char::is_whitespace) {
        return None;
    }
    if url_re().is_match(token) {
        return Some(ValueKind::Url);
    }
    if ip_re().is_match(token) {
        return Some(ValueKind::Domain);
    }
    if let Some(caps) = domain_re().captures(token) {
        let last = caps.get(1).map_or("", |m| m.as_str()).to_ascii_lowercase();
        return Some(if FILE_EXTENSIONS.contains(&last.as_str()) {
            ValueKind::Path
        } else {
            ValueKind::Domain
        });
    }
    if token.contains('/') && looks_like_path(token) {
        return Some(ValueKind::Path);
    }
    if number_re().is_match(token) {
        // One digit is everywhere in tool output: not distinctive.
        return (token.chars().filter(char::is_ascii_digit).count() >= 2)
            .then_some(ValueKind::Number);
    }
    if looks_like_identifier(token) {
        return Some(ValueKind::Identifier);
    }
    None
}

fn looks_like_path(token: &str) -> bool {
    if ["/", "./", "../", "~/"]
        .iter()
        .any(|p| token.starts_with(p))
    {
        return token.len() > 1;
    }
    let segments: Vec<&str> = token.split('/').filter(|s| !s.is_empty()).collect();
    let has_ext = segments
        .last()
        .and_then(|s| s.rsplit_once('.'))
        .is_some_and(|(stem, ext)| !stem.is_empty() && FILE_EXTENSIONS.contains(&ext));
    segments.len() >= 3 || (segments.len() == 2 && has_ext)
}

/// `snake_case`, `camelCase`, `kebab-with-digit-1`, `ENV_VAR`, `v2`: the
/// shapes of names that are looked up, not words.
fn looks_like_identifier(token: &str) -> bool {
    if token.chars().count() < 3
        || !token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    {
        return false;
    }
    let letters = token.chars().any(|c| c.is_ascii_alphabetic());
    let digits = token.chars().any(|c| c.is_ascii_digit());
    let underscore = token.contains('_');
    let camel = token
        .as_bytes()
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    letters && (digits || underscore || camel)
}

/// True when `value` occurs in `haystack` as a whole token: not glued to
/// letters or digits on either side (so `80` is not found in `8080`).
/// Domains and URLs compare case-insensitively. The one rule of
/// [`crate::grounding::found_in`].
pub fn appears_in(value: &Value, haystack: &str) -> bool {
    crate::grounding::found_in(&value.checkable(), haystack)
}

impl Value {
    /// The same value as grounding checks it.
    pub fn checkable(&self) -> crate::grounding::Checkable {
        use attest_protocol::CheckableKind as K;
        let kind = match self.kind {
            ValueKind::Url => K::Url,
            ValueKind::Domain => K::Domain,
            ValueKind::Path => K::Path,
            ValueKind::Number => K::Number,
            ValueKind::Identifier => K::Identifier,
            ValueKind::Command | ValueKind::Quoted => K::Quoted,
        };
        crate::grounding::Checkable {
            value: self.text.clone(),
            kind,
            unit: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<(String, ValueKind)> {
        distinctive_values(s)
            .into_iter()
            .map(|v| (v.text, v.kind))
            .collect()
    }

    #[test]
    fn finds_each_kind() {
        use ValueKind::*;
        assert_eq!(kinds("The port is 8080."), [("8080".into(), Number)]);
        assert_eq!(
            kinds("The API lives at api.wrong-example.com."),
            [("api.wrong-example.com".into(), Domain)]
        );
        assert_eq!(
            kinds("See https://docs.example.com/a?b=1, then config.toml and src/main.rs"),
            [
                ("https://docs.example.com/a?b=1".into(), Url),
                ("config.toml".into(), Path),
                ("src/main.rs".into(), Path)
            ]
        );
        assert_eq!(
            kinds("Deploy with `make ship` or run \"npm test\"; set MAX_RETRIES to 10.0"),
            [
                ("make ship".into(), Command),
                ("npm test".into(), Quoted),
                ("MAX_RETRIES".into(), Identifier),
                ("10.0".into(), Number)
            ]
        );
        assert_eq!(
            kinds("Reach 10.0.0.7:5432 or ~/data"),
            [("10.0.0.7:5432".into(), Domain), ("~/data".into(), Path)]
        );
        assert_eq!(
            kinds("use `serde_json` and fooBar"),
            [
                ("serde_json".into(), Identifier),
                ("fooBar".into(), Identifier)
            ]
        );
    }

    #[test]
    fn ordinary_words_and_single_digits_are_not_values() {
        for s in [
            "I found 3 files, e.g. the usual ones.",
            "This is fine and/or good.",
            "Hello there!",
            "",
        ] {
            assert!(kinds(s).is_empty(), "{s}: {:?}", kinds(s));
        }
    }

    #[test]
    fn appears_only_as_a_whole_token() {
        let v = |t: &str, kind| Value {
            text: t.into(),
            kind,
        };
        assert!(appears_in(&v("8080", ValueKind::Number), "port = 8080\n"));
        assert!(!appears_in(&v("80", ValueKind::Number), "port = 8080\n"));
        assert!(!appears_in(&v("8", ValueKind::Number), "ratio 8.5"));
        assert!(appears_in(&v("8", ValueKind::Number), "ratio 8."));
        assert!(appears_in(
            &v("API.Example.com", ValueKind::Domain),
            "url = \"https://api.example.com/v1\""
        ));
        assert!(!appears_in(
            &v("example.com", ValueKind::Domain),
            "see myexample.com"
        ));
        assert!(!appears_in(&v("", ValueKind::Quoted), "anything"));
        assert!(appears_in(
            &v("make ship", ValueKind::Command),
            "run `make ship`."
        ));
    }
}
