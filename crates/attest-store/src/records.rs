use serde::{Deserialize, Serialize};

/// A run's status column: `running` or a terminal state name.
pub type RunStatus = String;

/// What is recorded when a run begins.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub id: String,
    pub session_id: String,
    pub trace_id: String,
    pub prompt: String,
    /// JSON settings needed to resume the run (no secrets).
    pub settings: serde_json::Value,
    pub loop_version: String,
    pub prompt_version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub session_id: String,
    pub trace_id: String,
    pub prompt: String,
    pub status: RunStatus,
    pub reason: Option<String>,
    pub answer: Option<String>,
    pub steps: u32,
    pub settings: serde_json::Value,
    pub loop_version: String,
    pub prompt_version: String,
    pub pid: Option<u32>,
    pub started_at: String,
    pub finished_at: Option<String>,
}

impl RunRecord {
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }

    /// A run marked running whose process is gone: it crashed or was killed.
    pub fn is_orphaned(&self) -> bool {
        self.is_running() && !self.pid.is_some_and(process_alive)
    }
}

/// Whether a process with this pid exists (Linux: `/proc/<pid>`).
fn process_alive(pid: u32) -> bool {
    pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: String,
    pub created_at: String,
    pub updated_at: String,
    pub runs: u32,
    pub last_status: Option<String>,
}

/// A raw model output kept for audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    pub id: i64,
    pub step: Option<u32>,
    pub kind: String,
    pub body: String,
    pub created_at: String,
}
