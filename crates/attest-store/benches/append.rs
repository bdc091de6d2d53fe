//! Event append throughput of the SQLite store (WAL, one transaction per
//! append, as the engine writes, each hashed into the run's chain) and
//! reading and verifying a 5,000-entry run back.

use attest_protocol::{Event, EventBody, LogEntry};
use attest_store::{NewRun, SqliteStore, Store};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

fn event(seq: u64) -> LogEntry {
    LogEntry::Event {
        event: Event {
            run_id: "bench".into(),
            seq,
            ts: chrono::Utc::now(),
            body: EventBody::Progress {
                step: (seq / 5) as u32,
                text: "Reading the configuration file to find the port it sets.".into(),
                delta: false,
            },
        },
    }
}

fn fresh_store(dir: &std::path::Path) -> SqliteStore {
    let mut store = SqliteStore::open(&dir.join("attest.db")).unwrap();
    store.ensure_session("s").unwrap();
    store
        .begin_run(&NewRun {
            id: "bench".into(),
            session_id: "s".into(),
            trace_id: "t".into(),
            prompt: "p".into(),
            settings: serde_json::json!({}),
            loop_version: "l".into(),
            prompt_version: "p".into(),
        })
        .unwrap();
    store
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(100));
    group.bench_function("append_100_events", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap();
                let store = fresh_store(dir.path());
                (dir, store)
            },
            |(dir, mut store)| {
                for seq in 0..100 {
                    store.append("bench", &event(seq)).unwrap();
                }
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let mut store = fresh_store(dir.path());
    for seq in 0..5_000 {
        store.append("bench", &event(seq)).unwrap();
    }
    group.throughput(Throughput::Elements(5_000));
    group.bench_function("read_5000_entries", |b| {
        b.iter(|| store.entries("bench").unwrap().len())
    });
    // What `attest trace` and `resume` add before reading a run back.
    group.bench_function("verify_chain_5000_entries", |b| {
        b.iter(|| store.verify_chain("bench").unwrap())
    });
    group.finish();
}

/// One step's appends (eight entries, each committed) into a run that
/// already holds 10 / 100 / 500 / 5,000 entries: the cost must not grow
/// with the run.
fn bench_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_step");
    group.throughput(Throughput::Elements(8));
    for n in [10u64, 100, 500, 5_000] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = fresh_store(dir.path());
        for seq in 0..n {
            store.append("bench", &event(seq)).unwrap();
        }
        let mut seq = n;
        group.bench_function(criterion::BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                for _ in 0..8 {
                    store.append("bench", &event(seq)).unwrap();
                    seq += 1;
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, bench_step);
criterion_main!(benches);
