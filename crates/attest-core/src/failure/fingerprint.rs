//! Failure fingerprints (SPEC F9): HMAC-SHA256 with a per-user secret over
//! tool, provider, error type and a redacted parameter signature. Keyed, so
//! a fingerprint in a log or prompt says "same failure as before" without
//! letting anyone test guesses of the arguments against it.

use crate::redact::Redactor;
use crate::tool::write_canonical;
use attest_protocol::ErrorType;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

type HmacSha256 = Hmac<Sha256>;

const KEY_LEN: usize = 32;
/// Most bytes of one redacted argument value that enter a signature; long
/// file contents would otherwise make every signature huge.
const SIGNATURE_VALUE_LIMIT: usize = 512;

/// Why the fingerprint key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintKeyError {
    #[error("cannot read the fingerprint key {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the fingerprint key {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the fingerprint key {path} is not {KEY_LEN} bytes of hex; delete it to have a new one made")]
    Invalid { path: PathBuf },
    #[error("no randomness for a new fingerprint key: {0}")]
    Random(std::io::Error),
}

/// The secret for failure fingerprints. Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct FingerprintKey([u8; KEY_LEN]);

impl std::fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FingerprintKey([hidden])")
    }
}

/// Where the key lives by default: `$XDG_CONFIG_HOME/attest/fingerprint.key`,
/// else `$HOME/.config/attest/fingerprint.key`. The caller passes the
/// variables (only the CLI reads the environment); empty values count as
/// unset, as the XDG spec says.
pub fn default_key_path(xdg_config_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let non_empty = |v: Option<&OsStr>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = non_empty(xdg_config_home)
        // A relative XDG path is invalid per the spec and ignored.
        .filter(|p| p.is_absolute())
        .or_else(|| non_empty(home).map(|h| h.join(".config")))?;
    Some(base.join("attest").join("fingerprint.key"))
}

impl FingerprintKey {
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        FingerprintKey(bytes)
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, FingerprintKeyError> {
        let mut bytes = [0u8; KEY_LEN];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(FingerprintKeyError::Random)?;
        Ok(FingerprintKey(bytes))
    }

    /// Reads the key at `path`, creating it (mode 0600, parent 0700) when
    /// missing. A key file others can read is narrowed to 0600.
    pub fn load_or_create(path: &Path) -> Result<Self, FingerprintKeyError> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                tighten_permissions(path);
                Self::parse(&text).ok_or_else(|| FingerprintKeyError::Invalid {
                    path: path.to_path_buf(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::create(path),
            Err(source) => Err(FingerprintKeyError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    fn create(path: &Path) -> Result<Self, FingerprintKeyError> {
        let create_err = |source| FingerprintKeyError::Create {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(parent).map_err(create_err)?;
        }
        let key = Self::generate()?;
        // Write the whole key to a private temporary file first and link it
        // into place: a concurrent reader then sees either no key or a
        // complete one, never the empty file `create_new` would show it
        // between open and write (eval attempts start at the same moment).
        let temp = path.with_file_name(format!(
            ".fingerprint.key.{}.{}",
            std::process::id(),
            hex::encode(&key.0[..4])
        ));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options.open(&temp).and_then(|mut file| {
            file.write_all(format!("{}\n", hex::encode(key.0)).as_bytes())?;
            file.sync_all()
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(create_err(e));
        }
        let linked = std::fs::hard_link(&temp, path);
        let _ = std::fs::remove_file(&temp);
        match linked {
            Ok(()) => Ok(key),
            // Another process made it between our read and our link: theirs
            // wins, so both use the same key.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::load_or_create(path),
            Err(e) => Err(create_err(e)),
        }
    }

    fn parse(text: &str) -> Option<Self> {
        let bytes = hex::decode(text.trim()).ok()?;
        let bytes: [u8; KEY_LEN] = bytes.try_into().ok()?;
        Some(FingerprintKey(bytes))
    }

    /// The failure fingerprint: hex HMAC-SHA256 over tool, provider, error
    /// type and signature, each length-prefixed so that no two different
    /// field splits give the same input.
    pub fn fingerprint(
        &self,
        tool: &str,
        provider: &str,
        error_type: ErrorType,
        signature: &str,
    ) -> String {
        self.mac(
            "attest-failure-v1",
            &[tool, provider, error_type.as_str(), signature],
        )
    }

    /// The key of a call regardless of how it failed, so the retry budget
    /// can find a call's failures before it runs again.
    pub(crate) fn call_key(&self, tool: &str, provider: &str, signature: &str) -> String {
        self.mac("attest-call-v1", &[tool, provider, signature])
    }

    fn mac(&self, domain: &str, fields: &[&str]) -> String {
        // `new_from_slice` accepts any key length for HMAC; 32 is always fine.
        let Ok(mut mac) = HmacSha256::new_from_slice(&self.0) else {
            return String::new();
        };
        mac.update(domain.as_bytes());
        for field in fields {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        hex::encode(mac.finalize().into_bytes())
    }
}

/// The redacted parameter signature of a call's arguments: each top-level
/// argument as `name:type=value` in name order, values redacted and capped.
/// It only ever enters the HMAC; it is never stored or shown.
pub fn param_signature(redactor: &Redactor, arguments: &serde_json::Value) -> String {
    use serde_json::Value;
    let redacted = redactor.redact_json(arguments);
    let Value::Object(map) = &redacted else {
        let mut out = String::new();
        write_canonical(&redacted, &mut out);
        return out;
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let mut out = String::new();
    for key in keys {
        let value = &map[key];
        let class = match value {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let mut canonical = String::new();
        write_canonical(value, &mut canonical);
        let (canonical, _) = crate::text::truncate_str(&canonical, SIGNATURE_VALUE_LIMIT);
        out.push_str(&format!("{key}:{class}={canonical}\n"));
    }
    out
}

fn tighten_permissions(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                // Best effort: a key we cannot narrow is still usable, and
                // the file is the user's own.
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    fn key() -> FingerprintKey {
        FingerprintKey::from_bytes([7; KEY_LEN])
    }

    #[test]
    fn default_path_prefers_xdg_then_home() {
        let p = default_key_path(Some(OsStr::new("/x/cfg")), Some(OsStr::new("/home/a")));
        assert_eq!(p, Some(PathBuf::from("/x/cfg/attest/fingerprint.key")));
        let p = default_key_path(Some(OsStr::new("")), Some(OsStr::new("/home/a")));
        assert_eq!(
            p,
            Some(PathBuf::from("/home/a/.config/attest/fingerprint.key"))
        );
        let p = default_key_path(Some(OsStr::new("rel")), Some(OsStr::new("/home/a")));
        assert_eq!(
            p,
            Some(PathBuf::from("/home/a/.config/attest/fingerprint.key"))
        );
        assert_eq!(default_key_path(None, None), None);
    }

    #[test]
    fn key_is_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/attest/fingerprint.key");
        let a = FingerprintKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let b = FingerprintKey::load_or_create(&path).unwrap();
        assert_eq!(a, b);
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim().len(), 64);
        assert_eq!(format!("{a:?}"), "FingerprintKey([hidden])");
    }

    #[test]
    fn racing_creators_all_get_the_one_complete_key() {
        // Regression: with open-then-write a racer read the empty file and
        // failed with `Invalid` (seen as an eval infra failure in CI).
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("attest/fingerprint.key");
            let keys: Vec<_> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| FingerprintKey::load_or_create(&path)))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let first = keys[0].as_ref().unwrap();
            for k in &keys {
                assert_eq!(k.as_ref().unwrap(), first);
            }
            let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(
                names,
                vec![OsStr::new("fingerprint.key")],
                "no temporary file left"
            );
        }
    }

    #[test]
    fn loose_permissions_are_narrowed_and_bad_keys_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, hex::encode([1u8; 32])).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            FingerprintKey::load_or_create(&path).unwrap(),
            FingerprintKey::from_bytes([1; 32])
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "abcd").unwrap();
        assert!(matches!(
            FingerprintKey::load_or_create(&path),
            Err(FingerprintKeyError::Invalid { .. })
        ));
    }

