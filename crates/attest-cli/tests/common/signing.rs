//! Signing callbacks as their senders do (Standard Webhooks), for tests
//! that post decisions to `/v1/hooks/*`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The key of a `whsec_<base64>` secret.
pub fn whsec_key(secret: &str) -> Vec<u8> {
    B64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap()
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Standard Webhooks headers for `body`, signed with `secret`.
pub fn standard_headers(
    secret: &str,
    id: &str,
    ts: i64,
    body: &str,
) -> Vec<(&'static str, String)> {
    let content = format!("{id}.{ts}.{body}");
    let sig = B64.encode(hmac(&whsec_key(secret), content.as_bytes()));
    vec![
        ("content-type", "application/json".into()),
        ("webhook-id", id.into()),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", format!("v1,{sig}")),
    ]
}
