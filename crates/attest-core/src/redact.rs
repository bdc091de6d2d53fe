//! Redaction of text and JSON before it reaches a prompt, an event or a log
//! (SPEC F8).
//!
//! What is removed: configured secret values, configured paths, well-known
//! key and token shapes (`sk-…`, `Bearer …`, `ghp_…`, `xox…-`, `AKIA…`,
//! JWTs, private-key blocks), webhook URLs, URL credentials and query
//! strings, `key=value` pairs whose key names a secret, and long base64-like
//! blobs. Then the result is cut to a length limit.
//!
//! Patterns err on the side of removing too much: a redacted non-secret
//! costs a little context, a leaked secret cannot be taken back. Pure
//! lowercase hex (git object ids, sha256 digests) is kept, so the evidence
//! hashes receipts carry stay readable.

use crate::text::truncate_str;
use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use std::sync::OnceLock;

/// Default length limit for one redacted text, in bytes.
pub const DEFAULT_MAX_LEN: usize = 16 * 1024;
/// Secrets shorter than this are not searched for: they would match
/// everywhere and redact noise.
pub const MIN_SECRET_LEN: usize = 4;

/// Removes secrets from text and JSON values. Cheap to clone the config,
/// the compiled patterns are shared process-wide.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
    paths: Vec<(String, String)>,
    max_len: Option<usize>,
}

impl std::fmt::Debug for Redactor {
    // Never print the secrets themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .field("paths", &self.paths.len())
            .field("max_len", &self.max_len())
            .finish()
    }
}

