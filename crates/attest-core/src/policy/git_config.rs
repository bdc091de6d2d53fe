//! Whether a repository's own git configuration could make a "read-only"
//! git command run a program.
//!
//! `git status`, `git diff`, `git log` and friends run programs named in the
//! repository's config: `core.fsmonitor` (on every status), `core.pager`,
//! `diff.external`, `diff.<driver>.textconv`, `filter.<driver>.clean`,
//! `gpg.program` with `log.showSignature`, hooks such as
//! `post-index-change`, and whatever an `[include]` pulls in. A repository
//! (a cloned one, or one the model wrote into) sets these; the user's own
//! global config is theirs and is not judged here.
//!
//! The check is an allow list: every key of the repository's config files
//! (the common dir's `config`, the worktree's `config.worktree`, and those
//! of submodules under `modules/`) must be one known to run nothing, and
//! the hooks directories must hold nothing but `*.sample` files. Anything
//! else, or a file that cannot be read or parsed, is a concern: git
//! commands in that repository are asked rather than allowed.
//!
//! Not covered: a nested repository or gitlink that is not a registered
//! submodule, and config git reads from the environment (tools get a
//! scrubbed one, and assignments on the command line are judged apart).

use std::path::{Path, PathBuf};

/// Keys (lowercase `section.name`, or `section.*.name` for any
/// subsection) that run nothing.
const SAFE_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "core.longpaths",
    "core.abbrev",
    "core.compression",
    "core.loosecompression",
    "core.untrackedcache",
    "core.splitindex",
    "core.commitgraph",
    "core.multipackindex",
    "core.checkstat",
    "core.trustctime",
    "core.preloadindex",
    "core.fscache",
    "core.bigfilethreshold",
    "core.whitespace",
    "core.warnambiguousrefs",
    "core.protecthfs",
    "core.protectntfs",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.push",
    "remote.*.tagopt",
    "remote.*.prune",
    "remote.*.prunetags",
    "remote.*.mirror",
    "remote.*.promisor",
    "remote.*.partialclonefilter",
    "remote.*.skipdefaultupdate",
    "remote.*.skipfetchall",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "branch.*.pushremote",
    "branch.*.description",
    "submodule.*.url",
    "submodule.*.path",
    "submodule.*.active",
    "submodule.*.branch",
    "user.name",
    "user.email",
    "user.signingkey",
    "init.defaultbranch",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "push.followtags",
    "fetch.prune",
    "fetch.prunetags",
    "fetch.recursesubmodules",
    "fetch.writecommitgraph",
    "gc.auto",
    "gc.autodetach",
    "gc.reflogexpire",
    "gc.pruneexpire",
    "gc.worktreepruneexpire",
    "extensions.worktreeconfig",
    "extensions.objectformat",
    "extensions.partialclone",
    "extensions.refstorage",
    "extensions.preciousobjects",
    "extensions.noop",
    "index.version",
    "index.threads",
    "lfs.repositoryformatversion",
    "status.showuntrackedfiles",
    "status.short",
    "status.branch",
    "status.relativepaths",
    "diff.renames",
    "diff.algorithm",
    "diff.mnemonicprefix",
    "diff.noprefix",
    "diff.context",
    "diff.colormoved",
    "diff.indentheuristic",
    "diff.submodule",
    "diff.ignoresubmodules",
    "diff.statgraphwidth",
    "diff.relative",
    "diff.renamelimit",
    "diff.interhunkcontext",
    "log.date",
    "log.decorate",
    "log.abbrevcommit",
    "log.follow",
    "log.mailmap",
    "log.showroot",
    "merge.ff",
    "merge.conflictstyle",
    "merge.log",
    "merge.renamelimit",
    "rebase.autosquash",
    "rebase.autostash",
    "rebase.updaterefs",
    "rerere.enabled",
    "rerere.autoupdate",
    "feature.manyfiles",
    "feature.experimental",
];

/// Sections whose every two-level key runs nothing.
const SAFE_SECTIONS: &[&str] = &["color", "advice"];

/// Most directories looked at for submodule git dirs.
const MAX_MODULE_DIRS: usize = 256;

