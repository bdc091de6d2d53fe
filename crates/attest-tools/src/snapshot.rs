//! What a command changed in the workspace: a metadata snapshot (size,
//! mtime, ctime, inode) before and after, compared. Cheap — one `lstat` per
//! entry, content hashed only for what changed — and bounded: a tree larger
//! than the limit is walked breadth-first up to it, and the result says so.
//!
//! `.attest/` (the harness's own store) is not part of what a command can
//! be credited with changing.

use attest_core::text::sha256_hex;
use attest_protocol::{ChangeKind, PathChange};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Entries a snapshot records before it stops.
pub(crate) const ENTRY_LIMIT: usize = 20_000;
/// Changes listed in a receipt; more set the truncation flag.
const LISTED_LIMIT: usize = 200;
/// Changed files hashed at most, and the largest size hashed.
const HASHED_LIMIT: usize = 50;
const HASH_BYTES_LIMIT: u64 = 4 * 1024 * 1024;
const SKIPPED: [&str; 1] = [".attest"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    dir: bool,
    file: bool,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
}

impl Meta {
    fn ctime_nanos(&self) -> i128 {
        i128::from(self.ctime.0) * 1_000_000_000 + i128::from(self.ctime.1)
    }

    fn of(m: &std::fs::Metadata) -> Meta {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Meta {
                dir: m.is_dir(),
                file: m.is_file(),
                size: m.size(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
                ino: m.ino(),
            }
        }
        #[cfg(not(unix))]
        {
            let nanos = |t: std::io::Result<SystemTime>| {
                t.ok()
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map_or((0, 0), |d| (d.as_secs() as i64, d.subsec_nanos() as i64))
            };
            Meta {
                dir: m.is_dir(),
                file: m.is_file(),
                size: m.len(),
                mtime: nanos(m.modified()),
                ctime: (0, 0),
                ino: 0,
            }
        }
    }
}

/// The workspace's entries at one moment, keyed by relative path.
#[derive(Debug)]
pub(crate) struct Snapshot {
    entries: BTreeMap<String, Meta>,
    /// True when the walk stopped at the limit.
    truncated: bool,
    taken_at: SystemTime,
    /// Content hashes of files touched within a tick of the walk.
    recent: BTreeMap<String, String>,
}

/// What changed between a snapshot and now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Changes {
    pub changes: Vec<PathChange>,
    /// The limit was hit: some paths were not compared or not listed.
    pub truncated: bool,
}

impl Snapshot {
    /// Walks `root` breadth-first in name order (top-level files first, so
    /// a large tree still covers what sits near the root), without following
    /// symlinks, up to `limit` entries.
    pub(crate) fn take(root: &Path, limit: usize) -> Snapshot {
        let mut snapshot = Snapshot::walk(root, limit);
        let since = nanos_since_epoch(snapshot.taken_at) - TICK_NANOS;
        snapshot.recent = (snapshot.entries.iter())
            .filter(|(_, m)| m.file && m.size <= HASH_BYTES_LIMIT && m.ctime_nanos() >= since)
            .take(RECENT_HASHED_LIMIT)
            .filter_map(|(path, _)| Some((path.clone(), hash_file(&root.join(path))?)))
            .collect();
        snapshot
    }

