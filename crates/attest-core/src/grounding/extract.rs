//! The checkable values of an answer (SPEC A9) and the one rule for
//! whether a value occurs in a text: as a whole token, not glued to letters
//! or digits (`80` is not in `8080`, `8` is not in `8.5`).

use super::spans::{spans, Delimiter};
use crate::memory::values::{classify, url_re, ValueKind, TRIM};
use attest_protocol::CheckableKind;
use regex::Regex;
use std::sync::OnceLock;

/// One value an answer names that a text can confirm or not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Checkable {
    /// What is looked for (`0`, `config.toml`, `1.2.3`).
    pub value: String,
    pub kind: CheckableKind,
    /// The unit after a number (`hits`, `ms`), for display.
    pub unit: Option<String>,
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| {
        Regex::new(pattern).unwrap_or_else(|e| panic!("built-in pattern must compile: {e}"))
    })
}

fn version_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    re(
        &RE,
        r"^(?:[vV]\d+(?:\.\d+)+|\d+\.\d+\.\d+(?:\.\d+)*)(?:-[0-9A-Za-z.]+)?(?:\+[0-9A-Za-z.]+)?$",
    )
}

fn hash_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    re(&RE, r"^(?:sha256:|sha1:|sha512:)?([0-9a-fA-F]{7,128})$")
}

/// `8080`, `localhost:8080`, `10.0.0.7:5432`, `:3000`.
fn host_port_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    re(&RE, r"^([A-Za-z0-9.-]*):(\d{2,5})$")
}

/// A number, maybe with a unit glued on (`12ms`, `50%`, `1,024`).
fn number_unit_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    re(&RE, r"^(-?\d+(?:[.,]\d+)*)(%|[A-Za-z]{1,5})?$")
}

/// Units written after a number; any other plural noun counts too.
const UNITS: &[&str] = &[
    "%",
    "b",
    "kb",
    "mb",
    "gb",
    "tb",
    "kib",
    "mib",
    "gib",
    "byte",
    "bytes",
    "ms",
    "us",
    "ns",
    "s",
    "sec",
    "secs",
    "second",
    "min",
    "mins",
    "minute",
    "h",
    "hr",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "line",
    "file",
    "hit",
    "match",
    "time",
    "test",
    "error",
    "warning",
    "item",
    "entry",
    "result",
    "row",
    "column",
    "char",
    "word",
    "token",
    "step",
    "call",
    "run",
    "commit",
    "package",
    "crate",
    "module",
    "function",
    "field",
    "key",
    "request",
    "process",
    "thread",
    "core",
    "user",
    "record",
    "page",
    "retry",
    "attempt",
    "percent",
    "occurrence",
    "dependency",
    "directory",
    "folder",
    "issue",
    "failure",
    "version",
    "port",
    "node",
    "host",
    "server",
];

/// Words ending in `s` that are not units.
const NOT_UNITS: &[&str] = &[
    "this", "was", "has", "does", "is", "its", "yes", "thus", "plus", "less", "always", "perhaps",
    "across", "unless", "whereas", "as", "us", "his", "hers", "ours", "theirs", "yours", "status",
];

fn unit_of(word: &str) -> Option<String> {
    let word = word.trim_matches(TRIM);
    let lower = word.to_ascii_lowercase();
    if lower.is_empty() || !lower.chars().all(|c| c.is_ascii_alphabetic() || c == '%') {
        return None;
    }
    let singular = lower
        .strip_suffix("ies")
        .map(|s| format!("{s}y"))
        .or_else(|| lower.strip_suffix("es").map(String::from))
        .or_else(|| lower.strip_suffix('s').map(String::from));
    let known = UNITS.contains(&lower.as_str())
        || singular.is_some_and(|s| UNITS.contains(&s.as_str()))
        || (lower.len() >= 4 && lower.ends_with('s') && !NOT_UNITS.contains(&lower.as_str()));
    known.then(|| word.to_string())
}