impl Redactor {
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Adds secret values (API keys from the environment, tokens from
    /// config) to replace wherever they appear. Short values are ignored.
    pub fn with_secrets<I, S>(mut self, secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for s in secrets {
            let s = s.into();
            if s.len() >= MIN_SECRET_LEN && !self.secrets.contains(&s) {
                self.secrets.push(s);
            }
        }
        // Longest first, so a secret containing another is replaced whole.
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        self
    }

    /// The pieces of `text` that redaction removes: the secret values it
    /// holds, as found by configured values and patterns.
    pub fn removed_from(&self, text: &str) -> Vec<String> {
        let redacted = self.redact_unbounded(text);
        if redacted == text {
            return Vec::new();
        }
        let mut removed = Vec::new();
        let mut current = String::new();
        for change in similar::TextDiff::from_chars(text, &redacted).iter_all_changes() {
            match change.tag() {
                similar::ChangeTag::Delete => current.push_str(change.value()),
                _ if !current.is_empty() => removed.push(std::mem::take(&mut current)),
                _ => {}
            }
        }
        if !current.is_empty() {
            removed.push(current);
        }
        removed
    }

    /// This redactor, for text that carries `clean`'s content cut into
    /// pieces — a raw stream whose deltas split a secret between lines,
    /// where no pattern sees it whole. It also removes every word of what
    /// redaction takes out of `clean`, and each word's prefixes and suffixes
    /// of [`MIN_SECRET_LEN`] characters or more (the halves a delta boundary
    /// leaves).
    pub fn for_pieces_of(&self, clean: &str) -> Redactor {
        let mut pieces = Vec::new();
        for removed in self.removed_from(clean) {
            for word in removed
                .split(|c: char| c.is_whitespace() || matches!(c, '"' | '\\' | '\''))
                .filter(|w| w.chars().count() >= MIN_SECRET_LEN)
            {
                let bounds: Vec<usize> = word.char_indices().map(|(i, _)| i).collect();
                for &i in &bounds {
                    pieces.push(word[i..].to_string());
                    if i > 0 {
                        pieces.push(word[..i].to_string());
                    }
                }
            }
        }
        self.clone().with_secrets(pieces)
    }

    /// Replaces the path prefix `path` with `label` (e.g. the home directory
    /// with `~`, a private data directory with `[data]`).
    pub fn with_path(mut self, path: impl Into<String>, label: impl Into<String>) -> Self {
        let path = path.into();
        if !path.is_empty() {
            self.paths.push((path, label.into()));
            self.paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        }
        self
    }

    /// Sets the length limit (bytes) of one redacted text.
    pub fn with_max_len(mut self, max_len: usize) -> Self {
        self.max_len = Some(max_len);
        self
    }

    pub fn max_len(&self) -> usize {
        self.max_len.unwrap_or(DEFAULT_MAX_LEN)
    }

    /// The redacted, length-limited form of `text`.
    pub fn redact(&self, text: &str) -> String {
        let out = self.redact_unbounded(text);
        limit(&out, self.max_len())
    }

    /// Like [`Redactor::redact`] with another length limit.
    pub fn redact_to(&self, text: &str, max_len: usize) -> String {
        limit(&self.redact_unbounded(text), max_len)
    }

    /// A redacted copy of a JSON value: every string is redacted, and the
    /// value under a key that names a secret (`api_key`, `password`,
    /// `authorization`, …) is replaced whole.
    pub fn redact_json(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::String(s) => Value::String(self.redact(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.redact_json(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let count = is_count_key(k)
                            && v.as_u64().is_some_and(|n| is_count_value(&n.to_string()));
                        let v = if is_secret_key(k) && !v.is_null() && !count {
                            Value::String(REDACTED.to_string())
                        } else {
                            self.redact_json(v)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            scalar => scalar.clone(),
        }
    }

    fn redact_unbounded(&self, text: &str) -> String {
        if text.is_empty() {
            return String::new();
        }
        let mut out = text.to_string();
        // Exact values first: a pattern could otherwise cut a secret in two
        // and leave half of it behind.
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        for (path, label) in &self.paths {
            if out.contains(path.as_str()) {
                out = out.replace(path.as_str(), label);
            }
        }
        apply_patterns(out, screen())
    }
}

/// The patterns applied in order. A pattern that `screen` rules out for
/// the text is not searched for until a replacement changes the text;
/// after that each pattern is searched. `None`: every pattern is searched.
fn apply_patterns(mut text: String, screen: Option<&RegexSet>) -> String {
    let screened = screen.map(|set| set.matches(&text));
    let may_match = |pattern: usize, changed: bool| {
        changed || screened.as_ref().is_none_or(|m| m.matched(pattern))
    };
    let mut changed = false;
    for (i, (re, replacement)) in patterns().iter().enumerate() {
        if may_match(i, changed) && re.is_match(&text) {
            text = re.replace_all(&text, *replacement).into_owned();
            changed = true;
        }
    }
    if may_match(ASSIGNMENT, changed) {
        if let Some(replaced) = redact_assignments(&text) {
            text = replaced;
        }
    }
    if let Some(replaced) = redact_blobs(&text) {
        text = replaced;
    }
    text
}

/// [`replace_assignments`], skipped where it would change nothing: a body
/// full of token counts (`"prompt_tokens":954`) matches at every count, and
/// the replacement gives each back unchanged, so the capture search runs
/// only when some match is not such a count. `None`: nothing to replace.
fn redact_assignments(text: &str) -> Option<String> {
    let mut found = secret_assignment().find_iter(text).peekable();
    if found.peek().is_some() && !found.all(|m| is_kept_count(m.as_str())) {
        return Some(replace_assignments(text));
    }
    None
}

/// Every [`secret_assignment`] in `text` with its value redacted, except
/// token counts.
fn replace_assignments(text: &str) -> String {
    secret_assignment()
        .replace_all(text, |c: &regex::Captures| {
            if c.get(4).is_some() {
                return format!("{}{}\"{REDACTED}\"", &c[1], &c[3]);
            }
            if c.get(5).is_some() {
                return format!("{}{}\\\"{REDACTED}\\\"", &c[1], &c[3]);
            }
            if c.get(6).is_some() {
                return format!("{}{}'{REDACTED}'", &c[1], &c[3]);
            }
            let value = c[7].trim_end_matches(['}', ']', ')']);
            if is_count_key(&c[1]) && is_count_value(value) {
                c[0].to_string()
            } else {
                format!("{}{}{REDACTED}", &c[1], &c[3])
            }
        })
        .into_owned()
}

/// Whether a [`secret_assignment`] match is certainly a token count that
/// [`replace_assignments`] gives back unchanged: a key that names a count,
/// then `:` or `=`, then a bare number of at most nine digits. Decided on
/// the match alone; anything else (quoted values, other keys) is left to
/// the replacement.
fn is_kept_count(assignment: &str) -> bool {
    let key_end = assignment
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        .unwrap_or(assignment.len());
    let (key, rest) = assignment.split_at(key_end);
    let rest = rest.strip_prefix('\\').unwrap_or(rest);
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let Some(value) = rest.trim_start().strip_prefix([':', '=']) else {
        return false;
    };
    let value = value.trim_start().trim_end_matches(['}', ']', ')']);
    is_count_key(key) && is_count_value(value)
}

const REDACTED: &str = "[REDACTED]";

/// True for object keys whose values are credentials.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace('-', "_");
    const EXACT: [&str; 4] = ["auth", "key", "pwd", "pass"];
    const PARTS: [&str; 12] = [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "authorization",
        "cookie",
        "credential",
        "private_key",
        "access_key",
        "webhook",
    ];
    EXACT.contains(&k.as_str()) || PARTS.iter().any(|p| k.contains(p))
}

/// True for keys that name a number of model tokens (`max_tokens`,
/// `prompt_tokens`, `history_tokens_before`, `token_count`): their short
/// numeric values are counts, not credentials. A key that also names a
/// credential (`auth_tokens`, `refresh_tokens`, `api_key_tokens`) is not one.
fn is_count_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace(['-', '.'], "_");
    let counts = ["tokens", "token_count", "tokens_before", "tokens_after"]
        .iter()
        .any(|end| k.ends_with(end));
    const CREDENTIAL_WORDS: [&str; 12] = [
        "auth", "access", "refresh", "session", "bearer", "api", "key", "secret", "pass",
        "private", "id_token", "csrf",
    ];
    counts && !CREDENTIAL_WORDS.iter().any(|w| k.contains(w))
}

/// A count small enough to be one: at most nine digits.
fn is_count_value(value: &str) -> bool {
    (1..=9).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_digit())
}

/// `key=value` / `key: value` where the key names a secret: group 1 the
/// key, 3 the separator, then the value — 4 double-quoted (spaces and
/// escapes included, so `"password": "correct horse battery"` goes whole),
/// 5 double-quoted inside a JSON string (`\"password\": \"a b\"`, as raw
/// response bodies hold model text), 6 single-quoted, 7 bare — never an
/// object or array (`"prompt_tokens_details": {…}` is structure, not a value).
/// Its negated classes sit outside `(?i)`, as `patterns` explains.
fn secret_assignment() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(SECRET_ASSIGNMENT)
            .unwrap_or_else(|e| panic!("built-in redaction pattern must compile: {e}"))
    })
}

