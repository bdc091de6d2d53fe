//! `/metrics` in the Prometheus text format, and the one figure the store
//! cannot give: the harness's own time per step. Each run's provider is
//! wrapped in [`TimedProvider`], which measures from the end of one model
//! call to the start of the next (and from the last to the run's end):
//! everything the harness does between model calls, the model's own
//! latency excluded.

use async_trait::async_trait;
use attest::core::provider::{ModelRequest, ModelResponse, ProviderError, TextSink};
use attest::ModelProvider;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Upper bounds of the step-latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A cumulative histogram of harness time per step.
#[derive(Default)]
pub struct StepLatency {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
    /// Every observation, for the benchmark's percentiles (bounded).
    samples: Mutex<Vec<u32>>,
}

const MAX_SAMPLES: usize = 1_000_000;

impl StepLatency {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = d.as_micros().min(u32::MAX as u128) as u32;
        self.sum_micros
            .fetch_add(u64::from(micros), Ordering::Relaxed);
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if samples.len() < MAX_SAMPLES {
            samples.push(micros);
        }
    }

    /// The `q` quantile (0..=1) of the observations, in microseconds.
    pub fn quantile_micros(&self, q: f64) -> Option<u32> {
        let mut samples = self
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let rank = ((samples.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
        Some(samples[rank])
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP attest_step_latency_seconds Harness time per step: from one model response to the next request (model latency excluded)."
        );
        let _ = writeln!(out, "# TYPE attest_step_latency_seconds histogram");
        for (i, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "attest_step_latency_seconds_bucket{{le=\"{bound}\"}} {}",
                self.counts[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "attest_step_latency_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "attest_step_latency_seconds_sum {}",
            self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "attest_step_latency_seconds_count {count}");
        let _ = writeln!(
            out,
            "# HELP attest_step_latency_quantile_seconds Quantiles of the harness time per step, over every step observed."
        );
        let _ = writeln!(out, "# TYPE attest_step_latency_quantile_seconds gauge");
        for q in [0.5, 0.99] {
            if let Some(micros) = self.quantile_micros(q) {
                let _ = writeln!(
                    out,
                    "attest_step_latency_quantile_seconds{{quantile=\"{q}\"}} {}",
                    f64::from(micros) / 1e6
                );
            }
        }
    }
}

/// The figures `/metrics` shows.
pub struct Snapshot<'a> {
    /// Runs by state (`queued`, `running`, terminal states).
    pub runs_by_state: Vec<(String, u64)>,
    pub active_runs: u64,
    pub approvals_pending: u64,
    pub step_latency: &'a StepLatency,
}

pub fn render(s: &Snapshot<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP attest_runs Runs known to the server, by state."
    );
    let _ = writeln!(out, "# TYPE attest_runs gauge");
    for (state, n) in &s.runs_by_state {
        let _ = writeln!(out, "attest_runs{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP attest_active_runs Runs this server is driving now."
    );
    let _ = writeln!(out, "# TYPE attest_active_runs gauge");
    let _ = writeln!(out, "attest_active_runs {}", s.active_runs);
    let _ = writeln!(
        out,
        "# HELP attest_approvals_pending Approvals waiting for a decision."
    );
    let _ = writeln!(out, "# TYPE attest_approvals_pending gauge");
    let _ = writeln!(out, "attest_approvals_pending {}", s.approvals_pending);
    s.step_latency.render(&mut out);
    out
}

/// A run's provider, timed: see the module doc.
pub struct TimedProvider {
    inner: Arc<dyn ModelProvider>,
    latency: Arc<StepLatency>,
    last_response: Mutex<Option<Instant>>,
}

impl TimedProvider {
    pub fn new(inner: Arc<dyn ModelProvider>, latency: Arc<StepLatency>) -> Self {
        TimedProvider {
            inner,
            latency,
            last_response: Mutex::new(None),
        }
    }

    fn request_starts(&self) {
        let last = self
            .last_response
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(at) = last {
            self.latency.observe(at.elapsed());
        }
    }

    fn response_arrived(&self) {
        *self.last_response.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// The run ended: the time since the last response was the last step's.
    pub fn run_ended(&self) {
        self.request_starts();
    }
}

#[async_trait]
impl ModelProvider for TimedProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn api_family(&self) -> &str {
        self.inner.api_family()
    }
    fn model(&self) -> &str {
        self.inner.model()
    }
    fn prompt_version(&self) -> Option<&str> {
        self.inner.prompt_version()
    }
    fn call_syntax(&self, tool: &attest::ToolSpec) -> String {
        self.inner.call_syntax(tool)
    }
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        self.request_starts();
        let response = self.inner.complete(request).await;
        self.response_arrived();
        response
    }
    async fn complete_streaming(
        &self,
        request: &ModelRequest,
        sink: &TextSink,
    ) -> Result<ModelResponse, ProviderError> {
        self.request_starts();
        let response = self.inner.complete_streaming(request, sink).await;
        self.response_arrived();
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_cumulative_and_renders_as_prometheus_text() {
        let h = StepLatency::default();
        h.observe(Duration::from_micros(300));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(9));
        let text = render(&Snapshot {
            runs_by_state: vec![("completed".into(), 2)],
            active_runs: 1,
            approvals_pending: 0,
            step_latency: &h,
        });
        assert!(
            text.contains("attest_runs{state=\"completed\"} 2"),
            "{text}"
        );
        assert!(text.contains("attest_step_latency_seconds_bucket{le=\"0.0005\"} 1"));
        assert!(text.contains("attest_step_latency_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("attest_step_latency_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("attest_step_latency_seconds_count 3"));
        assert_eq!(h.quantile_micros(0.0), Some(300));
        assert_eq!(h.quantile_micros(1.0), Some(9_000_000));
    }
}
