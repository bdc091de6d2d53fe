#!/usr/bin/env bash
# Start-up of `attest run` against an HTTP provider (issue 19): process
# start → the first request's first byte at the tests' scripted model server,
# over many short runs (two `read_file` steps, a new workspace and store
# each), with the builds of several cargo profiles taken in turn so that
# they share the machine's moods.
#
# Usage: scripts/bench-startup.sh ROUNDS PROFILE...
#   e.g. scripts/bench-startup.sh 30 release
# Each PROFILE names target/PROFILE/attest and
# target/PROFILE/examples/scripted_server (build them with
# `cargo build --release -p attest-cli --no-default-features --bin attest --example scripted_server`
# and copy them to target/NAME/ to compare builds). Prints, per profile, the
# median, 10th and 90th percentiles, the largest, and how many runs took
# over 30 ms. The server runs on the last CPU, as in
# scripts/bench-overhead.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: $0 ROUNDS PROFILE..." >&2; exit 2; }
python3 - "$@" <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, "scripts")
import bench_setup

rounds, profiles = int(sys.argv[1]), sys.argv[2:]
for p in profiles:
    for f in (f"target/{p}/attest", f"target/{p}/examples/scripted_server"):
        if not os.access(f, os.X_OK):
            sys.exit(f"missing {f}")
cpus = sorted(os.sched_getaffinity(0))
server_cpus = cpus[-1:]
times = {p: [] for p in profiles}
for _ in range(rounds):
    for p in profiles:
        with tempfile.TemporaryDirectory() as root:
            ws, env, out = bench_setup.prepare(root, 2)
            srv, url = bench_setup.start_server(f"target/{p}/examples/scripted_server", "openai",
                                                False, 2, out, server_cpus)
            cmd = bench_setup.run_args(f"target/{p}/attest", "openai", False, url, 2, ws)
            time.sleep(0.05)  # the server settled
            started = time.time()
            run = subprocess.run(cmd, capture_output=True, text=True, env=env)
            srv.wait(timeout=30)
            done = json.loads(run.stdout.splitlines()[-1])
            assert done["type"] == "done" and done["state"] == "completed", run.stderr
            first = json.load(open(f"{out}/wire_times.json"))[0][0]
            times[p].append((first - started * 1_000_000) / 1000.0)
for p in profiles:
    xs = sorted(times[p])
    print(f"{p:<12} runs {len(xs)}  median {statistics.median(xs):.1f} ms  "
          f"p10 {xs[len(xs) // 10]:.1f}  p90 {xs[len(xs) * 9 // 10]:.1f}  "
          f"max {xs[-1]:.1f}  over 30 ms: {sum(x > 30 for x in xs)}")
PY