const SECRET_ASSIGNMENT: &str = r#"(?i)\b([a-z0-9_.-]*(password|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|client[_-]?secret|auth)[a-z0-9_.-]*)(\\?\x22?\s*[:=]\s*)(?:\x22((?:(?-i:[^\x22\\\n])|\\.)*)\x22|\\\x22((?:(?-i:[^\x22\\\n])|\\\\.)*?)\\\x22|'((?-i:[^'\n])*)'|\\?\x22?((?-i:[^\s\x22\\',;&{\[])(?-i:[^\s\x22\\',;&])*))"#;

/// Compiles the redaction patterns ahead of their first use.
pub(crate) fn compile_patterns() {
    patterns();
    secret_assignment();
    blob();
    screen();
}

/// Patterns with their replacements, in application order.
///
/// Negated classes sit outside `(?i)` as `(?-i:[^…])`: they exclude only
/// characters without case, so the match is the same, and folding every
/// character they admit made compiling them cost milliseconds each.
fn patterns() -> &'static [(Regex, &'static str)] {
    static PATTERNS: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        PATTERNS_SOURCE
            .into_iter()
            .map(|(p, r)| {
                let re = RegexBuilder::new(p)
                    .size_limit(1 << 22)
                    .build()
                    .unwrap_or_else(|e| panic!("built-in redaction pattern must compile: {e}"));
                (re, r)
            })
            .collect()
    })
}

