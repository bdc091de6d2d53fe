//! Lays out the cl100k vocabulary as three flat tables that the tokenizer
//! (`src/state/tokens/cl100k.rs`) reads in place: every token's bytes in
//! rank order, their offsets, and an open-addressing table from bytes to
//! rank. Read from tiktoken-rs at build time, so the running process never
//! builds tiktoken's hash maps and thread-local regexes (about 25 MB of
//! heap); the embedded tables are about 1.5 MB, of which a run touches the
//! 512 kB hash table and the bytes of the tokens it meets.

use std::path::PathBuf;

include!("src/state/tokens/vocab_hash.rs");

/// cl100k's ordinary tokens are ranks 0..=100255; its special tokens, which
/// budgets never count as such, come after.
const ORDINARY_RANKS: u32 = 100_256;
const _: () = assert!(ORDINARY_RANKS < 1 << RANK_BITS);

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/state/tokens/vocab_hash.rs");
    let bpe = tiktoken_rs::cl100k_base().expect("tiktoken-rs's embedded cl100k vocabulary");
    let mut bytes = Vec::new();
    let mut offsets = Vec::with_capacity(ORDINARY_RANKS as usize * 4 + 4);
    let mut table = vec![0u32; TABLE_SLOTS];
    offsets.extend_from_slice(&0u32.to_le_bytes());
    for rank in 0..ORDINARY_RANKS {
        let token = bpe
            .decode_bytes(&[rank])
            .unwrap_or_else(|e| panic!("cl100k has no rank {rank}: {e:?}"));
        assert!(!token.is_empty(), "rank {rank} decodes to nothing");
        let hash = hash_of(&token);
        let mut slot = slot_of(hash);
        // Linear probing; a slot holds rank + 1 under a fingerprint, 0
        // when empty.
        while table[slot] != 0 {
            slot = (slot + 1) % TABLE_SLOTS;
        }
        table[slot] = fingerprint_of(hash) | (rank + 1);
        bytes.extend_from_slice(&token);
        offsets.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let table: Vec<u8> = table.iter().flat_map(|slot| slot.to_le_bytes()).collect();
    for (name, data) in [
        ("cl100k_bytes.bin", &bytes),
        ("cl100k_offsets.bin", &offsets),
        ("cl100k_table.bin", &table),
    ] {
        std::fs::write(out.join(name), data).unwrap_or_else(|e| panic!("write {name}: {e}"));
    }
}
