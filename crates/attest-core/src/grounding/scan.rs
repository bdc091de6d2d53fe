//! Finding every value's needles in a text in one pass over its words.
//!
//! A value counts only as a whole token ([`stands_alone`]), so each of its
//! occurrences begins with its first word as a whole word of the text.
//! The pass looks each word of the text up in a table of the needles'
//! first words and checks the few candidates it names with the one rule
//! (exact bytes, [`stands_alone`]). A substring automaton does the same
//! work many times over: a short needle (`3 retries`) matches at nearly
//! every digit of a log, and each match costs more than reading the text.
//!
//! Three spellings need a second look-up: a number glued to a unit (`12` in
//! `12ms`: the word's leading digits), a version after `v` (`1.2.3` in
//! `v1.2.3`), and a short hash that starts a longer one (keyed by its first
//! bytes alone). Needles that do not start with a word the pass can see
//! (`_private`, `…`, a non-ASCII first letter) are searched for directly.

use super::extract::{case_insensitive, needle_found, stands_alone};
use attest_protocol::CheckableKind;
use std::collections::HashMap;

/// One needle of one value.
struct Needle {
    value: usize,
    kind: CheckableKind,
    text: String,
    /// Byte offset of its first word in `text`.
    offset: usize,
    /// Its first 16 bytes (folded where case does not matter) and the mask
    /// of those it has: most candidates are told apart without a compare
    /// of the whole text.
    head: [u64; 2],
    head_mask: [u64; 2],
}

/// Sixteen bytes of `text` from `at` (zeros past its end), folded with
/// `| 0x20` when `fold`.
fn sixteen(text: &[u8], at: usize, fold: bool) -> [u64; 2] {
    let mut bytes = [0u8; 16];
    if let Some(there) = text.get(at..) {
        let n = there.len().min(16);
        bytes[..n].copy_from_slice(&there[..n]);
    }
    let mut out = [0u64; 2];
    for (half, eight) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        *half = u64::from_le_bytes(eight.try_into().unwrap_or([0; 8]));
        if fold {
            *half |= 0x2020_2020_2020_2020;
        }
    }
    out
}

/// The needles of a set of values, by the key of their first word.
#[derive(Default)]
pub(super) struct WordIndex {
    needles: Vec<Needle>,
    /// Key of a first word (its length and first bytes) → needles.
    by_word: KeyTable,
    /// First bytes of a hash needle → needles (a longer hash contains it).
    by_prefix: KeyTable,
    /// Needles searched for directly.
    direct: Vec<u32>,
    /// For each first byte (folded like [`key`]) of the first words in
    /// `by_word`, their lengths (bit `n` for length `n`, 15 for longer):
    /// most words of a text are passed over unhashed.
    shapes: Shapes,
    /// Some needle is a version (looked for after a `v`, too).
    versions: bool,
    /// The bytes a word of the text must start with to be visited at all:
    /// a first byte of the table, `v` before a version, any letter or
    /// digit where there are hashes.
    visited: ByteTable,
}

/// Lengths by first byte.
struct Shapes([u16; 128]);

impl Default for Shapes {
    fn default() -> Self {
        Shapes([0; 128])
    }
}

fn length_bit(len: usize) -> u16 {
    1 << len.min(15)
}

/// A yes or no for each byte value.
struct ByteTable([bool; 256]);

impl Default for ByteTable {
    fn default() -> Self {
        ByteTable([false; 256])
    }
}

/// The bytes a hash needle is keyed by (hashes are at least 7 long).
const HASH_PREFIX: usize = 7;

impl WordIndex {
    /// The index of `(value, kind, needle)` triples.
    pub(super) fn new<'a>(
        needles: impl IntoIterator<Item = (usize, CheckableKind, &'a str)>,
    ) -> Self {
        let mut index = WordIndex::default();
        let (mut by_word, mut by_prefix) = (HashMap::new(), HashMap::new());
        for (value, kind, text) in needles {
            index.add(value, kind, text, &mut by_word, &mut by_prefix);
        }
        index.by_word = KeyTable::new(by_word);
        index.by_prefix = KeyTable::new(by_prefix);
        index.versions = index
            .needles
            .iter()
            .any(|n| n.kind == CheckableKind::Version);
        for byte in 0..=255u8 {
            index.visited.0[usize::from(byte)] = byte.is_ascii_alphanumeric()
                && (index.lengths_after(byte) != 0
                    || (index.versions && matches!(byte, b'v' | b'V'))
                    || !index.by_prefix.is_empty());
        }
        index
    }