/// [`patterns`]' sources and replacements, in application order.
const PATTERNS_SOURCE: [(&str, &str); 9] = [
    // PEM private keys, whole block.
    (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
        "[REDACTED_PRIVATE_KEY]",
    ),
    // Webhook URLs carry their secret in the path: the whole URL goes.
    (
        r"(?i)https?://(?-i:[^\s/])*(hooks\.slack\.com|discord(app)?\.com/api/webhooks|open\.feishu\.cn/open-apis/bot|open\.larksuite\.com/open-apis/bot|oapi\.dingtalk\.com/robot|qyapi\.weixin\.qq\.com/cgi-bin/webhook|outlook\.office\.com/webhook|webhook\.office\.com)(?-i:[^\s\x22'<>])*",
        "[REDACTED_WEBHOOK]",
    ),
    (
        r"(?i)https?://(?-i:[^\s\x22'<>])*/(webhooks?|hooks?)/(?-i:[^\s\x22'<>])*",
        "[REDACTED_WEBHOOK]",
    ),
    // user:password@ in URLs.
    (
        r"(?i)\b([a-z][a-z0-9+.-]*://)(?-i:[^\s/@\x22'])+@",
        "${1}[REDACTED]@",
    ),
    // Query strings carry keys and personal data; the path stays.
    (
        r"(?i)\b(https?://(?-i:[^\s?#\x22'<>])+)\?(?-i:[^\s#\x22'<>])*",
        "${1}?[REDACTED_QUERY]",
    ),
    (
        r"(?i)\bBearer\s+[A-Za-z0-9._~+/=-]{12,}",
        "Bearer [REDACTED]",
    ),
    // Provider key shapes.
    (
        r"\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bxox[abposr]-[A-Za-z0-9-]{10,}|\b(AKIA|ASIA)[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_-]{30,}|\bglpat-[A-Za-z0-9_-]{20,}",
        REDACTED,
    ),
    // JWTs.
    (
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        REDACTED,
    ),
    // Authorization headers of other schemes.
    (
        r"(?i)\b(authorization|x-api-key|api-key|cookie|set-cookie)(\s*:\s*)(?-i:[^\r\n])+",
        "${1}${2}[REDACTED]",
    ),
];

/// Where [`screen`] holds [`secret_assignment`]: after the nine of
/// [`patterns`].
const ASSIGNMENT: usize = PATTERNS_SOURCE.len();

/// The patterns and [`secret_assignment`] in one set, each with its
/// word-boundary assertions (`\b`) dropped: the set matches a pattern
/// wherever the pattern itself does (and sometimes where it does not), so a
/// pattern the set rules out for a text need not be searched. Dropping `\b`
/// keeps the set's DFA going over non-ASCII text, where a Unicode word
/// boundary stops a DFA and leaves a slower engine to scan. [`blob`] is
/// left out: it has no literal to skip to, so it scans every byte anyway,
/// and in the set its runs of 32 made the scan of base64 text 2.6 times
/// slower (`cargo bench -p attest-core --bench redact`). `None` if the set
/// cannot be built: then every pattern is searched.
fn screen() -> Option<&'static RegexSet> {
    static SCREEN: OnceLock<Option<RegexSet>> = OnceLock::new();
    SCREEN
        .get_or_init(|| {
            let sources = PATTERNS_SOURCE
                .iter()
                .map(|(p, _)| *p)
                .chain([SECRET_ASSIGNMENT])
                // No pattern has an escaped `\\` before a `b`, which this
                // would break; the screening proptest would catch one.
                .map(|p| p.replace(r"\b", ""));
            RegexSetBuilder::new(sources)
                .size_limit(1 << 23)
                .build()
                .ok()
        })
        .as_ref()
}

const BLOB_PATTERN: &str = r"[A-Za-z0-9+/_-]{32,}={0,2}";

fn blob() -> &'static Regex {
    static BLOB: OnceLock<Regex> = OnceLock::new();
    BLOB.get_or_init(|| {
        Regex::new(BLOB_PATTERN).unwrap_or_else(|e| panic!("blob pattern must compile: {e}"))
    })
}

/// Replaces runs of 32+ base64/base64url characters that look random
/// (upper and lower case letters and digits all present) with a marker
/// giving their length. Pure hex and ordinary words pass. `None`: no run
/// to look at.
fn redact_blobs(text: &str) -> Option<String> {
    let re = blob();
    if !re.is_match(text) {
        return None;
    }
    let replaced = re.replace_all(text, |caps: &regex::Captures<'_>| {
        let m = &caps[0];
        let upper = m.bytes().any(|b| b.is_ascii_uppercase());
        let lower = m.bytes().any(|b| b.is_ascii_lowercase());
        let digit = m.bytes().any(|b| b.is_ascii_digit());
        // Paths and identifiers made of words (`src/some_module/file_name`)
        // have separators but rarely all three classes mixed densely.
        if upper && lower && digit && !looks_like_words(m) {
            format!("[REDACTED_BLOB {} chars]", m.len())
        } else {
            m.to_string()
        }
    });
    Some(replaced.into_owned())
}

