//! The cl100k byte-pair encoding, counting only, over the flat vocabulary
//! tables the build script embeds (`build.rs`). Same split and merges as
//! tiktoken (the tests compare counts with tiktoken-rs), without its heap:
//! nothing is built at run time but the split regex.

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

include!("vocab_hash.rs");

/// Every ordinary token's bytes, in rank order.
static BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_bytes.bin"));
/// Little-endian u32 offsets into `BYTES`: rank r is `offset(r)..offset(r + 1)`.
static OFFSETS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_offsets.bin"));
/// Little-endian u32 slots of an open-addressing table: rank + 1 in the
/// low `RANK_BITS` under a fingerprint of the token's hash, or 0.
static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_table.bin"));

/// cl100k's split pattern without its one look-ahead (`\s+(?!\S)`), which
/// the regex crate does not have: `split` applies it by hand. The
/// possessive quantifiers of tiktoken's form change nothing here, as no
/// alternative could give back what they keep.
const SPLIT: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n]|\s+";

/// Pieces longer than this merge through a heap instead of by scanning
/// for the lowest rank each time (quadratic in the piece's length).
const SCAN_LIMIT: usize = 128;

fn split_regex() -> &'static Regex {
    static SPLIT_REGEX: OnceLock<Regex> = OnceLock::new();
    SPLIT_REGEX.get_or_init(|| Regex::new(SPLIT).expect("the cl100k split pattern compiles"))
}

fn u32_at(table: &[u8], index: usize) -> u32 {
    let at = index * 4;
    u32::from_le_bytes([table[at], table[at + 1], table[at + 2], table[at + 3]])
}

fn token_bytes(rank: u32) -> &'static [u8] {
    let rank = rank as usize;
    &BYTES[u32_at(OFFSETS, rank) as usize..u32_at(OFFSETS, rank + 1) as usize]
}

/// The rank of the token whose bytes are exactly `bytes`.
fn rank(bytes: &[u8]) -> Option<u32> {
    let hash = hash_of(bytes);
    let fingerprint = fingerprint_of(hash);
    let mut slot = slot_of(hash);
    loop {
        let entry = u32_at(TABLE, slot);
        if entry == 0 {
            return None;
        }
        let rank = (entry & ((1 << RANK_BITS) - 1)) - 1;
        if entry & !((1 << RANK_BITS) - 1) == fingerprint && token_bytes(rank) == bytes {
            return Some(rank);
        }
        slot = (slot + 1) % TABLE_SLOTS;
    }
}

/// Tokens in `text`, as tiktoken's `encode_ordinary(text).len()`.
pub fn count(text: &str) -> usize {
    split(text)
        .map(|piece| piece_tokens(piece.as_bytes()))
        .sum()
}

/// The pieces cl100k's pattern splits `text` into.
fn split(text: &str) -> impl Iterator<Item = &str> {
    let regex = split_regex();
    let mut at = 0;
    std::iter::from_fn(move || {
        // Every character is matched by some alternative of the pattern, so
        // the pieces tile the text and each search is anchored where the
        // last piece ended: an unanchored one would find the same piece,
        // after a second, reverse scan to learn where it starts.
        let found = regex.search(&Input::new(text).range(at..).anchored(Anchored::Yes))?;
        let mut end = found.end();
        let piece = &text[found.range()];
        // The pattern's `\s+(?!\S)`: a run of spaces (no line break, which
        // an earlier alternative takes) that stops before a non-space
        // leaves its last space to the word after it.
        if end < text.len()
            && piece.chars().nth(1).is_some()
            && piece.chars().all(char::is_whitespace)
            && !piece.ends_with(['\r', '\n'])
        {
            end -= piece.chars().next_back().map_or(0, char::len_utf8);
        }
        let piece = &text[found.start()..end];
        at = end;
        Some(piece)
    })
}

/// Tokens that byte-pair merging makes of one piece: the lowest-ranked
/// adjacent pair that is itself a token merges first, the leftmost of
/// equals, until no pair is a token.
fn piece_tokens(piece: &[u8]) -> usize {
    if piece.len() <= 1 || rank(piece).is_some() {
        return piece.len().min(1);
    }
    if piece.len() > SCAN_LIMIT {
        return heap_merge(piece);
    }
    // Part boundaries, each with the rank of the pair it starts (the part
    // and the next one together), u32::MAX where that is no token.
    let pair_rank = |parts: &[(usize, u32)], i: usize| {
        parts
            .get(i + 2)
            .and_then(|after| rank(&piece[parts[i].0..after.0]))
            .unwrap_or(u32::MAX)
    };
    let mut parts: Vec<(usize, u32)> = (0..=piece.len()).map(|at| (at, u32::MAX)).collect();
    for i in 0..parts.len() - 2 {
        parts[i].1 = pair_rank(&parts, i);
    }
    loop {
        let mut lowest = (u32::MAX, 0);
        for (i, &(_, r)) in parts[..parts.len() - 1].iter().enumerate() {
            if r < lowest.0 {
                lowest = (r, i);
            }
        }
        let (r, i) = lowest;
        if r == u32::MAX {
            break;
        }
        parts.remove(i + 1);
        parts[i].1 = pair_rank(&parts, i);
        if i > 0 {
            parts[i - 1].1 = pair_rank(&parts, i - 1);
        }
    }
    parts.len() - 1
}