    fn add(
        &mut self,
        value: usize,
        kind: CheckableKind,
        text: &str,
        by_word: &mut HashMap<u64, Vec<u32>>,
        by_prefix: &mut HashMap<u64, Vec<u32>>,
    ) {
        let id = self.needles.len() as u32;
        let bytes = text.as_bytes();
        // The first word must be one the pass sees whole: one starting
        // with `_` or a non-ASCII letter can begin inside a word of the
        // text, and one that ends the needle with `_` can go on there.
        let entry = bytes.iter().position(|&b| is_word_byte(b)).filter(|&at| {
            let end = word_end(text, at);
            bytes[at].is_ascii_alphanumeric()
                && bytes[at..end].is_ascii()
                && !(end == bytes.len() && bytes[end - 1] == b'_')
                // A number may have letters after it (`12ms`): found by the
                // word's leading digits, so its own must be digits.
                && (kind != CheckableKind::Number
                    || bytes[at..end].iter().all(u8::is_ascii_digit))
        });
        let fold = case_insensitive(kind);
        let kept = |n: usize| match n {
            0 => 0,
            8.. => u64::MAX,
            n => (1u64 << (8 * n)) - 1,
        };
        let mut head = sixteen(bytes, 0, fold);
        let head_mask = [kept(bytes.len()), kept(bytes.len().saturating_sub(8))];
        head[0] &= head_mask[0];
        head[1] &= head_mask[1];
        self.needles.push(Needle {
            value,
            kind,
            text: text.to_string(),
            offset: entry.unwrap_or(0),
            head,
            head_mask,
        });
        match entry {
            None => self.direct.push(id),
            Some(at) => {
                let word = &bytes[at..word_end(text, at)];
                if kind == CheckableKind::Hash {
                    // A hash may go on in the text: keyed by its first bytes
                    // (real ones have at least seven), else searched for.
                    if at == 0 && word.len() >= HASH_PREFIX {
                        by_prefix.entry(prefix_key(bytes, 0)).or_default().push(id);
                    } else {
                        self.direct.push(id);
                    }
                } else {
                    self.shapes.0[usize::from(word[0] | 0x20)] |= length_bit(word.len());
                    by_word
                        .entry(key(bytes, at, word.len()))
                        .or_default()
                        .push(id);
                }
            }
        }
    }

    /// Sets `found[value]` for each value with a needle that stands alone
    /// in `hay` (values already found are not looked for again).
    pub(super) fn find(&self, hay: &str, found: &mut [bool]) {
        if self.needles.is_empty() {
            return;
        }
        if !self.by_word.is_empty() || !self.by_prefix.is_empty() {
            let mut left = Left::new(self);
            if hay.is_ascii() {
                self.visit_ascii_words(hay, found, &mut left);
            } else {
                self.visit_words(hay, found, &mut left);
            }
        }
        for &id in &self.direct {
            let n = &self.needles[id as usize];
            if !found[n.value] && needle_found(n.kind, &n.text, hay) {
                found[n.value] = true;
            }
        }
    }