/// True when a run is mostly separated words, like a path or an
/// identifier (`Crates/attest_tools/Src/Lib2`), not an encoded secret.
fn looks_like_words(s: &str) -> bool {
    let seps = s
        .bytes()
        .filter(|b| matches!(b, b'/' | b'_' | b'-'))
        .count();
    // Random base64 has a separator every ~21 chars on average; words, one
    // every ~6.
    seps * 10 >= s.len()
}

/// Cuts to `max` bytes with a note.
fn limit(text: &str, max: usize) -> String {
    match truncate_str(text, max) {
        (head, false) => head.to_string(),
        (head, true) => format!("{head}…[cut: {} of {} bytes shown]", head.len(), text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_are_not_secrets_but_tokens_are() {
        let r = Redactor::new();
        let text = r#"{"prompt_tokens":954,"max_tokens": 256} max_tokens=4096 auth_token=abc123def456 tokens: sk9"#;
        let out = r.redact(text);
        assert!(out.contains(r#""prompt_tokens":954"#), "{out}");
        assert!(out.contains(r#""max_tokens": 256"#), "{out}");
        assert!(out.contains("max_tokens=4096"), "{out}");
        assert!(out.contains("auth_token=[REDACTED]"), "{out}");
        assert!(
            out.contains("tokens: [REDACTED]"),
            "a non-number under a count key goes: {out}"
        );
        let json = serde_json::json!({
            "usage": {"completion_tokens": 12, "total_tokens": 966},
            "refresh_tokens": ["r-1"],
            "access_token": "abc"
        });
        let out = r.redact_json(&json);
        assert_eq!(out["usage"]["completion_tokens"], 12);
        assert_eq!(out["usage"]["total_tokens"], 966);
        assert_eq!(out["refresh_tokens"], REDACTED);
        assert_eq!(out["access_token"], REDACTED);
        let out = r.redact_json(
            &serde_json::json!({"auth_tokens": 987654321, "tokens": 1234567890123u64}),
        );
        assert_eq!(out["auth_tokens"], REDACTED);
        assert_eq!(out["tokens"], REDACTED);
    }
    use serde_json::json;

    /// Each canary must vanish from the output; the surrounding text stays.
    pub(super) const CANARIES: &[(&str, &str)] = &[
        ("sk-proj-CANARYabcdefghijklmnop1234", "openai key"),
        ("sk-ant-api03-CANARYabcdefghijklmnop", "anthropic key"),
        ("ghp_CANARYabcdefghijklmnopqrstuvwxyz12", "github token"),
        ("github_pat_11CANARYabcdefghijklmnopqrs", "github pat"),
        ("xoxb-1234567890-CANARYabcdef", "slack token"),
        ("AKIACANARY0123456789", "aws key id"),
        ("AIzaSyCANARY-abcdefghijklmnopqrstuvwxy", "google key"),
        ("glpat-CANARYabcdefghijklmnop", "gitlab token"),
        (
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJDQU5BUlkifQ.c2lnbmF0dXJlQ0FOQVJZ",
            "jwt",
        ),
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYCANARYKEY9", "aws secret"),
    ];

    #[test]
    fn token_shapes_are_removed() {
        let r = Redactor::new();
        for (canary, what) in CANARIES {
            let text = format!("before {canary} after");
            let out = r.redact(&text);
            assert!(!out.contains(canary), "{what}: {out}");
            assert!(!out.contains("CANARY"), "{what}: {out}");
            assert!(
                out.starts_with("before ") && out.ends_with(" after"),
                "{what}: {out}"
            );
        }
    }

    #[test]
    fn bearer_and_headers() {
        let r = Redactor::new();
        let out = r.redact("Authorization: Bearer abc.CANARY.def\nok");
        assert!(!out.contains("CANARY"), "{out}");
        assert!(out.ends_with("\nok"), "{out}");
        let out = r.redact("curl -H 'Bearer CANARYtoken123'");
        assert!(!out.contains("CANARY"), "{out}");
        let out = r.redact("x-api-key: CANARY42");
        assert!(!out.contains("CANARY"), "{out}");
        let out = r.redact("Cookie: session=CANARY");
        assert!(!out.contains("CANARY"), "{out}");
    }

    #[test]
    fn a_secret_cut_between_stream_lines_is_removed_from_the_raw_stream() {
        let r = Redactor::new();
        let clean =
            r#"Done: {"password": "correct horse battery staple"} and sk-live-abcdef0123456789xyz"#;
        let raw = "data: {\"content\":\"Done: {\\\"password\\\": \\\"correct hor\"}\n\
                   data: {\"content\":\"se battery staple\\\"} and sk-live-abcdef01\"}\n\
                   data: {\"content\":\"23456789xyz\"}\n";
        let plain = r.redact(raw);
        assert!(
            plain.contains("battery"),
            "per line, nothing matches: {plain}"
        );
        let out = r.for_pieces_of(clean).redact(raw);
        // Pieces shorter than MIN_SECRET_LEN ("hor|se") can remain.
        for piece in ["correct", "battery", "staple", "abcdef01", "23456789xyz"] {
            assert!(!out.contains(piece), "{piece}: {out}");
        }
        assert!(out.contains("Done"), "{out}");
    }

    #[test]
    fn quoted_secret_values_go_whole_spaces_and_all() {
        let r = Redactor::new();
        for text in [
            r#"{"password": "correct horse battery staple"}"#,
            r#"password = 'correct horse battery staple'"#,
            r#"{"api_key":"correct horse \"battery\" staple"}"#,
            r#"{"content": "see {\"password\": \"correct horse battery staple\"}"}"#,
        ] {
            let out = r.redact(text);
            for word in ["correct", "horse", "battery", "staple"] {
                assert!(!out.contains(word), "{text} -> {out}");
            }
            assert!(out.contains("[REDACTED]"), "{out}");
        }
        // The surrounding JSON stays well-formed.
        let out = r.redact(r#"{"password": "a b c", "user": "ann"}"#);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["user"], "ann");
        assert_eq!(v["password"], "[REDACTED]");
    }

    #[test]
    fn key_value_secrets() {
        let r = Redactor::new();
        for text in [
            "password=CANARY1",
            "db_password: CANARY1",
            "API_KEY=CANARY1 next",
            r#"{"client_secret": "CANARY1"}"#,
            "token=CANARY1&x=1",
        ] {
            let out = r.redact(text);
            assert!(!out.contains("CANARY"), "{text} -> {out}");
        }
        assert_eq!(r.redact("token=CANARY1 rest"), "token=[REDACTED] rest");
    }

    #[test]
    fn urls_lose_queries_credentials_and_webhooks() {
        let r = Redactor::new();
        let out = r.redact("GET https://api.example.com/v1/quote?symbol=X&apikey=CANARY failed");
        assert_eq!(
            out,
            "GET https://api.example.com/v1/quote?[REDACTED_QUERY] failed"
        );
        let out = r.redact("https://user:CANARY@host.example/path");
        assert!(!out.contains("CANARY"), "{out}");
        assert!(out.contains("host.example/path"), "{out}");
        for hook in [
            "https://hooks.slack.com/services/T000/B000/CANARY",
            "https://discord.com/api/webhooks/123/CANARY",
            "https://open.feishu.cn/open-apis/bot/v2/hook/CANARY",
            "https://oapi.dingtalk.com/robot/send?access_token=CANARY",
            "https://example.com/webhook/CANARY",
        ] {
            let out = r.redact(&format!("posting to {hook} now"));
            assert!(!out.contains("CANARY"), "{out}");
            assert!(out.contains("[REDACTED_WEBHOOK]"), "{out}");
            assert!(out.ends_with(" now"), "{out}");
        }
    }

    #[test]
    fn private_key_blocks() {
        let r = Redactor::new();
        let text = "x\n-----BEGIN OPENSSH PRIVATE KEY-----\nCANARY\nmore\n-----END OPENSSH PRIVATE KEY-----\ny";
        assert_eq!(r.redact(text), "x\n[REDACTED_PRIVATE_KEY]\ny");
        // A block cut off by truncation upstream still goes.
        let out = r.redact("-----BEGIN RSA PRIVATE KEY-----\nCANARY");
        assert!(!out.contains("CANARY"), "{out}");
    }

    #[test]
    fn configured_secrets_and_paths() {
        let r = Redactor::new()
            .with_secrets(["hunter2-CANARY", "abc"]) // "abc" is too short to search for
            .with_path("/home/alice", "~");
        let out = r.redact("pw hunter2-CANARY in /home/alice/.config, abc stays");
        assert_eq!(out, "pw [REDACTED] in ~/.config, abc stays");
        // Debug never shows secrets.
        assert!(!format!("{r:?}").contains("CANARY"));
    }

    #[test]
    fn blobs_go_hex_and_paths_stay() {
        let r = Redactor::new();
        let blob = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0MjQyNDI0Mg==";
        let out = r.redact(&format!("data {blob} end"));
        assert_eq!(
            out,
            format!("data [REDACTED_BLOB {} chars] end", blob.len())
        );
        let sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(r.redact(sha), sha);
        let git = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(r.redact(git), git);
        let path = "crates/attest_tools/src/builtin/Read_file_2.rs";
        assert_eq!(r.redact(path), path);
    }

    #[test]
    fn length_limit_applies_after_redaction() {
        let r = Redactor::new().with_max_len(20);
        let out = r.redact(&"a".repeat(100));
        assert!(out.starts_with(&"a".repeat(20)));
        assert!(out.contains("cut: 20 of 100 bytes"), "{out}");
        // A cut never lands inside a multi-byte char.
        let out = Redactor::new().redact_to("ééééé", 3);
        assert!(out.starts_with('é'), "{out}");
    }

    #[test]
    fn json_values_by_key_and_content() {
        let r = Redactor::new().with_secrets(["s3cr3t-CANARY"]);
        let v = json!({
            "command": "curl -H 'Authorization: Bearer CANARYxyz123' https://x.io/a?k=CANARY",
            "api_key": "CANARY",
            "Password": 1234,
            "nested": [{"token": "CANARY"}, "s3cr3t-CANARY"],
            "path": "src/main.rs",
            "count": 3,
            "token_count": null
        });
        let out = r.redact_json(&v);
        let text = out.to_string();
        assert!(!text.contains("CANARY"), "{text}");
        assert!(!text.contains("1234"), "{text}");
        assert_eq!(out["path"], "src/main.rs");
        assert_eq!(out["count"], 3);
        assert_eq!(out["api_key"], "[REDACTED]");
        assert!(out["token_count"].is_null());
    }

    #[test]
    fn plain_text_is_untouched() {
        let r = Redactor::new();
        for text in [
            "cargo test -p attest-tools",
            "error[E0308]: mismatched types at src/lib.rs:12:5",
            "the token budget was exceeded",
            "https://docs.rs/landlock/0.4.8",
            "",
        ] {
            assert_eq!(r.redact(text), text);
        }
    }

    #[test]
    fn secret_keys() {
        for k in [
            "api_key",
            "API-KEY",
            "x_auth_token",
            "password",
            "auth",
            "Cookie",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in ["path", "command", "author", "keyword", "monkey"] {
            assert!(!is_secret_key(k), "{k}");
        }
    }
}

#[cfg(test)]
mod structure_tests {
    use super::*;

    #[test]
    fn an_object_under_a_secret_like_key_is_structure_not_a_value() {
        let body = r#"{"usage":{"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":0}},"auth":{"token":"s3cr3t-value-x"}}"#;
        let out = Redactor::new().redact(body);
        assert!(
            out.contains(r#""prompt_tokens_details":{"cached_tokens":0}"#),
            "{out}"
        );
        assert!(!out.contains("s3cr3t-value-x"), "{out}");
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "{out}"
        );
    }
}

#[cfg(test)]
mod count_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_bare_counts_under_count_keys_are_kept_without_a_search() {
        for kept in [
            r#"prompt_tokens":954"#,
            "max_tokens=4096",
            r#"total_tokens": 12}"#,
            r#"completion_tokens\":7"#,
        ] {
            assert!(is_kept_count(kept), "{kept}");
        }
        for searched in [
            r#"max_tokens": "256""#,
            "auth_tokens=123",
            "tokens: sk9",
            "prompt_tokens=1234567890",
            "password=12345",
            r#"prompt_tokens":-1"#,
        ] {
            assert!(!is_kept_count(searched), "{searched}");
        }
    }

    #[test]
    fn a_raw_body_of_counts_and_a_secret_keeps_the_counts_and_loses_the_secret() {
        let body = r#"{"usage":{"prompt_tokens":954,"completion_tokens":7},"note":"api_key=abcd1234efgh"}"#;
        let out = Redactor::new().redact(body);
        assert!(
            out.contains(r#""prompt_tokens":954,"completion_tokens":7"#),
            "{out}"
        );
        assert!(!out.contains("abcd1234efgh"), "{out}");
    }

    /// Pieces of assignments: count and credential keys, separators,
    /// bare, quoted and escaped values.
    fn assignment_text() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "prompt_tokens",
            "max_tokens",
            "total_tokens",
            "auth_tokens",
            "token",
            "api_key",
            "tokens_before",
            "x.tokens",
            "Max-Tokens",
            "password",
            "note",
        ]);
        let sep = prop::sample::select(vec![":", "=", "\":", "\\\":", " : ", "\": "]);
        let value = prop::sample::select(vec![
            "954",
            "1234567890",
            "\"256\"",
            "\\\"12\\\"",
            "'9'",
            "12}",
            "7]}",
            "sk-x",
            "abc123",
            "-1",
            "0",
            " 5",
            "{\"a\":1}",
        ]);
        let glue = prop::sample::select(vec![",", " ", "\n", "{", "\"", ";"]);
        prop::collection::vec((glue, key, sep, value), 1..6).prop_map(|parts| {
            parts
                .into_iter()
                .map(|(g, k, s, v)| format!("{g}{k}{s}{v}"))
                .collect()
        })
    }

    proptest! {
        /// Skipping the replacement when every match is a kept count
        /// changes nothing: the result is the full replacement's.
        #[test]
        fn skipping_counts_is_the_same_as_replacing(text in assignment_text()) {
            prop_assert_eq!(
                redact_assignments(&text).unwrap_or_else(|| text.clone()),
                replace_assignments(&text)
            );
        }

        /// Leaving out the patterns the screen rules out changes nothing:
        /// the result is that of searching for every pattern.
        #[test]
        fn screening_is_the_same_as_searching_every_pattern(text in redactable_text()) {
            prop_assert_eq!(apply_patterns(text.clone(), screen()), apply_patterns(text, None));
        }
    }

    /// Texts made of what the patterns look for, near misses, words
    /// next to non-ASCII letters (where Unicode and ASCII word boundaries
    /// differ) and arbitrary text.
    fn redactable_text() -> impl Strategy<Value = String> {
        let mut known: Vec<String> = super::tests::CANARIES
            .iter()
            .map(|(c, _)| c.to_string())
            .collect();
        known.extend(
            [
                "Bearer abcdefghijklmnop",
                "https://hooks.slack.com/services/T0/B0/x",
                "https://example.com/webhook/abc",
                "http://user:pw@host/p?q=1",
                "postgres://u:p@db/x",
                "-----BEGIN RSA PRIVATE KEY-----\nabc\n",
                "-----END RSA PRIVATE KEY-----",
                "password=hunter2",
                "\"api_key\": \"a b\"",
                "\\\"token\\\": \\\"x y\\\"",
                "\"prompt_tokens\":12",
                "max_tokens=4096",
                "authorization: Basic abc",
                "Cookie: a=b",
                "sk-",
                "eyJ",
                "AKIA",
                "Aa0Bb1Cc2Dd3Ee4Ff5Gg6Hh7Ii8Jj9Kk0Ll",
                "é",
                "证据",
                "\u{212A}",
                "\u{17F}",
                "_",
                "-",
                ".",
                "/",
                ":",
                "=",
                "'",
                " ",
                "\n",
            ]
            .map(String::from),
        );
        let piece = prop_oneof![
            4 => prop::sample::select(known),
            1 => any::<String>(),
        ];
        prop::collection::vec(piece, 0..8).prop_map(|pieces| pieces.concat())
    }

    #[test]
    fn the_screen_builds() {
        assert!(
            screen().is_some(),
            "without it every pattern is searched for"
        );
    }
}
