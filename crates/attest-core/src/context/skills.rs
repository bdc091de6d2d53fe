//! The skills catalog (SPEC D3): `skills/<name>/SKILL.md`, with YAML front
//! matter naming and describing the skill. Only names and descriptions go
//! into the prompt; a body is loaded on demand by the `skill` tool
//! ([`super::skill_tool`]), whose file rules this catalog shares.

use super::skill_tool::{self as files, SkillEntry, SkillFile, SkillFileError};
use super::workspace_files::{open_workspace, ContextError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The rule that goes with the catalog: skills carry the facts that must not
/// be guessed or taken from memory.
pub const SKILL_RULE: &str = "Before relying on a skill's domain facts (URLs, commands, hosts), load it with the `skill` tool when it clearly matches the task.";

/// Longest description accepted, in chars: the catalog is in every request.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A skill as listed in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillMeta {
    pub name: String,
    /// Whitespace collapsed to single spaces: one catalog line per skill.
    pub description: String,
    /// Workspace-relative: `skills/<name>/SKILL.md`.
    pub path: String,
    /// sha256 of the whole file.
    pub sha256: String,
}

/// A skill's body, as the `skill` tool returns it (front matter stripped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillBody {
    pub name: String,
    pub body: String,
    pub sha256: String,
    pub path: String,
}

/// The skills of a workspace, and what was wrong with the ones left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SkillCatalog {
    /// Sorted by name.
    pub skills: Vec<SkillMeta>,
    /// One line per entry of `skills/` that is not a usable skill, with the
    /// reason. A skill is either listed whole or only here.
    pub problems: Vec<String>,
}

#[derive(Deserialize)]
struct FrontMatter {
    name: Option<serde_yaml_ng::Value>,
    description: Option<serde_yaml_ng::Value>,
}

impl SkillCatalog {
    /// Scans `root/skills/`. Never fails: a bad root or a bad skill becomes a
    /// problem line, so one broken skill does not take the others down.
    pub fn load(root: &Path) -> SkillCatalog {
        let mut catalog = SkillCatalog::default();
        let workspace = match open_workspace(root) {
            Ok(w) => w,
            Err(e) => {
                catalog.problems.push(e.to_string());
                return catalog;
            }
        };
        let entries = match files::scan_skills(&workspace) {
            Ok(entries) => entries,
            Err(e) => {
                catalog.problems.push(e.to_string());
                return catalog;
            }
        };
        for entry in entries {
            match entry {
                SkillEntry::Rejected { path, reason } => {
                    catalog.problems.push(format!("{path}: {reason}"))
                }
                SkillEntry::Candidate(name) => {
                    match files::read_skill_file(&workspace, &name)
                        .map_err(|e| e.to_string())
                        .and_then(|file| check(&file).map(|meta| (file, meta)))
                    {
                        Ok((_, meta)) => catalog.skills.push(meta),
                        Err(reason) => catalog.problems.push(reason),
                    }
                }
            }
        }
        // scan_skills sorts by directory name, which equals the skill name;
        // sort anyway so the order never depends on that detail.
        catalog.skills.sort_by(|a, b| a.name.cmp(&b.name));
        catalog
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    pub fn names(&self) -> Vec<&str> {
        self.skills.iter().map(|s| s.name.as_str()).collect()
    }

    /// The catalog for the system prompt: a heading, the loading rule, one
    /// line per skill (name and description only, by name). Empty when there
    /// are no skills, so the caller can leave the section out. Identical
    /// catalogs render byte-identically.
    pub fn render(&self) -> String {
        if self.skills.is_empty() {
            return String::new();
        }
        let mut out = String::from("# Skills\n\n");
        out.push_str(SKILL_RULE);
        out.push('\n');
        for skill in &self.skills {
            out.push_str(&format!("- {}: {}\n", skill.name, skill.description));
        }
        out
    }

    /// A skill's body, checked like the catalog checks it: a skill that the
    /// catalog would not list is not loaded either.
    pub fn body(root: &Path, name: &str) -> Result<SkillBody, ContextError> {
        let workspace = open_workspace(root)?;
        let file = match files::read_skill_file(&workspace, name) {
            Ok(file) => file,
            Err(SkillFileError::InvalidName { .. } | SkillFileError::NotFound { .. }) => {
                return Err(ContextError::UnknownSkill {
                    name: name.to_string(),
                    available: files::available_skill_names(&workspace),
                })
            }
            Err(SkillFileError::Io { path, source }) => {
                return Err(ContextError::Io { path, source })
            }
            Err(e) => {
                return Err(ContextError::InvalidSkill {
                    name: name.to_string(),
                    reason: e.to_string(),
                })
            }
        };
        check(&file).map_err(|reason| ContextError::InvalidSkill {
            name: name.to_string(),
            reason,
        })?;
        Ok(SkillBody {
            name: file.name,
            body: file.body,
            sha256: file.sha256,
            path: file.path,
        })
    }
}

/// Parses and checks the front matter; the error is a problem line.
fn check(file: &SkillFile) -> Result<SkillMeta, String> {
    let bad = |reason: String| format!("{}: {reason}", file.path);
    if file.front_matter.trim().is_empty() {
        return Err(bad(
            "front matter is empty; it needs `name` and `description`".into(),
        ));
    }
    let front: FrontMatter = serde_yaml_ng::from_str(&file.front_matter)
        .map_err(|e| bad(format!("front matter is not a YAML mapping: {e}")))?;
    let text = |value: Option<serde_yaml_ng::Value>, key: &str| -> Result<String, String> {
        match value {
            Some(serde_yaml_ng::Value::String(s)) if !s.trim().is_empty() => Ok(s),
            Some(serde_yaml_ng::Value::String(_)) | None => {
                Err(bad(format!("front matter has no `{key}`")))
            }
            Some(_) => Err(bad(format!("`{key}` must be a string"))),
        }
    };
    let name = text(front.name, "name")?;
    if name != file.name {
        return Err(bad(format!(
            "`name: {name}` does not match the directory name `{}`",
            file.name
        )));
    }
    let description = text(front.description, "description")?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(bad(format!(
            "description is {chars} chars, more than {MAX_DESCRIPTION_CHARS}; keep the details in the body"
        )));
    }
    Ok(SkillMeta {
        name,
        description,
        path: file.path.clone(),
        sha256: file.sha256.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::sha256_hex;
    use std::os::unix::fs::symlink;

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn skill(name: &str, description: &str, body: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}")
    }

    #[test]
    fn lists_valid_skills_by_name_with_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let zeta = skill("zeta", "Last one.", "ZETA BODY\n");
        write(dir.path(), "skills/zeta/SKILL.md", &zeta);
        write(
            dir.path(),
            "skills/alpha/SKILL.md",
            "---\nname: \"alpha\"\ndescription: >\n  Folded\n  description.\nlicense: MIT\n---\nALPHA BODY\n",
        );
        let catalog = SkillCatalog::load(dir.path());
        assert_eq!(catalog.problems, Vec::<String>::new());
        assert_eq!(catalog.names(), ["alpha", "zeta"]);
        assert_eq!(catalog.skills[0].description, "Folded description.");
        assert_eq!(catalog.skills[1].path, "skills/zeta/SKILL.md");
        assert_eq!(catalog.skills[1].sha256, sha256_hex(zeta.as_bytes()));
    }