    /// [`Self::find`]'s pass for any text, a byte (or a character) at a
    /// time.
    fn visit_words(&self, hay: &str, found: &mut [bool], left: &mut Left) {
        let b = hay.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            match CLASS[c as usize] {
                OTHER => {
                    i += 1;
                    continue;
                }
                NON_ASCII => {
                    // A word starting with a non-ASCII character names
                    // no needle of the table; skip it (or the one
                    // character).
                    let end = word_end(hay, i);
                    i = if end > i { end } else { i + char_len(c) };
                    continue;
                }
                _ => {}
            }
            let mut end = i + 1;
            while end < b.len() && CLASS[b[end] as usize] == WORD {
                end += 1;
            }
            if end < b.len() && b[end] >= 0x80 {
                end = word_end(hay, end);
            }
            if c != b'_' {
                self.visit(hay, i, end, found, left);
            }
            i = end;
        }
    }

    /// [`Self::find`]'s pass for a text of ASCII only: a bit per byte for
    /// "letter, digit or `_`", eight bytes at a time, and only the words
    /// that may start a needle are visited.
    fn visit_ascii_words(&self, hay: &str, found: &mut [bool], left: &mut Left) {
        let b = hay.as_bytes();
        let mut carry = 0u64;
        for (k, block) in b.chunks(64).enumerate() {
            let word = word_bits(block);
            let mut starts = word & !((word << 1) | carry);
            carry = word >> 63;
            // Keep the starts worth a visit, without a branch on each (a
            // word's first byte is as good as random to the predictor).
            let mut kept = 0u64;
            while starts != 0 {
                let j = starts.trailing_zeros() as usize;
                starts &= starts - 1;
                kept |= u64::from(self.visited.0[usize::from(block[j])]) << j;
            }
            let mut starts = kept;
            while starts != 0 {
                let j = starts.trailing_zeros() as usize;
                starts &= starts - 1;
                let start = k * 64 + j;
                // The word ends at the first byte after it that is not a
                // word byte: in this block, or (rarely) a later one.
                let rest = !word & (u64::MAX << j);
                let end = if rest != 0 {
                    (k * 64 + rest.trailing_zeros() as usize).min(b.len())
                } else {
                    let from = (k + 1) * 64;
                    from + b[from.min(b.len())..]
                        .iter()
                        .take_while(|&&c| CLASS[usize::from(c)] == WORD)
                        .count()
                };
                self.visit(hay, start, end.min(b.len()), found, left);
            }
        }
    }

    /// The look-ups for the word `hay[start..end]`.
    #[inline]
    fn visit(&self, hay: &str, start: usize, end: usize, found: &mut [bool], left: &mut Left) {
        let b = hay.as_bytes();
        let len = end - start;
        let c = b[start];
        let lengths = self.lengths_after(c);
        if lengths & length_bit(len) != 0 {
            if let Some((list, ids)) = self.by_word.get(key(b, start, len)) {
                self.check_all(ids, hay, start, None, found, &mut left.word[list]);
            }
        }
        if c.is_ascii_digit() {
            let digits = leading_digits(&b[start..end]);
            if digits < len && lengths & length_bit(digits) != 0 {
                // `12ms`: the number is the leading digits.
                if let Some((list, ids)) = self.by_word.get(key(b, start, digits)) {
                    self.check_all(ids, hay, start, None, found, &mut left.word[list]);
                }
            }
        } else if self.versions
            && matches!(c, b'v' | b'V')
            && len > 1
            && self.lengths_after(b[start + 1]) & length_bit(len - 1) != 0
        {
            // `v1.2.3`: the version after its `v`.
            if let Some((_, ids)) = self.by_word.get(key(b, start + 1, len - 1)) {
                // Not counted: only the versions of the list are checked.
                let mut ignored = u32::MAX;
                self.check_all(
                    ids,
                    hay,
                    start + 1,
                    Some(CheckableKind::Version),
                    found,
                    &mut ignored,
                );
            }
        }
        if len >= HASH_PREFIX && !self.by_prefix.is_empty() {
            if let Some((list, ids)) = self.by_prefix.get(prefix_key(b, start)) {
                self.check_all(ids, hay, start, None, found, &mut left.prefix[list]);
            }
        }
    }

    /// The lengths of the table's first words that start with `byte`.
    fn lengths_after(&self, byte: u8) -> u16 {
        self.shapes
            .0
            .get(usize::from(byte | 0x20))
            .copied()
            .unwrap_or(0)
    }

    /// Checks each needle of `ids` whose first word is at `at`.
    #[inline]
    fn check_all(
        &self,
        ids: &[u32],
        hay: &str,
        at: usize,
        only: Option<CheckableKind>,
        found: &mut [bool],
        left: &mut u32,
    ) {
        if *left == 0 {
            return;
        }
        let mut unfound = 0;
        let b = hay.as_bytes();
        // The text's 16 bytes at the first word, as is and folded (most
        // needles start with their first word).
        let mut there = None;
        for &id in ids {
            let n = &self.needles[id as usize];
            if found[n.value] {
                continue;
            }
            unfound += 1;
            if only.is_some_and(|k| k != n.kind) {
                continue;
            }
            let Some(start) = at.checked_sub(n.offset) else {
                continue;
            };
            let fold = case_insensitive(n.kind);
            let got = if n.offset == 0 {
                let (plain, folded) = *there.get_or_insert_with(|| {
                    let plain = sixteen(b, at, false);
                    (
                        plain,
                        [
                            plain[0] | 0x2020_2020_2020_2020,
                            plain[1] | 0x2020_2020_2020_2020,
                        ],
                    )
                });
                if fold {
                    folded
                } else {
                    plain
                }
            } else {
                sixteen(b, start, fold)
            };
            if got[0] & n.head_mask[0] != n.head[0] || got[1] & n.head_mask[1] != n.head[1] {
                continue;
            }
            let end = start + n.text.len();
            let Some(text) = b.get(start..end) else {
                continue;
            };
            let same = if n.text.len() <= 16 && !fold {
                true
            } else if fold {
                text.eq_ignore_ascii_case(n.text.as_bytes())
            } else {
                text == n.text.as_bytes()
            };
            if same
                && hay.is_char_boundary(start)
                && hay.is_char_boundary(end)
                && stands_alone(n.kind, &n.text, hay, start, end)
            {
                found[n.value] = true;
                unfound -= 1;
            }
        }
        // Once every value of the list is found in this text, its word
        // costs a look-up and nothing more.
        if only.is_none() {
            *left = unfound;
        }
    }
}

