//! Argument objects as models write them by hand: JSON, else JSON5 (unquoted
//! keys, single quotes, trailing commas, comments). Either way a key given
//! twice is refused, since a client could keep either value.

use crate::tool_call_format::StrictValue;
use serde_json::{Map, Value};

/// An arguments object and whether it was strict JSON as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Arguments {
    pub object: Map<String, Value>,
    pub strict: bool,
}

/// Parse `src` (the whole text) as one object; the error says why not.
pub fn object(src: &str) -> Result<Arguments, String> {
    let strict = serde_json::from_str::<StrictValue>(src);
    let (value, strict) = match strict {
        Ok(StrictValue(v)) => (v, true),
        Err(e) if e.to_string().contains("duplicate key") => {
            return Err(format!("are not a valid object ({e})"))
        }
        Err(_) => match json5::from_str::<StrictValue>(src) {
            Ok(StrictValue(v)) => (v, false),
            Err(e) => return Err(format!("are neither JSON nor relaxed JSON ({e})")),
        },
    };
    match value {
        Value::Object(object) => Ok(Arguments { object, strict }),
        _ => Err("are not an object".to_string()),
    }
}

/// The end (exclusive byte offset) of the bracketed value that opens `src`
/// (`{…}`, `[…]` or `(…)`), honouring strings in double or single quotes.
pub fn bracketed_end(src: &str) -> Result<usize, &'static str> {
    let mut open: Vec<char> = Vec::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in src.char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' if !open.is_empty() => quote = Some(c),
            '{' => open.push('}'),
            '[' => open.push(']'),
            '(' => open.push(')'),
            '}' | ']' | ')' => {
                if open.pop() != Some(c) {
                    return Err("have unbalanced brackets");
                }
                if open.is_empty() {
                    return Ok(i + c.len_utf8());
                }
            }
            _ if open.is_empty() => return Err("do not start with a bracket"),
            _ => {}
        }
    }
    Err("are not closed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(src: &str) -> (Value, bool) {
        let a = object(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        (Value::Object(a.object), a.strict)
    }

    #[test]
    fn json_and_relaxed_json() {
        assert_eq!(parsed(r#"{"path": "a"}"#), (json!({"path": "a"}), true));
        assert_eq!(
            parsed("{path: 'config.toml', n: 2,}"),
            (json!({"path": "config.toml", "n": 2}), false)
        );
        assert_eq!(
            parsed("{\n  // the file\n  path: \"a\"\n}"),
            (json!({"path": "a"}), false)
        );
    }

    #[test]
    fn refusals() {
        for src in [
            r#"{"path": "a", "path": "b"}"#,
            "{path: 'a', path: 'b'}",
            "[1, 2]",
            "\"a\"",
            "{path: a b}",
            "{path: NaN}",
            "",
        ] {
            assert!(object(src).is_err(), "{src}");
        }
    }

    #[test]
    fn brackets_are_matched_outside_strings() {
        assert_eq!(bracketed_end(r#"{"a": "}"} tail"#), Ok(10));
        assert_eq!(bracketed_end("[{a: ')'}] x"), Ok(10));
        assert_eq!(bracketed_end("(a: [1, 2])"), Ok(11));
        assert!(bracketed_end("[{\"a\": ]").is_err());
        assert!(bracketed_end("{\"a\": 1").is_err());
        assert!(bracketed_end("x{}").is_err());
        assert_eq!(
            bracketed_end("{\"é\": \"多\"}"),
            Ok("{\"é\": \"多\"}".len())
        );
    }
}