    #[test]
    fn fingerprint_is_keyed_and_field_separated() {
        let k = key();
        let fp = k.fingerprint(
            "quote",
            "exchange",
            ErrorType::Timeout,
            "sym:string=\"X\"\n",
        );
        assert_eq!(fp.len(), 64);
        assert_eq!(
            fp,
            k.fingerprint(
                "quote",
                "exchange",
                ErrorType::Timeout,
                "sym:string=\"X\"\n"
            )
        );
        let other_key = FingerprintKey::from_bytes([8; KEY_LEN]);
        assert_ne!(
            fp,
            other_key.fingerprint(
                "quote",
                "exchange",
                ErrorType::Timeout,
                "sym:string=\"X\"\n"
            )
        );
        assert_ne!(
            fp,
            k.fingerprint(
                "quote",
                "exchange",
                ErrorType::RateLimited,
                "sym:string=\"X\"\n"
            )
        );
        // Moving a boundary between fields changes the fingerprint.
        assert_ne!(
            k.fingerprint("ab", "c", ErrorType::Timeout, ""),
            k.fingerprint("a", "bc", ErrorType::Timeout, "")
        );
        assert_ne!(
            k.call_key("a", "b", "c"),
            k.fingerprint("a", "b", ErrorType::Timeout, "c")
        );
    }

    #[test]
    fn signature_is_redacted_ordered_and_capped() {
        let r = Redactor::new();
        let a = param_signature(&r, &json!({"b": 1, "a": "x", "api_key": "CANARY"}));
        let b = param_signature(&r, &json!({"api_key": "CANARY", "a": "x", "b": 1}));
        assert_eq!(a, b);
        assert!(!a.contains("CANARY"), "{a}");
        assert!(a.starts_with("a:string=\"x\"\napi_key:string="), "{a}");
        let long = param_signature(&r, &json!({"content": "y".repeat(10_000)}));
        assert!(long.len() < SIGNATURE_VALUE_LIMIT + 40);
        // Different values, different signatures.
        assert_ne!(
            param_signature(&r, &json!({"command": "ls a"})),
            param_signature(&r, &json!({"command": "ls b"}))
        );
    }
}
