//! Fresh workspaces for attempts: a copy of the case's fixture directory
//! with its inline files written over it. Each attempt gets its own, and
//! keeps it: the run's store (`.attest/attest.db`) lives there, so every
//! attempt's trace stays readable after the eval.

use super::suite::WorkspaceFixture;
use std::io;
use std::path::Path;

/// Recreate `dest` from `fixture`: anything already there (a crashed
/// attempt's leftovers) is removed first. A fixture directory's own
/// `.attest/` is not copied.
pub fn materialize(fixture: &WorkspaceFixture, dest: &Path) -> io::Result<()> {
    if dest.exists() {
        std::fs::remove_dir_all(dest)?;
    }
    std::fs::create_dir_all(dest)?;
    if let Some(dir) = &fixture.dir {
        copy_dir(dir, dest)?;
    }
    for (rel, text) in &fixture.files {
        let path = dest.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == ".attest" {
            continue;
        }
        let target = to.join(&name);
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        } else if kind.is_symlink() {
            // A link in a fixture stays a link: confinement of what it
            // points to is the workspace's job, as in any real repository.
            let link = std::fs::read_link(entry.path())?;
            std::os::unix::fs::symlink(link, &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn copies_the_dir_then_writes_files_over_it() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("sub")).unwrap();
        std::fs::write(src.path().join("sub/a.txt"), "from dir").unwrap();
        std::fs::write(src.path().join("b.txt"), "old").unwrap();
        std::fs::create_dir_all(src.path().join(".attest")).unwrap();
        std::fs::write(src.path().join(".attest/attest.db"), "x").unwrap();
        let fixture = WorkspaceFixture {
            dir: Some(src.path().to_path_buf()),
            files: BTreeMap::from([
                ("b.txt".to_string(), "new".to_string()),
                ("deep/c.txt".to_string(), "c".to_string()),
            ]),
        };
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("full/case/0");
        materialize(&fixture, &dest).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("sub/a.txt")).unwrap(),
            "from dir"
        );
        assert_eq!(std::fs::read_to_string(dest.join("b.txt")).unwrap(), "new");
        assert_eq!(
            std::fs::read_to_string(dest.join("deep/c.txt")).unwrap(),
            "c"
        );
        assert!(!dest.join(".attest").exists());
        // A second materialization starts clean.
        std::fs::write(dest.join("left-over"), "x").unwrap();
        materialize(&fixture, &dest).unwrap();
        assert!(!dest.join("left-over").exists());
    }
}