/// Per list of the tables, how many of its needles' values are not yet
/// found in the text being searched (`u32::MAX`: not counted yet).
struct Left {
    word: Vec<u32>,
    prefix: Vec<u32>,
}

impl Left {
    fn new(index: &WordIndex) -> Self {
        Left {
            word: vec![u32::MAX; index.by_word.lists.len()],
            prefix: vec![u32::MAX; index.by_prefix.lists.len()],
        }
    }
}

const OTHER: u8 = 0;
const WORD: u8 = 1;
const NON_ASCII: u8 = 2;

/// Each byte's class: ASCII letters, digits and `_` are word bytes; a byte
/// of a non-ASCII character is decided per character.
static CLASS: [u8; 256] = {
    let mut t = [OTHER; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if b >= 0x80 {
            NON_ASCII
        } else if b.is_ascii_alphanumeric() || b == b'_' {
            WORD
        } else {
            OTHER
        };
        i += 1;
    }
    t
};

/// Bit `j`: byte `j` of `chunk` (ASCII, at most 64 bytes) is a letter, a
/// digit or `_`. Eight bytes at a time: with every byte below 0x80, adding
/// a constant under 0x80 to each byte never carries into the next, so the
/// top bit of each byte says whether it reached a bound.
fn word_bits(chunk: &[u8]) -> u64 {
    const fn each(byte: u8) -> u64 {
        (byte as u64) * 0x0101_0101_0101_0101
    }
    const TOP: u64 = each(0x80);
    let in_range = |x: u64, lo: u8, hi: u8| (x + each(0x80 - lo)) & !(x + each(0x7F - hi)) & TOP;
    let word8 = |x: u64| {
        let word = in_range(x | each(0x20), b'a', b'z')
            | in_range(x, b'0', b'9')
            | in_range(x, b'_', b'_');
        // The top bit of byte i to bit i (no two partial products meet).
        ((word >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
    };
    let mut bits = 0u64;
    let mut eights = chunk.chunks_exact(8);
    for (i, eight) in (&mut eights).enumerate() {
        let x = u64::from_le_bytes(eight.try_into().unwrap_or([0; 8]));
        bits |= word8(x) << (8 * i);
    }
    let tail = eights.remainder();
    if !tail.is_empty() {
        let mut padded = [0u8; 8];
        padded[..tail.len()].copy_from_slice(tail);
        bits |= word8(u64::from_le_bytes(padded)) << (8 * (chunk.len() / 8));
    }
    bits
}

/// ASCII letters, digits and `_`, and every byte of a non-ASCII character
/// (whether it is a letter is decided per character by [`word_end`]).
fn is_word_byte(b: u8) -> bool {
    CLASS[usize::from(b)] != OTHER
}

fn char_len(first: u8) -> usize {
    match first {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    }
}

/// End of the word starting at `at`: letters, digits and `_` (what
/// [`stands_alone`] counts as glued).
fn word_end(text: &str, at: usize) -> usize {
    let b = text.as_bytes();
    let mut end = at;
    while end < b.len() {
        let c = b[end];
        if c < 0x80 {
            if c.is_ascii_alphanumeric() || c == b'_' {
                end += 1;
                continue;
            }
            break;
        }
        match text[end..].chars().next() {
            Some(ch) if ch.is_alphanumeric() => end += ch.len_utf8(),
            _ => break,
        }
    }
    end
}

fn leading_digits(word: &[u8]) -> usize {
    word.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// The key of the word `text[start..start + len]`: its length and first
/// seven bytes, ASCII case folded (`| 0x20` folds letters and leaves
/// digits; `_` folds too, consistently). Words that share a key are told
/// apart by the check that follows.
fn key(text: &[u8], start: usize, len: usize) -> u64 {
    let first = match text.get(start..start + 8) {
        Some(eight) => u64::from_le_bytes(eight.try_into().unwrap_or([0; 8])),
        None => {
            let mut padded = [0u8; 8];
            let tail = &text[start..(start + 8).min(text.len())];
            padded[..tail.len()].copy_from_slice(tail);
            u64::from_le_bytes(padded)
        }
    };
    let kept = if len >= 7 {
        0x00FF_FFFF_FFFF_FFFF
    } else {
        (1u64 << (8 * len)) - 1
    };
    ((first | 0x2020_2020_2020_2020) & kept) | ((len.min(255) as u64) << 56)
}

/// The first bytes of a hash, marked apart from [`key`]'s.
fn prefix_key(text: &[u8], start: usize) -> u64 {
    key(text, start, HASH_PREFIX) ^ (1 << 63) ^ (1 << 62)
}

/// Keys to needle lists in an open-addressed table a quarter full: most
/// look-ups of a text's words miss at the first slot.
#[derive(Default)]
struct KeyTable {
    /// `(key, list)`; key 0 (no word has it: its length is in it) is empty.
    slots: Vec<(u64, u32)>,
    lists: Vec<Vec<u32>>,
    shift: u32,
}

impl KeyTable {
    fn new(entries: HashMap<u64, Vec<u32>>) -> Self {
        if entries.is_empty() {
            return KeyTable::default();
        }
        let bits = (entries.len() * 4)
            .next_power_of_two()
            .trailing_zeros()
            .max(4);
        let mut table = KeyTable {
            slots: vec![(0, 0); 1 << bits],
            lists: Vec::with_capacity(entries.len()),
            shift: 64 - bits,
        };
        for (key, ids) in entries {
            let mut slot = table.slot(key);
            while table.slots[slot].0 != 0 {
                slot = (slot + 1) & (table.slots.len() - 1);
            }
            table.slots[slot] = (key, table.lists.len() as u32);
            table.lists.push(ids);
        }
        table
    }

    fn slot(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[inline]
    fn get(&self, key: u64) -> Option<(usize, &[u32])> {
        if self.slots.is_empty() {
            return None;
        }
        let mut slot = self.slot(key);
        loop {
            match self.slots[slot] {
                (0, _) => return None,
                (k, list) if k == key => return Some((list as usize, &self.lists[list as usize])),
                _ => slot = (slot + 1) & (self.slots.len() - 1),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn index_finds(kind: CheckableKind, needle: &str, hay: &str) -> bool {
        let index = WordIndex::new([(0, kind, needle)]);
        let mut found = [false];
        index.find(hay, &mut found);
        found[0]
    }

    const KINDS: [CheckableKind; 8] = [
        CheckableKind::Number,
        CheckableKind::Port,
        CheckableKind::Version,
        CheckableKind::Hash,
        CheckableKind::Path,
        CheckableKind::Domain,
        CheckableKind::Identifier,
        CheckableKind::Quoted,
    ];

    #[test]
    fn the_same_rule_as_the_needle_search() {
        let cases = [
            (CheckableKind::Number, "80", "8080"),
            (CheckableKind::Number, "8", "8.5"),
            (CheckableKind::Number, "5", "8.5"),
            (CheckableKind::Number, "12", "took 12ms"),
            (CheckableKind::Number, "12", "x12"),
            (CheckableKind::Number, "1,024", "1,024 bytes"),
            (CheckableKind::Number, "-5", "x-5"),
            (CheckableKind::Number, "42", "é42 —42"),
            (CheckableKind::Port, "8080", "8080ms"),
            (CheckableKind::Port, "8080", "localhost:8080/"),
            (CheckableKind::Version, "1.2.3", "tag v1.2.3"),
            (CheckableKind::Version, "1.2.3", "xv1.2.3"),
            (CheckableKind::Version, "1.2.3", "1.2.3.4"),
            (CheckableKind::Hash, "abc1234", "commit ABC1234def0"),
            (
                CheckableKind::Domain,
                "Example.COM",
                "https://example.com/x",
            ),
            (CheckableKind::Path, "/etc/hosts", "cat x/etc/hosts"),
            (CheckableKind::Path, "src/main.rs", "see src/main.rs:12"),
            (CheckableKind::Identifier, "_private", "self.a_private"),
            (
                CheckableKind::Quoted,
                "degraded mode",
                "in DEGRADED mode; degraded mode",
            ),
            (CheckableKind::Quoted, "über", "Straße über"),
            (CheckableKind::Quoted, "...", "wait..."),
        ];
        for (kind, needle, hay) in cases {
            assert_eq!(
                index_finds(kind, needle, hay),
                needle_found(kind, needle, hay),
                "{kind:?} {needle} in {hay}"
            );
        }
        assert!(index_finds(CheckableKind::Number, "12", "took 12ms"));
        assert!(!index_finds(CheckableKind::Number, "80", "8080"));
        assert!(index_finds(CheckableKind::Version, "1.2.3", "tag v1.2.3"));
        assert!(index_finds(
            CheckableKind::Hash,
            "abc1234",
            "commit ABC1234def0"
        ));
    }

    #[test]
    fn word_bits_marks_letters_digits_and_underscores() {
        let all: Vec<u8> = (0u8..0x80).collect();
        for chunk in all.chunks(64).chain(all[5..50].chunks(64)) {
            let bits = word_bits(chunk);
            for (j, &c) in chunk.iter().enumerate() {
                let word = c.is_ascii_alphanumeric() || c == b'_';
                assert_eq!(bits >> j & 1 == 1, word, "byte {c:#x}");
            }
            assert_eq!(bits >> chunk.len().min(63), 0, "bits past the chunk");
        }
    }

    #[test]
    fn words_across_the_64_byte_blocks() {
        for pad in 50..140 {
            let hay = format!("{} src/svc_3.rs and 12ms", "x".repeat(pad));
            assert!(
                index_finds(CheckableKind::Path, "src/svc_3.rs", &hay),
                "{pad}"
            );
            assert!(index_finds(CheckableKind::Number, "12", &hay), "{pad}");
            let glued = format!("{}src", "x".repeat(pad));
            assert!(
                !index_finds(CheckableKind::Identifier, "src", &glued),
                "{pad}"
            );
            let long = format!("{} {}", "y".repeat(pad), "s".repeat(pad));
            assert!(
                !index_finds(CheckableKind::Identifier, "ss", &long),
                "{pad}"
            );
            assert!(
                index_finds(CheckableKind::Identifier, &"s".repeat(pad), &long),
                "{pad}"
            );
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_needle_search(
            needle in "[-_/.a-cv0-9]{0,2}[a-cv0-9][-_.,:a-cv0-9é]{0,6}",
            hay in "[-_/.,: a-cvA-CV0-9é—]{0,60}",
            kind in 0..KINDS.len(),
            plant in any::<bool>(),
        ) {
            let kind = KINDS[kind];
            let hay = if plant { format!("{hay}{needle} {hay}") } else { hay };
            prop_assert_eq!(index_finds(kind, &needle, &hay), needle_found(kind, &needle, &hay));
        }

        #[test]
        fn many_needles_sharing_words_agree_with_the_needle_search(
            needles in proptest::collection::vec(("[a-c0-9]{1,2}[-_./:]?[a-c0-9]{0,3}", 0..KINDS.len()), 1..8),
            hay in "[-_/.,: a-cA-C0-9]{0,40}",
            planted in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            // The same needles several times over a text with some of them
            // in it: each list's count of values left must stay exact.
            let mut text = hay.clone();
            for p in &planted {
                text.push(' ');
                text.push_str(&needles[p.index(needles.len())].0);
            }
            let text = format!("{text} {text}");
            let index = WordIndex::new(
                needles.iter().enumerate().map(|(i, (n, k))| (i, KINDS[*k], n.as_str())),
            );
            let mut found = vec![false; needles.len()];
            index.find(&text, &mut found);
            for (i, (n, k)) in needles.iter().enumerate() {
                prop_assert_eq!(found[i], needle_found(KINDS[*k], n, &text), "{} {:?} in {}", n, KINDS[*k], text);
            }
        }
    }
}
