//! One `[[mcp_servers]]` entry of the (trusted) config, with exactly the
//! keys the issue lists, and how its annotations map to effect classes.

use attest_protocol::{EffectClass, Permission};
use std::collections::BTreeMap;

/// Default time one call (and the start-up handshake) may take.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// `[[mcp_servers]]`: a stdio server (`command`, `args`, `env`) or a
/// streamable-HTTP one (`url`, `bearer_token_env`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Prefix of its tools' names: `NAME__tool`.
    pub name: String,
    /// Program of a stdio server, started in the tool sandbox with the
    /// workspace as its working directory.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for a stdio server on top of the tools' environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Endpoint of a streamable-HTTP server.
    #[serde(default)]
    pub url: Option<String>,
    /// Variable holding the HTTP server's bearer token.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// Allow list of the server's tool names (default: all).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Permission for all its tools (default: `allow` for trusted read-only
    /// tools, `ask` for everything else).
    #[serde(default)]
    pub permission: Option<Permission>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Believe the server's `readOnlyHint` (default: no; the MCP spec itself
    /// calls annotations from untrusted servers hints).
    #[serde(default)]
    pub trusted_annotations: bool,
}

/// Why an `[[mcp_servers]]` entry was rejected.
#[derive(Debug, thiserror::Error)]
pub enum McpConfigError {
    #[error(
        "invalid MCP server name `{name}`: use 1 to 32 letters, digits, `-` or `_`, without `__`"
    )]
    InvalidName { name: String },
    #[error(
        "MCP server `{name}`: give exactly one of `command` (stdio) or `url` (streamable HTTP)"
    )]
    Transport { name: String },
    #[error("MCP server `{name}`: `{key}` applies to {applies} servers only")]
    MisplacedKey {
        name: String,
        key: &'static str,
        applies: &'static str,
    },
    #[error("MCP server `{name}`: `timeout_ms` must be greater than 0")]
    InvalidTimeout { name: String },
    #[error("MCP server `{name}`: `url` must start with http:// or https://")]
    InvalidUrl { name: String },
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpEndpoint {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    Http {
        url: String,
        bearer_token_env: Option<String>,
    },
}

impl McpServerConfig {
    /// Checks the entry and says how to reach the server.
    pub fn endpoint(&self) -> Result<McpEndpoint, McpConfigError> {
        let name = || self.name.clone();
        let valid_name = (1..=32).contains(&self.name.len())
            && !self.name.contains("__")
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid_name {
            return Err(McpConfigError::InvalidName { name: name() });
        }
        if self.timeout_ms == Some(0) {
            return Err(McpConfigError::InvalidTimeout { name: name() });
        }
        match (&self.command, &self.url) {
            (Some(command), None) if !command.is_empty() => {
                if self.bearer_token_env.is_some() {
                    return Err(McpConfigError::MisplacedKey {
                        name: name(),
                        key: "bearer_token_env",
                        applies: "streamable-HTTP (`url`)",
                    });
                }
                Ok(McpEndpoint::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                })
            }
            (None, Some(url)) => {
                for (key, set) in [
                    ("args", !self.args.is_empty()),
                    ("env", !self.env.is_empty()),
                ] {
                    if set {
                        return Err(McpConfigError::MisplacedKey {
                            name: name(),
                            key,
                            applies: "stdio (`command`)",
                        });
                    }
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(McpConfigError::InvalidUrl { name: name() });
                }
                Ok(McpEndpoint::Http {
                    url: url.clone(),
                    bearer_token_env: self.bearer_token_env.clone(),
                })
            }
            _ => Err(McpConfigError::Transport { name: name() }),
        }
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS))
    }

    /// Whether the allow list lets `tool` through.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == tool))
    }
}

/// What a tool's annotations say, as far as attest listens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
}

/// The effect class and permission of one of `cfg`'s tools: never looser
/// than the user says. `readOnlyHint` makes a tool observe-class only on a
/// server marked `trusted_annotations`; every other tool is mutate-class
/// with permission `ask` unless the user chose otherwise; an explicit
/// `destructiveHint: true` makes `ask` mandatory even where the user said
/// `allow` (a server's admission of danger is believed from anyone).
pub fn classify(cfg: &McpServerConfig, hints: Hints) -> (EffectClass, Permission) {
    let read_only = cfg.trusted_annotations && hints.read_only == Some(true);
    let effect = if read_only {
        EffectClass::Observe
    } else {
        EffectClass::Mutate
    };
    let default = if read_only {
        Permission::Allow
    } else {
        Permission::Ask
    };
    let mut permission = cfg.permission.unwrap_or(default);
    if !read_only && hints.destructive == Some(true) && permission == Permission::Allow {
        permission = Permission::Ask;
    }
    (effect, permission)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> McpServerConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn exactly_one_transport_and_the_keys_that_belong_to_it() {
        let stdio = cfg("name = \"fs\"\ncommand = \"npx\"\nargs = [\"-y\", \"x\"]");
        assert!(matches!(stdio.endpoint(), Ok(McpEndpoint::Stdio { .. })));
        let http =
            cfg("name = \"web\"\nurl = \"http://127.0.0.1:1/mcp\"\nbearer_token_env = \"T\"");
        assert!(matches!(http.endpoint(), Ok(McpEndpoint::Http { .. })));
        for bad in [
            "name = \"x\"",
            "name = \"x\"\ncommand = \"a\"\nurl = \"http://h\"",
            "name = \"x\"\ncommand = \"a\"\nbearer_token_env = \"T\"",
            "name = \"x\"\nurl = \"http://h\"\nargs = [\"a\"]",
            "name = \"x\"\nurl = \"ftp://h\"",
            "name = \"a__b\"\ncommand = \"a\"",
            "name = \"x\"\ncommand = \"a\"\ntimeout_ms = 0",
        ] {
            assert!(cfg(bad).endpoint().is_err(), "{bad}");
        }
        assert!(toml::from_str::<McpServerConfig>("name = \"x\"\nsurprise = 1").is_err());
    }

    #[test]
    fn annotations_never_loosen_what_the_user_says() {
        let ro = Hints {
            read_only: Some(true),
            destructive: None,
        };
        let destructive = Hints {
            read_only: Some(false),
            destructive: Some(true),
        };
        let untrusted = cfg("name = \"s\"\ncommand = \"a\"");
        assert_eq!(
            classify(&untrusted, ro),
            (EffectClass::Mutate, Permission::Ask),
            "hints of an untrusted server are only hints"
        );
        let trusted = cfg("name = \"s\"\ncommand = \"a\"\ntrusted_annotations = true");
        assert_eq!(
            classify(&trusted, ro),
            (EffectClass::Observe, Permission::Allow)
        );
        assert_eq!(
            classify(&trusted, Hints::default()),
            (EffectClass::Mutate, Permission::Ask)
        );
        let asks =
            cfg("name = \"s\"\ncommand = \"a\"\ntrusted_annotations = true\npermission = \"ask\"");
        assert_eq!(classify(&asks, ro), (EffectClass::Observe, Permission::Ask));
        let allows = cfg("name = \"s\"\ncommand = \"a\"\npermission = \"allow\"");
        assert_eq!(
            classify(&allows, Hints::default()),
            (EffectClass::Mutate, Permission::Allow)
        );
        assert_eq!(
            classify(&allows, destructive),
            (EffectClass::Mutate, Permission::Ask),
            "destructiveHint makes ask mandatory"
        );
        let denies = cfg("name = \"s\"\ncommand = \"a\"\npermission = \"deny\"");
        assert_eq!(classify(&denies, destructive).1, Permission::Deny);
    }
}
