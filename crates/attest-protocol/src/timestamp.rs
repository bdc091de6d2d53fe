//! The JSON form of the timestamps a step writes several times over
//! (events' `ts`, receipts' `started_at` and `finished_at`): chrono's own
//! text, made in one piece.
//!
//! chrono serializes a `DateTime` through `collect_str`, which hands
//! serde_json its text a character at a time, each escaped on its own:
//! about 2,500 instructions a timestamp, sixteen timestamps a step
//! (callgrind, issue 19). `to_rfc3339_opts` writes the same text into one
//! string. Reading is chrono's, unchanged.

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

/// `serialize_with` for a `DateTime<Utc>`: the text chrono's `Serialize`
/// writes (RFC 3339, `Z`, as many fractional digits as the nanoseconds
/// need: 0, 3, 6 or 9).
pub fn serialize<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    // RFC 3339 has four-digit years only; chrono writes others its own way.
    if !(0..=9999).contains(&at.year()) {
        return at.serialize(serializer);
    }
    serializer.serialize_str(&rfc3339(at, SecondsFormat::AutoSi))
}

/// `at` in RFC 3339 with `Z`, in `format`: chrono's `to_rfc3339_opts`.
/// Kept out of line so the binary holds one copy of chrono's writer, not
/// one per crate and per serializer that writes a time: a step writes its
/// timestamps from several crates, and each copy is more code the step
/// runs (`scripts/bench-footprint.sh`).
#[inline(never)]
pub fn rfc3339(at: &DateTime<Utc>, format: SecondsFormat) -> String {
    at.to_rfc3339_opts(format, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    #[derive(Serialize)]
    struct Ours(#[serde(serialize_with = "serialize")] DateTime<Utc>);

    fn same_as_chrono(at: DateTime<Utc>) -> Result<(), TestCaseError> {
        let ours = serde_json::to_string(&Ours(at)).unwrap();
        let chrono = serde_json::to_string(&at).unwrap();
        prop_assert_eq!(ours, chrono);
        Ok(())
    }

    proptest! {
        /// Any instant chrono can hold, leap seconds and years outside
        /// 0–9999 included, is written as chrono writes it.
        #[test]
        fn the_text_is_chronos(
            secs in -8_000_000_000_000i64..8_000_000_000_000i64,
            nanos in prop_oneof![
                Just(0u32),
                (0u32..1_000).prop_map(|n| n * 1_000_000),
                (0u32..1_000_000).prop_map(|n| n * 1_000),
                0u32..2_000_000_000,
            ],
        ) {
            if let Some(at) = DateTime::from_timestamp(secs, nanos) {
                same_as_chrono(at)?;
            }
        }
    }

    #[test]
    fn ordinary_and_edge_instants() {
        for at in [
            Utc.with_ymd_and_hms(2026, 12, 7, 12, 1, 37).unwrap(),
            DateTime::from_timestamp(1_796_000_000, 561_303_854).unwrap(),
            DateTime::from_timestamp(1_796_000_000, 561_000_000).unwrap(),
            DateTime::from_timestamp(1_796_000_000, 561_303_000).unwrap(),
            // A leap second: 23:59:60.5.
            DateTime::from_timestamp(1_483_228_799, 1_500_000_000).unwrap(),
            DateTime::from_timestamp(0, 0).unwrap(),
        ] {
            same_as_chrono(at).unwrap();
        }
        let text = serde_json::to_string(&Ours(
            DateTime::from_timestamp(1_796_000_000, 561_303_854).unwrap(),
        ))
        .unwrap();
        assert_eq!(text, "\"2026-11-30T00:53:20.561303854Z\"");
    }
}
