//! The `[permissions]` config section.
//!
//! ```toml
//! [permissions]
//! default = "ask"          # tools without an entry (else each tool's own default)
//! read_file = "allow"
//! shell = { default = "ask", rules = [
//!   { match = "git status*", decision = "allow" },
//!   { match = "rm -rf *", decision = "deny" },
//! ] }
//! write_file = { rules = [ { match = "docs/*", decision = "allow", arg = "path" } ] }
//! ```
//!
//! A bare `tool = "allow"` is the shape older configs used, so they still
//! load. The key `default` is reserved: a tool cannot be named that here.

use attest_protocol::Permission;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The whole `[permissions]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionsConfig {
    /// Applies to tools without an entry; otherwise each tool's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Permission>,
    /// Per tool: a permission, or a default with rules.
    #[serde(flatten)]
    pub tools: BTreeMap<String, ToolPermission>,
}

/// One tool's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ToolPermission {
    /// `tool = "allow"`.
    Fixed(Permission),
    /// `tool = { default = "ask", rules = [...] }`.
    Rules(ToolRules),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRules {
    /// When no rule matches; unset means the config default, then the
    /// tool's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Permission>,
    #[serde(default)]
    pub rules: Vec<PermissionRule>,
}

/// `{ match = "git status*", decision = "allow", arg = "command" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    /// Glob: `*` matches anything (spaces included); the rest is literal.
    #[serde(rename = "match")]
    pub pattern: String,
    pub decision: Permission,
    /// The argument the pattern applies to. Unset: `command` if the call
    /// has a string `command`, else `path` if it has a string `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
}

impl ToolPermission {
    /// The tool-level default this entry sets, if any.
    pub fn default_permission(&self) -> Option<Permission> {
        match self {
            ToolPermission::Fixed(p) => Some(*p),
            ToolPermission::Rules(r) => r.default,
        }
    }

    pub fn rules(&self) -> &[PermissionRule] {
        match self {
            ToolPermission::Fixed(_) => &[],
            ToolPermission::Rules(r) => &r.rules,
        }
    }
}

// Hand-written rather than `#[serde(untagged)]` so that a mistake in a
// rule table reports the field at fault instead of "did not match any
// variant".
impl<'de> Deserialize<'de> for ToolPermission {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolPermission;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"allow\", \"ask\", \"deny\" or a table { default, rules }")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map(ToolPermission::Fixed).map_err(E::custom)
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ToolRules::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ToolPermission::Rules)
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_toml_shape_parses() {
        #[derive(Deserialize)]
        struct File {
            permissions: PermissionsConfig,
        }
        let text = r#"
[permissions]
default = "ask"
read_file = "allow"
shell = { default = "ask", rules = [ { match = "git status*", decision = "allow" }, { match = "rm -rf *", decision = "deny" }, { match = "sudo *", decision = "deny" } ] }
write_file = { rules = [ { match = "docs/*", decision = "allow", arg = "path" } ] }
"#;
        let cfg = toml::from_str::<File>(text).unwrap().permissions;
        assert_eq!(cfg.default, Some(Permission::Ask));
        assert_eq!(
            cfg.tools["read_file"],
            ToolPermission::Fixed(Permission::Allow)
        );
        let shell = &cfg.tools["shell"];
        assert_eq!(shell.default_permission(), Some(Permission::Ask));
        assert_eq!(shell.rules().len(), 3);
        assert_eq!(shell.rules()[0].pattern, "git status*");
        assert_eq!(shell.rules()[0].decision, Permission::Allow);
        assert_eq!(shell.rules()[0].arg, None);
        let write = &cfg.tools["write_file"];
        assert_eq!(write.default_permission(), None);
        assert_eq!(write.rules()[0].arg.as_deref(), Some("path"));
        assert!(!cfg.tools.contains_key("default"));
    }

    #[test]
    fn mistakes_are_reported_precisely() {
        let err = toml::from_str::<PermissionsConfig>(r#"shell = "maybe""#).unwrap_err();
        assert!(
            err.to_string().contains("unknown permission `maybe`"),
            "{err}"
        );
        let err = toml::from_str::<PermissionsConfig>(
            r#"shell = { rules = [ { match = "x", decision = "allow", args = "command" } ] }"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `args`"), "{err}");
        let err =
            toml::from_str::<PermissionsConfig>(r#"shell = { defaults = "ask" }"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `defaults`"),
            "{err}"
        );
        let err = toml::from_str::<PermissionsConfig>(r#"shell = { rules = [ { match = "x" } ] }"#)
            .unwrap_err();
        assert!(
            err.to_string().contains("missing field `decision`"),
            "{err}"
        );
        assert!(toml::from_str::<PermissionsConfig>("shell = 3").is_err());
    }

    #[test]
    fn round_trips_through_json() {
        let cfg: PermissionsConfig = serde_json::from_value(serde_json::json!({
            "default": "deny",
            "grep": "allow",
            "shell": {"rules": [{"match": "ls*", "decision": "allow"}]}
        }))
        .unwrap();
        let back: PermissionsConfig =
            serde_json::from_value(serde_json::to_value(&cfg).unwrap()).unwrap();
        assert_eq!(back, cfg);
        assert_eq!(PermissionsConfig::default().tools.len(), 0);
    }
}