    fn walk(root: &Path, limit: usize) -> Snapshot {
        let taken_at = SystemTime::now();
        let mut entries = BTreeMap::new();
        let mut truncated = false;
        let mut queue: VecDeque<(PathBuf, String)> =
            VecDeque::from([(root.to_path_buf(), String::new())]);
        'walk: while let Some((dir, prefix)) = queue.pop_front() {
            let Ok(read) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<_> = read.flatten().map(|e| e.file_name()).collect();
            names.sort();
            for name in names {
                let name = name.to_string_lossy().into_owned();
                if prefix.is_empty() && SKIPPED.contains(&name.as_str()) {
                    continue;
                }
                if entries.len() >= limit {
                    truncated = true;
                    break 'walk;
                }
                let path = dir.join(&name);
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                let rel = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}/{name}")
                };
                let meta = Meta::of(&meta);
                if meta.dir {
                    queue.push_back((path, rel.clone()));
                }
                entries.insert(rel, meta);
            }
        }
        Snapshot {
            entries,
            truncated,
            taken_at,
            recent: BTreeMap::new(),
        }
    }

    /// Compares this snapshot with the tree under `root` now. A directory
    /// counts when created or deleted, not when its entries change (that is
    /// what its mtime says).
    pub(crate) fn changes_since(&self, root: &Path, limit: usize) -> Changes {
        let after = Snapshot::walk(root, limit);
        let mut changes = Vec::new();
        for (path, before) in &self.entries {
            match after.entries.get(path) {
                Some(now) if now.dir && before.dir => {}
                Some(now) if now == before => {}
                Some(_) => changes.push((path.clone(), ChangeKind::Modified)),
                // Past the second walk's limit is not gone: look.
                None if after.truncated => match std::fs::symlink_metadata(root.join(path)) {
                    Ok(m) => {
                        let now = Meta::of(&m);
                        if now != *before && !(now.dir && before.dir) {
                            changes.push((path.clone(), ChangeKind::Modified));
                        }
                    }
                    Err(_) => changes.push((path.clone(), ChangeKind::Deleted)),
                },
                None => changes.push((path.clone(), ChangeKind::Deleted)),
            }
            // Same metadata, but touched within a timestamp tick of the
            // first walk: the content decides.
            if let (Some(hash), Some(now)) = (self.recent.get(path), after.entries.get(path)) {
                if now == before && hash_file(&root.join(path)).as_ref() != Some(hash) {
                    changes.push((path.clone(), ChangeKind::Modified));
                }
            }
        }
        for (path, now) in &after.entries {
            if self.entries.contains_key(path) {
                continue;
            }
            // Past the first walk's limit, a path may simply not have been
            // seen: it is new only if its inode changed since then.
            if self.truncated && !self.touched_since_taken(now) {
                continue;
            }
            changes.push((path.clone(), ChangeKind::Created));
        }
        changes.sort();
        let truncated = self.truncated || after.truncated || changes.len() > LISTED_LIMIT;
        changes.truncate(LISTED_LIMIT);
        let mut hashed = 0;
        let changes = changes
            .into_iter()
            .map(|(path, change)| {
                let mut sha256 = None;
                let is_small_file = after
                    .entries
                    .get(&path)
                    .is_some_and(|m| m.file && m.size <= HASH_BYTES_LIMIT);
                if change != ChangeKind::Deleted && is_small_file && hashed < HASHED_LIMIT {
                    hashed += 1;
                    sha256 = hash_file(&root.join(&path));
                }
                PathChange {
                    path,
                    change,
                    sha256,
                }
            })
            .collect();
        Changes { changes, truncated }
    }

    fn touched_since_taken(&self, meta: &Meta) -> bool {
        meta.ctime_nanos() >= nanos_since_epoch(self.taken_at) - TICK_NANOS
    }
}

/// File timestamps come from a coarse clock (a few ms per tick): a change
/// this close to a walk may leave the metadata as it was.
const TICK_NANOS: i128 = 50_000_000;
/// Recently touched files hashed by a walk, at most.
const RECENT_HASHED_LIMIT: usize = 50;

fn nanos_since_epoch(t: SystemTime) -> i128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn hash_file(path: &Path) -> Option<String> {
    std::fs::read(path).ok().map(|bytes| sha256_hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(c: &Changes) -> Vec<(&str, ChangeKind)> {
        c.changes
            .iter()
            .map(|p| (p.path.as_str(), p.change))
            .collect()
    }

    #[test]
    fn finds_created_modified_and_deleted_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep"), "k").unwrap();
        std::fs::write(root.join("edit"), "old").unwrap();
        std::fs::write(root.join("gone"), "g").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::create_dir(root.join(".attest")).unwrap();
        let before = Snapshot::take(root, ENTRY_LIMIT);
        std::fs::write(root.join("edit"), "new content").unwrap();
        std::fs::remove_file(root.join("gone")).unwrap();
        std::fs::write(root.join("sub/made"), "m").unwrap();
        std::fs::write(root.join(".attest/db"), "x").unwrap();
        let c = before.changes_since(root, ENTRY_LIMIT);
        assert_eq!(
            kinds(&c),
            [
                ("edit", ChangeKind::Modified),
                ("gone", ChangeKind::Deleted),
                ("sub/made", ChangeKind::Created),
            ]
        );
        assert!(!c.truncated);
        assert_eq!(c.changes[0].sha256, Some(sha256_hex(b"new content")));
        assert_eq!(c.changes[1].sha256, None);
    }

    #[test]
    fn nothing_changed_is_an_empty_list() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a"), "a").unwrap();
        let before = Snapshot::take(dir.path(), ENTRY_LIMIT);
        let _ = std::fs::read(dir.path().join("src/a"));
        let c = before.changes_since(dir.path(), ENTRY_LIMIT);
        assert_eq!(c.changes, []);
        assert!(!c.truncated);
    }

    #[test]
    fn a_tree_past_the_limit_says_so_and_still_sees_shallow_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("Cargo.toml"), "version = \"0.1.0\"").unwrap();
        std::fs::create_dir(root.join("deep")).unwrap();
        for i in 0..30 {
            std::fs::write(root.join(format!("deep/f{i:02}")), "x").unwrap();
        }
        let before = Snapshot::take(root, 10);
        assert!(before.truncated);
        std::fs::write(root.join("Cargo.toml"), "version = \"0.2.0\"").unwrap();
        let c = before.changes_since(root, 10);
        assert!(c.truncated);
        assert_eq!(kinds(&c), [("Cargo.toml", ChangeKind::Modified)]);
    }
}