    #[test]
    fn render_is_deterministic_and_free_of_bodies() {
        let dir = tempfile::tempdir().unwrap();
        // Created in reverse order: directory order must not matter.
        for (name, desc) in [("web", "Search the web."), ("deploy", "Deploy the app.")] {
            write(
                dir.path(),
                &format!("skills/{name}/SKILL.md"),
                &skill(
                    name,
                    desc,
                    &format!("SECRET-BODY-{name}: use host h.example\n"),
                ),
            );
        }
        let a = SkillCatalog::load(dir.path()).render();
        let b = SkillCatalog::load(dir.path()).render();
        assert_eq!(a, b);
        assert_eq!(
            a,
            format!(
                "# Skills\n\n{SKILL_RULE}\n- deploy: Deploy the app.\n- web: Search the web.\n"
            )
        );
        assert!(!a.contains("SECRET-BODY"));
        assert!(!a.contains("h.example"));
    }

    #[test]
    fn empty_catalog_renders_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = SkillCatalog::load(dir.path());
        assert!(catalog.is_empty());
        assert!(catalog.problems.is_empty());
        assert_eq!(catalog.render(), "");
    }

    #[test]
    fn malformed_skills_are_reported_not_fatal_and_never_half_loaded() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "skills/good/SKILL.md",
            &skill("good", "Fine.", "ok\n"),
        );
        write(dir.path(), "skills/nofm/SKILL.md", "# just markdown\n");
        write(
            dir.path(),
            "skills/unclosed/SKILL.md",
            "---\nname: unclosed\n",
        );
        write(
            dir.path(),
            "skills/nodesc/SKILL.md",
            "---\nname: nodesc\n---\nx\n",
        );
        write(
            dir.path(),
            "skills/noname/SKILL.md",
            "---\ndescription: d\n---\nx\n",
        );
        write(
            dir.path(),
            "skills/other/SKILL.md",
            &skill("different", "d", "x"),
        );
        write(
            dir.path(),
            "skills/yaml/SKILL.md",
            "---\nname: [yaml\n---\nx\n",
        );
        write(
            dir.path(),
            "skills/list/SKILL.md",
            "---\n- a\n- b\n---\nx\n",
        );
        write(
            dir.path(),
            "skills/num/SKILL.md",
            "---\nname: num\ndescription: 3\n---\nx\n",
        );
        write(dir.path(), "skills/empty/SKILL.md", "---\n---\nx\n");
        write(
            dir.path(),
            "skills/long/SKILL.md",
            &skill("long", &"word ".repeat(300), "x"),
        );
        write(
            dir.path(),
            "skills/Upper/SKILL.md",
            &skill("Upper", "d", "x"),
        );
        std::fs::write(dir.path().join("skills/binary"), [0xff]).unwrap();
        std::fs::create_dir_all(dir.path().join("skills/nofile")).unwrap();
        std::fs::write(dir.path().join("skills/latin1.md"), "x").unwrap();
        write(dir.path(), "skills/bytes/SKILL.md", "");
        std::fs::write(
            dir.path().join("skills/bytes/SKILL.md"),
            [b'-', b'-', b'-', 0xff],
        )
        .unwrap();
        let catalog = SkillCatalog::load(dir.path());
        assert_eq!(catalog.names(), ["good"]);
        let problems = catalog.problems.join("\n");
        for needle in [
            "skills/Upper: not a valid skill name",
            "skills/binary: not a skill directory",
            "skills/bytes/SKILL.md` is malformed: not valid UTF-8",
            "skills/empty/SKILL.md: front matter is empty",
            "skills/latin1.md: not a skill directory",
            "skills/list/SKILL.md: front matter is not a YAML mapping",
            "skills/long/SKILL.md: description is",
            "skills/nodesc/SKILL.md: front matter has no `description`",
            "skills/nofile: has no SKILL.md",
            "skills/nofm/SKILL.md` is malformed: no front matter",
            "skills/noname/SKILL.md: front matter has no `name`",
            "skills/num/SKILL.md: `description` must be a string",
            "skills/other/SKILL.md: `name: different` does not match the directory name `other`",
            "skills/unclosed/SKILL.md` is malformed: no front matter",
            "skills/yaml/SKILL.md: front matter is not a YAML mapping",
        ] {
            assert!(
                problems.contains(needle),
                "missing {needle:?} in\n{problems}"
            );
        }
        assert_eq!(catalog.problems.len(), 15, "{problems}");
        // What the catalog leaves out, the loader refuses too.
        let err = SkillCatalog::body(dir.path(), "other").unwrap_err();
        assert!(matches!(err, ContextError::InvalidSkill { .. }), "{err}");
        assert!(SkillCatalog::body(dir.path(), "good").is_ok());
    }

    #[test]
    fn body_strips_front_matter_and_unknown_names_list_the_available() {
        let dir = tempfile::tempdir().unwrap();
        let text = skill("deploy", "Deploy.", "\n# Steps\nmake deploy\n");
        write(dir.path(), "skills/deploy/SKILL.md", &text);
        let body = SkillCatalog::body(dir.path(), "deploy").unwrap();
        assert_eq!(body.body, "# Steps\nmake deploy\n");
        assert_eq!(body.sha256, sha256_hex(text.as_bytes()));
        assert_eq!(body.path, "skills/deploy/SKILL.md");
        for name in ["nope", "../deploy", ""] {
            let err = SkillCatalog::body(dir.path(), name).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("unknown skill `{name}`; available skills: deploy")
            );
        }
    }

    #[test]
    fn skills_behind_escaping_symlinks_are_problems() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write(
            outside.path(),
            "x/SKILL.md",
            &skill("x", "Outside.", "OUT\n"),
        );
        std::fs::create_dir(dir.path().join("skills")).unwrap();
        symlink(outside.path().join("x"), dir.path().join("skills/x")).unwrap();
        let catalog = SkillCatalog::load(dir.path());
        assert!(catalog.is_empty());
        assert_eq!(catalog.problems.len(), 1);
        assert!(
            catalog.problems[0].contains("outside the workspace"),
            "{:?}",
            catalog.problems
        );

        let dir2 = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir2.path().join("skills")).unwrap();
        let catalog = SkillCatalog::load(dir2.path());
        assert!(catalog.is_empty());
        assert_eq!(catalog.problems.len(), 1, "{:?}", catalog.problems);
    }
}