/// The checkable values of `answer`, each once, in order of appearance.
pub fn checkable_values(answer: &str) -> Vec<Checkable> {
    let mut out: Vec<Checkable> = Vec::new();
    let mut push = |c: Checkable| {
        if !c.value.is_empty() && !out.iter().any(|o| o.value == c.value && o.kind == c.kind) {
            out.push(c);
        }
    };
    // Fence lines carry no values; the code inside them does.
    let mut rest = String::with_capacity(answer.len());
    for line in answer.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            rest.push_str(&blank(line));
        } else {
            rest.push_str(line);
        }
    }
    // Code spans and quotes first, blanked afterwards so their words are
    // not taken again.
    for (delimiters, code) in [
        (&[Delimiter::Backtick][..], true),
        (&[Delimiter::Straight, Delimiter::Curly][..], false),
    ] {
        let scanned = rest.clone();
        for span in spans(&scanned, delimiters) {
            // The answer's own text at that place: a quote may span a code
            // span already blanked out of `rest` (blanking keeps offsets).
            let inner = answer
                .get(span.inner.clone())
                .unwrap_or(&scanned[span.inner])
                .trim();
            if inner.chars().any(char::is_alphanumeric) {
                push(span_value(inner, code));
            }
            rest.replace_range(span.whole.clone(), &blank(&scanned[span.whole]));
        }
    }
    let scanned = rest.clone();
    for m in url_re().find_iter(&scanned) {
        push(Checkable {
            value: m.as_str().trim_end_matches(TRIM).to_string(),
            kind: CheckableKind::Url,
            unit: None,
        });
        rest.replace_range(m.range(), &blank(m.as_str()));
    }
    let words: Vec<&str> = rest.split_whitespace().collect();
    for (i, raw) in words.iter().enumerate() {
        let token = raw.trim_matches(TRIM);
        let word_before = |back: usize| {
            i.checked_sub(back)
                .map(|p| words[p].trim_matches(TRIM).to_ascii_lowercase())
        };
        let is_port = |w: Option<String>| w.is_some_and(|w| w == "port" || w == "ports");
        // `port 8080`, `port is 8080`, `port = 8080`.
        let after_port_word = is_port(word_before(1))
            || (is_port(word_before(2))
                && word_before(1)
                    .is_some_and(|w| matches!(w.as_str(), "" | "is" | "was" | "of" | "to")));
        for c in token_values(token, words.get(i + 1).copied(), after_port_word) {
            push(c);
        }
    }
    out
}

/// Spaces of the same byte length (ranges found earlier stay valid);
/// newlines stay.
fn blank(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push('\n'),
            c => (0..c.len_utf8()).for_each(|_| out.push(' ')),
        }
    }
    out
}

/// A code span or quoted string: its own kind when it has one, else an
/// identifier (code span without spaces) or a verbatim string.
fn span_value(inner: &str, code: bool) -> Checkable {
    if let Some(c) = token_values(inner, None, false).into_iter().next() {
        if c.value == inner || c.kind != CheckableKind::Number {
            return c;
        }
    }
    let kind = if code && !inner.contains(char::is_whitespace) {
        CheckableKind::Identifier
    } else {
        CheckableKind::Quoted
    };
    Checkable {
        value: inner.to_string(),
        kind,
        unit: None,
    }
}

/// The values of one bare token; `next` is the word after it (a unit?).
fn token_values(token: &str, next: Option<&str>, after_port_word: bool) -> Vec<Checkable> {
    let plain = |value: &str, kind| Checkable {
        value: value.to_string(),
        kind,
        unit: None,
    };
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Vec::new();
    }
    // Cheap tests first: most tokens of an answer are words, which no
    // pattern below can match (each needs what it tests for).
    let digit = token.bytes().any(|b| b.is_ascii_digit());
    let marked = token.contains(['.', '/', ':']);
    if !digit && !marked && token.len() < 7 {
        return Vec::new();
    }
    if let Some(caps) = token
        .contains(':')
        .then(|| host_port_re().captures(token))
        .flatten()
    {
        let host = caps.get(1).map_or("", |m| m.as_str());
        let port = caps.get(2).map_or("", |m| m.as_str());
        let hostish = host.is_empty()
            || host.eq_ignore_ascii_case("localhost")
            || classify(host) == Some(ValueKind::Domain);
        if hostish && port.parse::<u32>().is_ok_and(|p| p <= 65_535) {
            let mut out = vec![plain(port, CheckableKind::Port)];
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                out.insert(0, plain(host, CheckableKind::Domain));
            }
            return out;
        }
    }
    if digit && token.contains('.') && version_re().is_match(token) {
        return vec![plain(token, CheckableKind::Version)];
    }
    if let Some(caps) = (token.len() >= 7)
        .then(|| hash_re().captures(token))
        .flatten()
    {
        let hex = caps.get(1).map_or("", |m| m.as_str());
        let letters = hex.chars().any(|c| c.is_ascii_alphabetic());
        let digits = hex.chars().any(|c| c.is_ascii_digit());
        if (letters && digits) || token.contains(':') {
            return vec![plain(token, CheckableKind::Hash)];
        }
    }
    let numeric = token.starts_with(|c: char| c.is_ascii_digit() || c == '-');
    if let Some(caps) = numeric.then(|| number_unit_re().captures(token)).flatten() {
        let number = caps.get(1).map_or("", |m| m.as_str());
        let unit = match caps.get(2) {
            Some(glued) => unit_of(glued.as_str()),
            None => next.and_then(unit_of),
        };
        if caps.get(2).is_some() && unit.is_none() {
            // `3x4`, `10e`: not a number we can name.
            return Vec::new();
        }
        if after_port_word && number.chars().all(|c| c.is_ascii_digit()) {
            return vec![plain(number, CheckableKind::Port)];
        }
        let digits = number.chars().filter(char::is_ascii_digit).count();
        // A lone digit is everywhere; with a unit it is a claim (`0 hits`).
        if digits >= 2 || unit.is_some() {
            return vec![Checkable {
                value: number.to_string(),
                kind: CheckableKind::Number,
                unit,
            }];
        }
        return Vec::new();
    }
    // A URL, a domain or a path has a `.`, `/` or `:` in it.
    if !marked {
        return Vec::new();
    }
    match classify(token) {
        Some(ValueKind::Url) => vec![plain(token, CheckableKind::Url)],
        Some(ValueKind::Domain) => vec![plain(token, CheckableKind::Domain)],
        Some(ValueKind::Path) => vec![plain(token, CheckableKind::Path)],
        // Bare identifiers are words of the answer; only code spans name them.
        _ => Vec::new(),
    }
}

