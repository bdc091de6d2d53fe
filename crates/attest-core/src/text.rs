//! Small text and hashing helpers shared by the registry, the failure
//! records and tool implementations.

use sha2::{Digest, Sha256};

/// Hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The longest prefix of `s` that is at most `max` bytes and ends on a char
/// boundary, and whether anything was cut.
pub fn truncate_str(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// `s` cut to at most `max` bytes of content, with a note saying so when cut.
pub fn truncate_with_note(s: &str, max: usize) -> String {
    match truncate_str(s, max) {
        (head, false) => head.to_string(),
        (head, true) => format!(
            "{head}\n[truncated: showing the first {} of {} bytes]",
            head.len(),
            s.len()
        ),
    }
}

/// Lossy UTF-8 of captured process output, trimmed and truncated with a note.
pub fn captured_text(bytes: &[u8], total: u64, max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim();
    let (head, cut) = truncate_str(trimmed, max);
    if cut || total > bytes.len() as u64 {
        format!("{head}\n[truncated: output was {total} bytes]")
    } else {
        head.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_char_boundaries() {
        let s = "aé"; // 'é' is two bytes
        assert_eq!(truncate_str(s, 2), ("a", true));
        assert_eq!(truncate_str(s, 3), ("aé", false));
        assert_eq!(truncate_str("", 0), ("", false));
    }

    #[test]
    fn note_says_sizes() {
        let out = truncate_with_note("abcdef", 3);
        assert!(out.starts_with("abc\n"));
        assert!(out.contains("first 3 of 6 bytes"), "{out}");
        assert_eq!(truncate_with_note("abc", 3), "abc");
    }

    #[test]
    fn captured_text_notes_dropped_bytes() {
        assert_eq!(captured_text(b" hi \n", 5, 100), "hi");
        let out = captured_text(b"abc", 10, 100);
        assert!(out.contains("output was 10 bytes"), "{out}");
    }

    #[test]
    fn sha256_of_empty() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
