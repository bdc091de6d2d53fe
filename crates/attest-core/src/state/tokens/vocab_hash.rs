// Shared by the build script, which lays the vocabulary's hash table out,
// and by `cl100k`, which probes it: both must hash alike. Included with
// `include!`, so it holds items only.

/// Slots in the vocabulary's open-addressing table: a power of two, 1.3
/// per token. The table is what a run touches at random, so it is kept
/// small; fingerprints keep its longer probes cheap.
const TABLE_SLOTS: usize = 1 << 17;

/// Bits of a slot that hold rank + 1 (0: empty); the rest hold a
/// fingerprint of the token's hash, so that a probe reads a token's bytes
/// only when the fingerprints agree.
const RANK_BITS: u32 = 17;

/// FNV-1a over a token's bytes, finished with a 64-bit mixer so that both
/// the slot (high bits) and the fingerprint (low bits) are well spread.
fn hash_of(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// The slot a token's probe starts at.
fn slot_of(hash: u64) -> usize {
    (hash >> (64 - TABLE_SLOTS.trailing_zeros())) as usize
}

/// A slot's fingerprint bits for a token of this hash.
fn fingerprint_of(hash: u64) -> u32 {
    (hash as u32) << RANK_BITS
}