/// `piece_tokens` for long pieces: the same merges in the same order, the
/// candidates kept in a heap ordered by (rank, position), stale entries
/// skipped when they surface.
fn heap_merge(piece: &[u8]) -> usize {
    let n = piece.len();
    // Parts as a linked list over their start positions; `next[i] == n`
    // at the last part.
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
    let mut alive = vec![true; n];
    let pair_at = |next: &[usize], i: usize| -> Option<u32> {
        let second = next[i];
        (second < n)
            .then(|| rank(&piece[i..next[second]]))
            .flatten()
    };
    let mut heap = BinaryHeap::new();
    for i in 0..n - 1 {
        if let Some(r) = pair_at(&next, i) {
            heap.push(Reverse((r, i)));
        }
    }
    let mut parts = n;
    while let Some(Reverse((r, i))) = heap.pop() {
        if !alive[i] || pair_at(&next, i) != Some(r) {
            continue;
        }
        let second = next[i];
        alive[second] = false;
        next[i] = next[second];
        if next[i] < n {
            prev[next[i]] = i;
        }
        parts -= 1;
        if let Some(r) = pair_at(&next, i) {
            heap.push(Reverse((r, i)));
        }
        let before = prev[i];
        if before < n {
            if let Some(r) = pair_at(&next, before) {
                heap.push(Reverse((r, before)));
            }
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tiktoken() -> &'static tiktoken_rs::CoreBPE {
        static BPE: OnceLock<tiktoken_rs::CoreBPE> = OnceLock::new();
        BPE.get_or_init(|| tiktoken_rs::cl100k_base().unwrap())
    }

    fn assert_same(text: &str) {
        assert_eq!(
            count(text),
            tiktoken().encode_ordinary(text).len(),
            "{text:?}"
        );
    }

    #[test]
    fn the_vocabulary_round_trips_every_rank() {
        for r in 0..100_256 {
            assert_eq!(rank(token_bytes(r)), Some(r), "rank {r}");
        }
        assert_eq!(rank(b"\xff\xfe\xfd definitely not a token"), None);
    }

    #[test]
    fn counts_equal_tiktokens_on_the_cases_its_pattern_is_about() {
        for text in [
            "",
            "hello world",
            "Hello,   world!\n\n  indented\tand\r\nwindows\n",
            "trailing spaces   ",
            "  \n  \n",
            "it's they'LL we've I'M she'd 'tis",
            "1234567 and 12.5 MB, ports 8080/tcp",
            "日本語のテキスト、そして中文。 Ελληνικά  русский",
            "\u{1F600}\u{1F680} emoji \u{0301}e\u{0301}",
            "{\"path\":\"data/f0001.txt\",\"n\":[1,2,3]}\n",
            "\u{a0}\u{2003}x\u{85}y\u{2028}z",
            "fn main() {\n    println!(\"hi\");\n}\n",
            &"aaaaaaaa".repeat(200),
            &"ab1".repeat(300),
            &"\u{7}\u{0}\u{ff}x".repeat(50),
        ] {
            assert_same(text);
        }
    }

    #[test]
    fn long_pieces_merge_as_short_ones_do() {
        for piece in [
            "a".repeat(SCAN_LIMIT + 1),
            "abcdefghij".repeat(40),
            "xyzzy".repeat(60),
            "\u{1F600}".repeat(70),
        ] {
            assert_same(&piece);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn counts_equal_tiktokens(text in "(\\PC|\\s|[ \\n\\t'0-9a-z]){0,200}") {
            assert_same(&text);
        }

        #[test]
        fn counts_equal_tiktokens_on_ascii_prose(text in "[ -~\\n\\t]{0,400}") {
            assert_same(&text);
        }

        #[test]
        fn counts_equal_tiktokens_where_spaces_breaks_and_contractions_mix(
            text in "([ \\t\\r\\n\\u{a0}\\u{3000}]{1,4}|'[sdmtlvrSDMTLVR]{1,2}|[a-zA-Z\\u{e9}\\u{4e2d}]{1,6}|[0-9]{1,5}|[.,!?/_-]{1,3}){0,60}"
        ) {
            assert_same(&text);
        }

        /// The anchored search in `split` relies on every character being
        /// matched by some alternative; a gap would end the split early.
        #[test]
        fn pieces_tile_any_text(text in any::<String>()) {
            prop_assert_eq!(split(&text).collect::<String>(), text);
        }

        #[test]
        fn long_pieces_count_as_tiktoken_counts_them(text in "[a-z]{129,700}|[\\u{4e00}-\\u{4e2f}]{50,200}") {
            assert_same(&text);
        }
    }
}
