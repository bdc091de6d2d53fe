//! Bearer tokens with scopes. A token is shown once, when it is created;
//! the store keeps its SHA-256 hash, and a presented token is hashed and
//! compared against every stored hash in constant time.

use crate::error::ApiError;
use attest::store::{NewToken, ServerStore, TokenRecord};
use sha2::{Digest, Sha256};

/// Every scope a token can carry.
pub const SCOPES: [&str; 4] = [
    "runs:read",
    "runs:write",
    "approvals:read",
    "approvals:write",
];

/// Who made a request: a token's name, or `anonymous` on a server with
/// no tokens (loopback only).
#[derive(Debug, Clone)]
pub struct Caller {
    pub name: String,
}

/// The SHA-256 of a token, hex.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Compares without an early exit, so the time taken says nothing about
/// where two hashes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parse `runs:read,runs:write`; unknown scopes are refused.
pub fn parse_scopes(list: &str) -> Result<Vec<String>, String> {
    let mut scopes = Vec::new();
    for scope in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !SCOPES.contains(&scope) {
            return Err(format!(
                "unknown scope `{scope}` (known: {})",
                SCOPES.join(", ")
            ));
        }
        if !scopes.iter().any(|s| s == scope) {
            scopes.push(scope.to_string());
        }
    }
    if scopes.is_empty() {
        return Err(format!("name at least one scope ({})", SCOPES.join(", ")));
    }
    Ok(scopes)
}

/// Create a token: record its hash and return the token itself (shown once).
pub fn create_token(
    store: &mut dyn ServerStore,
    name: &str,
    scopes: Vec<String>,
) -> Result<String, attest::store::StoreError> {
    let secret = format!(
        "attest_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    store.add_token(&NewToken {
        id: format!("tok_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        name: name.to_string(),
        hash: hash_token(&secret),
        scopes,
    })?;
    Ok(secret)
}

/// Tokens not revoked.
pub fn active_tokens(store: &dyn ServerStore) -> Result<Vec<TokenRecord>, ApiError> {
    Ok(store
        .tokens()
        .map_err(|e| ApiError::Unavailable(e.to_string()))?
        .into_iter()
        .filter(|t| t.revoked_at.is_none())
        .collect())
}

/// Check a request's `Authorization` header for `scope`. A server without
/// tokens lets everyone in (it only listens on loopback); with tokens,
/// no or an unknown token is 401 and a token without the scope is 403.
pub fn authorize(
    tokens: &[TokenRecord],
    authorization: Option<&str>,
    scope: &str,
) -> Result<Caller, ApiError> {
    if tokens.is_empty() {
        return Ok(Caller {
            name: "anonymous".into(),
        });
    }
    let presented = authorization
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::Unauthorized("a bearer token is required".into()))?;
    let hash = hash_token(presented);
    let mut matched = None;
    for token in tokens {
        if constant_time_eq(token.hash.as_bytes(), hash.as_bytes()) {
            matched = Some(token);
        }
    }
    let token = matched.ok_or_else(|| ApiError::Unauthorized("the token is not valid".into()))?;
    if token.scopes.iter().any(|s| s == scope) {
        Ok(Caller {
            name: token.name.clone(),
        })
    } else {
        Err(ApiError::Forbidden(format!(
            "token `{}` lacks the scope {scope}",
            token.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest::store::SqliteStore;

    #[test]
    fn a_created_token_is_stored_hashed_and_authorizes_its_scopes_only() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        let secret = create_token(&mut store, "ci", vec!["runs:read".into()]).unwrap();
        let tokens = active_tokens(&store).unwrap();
        assert_eq!(tokens.len(), 1);
        assert_ne!(tokens[0].hash, secret, "only the hash is kept");
        let bearer = format!("Bearer {secret}");
        assert_eq!(
            authorize(&tokens, Some(&bearer), "runs:read").unwrap().name,
            "ci"
        );
        assert!(matches!(
            authorize(&tokens, Some(&bearer), "runs:write"),
            Err(ApiError::Forbidden(_))
        ));
        assert!(matches!(
            authorize(&tokens, Some("Bearer attest_wrong"), "runs:read"),
            Err(ApiError::Unauthorized(_))
        ));
        assert!(matches!(
            authorize(&tokens, None, "runs:read"),
            Err(ApiError::Unauthorized(_))
        ));
    }

    #[test]
    fn scopes_are_checked_when_parsed() {
        assert_eq!(
            parse_scopes("runs:read, runs:write,runs:read").unwrap(),
            vec!["runs:read", "runs:write"]
        );
        assert!(parse_scopes("runs:admin").is_err());
        assert!(parse_scopes("").is_err());
    }
}
