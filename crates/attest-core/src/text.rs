//! Small text and hashing helpers shared by the registry, the failure
//! records and tool implementations.

use sha2::{Digest, Sha256};
use std::io::Read;

/// Hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What [`read_hashed_head`] read: the first bytes, the whole length and
/// the whole hex sha256.
pub struct HashedHead {
    pub head: Vec<u8>,
    pub total: u64,
    pub sha256: String,
}

/// Reads `reader` to its end, hashing all of it but keeping only the first
/// `keep` bytes, so a large file costs no more memory than a small one.
/// The head is read straight into its own buffer; a buffer for the rest is
/// made only when there is more (most reads are of small files).
pub fn read_hashed_head(mut reader: impl Read, keep: usize) -> std::io::Result<HashedHead> {
    let mut head = Vec::new();
    (&mut reader).take(keep as u64).read_to_end(&mut head)?;
    let mut hasher = Sha256::new();
    hasher.update(&head);
    let mut total = head.len() as u64;
    if head.len() == keep {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hasher.update(&buf[..n]);
            total += n as u64;
        }
    }
    Ok(HashedHead {
        head,
        total,
        sha256: hex::encode(hasher.finalize()),
    })
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
    fn hashed_head_hashes_everything_and_keeps_only_the_head() {
        // Longer than one 64 KiB read, so the hash spans several reads.
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let read = read_hashed_head(&data[..], 10).unwrap();
        assert_eq!(read.head, &data[..10]);
        assert_eq!(read.total, 200_000);
        assert_eq!(read.sha256, sha256_hex(&data));
        let whole = read_hashed_head(&data[..5], 10).unwrap();
        assert_eq!((whole.head.as_slice(), whole.total), (&data[..5], 5));
        // Exactly the head, one byte more, and nothing kept at all.
        for (len, keep) in [(10, 10), (11, 10), (70_000, 0), (0, 0), (0, 10)] {
            let read = read_hashed_head(&data[..len], keep).unwrap();
            assert_eq!(read.head, &data[..len.min(keep)], "{len} {keep}");
            assert_eq!(read.total, len as u64, "{len} {keep}");
            assert_eq!(read.sha256, sha256_hex(&data[..len]), "{len} {keep}");
        }
    }

    #[test]
    fn sha256_of_empty() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
