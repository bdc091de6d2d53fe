//! Small JSON helpers shared by the wire formats. Provider input is untrusted:
//! everything here is total (no panics on missing or mistyped fields).

use serde_json::Value;

pub(crate) fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A token count; missing or mistyped reads as 0.
pub(crate) fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A readable message from an `error` value (`{"type","message"}`, a bare
/// string, or anything else).
pub(crate) fn error_message(err: &Value) -> String {
    let message = match err {
        Value::String(s) => s.clone(),
        _ => {
            let kind = str_field(err, "type").or_else(|| str_field(err, "code"));
            match (kind, str_field(err, "message")) {
                (Some(k), Some(m)) => format!("{k}: {m}"),
                (None, Some(m)) => m.to_string(),
                _ => err.to_string(),
            }
        }
    };
    preview(&message)
}

/// At most 300 bytes of `s`, cut on a char boundary, for error messages.
pub(crate) fn preview(s: &str) -> String {
    const MAX: usize = 300;
    if s.len() <= MAX {
        return s.to_string();
    }
    format!("{}…", truncate(s, MAX))
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A temperature as JSON. Goes through the decimal text of the f32 so that
/// 0.2 is sent as 0.2, not 0.20000000298023224. Non-finite values are dropped.
pub(crate) fn temperature(t: f32) -> Option<Value> {
    if !t.is_finite() {
        return None;
    }
    let t: f64 = t.to_string().parse().ok()?;
    serde_json::Number::from_f64(t).map(Value::Number)
}
