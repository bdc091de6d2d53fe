//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): one
//! implementation for signing outbound deliveries and verifying the
//! `generic` adapter's callbacks. The signed content is
//! `{webhook-id}.{webhook-timestamp}.{body}`; the header is
//! `v1,<base64 HMAC-SHA256>`, several space-separated while a secret is
//! rotated; the secret is `whsec_<base64 key>`.

use super::HookError;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How far a callback's timestamp may be from now, either way.
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// A signing key, decoded from its `whsec_…` form.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// `whsec_<base64>` (the prefix may be left off, as the spec's
    /// libraries allow).
    pub fn parse(text: &str) -> Result<Secret, String> {
        let b64 = text.trim().strip_prefix("whsec_").unwrap_or(text.trim());
        let key = B64
            .decode(b64)
            .map_err(|_| "is not `whsec_` followed by base64".to_string())?;
        if key.len() < 16 {
            return Err("is shorter than 16 bytes once decoded".into());
        }
        Ok(Secret(key))
    }

    /// The `webhook-signature` header value for one delivery.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!("v1,{}", B64.encode(self.mac(id, timestamp, body)))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        mac.finalize().into_bytes().to_vec()
    }

    /// Check a callback's three headers against its body at `now` (Unix
    /// seconds): a matching `v1` signature, then a fresh timestamp.
    pub fn verify(
        &self,
        id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
        now: i64,
    ) -> Result<(), HookError> {
        if id.is_empty() || id.len() > 256 {
            return Err(HookError::Unauthorized(
                "`webhook-id` is missing or too long".into(),
            ));
        }
        let ts: i64 = timestamp.trim().parse().map_err(|_| {
            HookError::Unauthorized("`webhook-timestamp` is not Unix seconds".into())
        })?;
        let expected = self.mac(id, ts, body);
        let matched = signatures.split(' ').any(|sig| {
            sig.strip_prefix("v1,")
                .and_then(|b64| B64.decode(b64).ok())
                .is_some_and(|given| constant_time_eq(&given, &expected))
        });
        if !matched {
            return Err(HookError::Unauthorized(
                "no `webhook-signature` matches the body".into(),
            ));
        }
        fresh(ts, now)
    }
}

/// A timestamp within [`TOLERANCE_SECS`] of `now`.
pub fn fresh(ts: i64, now: i64) -> Result<(), HookError> {
    if (now - ts).abs() > TOLERANCE_SECS {
        return Err(HookError::Unauthorized(format!(
            "the timestamp is {}s from now, more than {TOLERANCE_SECS}s",
            (now - ts).abs()
        )));
    }
    Ok(())
}

/// Equal bytes, in time that does not depend on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Hex HMAC-SHA256 of `parts` under `key` (Slack's `v0`, approval tokens).
pub fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Standard Webhooks specification's test vector (the spec repo's
    // libraries test against it).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn signs_and_verifies_the_spec_vector() {
        let secret = Secret::parse(SECRET).unwrap();
        assert_eq!(secret.sign(ID, TS, BODY), SIGNATURE);
        secret
            .verify(ID, "1614265330", SIGNATURE, BODY, TS + 10)
            .unwrap();
        // One of several (rotation) is enough.
        let several = format!("v1,bm90IGl0 {SIGNATURE}");
        secret.verify(ID, "1614265330", &several, BODY, TS).unwrap();
    }

    #[test]
    fn a_changed_body_id_or_timestamp_and_a_stale_one_are_rejected() {
        let secret = Secret::parse(SECRET).unwrap();
        let bad = |id: &str, ts: &str, body: &[u8], now: i64| {
            matches!(
                secret.verify(id, ts, SIGNATURE, body, now),
                Err(HookError::Unauthorized(_))
            )
        };
        assert!(bad(ID, "1614265330", br#"{"test": 2432232315}"#, TS));
        assert!(bad("msg_other", "1614265330", BODY, TS));
        assert!(bad(ID, "1614265331", BODY, TS));
        assert!(bad(ID, "1614265330", BODY, TS + TOLERANCE_SECS + 1));
        assert!(bad(ID, "1614265330", BODY, TS - TOLERANCE_SECS - 1));
        assert!(bad(ID, "soon", BODY, TS));
        assert!(!bad(ID, "1614265330", BODY, TS + TOLERANCE_SECS));
    }

    #[test]
    fn secrets_must_be_base64_and_long_enough() {
        assert!(Secret::parse("whsec_not base64!").is_err());
        assert!(Secret::parse("whsec_c2hvcnQ=").is_err());
        assert!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
    }
}
