//! The run log: where transcript items, events and trace records go, in order.
//!
//! Write-ahead discipline: the engine appends a tool call before executing it
//! and its result before the next request, and calls [`RunLog::flush`]
//! before every wait (a model request, a tool's execution, an approval), so
//! what a later step acts on is already on disk. A log may hold appended
//! entries until then: the durable store writes a step's entries in one
//! transaction instead of one each (SPEC P1). Observers see an event only
//! once it is flushed. The durable store implements this trait in its own
//! crate.

pub use attest_protocol::LogEntry;
#[cfg(test)]
use attest_protocol::TranscriptItem;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("run log I/O error at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("run log serialization error: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("run store error: {0}")]
    Store(String),
}

/// Append-only sink for a run's entries.
pub trait RunLog: Send {
    /// Append one entry; it may be held until the next [`Self::flush`].
    fn append(&mut self, entry: &LogEntry) -> Result<(), LogError>;

    /// Append entries that stand or fall together (a run's terminal item
    /// and its `done` event) and flush: a durable log writes whatever it
    /// holds and these in one transaction. They are moved in, not copied
    /// (a long run's `done` carries every receipt), and given back once
    /// written; entries it could not write, a log may keep for its next
    /// flush. The default appends them in order, then flushes.
    fn append_all(&mut self, entries: Vec<LogEntry>) -> Result<Vec<LogEntry>, LogError> {
        entries.iter().try_for_each(|e| self.append(e))?;
        self.flush()?;
        Ok(entries)
    }

    /// Make every appended entry durable. The default: appends already are.
    fn flush(&mut self) -> Result<(), LogError> {
        Ok(())
    }
}

/// Keeps entries in memory (library use and tests).
#[derive(Debug, Default)]
pub struct MemoryRunLog {
    pub entries: Vec<LogEntry>,
}

impl RunLog for MemoryRunLog {
    fn append(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        self.entries.push(entry.clone());
        Ok(())
    }
}

/// Writes one JSON line per entry to `<dir>/<run_id>.jsonl`, flushed per entry.
#[derive(Debug)]
pub struct JsonlRunLog {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonlRunLog {
    pub fn create(dir: &Path, run_id: &str) -> Result<Self, LogError> {
        let io = |source| LogError::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join(format!("{run_id}.jsonl"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| LogError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(JsonlRunLog {
            path,
            out: BufWriter::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read a JSONL run log back. A truncated last line (a crash mid-write)
    /// is skipped and reported, not fatal.
    pub fn read(path: &Path) -> Result<(Vec<LogEntry>, Option<String>), LogError> {
        let text = std::fs::read_to_string(path).map_err(|source| LogError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut entries = Vec::new();
        let mut damaged = None;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str(line) {
                Ok(e) => entries.push(e),
                Err(e) => {
                    damaged = Some(format!("line {} unreadable: {e}", n + 1));
                }
            }
        }
        Ok((entries, damaged))
    }
}

impl RunLog for JsonlRunLog {
    fn append(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        let line = entry.to_json()?;
        let io = |source| LogError::Io {
            path: self.path.clone(),
            source,
        };
        self.out.write_all(line.as_bytes()).map_err(io)?;
        self.out.write_all(b"\n").map_err(io)?;
        self.out.flush().map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_log_round_trips_and_tolerates_a_truncated_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = JsonlRunLog::create(dir.path(), "r1").unwrap();
        let item = LogEntry::Item {
            item: TranscriptItem::UserInput { text: "hi".into() },
        };
        log.append(&item).unwrap();
        let path = log.path().to_path_buf();
        drop(log);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"entry\":\"item\",\"ite")
            .unwrap();
        let (entries, damaged) = JsonlRunLog::read(&path).unwrap();
        assert_eq!(entries, vec![item]);
        assert!(damaged.unwrap().contains("line 2"));
    }
}