/// Why git commands in the repository around `workspace` may run a
/// program the repository chose, or `None` when its config is plain (or
/// there is no repository).
pub(crate) fn concern(workspace: &Path) -> Option<String> {
    let dot_git = workspace
        .ancestors()
        .map(|d| d.join(".git"))
        .find(|p| std::fs::symlink_metadata(p).is_ok())?;
    let git_dir = match git_dir_of(&dot_git) {
        Ok(dir) => dir,
        Err(why) => return Some(why),
    };
    let common = common_dir(&git_dir);
    let mut dirs = vec![git_dir.clone()];
    if common != git_dir {
        dirs.push(common.clone());
    }
    let mut seen = 0usize;
    collect_module_dirs(&common.join("modules"), &mut dirs, &mut seen);
    // Submodules checked out with a `.git` directory of their own.
    let root = dot_git.parent().unwrap_or(workspace);
    if let Ok(modules) = std::fs::read_to_string(root.join(".gitmodules")) {
        let paths = modules.lines().filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "path").then(|| v.trim().to_string())
        });
        dirs.extend(
            paths
                .map(|path| root.join(path).join(".git"))
                .filter(|sub| sub.is_dir()),
        );
    }
    if seen > MAX_MODULE_DIRS {
        return Some("the repository has more submodule git dirs than are checked".to_string());
    }
    for dir in &dirs {
        for name in ["config", "config.worktree"] {
            let file = dir.join(name);
            match std::fs::read(&file) {
                Ok(bytes) => {
                    if let Some(why) = config_concern(&String::from_utf8_lossy(&bytes)) {
                        return Some(format!("{}: {why}", file.display()));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Some(format!("cannot read {}: {e}", file.display())),
            }
        }
        if let Some(why) = hooks_concern(&dir.join("hooks")) {
            return Some(why);
        }
    }
    None
}

/// The git dir a `.git` entry stands for: itself, or the `gitdir:` a
/// `.git` file points to (worktrees, absorbed submodules).
fn git_dir_of(dot_git: &Path) -> Result<PathBuf, String> {
    if dot_git.is_dir() {
        return Ok(dot_git.to_path_buf());
    }
    let text = std::fs::read_to_string(dot_git)
        .map_err(|e| format!("cannot read {}: {e}", dot_git.display()))?;
    let target = text
        .lines()
        .find_map(|l| l.strip_prefix("gitdir:"))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("{} names no gitdir", dot_git.display()))?;
    let base = dot_git.parent().unwrap_or(Path::new("/"));
    Ok(base.join(target))
}

/// The common dir of a git dir (`commondir` in a worktree's git dir).
fn common_dir(git_dir: &Path) -> PathBuf {
    match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(text) if !text.trim().is_empty() => git_dir.join(text.trim()),
        _ => git_dir.to_path_buf(),
    }
}

/// Submodule git dirs under `modules/` (nested ones too): directories
/// holding a `config` file.
fn collect_module_dirs(dir: &Path, out: &mut Vec<PathBuf>, seen: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        *seen += 1;
        if *seen > MAX_MODULE_DIRS {
            return;
        }
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if path.join("config").is_file() {
            out.push(path.clone());
            collect_module_dirs(&path.join("modules"), out, seen);
        } else {
            // Submodule names may contain `/`.
            collect_module_dirs(&path, out, seen);
        }
    }
}

/// A hook that is not a `*.sample`: git runs hooks such as
/// `post-index-change` even for `git status`.
fn hooks_concern(hooks: &Path) -> Option<String> {
    let entries = match std::fs::read_dir(hooks) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(format!("cannot read {}: {e}", hooks.display())),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.ends_with(".sample") {
            return Some(format!("{} has a hook `{name}`", hooks.display()));
        }
    }
    None
}

/// The first key of a config file's text that is not known to run
/// nothing, or a line that cannot be read as git config.
pub(crate) fn config_concern(text: &str) -> Option<String> {
    let mut section = String::new();
    let mut continued = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let was_continued = continued;
        continued = line.ends_with('\\');
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut rest = line;
        if let Some(header) = line.strip_prefix('[') {
            let Some((inside, after)) = header.split_once(']') else {
                return Some(format!("line {}: an unreadable section header", n + 1));
            };
            section = section_name(inside);
            rest = after.trim();
            if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
                continue;
            }
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let after_name = rest[name.len()..].trim_start();
        let is_key = !name.is_empty()
            && (after_name.is_empty()
                || after_name.starts_with('=')
                || after_name.starts_with('#')
                || after_name.starts_with(';'));
        if !is_key {
            if was_continued {
                // The rest of a value continued from the line before.
                continue;
            }
            return Some(format!("line {}: not a config entry", n + 1));
        }
        if section.is_empty() {
            return Some(format!("line {}: a key outside any section", n + 1));
        }
        let key = format!("{section}.{}", name.to_ascii_lowercase());
        if !key_is_safe(&key) {
            return Some(format!("sets `{key}`"));
        }
    }
    None
}

/// `core`, `remote "origin"` → `remote.*`, `branch.main` (old style) →
/// `branch.*`.
fn section_name(header: &str) -> String {
    let header = header.trim();
    let (name, has_sub) = match header.split_once(|c: char| c.is_whitespace() || c == '.') {
        Some((name, _)) => (name, true),
        None => (header, false),
    };
    let name = name.to_ascii_lowercase();
    if has_sub {
        format!("{name}.*")
    } else {
        name
    }
}