/// What to search for: the value, and spellings that mean the same
/// (`1,024` is `1024`; `v1.2.3` is `1.2.3`).
pub fn needles(c: &Checkable) -> Vec<String> {
    let mut out = vec![c.value.clone()];
    match c.kind {
        CheckableKind::Number if c.value.contains(',') => out.push(c.value.replace(',', "")),
        CheckableKind::Version => {
            if let Some(bare) = c.value.strip_prefix(['v', 'V']) {
                out = vec![bare.to_string()];
            }
        }
        CheckableKind::Hash => {
            if let Some((_, hex)) = c.value.split_once(':') {
                out = vec![hex.to_string()];
            }
        }
        _ => {}
    }
    out
}

/// Whether case matters when comparing the value.
pub fn case_insensitive(kind: CheckableKind) -> bool {
    matches!(
        kind,
        CheckableKind::Url | CheckableKind::Domain | CheckableKind::Hash
    )
}

/// Whether the needle found at `hay[at..end]` stands as a whole token.
pub fn stands_alone(kind: CheckableKind, needle: &str, hay: &str, at: usize, end: usize) -> bool {
    let glued = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let first_word = needle.chars().next().is_some_and(char::is_alphanumeric);
    let last_word = needle.chars().last().is_some_and(char::is_alphanumeric);
    let mut before = hay[..at].chars().rev();
    let just_before = before.next();
    let after = hay[end..].chars().next();
    let glued_before = first_word
        && glued(just_before)
        // `1.2.3` is in `v1.2.3`.
        && !(kind == CheckableKind::Version
            && matches!(just_before, Some('v' | 'V'))
            && !glued(before.next()));
    let glued_after = last_word
        && match kind {
            // A short hash names a longer one it starts.
            CheckableKind::Hash => false,
            // `12` is in `12ms`, not in `123`.
            CheckableKind::Number => after.is_some_and(|c| c.is_ascii_digit() || c == '_'),
            _ => glued(after),
        };
    // A number continues through `.5` or `,000`: `8.5` is not `8`.
    let number_continues = matches!(kind, CheckableKind::Number | CheckableKind::Port)
        && matches!(after, Some('.' | ','))
        && hay[end..]
            .chars()
            .nth(1)
            .is_some_and(|c| c.is_ascii_digit());
    !(glued_before || glued_after || number_continues)
}

/// True when `c` occurs in `hay` as a whole token (ASCII case-insensitive
/// for URLs, domains and hashes).
pub fn found_in(c: &Checkable, hay: &str) -> bool {
    needles(c)
        .iter()
        .any(|needle| needle_found(c.kind, needle, hay))
}

/// One needle of a value of `kind`, as a whole token in `hay`.
pub fn needle_found(kind: CheckableKind, needle: &str, hay: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    if case_insensitive(kind) {
        let (needle, hay) = (needle.to_ascii_lowercase(), hay.to_ascii_lowercase());
        occurs(kind, &needle, &hay)
    } else {
        occurs(kind, needle, hay)
    }
}

/// Every occurrence counts, overlapping ones too (`vv` in `vvv`).
fn occurs(kind: CheckableKind, needle: &str, hay: &str) -> bool {
    let mut from = 0;
    while let Some(found) = hay[from..].find(needle) {
        let at = from + found;
        if stands_alone(kind, needle, hay, at, at + needle.len()) {
            return true;
        }
        from = at + hay[at..].chars().next().map_or(1, char::len_utf8);
    }
    false
}
