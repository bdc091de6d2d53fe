//! Grounding a 2 KB answer against 50 receipts of 10 KB each (issue 12:
//! it must add at most 1 ms to a run). `cargo bench -p attest-core --bench
//! grounding -- --quick`

use attest_core::grounding::{ground, Evidence};
use attest_protocol::{
    EffectClass, Evidence as ReceiptEvidence, Receipt, ReceiptStatus, TranscriptItem,
    VerificationStatus,
};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

/// 50 calls, each with a 10 KB output of config-like lines.
fn items() -> Vec<TranscriptItem> {
    let now = chrono::Utc::now();
    let mut items = vec![TranscriptItem::UserInput {
        text: "Summarize the service configuration in config/ and name ports, versions and hosts."
            .into(),
    }];
    for c in 0..50 {
        let id = format!("call_{c}");
        let mut output = String::new();
        let mut line = 0;
        while output.len() < 10 * 1024 {
            output.push_str(&format!(
                "service_{c}_{line}.port = {}  # host svc{line}.internal.example.com, version {c}.{line}.7, file src/svc_{line}.rs\n",
                8000 + line
            ));
            line += 1;
        }
        output.truncate(10 * 1024);
        items.push(TranscriptItem::ToolCall {
            call_id: id.clone(),
            name: "read_file".into(),
            arguments: format!("{{\"path\":\"config/svc_{c}.toml\"}}"),
        });
        items.push(TranscriptItem::ToolResult {
            call_id: id.clone(),
            name: "read_file".into(),
            status: ReceiptStatus::Ok,
            output,
            receipt: Some(Box::new(Receipt {
                call_id: id,
                tool_name: "read_file".into(),
                effect: EffectClass::Observe,
                status: ReceiptStatus::Ok,
                started_at: now,
                finished_at: now,
                input_fingerprint: String::new(),
                evidence: ReceiptEvidence {
                    size_bytes: Some(10 * 1024),
                    ..Default::default()
                },
                verification_status: VerificationStatus::Verified,
                error: None,
            })),
        });
    }
    items
}

/// About 2 KB of prose naming ports, versions, hosts, paths, quoted
/// strings and counts, half of which no output shows.
fn answer() -> String {
    let mut answer = String::new();
    let mut i = 0;
    while answer.len() < 2 * 1024 {
        answer.push_str(&format!(
            "Service {i} listens on port {} at svc{i}.internal.example.com (version {i}.{i}.7, see `src/svc_{i}.rs`), logs \"{}\" and retried {} times. ",
            8000 + i * 7,
            if i % 2 == 0 { "ready" } else { "degraded mode" },
            i % 4
        ));
        i += 1;
    }
    answer.truncate(2 * 1024);
    answer
}

fn bench(c: &mut Criterion) {
    let items = items();
    let answer = answer();
    let names = vec!["read_file", "grep", "list_dir", "shell"];
    let g = ground(&answer, &Evidence::from_items(&items, &[], names.clone()));
    eprintln!(
        "answer {} bytes, {} values, {} ungrounded",
        answer.len(),
        g.values.len(),
        g.ungrounded.len()
    );
    // On-CPU time of this thread (Linux), which a loaded machine does not
    // inflate the way it inflates wall-clock time.
    let on_cpu_ns = || {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
    };
    if let Some(before) = on_cpu_ns() {
        const RUNS: u64 = 200;
        for _ in 0..RUNS {
            let evidence = Evidence::from_items(black_box(&items), &[], names.clone());
            black_box(ground(black_box(&answer), &evidence));
        }
        if let Some(after) = on_cpu_ns() {
            eprintln!(
                "on-CPU time per grounding: {:.3} ms ({RUNS} runs)",
                (after - before) as f64 / RUNS as f64 / 1e6
            );
        }
        // Where it goes: extracting the values alone.
        if let Some(start) = on_cpu_ns() {
            for _ in 0..RUNS {
                black_box(attest_core::grounding::checkable_values(black_box(&answer)));
            }
            if let Some(end) = on_cpu_ns() {
                eprintln!(
                    "  of which extracting the values: {:.3} ms",
                    (end - start) as f64 / RUNS as f64 / 1e6
                );
            }
        }
    }
    c.bench_function("ground 2 KB answer vs 50 x 10 KB outputs", |b| {
        b.iter(|| {
            let evidence = Evidence::from_items(black_box(&items), &[], names.clone());
            black_box(ground(black_box(&answer), &evidence))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