fn key_is_safe(key: &str) -> bool {
    if SAFE_KEYS.contains(&key) {
        return true;
    }
    let mut parts = key.split('.');
    let section = parts.next().unwrap_or("");
    // Two-level keys only: a subsection (`color.status.*`) is fine for
    // colors, but `diff.<driver>.command` is how drivers are named.
    SAFE_SECTIONS.contains(&section) && (key.matches('.').count() == 1 || section == "color")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLONED: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.com/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n";

    #[test]
    fn a_freshly_cloned_config_is_plain() {
        assert_eq!(config_concern(CLONED), None);
        assert_eq!(
            config_concern(
                "[color \"status\"]\n\tadded = green\n[advice]\n\tdetachedHead = false\n"
            ),
            None
        );
    }

    #[test]
    fn program_keys_includes_and_odd_lines_are_concerns() {
        for (text, key) in [
            ("[core]\n\tfsmonitor = ./x", "core.fsmonitor"),
            ("[core]\n\tpager = ./x", "core.pager"),
            ("[CORE]\n\tFsMonitor = ./x", "core.fsmonitor"),
            ("[core] fsmonitor = ./x", "core.fsmonitor"),
            ("[diff]\n\texternal = ./x", "diff.external"),
            ("[diff \"evil\"]\n\ttextconv = ./x", "diff.*.textconv"),
            ("[filter \"f\"]\n\tclean = ./x", "filter.*.clean"),
            ("[include]\n\tpath = ../elsewhere", "include.path"),
            ("[includeIf \"gitdir:/\"]\n\tpath = x", "includeif.*.path"),
            ("[core]\n\thooksPath = hooks", "core.hookspath"),
            ("[gpg]\n\tprogram = ./x", "gpg.program"),
            ("[log]\n\tshowSignature = true", "log.showsignature"),
            ("[alias]\n\tst = !sh", "alias.st"),
            (
                "[color \"x\"]\n[diff \"d\"]\n\tcommand = ./x",
                "diff.*.command",
            ),
        ] {
            let why = config_concern(&format!("{CLONED}{text}\n")).unwrap_or_default();
            assert!(why.contains(key), "{text}: {why}");
        }
        assert!(config_concern("fsmonitor = x").is_some());
        assert!(config_concern("[core\n").is_some());
        assert!(config_concern("[core]\n\t!!!\n").is_some());
        // A continued value's next line is not a key, but a key-like line
        // after a continuation is judged anyway.
        assert_eq!(config_concern("[user]\n\tname = a \\\n  b c\n"), None);
        assert!(config_concern("[user]\n\tname = a \\\nfsmonitor = x\n").is_some());
    }

    fn repo(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
        std::fs::write(dir.path().join(".git/config"), config).unwrap();
        std::fs::write(dir.path().join(".git/hooks/pre-commit.sample"), "#!/bin/sh").unwrap();
        dir
    }

    #[test]
    fn repositories_are_found_and_judged() {
        let plain = repo(CLONED);
        assert_eq!(concern(plain.path()), None);
        let sub = plain.path().join("src/deep");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(concern(&sub), None, "found from a subdirectory");

        let evil = repo("[core]\n\tfsmonitor = touch pwned\n");
        let why = concern(&evil.path().join(".")).unwrap();
        assert!(why.contains("core.fsmonitor"), "{why}");

        let hooked = repo(CLONED);
        std::fs::write(hooked.path().join(".git/hooks/post-index-change"), "x").unwrap();
        assert!(concern(hooked.path())
            .unwrap()
            .contains("post-index-change"));

        let module = repo(CLONED);
        let mdir = module.path().join(".git/modules/lib/a");
        std::fs::create_dir_all(&mdir).unwrap();
        std::fs::write(mdir.join("config"), "[core]\n\tpager = x\n").unwrap();
        assert!(concern(module.path()).unwrap().contains("core.pager"));

        // A worktree: `.git` is a file naming the git dir, whose
        // `commondir` holds the shared config.
        let main = repo("[diff]\n\texternal = x\n");
        let wt_git = main.path().join(".git/worktrees/w");
        std::fs::create_dir_all(&wt_git).unwrap();
        std::fs::write(wt_git.join("commondir"), "../..").unwrap();
        let wt = tempfile::tempdir().unwrap();
        std::fs::write(
            wt.path().join(".git"),
            format!("gitdir: {}\n", wt_git.display()),
        )
        .unwrap();
        assert!(concern(wt.path()).unwrap().contains("diff.external"));

        let none = tempfile::tempdir().unwrap();
        // A temp dir may sit inside a repository on some machines; only
        // assert when it does not.
        if none.path().ancestors().all(|d| !d.join(".git").exists()) {
            assert_eq!(concern(none.path()), None);
        }
    }
}
