//! A cleared call's execution (after a flush: the call is durable before
//! the tool runs) with its progress reports stored as
//! `tool_progress` events while it runs (an MCP server's progress
//! notifications). Reports are display only: they never reach the model and
//! never count as evidence; a chatty tool is throttled so that it cannot
//! flood the run log.

use super::run::Run;
use super::EngineError;
use crate::provider::ParsedCall;
use crate::tool::{Clearance, ProgressSink, ToolContext, ToolOutput, ToolProgress, ToolRegistry};
use attest_protocol::{EventBody, Receipt};
use std::time::{Duration, Instant};

/// Least time between two stored reports of one call (a final one, where
/// progress reaches the total, is always stored).
const MIN_INTERVAL: Duration = Duration::from_millis(200);
/// Most reports stored for one call.
const MAX_REPORTS: u32 = 100;
/// Bytes of a report's message kept.
const MESSAGE_LIMIT: usize = 200;

impl Run<'_> {
    /// Execute a cleared call, storing the progress it reports meanwhile.
    pub(super) async fn execute_with_progress(
        &mut self,
        step: u32,
        call: &ParsedCall,
        registry: &ToolRegistry,
        clearance: Clearance,
    ) -> Result<(ToolOutput, Receipt), EngineError> {
        // Write-ahead: the call is durable before the tool runs. Its events
        // are shown once the tool has started.
        self.commit()?;
        let (sink, mut reports) = ProgressSink::channel();
        let ctx = ToolContext {
            progress: Some(sink),
            ..self.engine.tool_ctx.clone()
        };
        let execution = registry.execute_cleared(clearance, &ctx);
        tokio::pin!(execution);
        let mut throttle = Throttle::default();
        let mut unshown = true;
        let done = loop {
            tokio::select! {
                biased;
                done = &mut execution => break done,
                () = std::future::ready(()), if unshown => {
                    // The tool's task is spawned; let it run to its first
                    // wait (a read, a child process) before showing.
                    unshown = false;
                    tokio::task::yield_now().await;
                    self.show_committed();
                }
                Some(report) = reports.recv() => {
                    if throttle.admit(&report, Instant::now()) {
                        self.emit_progress(step, call, report)?;
                    }
                }
            }
        };
        self.show_committed();
        // Reports sent just before the result still count.
        while let Ok(report) = reports.try_recv() {
            if throttle.admit(&report, Instant::now()) {
                self.emit_progress(step, call, report)?;
            }
        }
        Ok(done)
    }

    fn emit_progress(
        &mut self,
        step: u32,
        call: &ParsedCall,
        report: ToolProgress,
    ) -> Result<(), EngineError> {
        // Redacted before it is cut, so that a secret across the cut is
        // still found (`sequenced` redacts again, finding nothing).
        let message = report
            .message
            .map(|m| self.redactor.redact_to(m.trim(), MESSAGE_LIMIT))
            .filter(|m| !m.is_empty());
        self.emit(EventBody::ToolProgress {
            step,
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            progress: report.progress,
            total: report.total,
            message,
        })?;
        // Shown while the tool still runs.
        self.flush()
    }
}

/// Which of one call's reports are stored.
#[derive(Debug, Default)]
struct Throttle {
    last: Option<Instant>,
    stored: u32,
}

impl Throttle {
    fn admit(&mut self, report: &ToolProgress, now: Instant) -> bool {
        if self.stored >= MAX_REPORTS {
            return false;
        }
        let finished = report.total.is_some_and(|t| report.progress >= t);
        let due = self
            .last
            .is_none_or(|last| now.duration_since(last) >= MIN_INTERVAL);
        if finished || due {
            self.last = Some(now);
            self.stored += 1;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(progress: f64, total: Option<f64>) -> ToolProgress {
        ToolProgress {
            progress,
            total,
            message: None,
        }
    }

    #[test]
    fn the_first_the_spaced_and_the_final_reports_are_stored() {
        let start = Instant::now();
        let mut throttle = Throttle::default();
        assert!(throttle.admit(&report(1.0, Some(10.0)), start));
        assert!(!throttle.admit(&report(2.0, Some(10.0)), start + Duration::from_millis(50)));
        assert!(throttle.admit(&report(3.0, Some(10.0)), start + MIN_INTERVAL));
        assert!(throttle.admit(&report(10.0, Some(10.0)), start + MIN_INTERVAL));
        // Without a total nothing is final: only spacing admits.
        let mut open = Throttle::default();
        assert!(open.admit(&report(1.0, None), start));
        assert!(!open.admit(&report(2.0, None), start));
    }

    #[test]
    fn a_flood_stops_at_the_cap() {
        let start = Instant::now();
        let mut throttle = Throttle::default();
        let stored = (0..1000)
            .filter(|i| throttle.admit(&report(f64::from(*i), Some(f64::from(*i))), start))
            .count();
        assert_eq!(stored, MAX_REPORTS as usize);
    }
}
