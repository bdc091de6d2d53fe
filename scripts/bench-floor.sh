#!/usr/bin/env bash
# The floor under a step (issue 19): what a step costs on this machine
# without attest's engine, measured the way scripts/bench-overhead.sh
# measures attest.
#
# Builds release (attest, the scripted model server, and
# attest-store's `step_floor` example), runs `attest run` once (OpenAI
# wire, not streamed, `read_file` of a small file per step, back to back)
# to have a store of a real run, then runs `step_floor` against the same
# server RUNS times. `step_floor` replays that run's log entries into a
# new store in attest's transactions (one commit before each tool runs,
# one before each request), reads each step's file, and sends a request
# about as long as attest's. With the `blocking` client it talks to the
# server with blocking writes and reads: what no harness with a durable
# write-ahead log can skip. The `tokio` client does the same on a
# current-thread tokio runtime; the `hyper` client uses hyper's HTTP/1
# connection alone on such a runtime; the `reqwest` client talks through
# attest's HTTP stack (reqwest's client over hyper). The rest of attest's time per step is its own work (the
# engine, redaction, checks, the state).
#
# Prints, per run and client: the per-step time (the gap between a
# response's last byte leaving the server and the next request's first
# byte arriving there, less the file's read, as bench-overhead.sh
# subtracts the tool's run time), its median and p90, the last 20 steps'
# median over the first 20's, and the medians of its two parts (response
# read → first commit returned / file read → request written, timed in
# the client; the second not for hyper and reqwest).
#
# Usage: scripts/bench-floor.sh [STEPS [RUNS [CLIENTS]]]
#   (default: 100 3 "blocking tokio hyper reqwest"; the clients take turns in each run)
# ATTEST_BENCH_MODEL_LATENCY_MS=T holds each response T ms, as in
# bench-overhead.sh; ATTEST_BENCH_NO_BUILD=1 and ATTEST_BENCH_PROFILE as
# there (the folder must hold `examples/step_floor` too).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-100}
runs=${2:-3}
clients=${3:-blocking tokio hyper reqwest}
source scripts/bench-binaries.sh

python3 - "$bin" "$server" "$floor" "$steps" "$runs" $clients <<'PY'
import json, os, statistics, subprocess, sys, tempfile
sys.path.insert(0, "scripts")
import bench_setup

attest, server, floor = sys.argv[1:4]
steps, runs = int(sys.argv[4]), int(sys.argv[5])
clients = sys.argv[6:]
cpus = sorted(os.sched_getaffinity(0))
# The server on the last CPU, as bench-overhead.sh keeps it.
server_cpus = cpus[-1:] if len(cpus) >= 2 else cpus
latency = os.environ.pop("ATTEST_BENCH_MODEL_LATENCY_MS", None)

with tempfile.TemporaryDirectory() as root:
    # A real run's store, written back to back.
    ws, env, out = bench_setup.prepare(f"{root}/template", steps)
    srv, url = bench_setup.start_server(server, "openai", False, steps, out, server_cpus)
    made = subprocess.run(bench_setup.run_args(attest, "openai", False, url, steps, ws),
                          env=env, capture_output=True, text=True)
    srv.wait(timeout=60)
    assert made.returncode == 0, made.stderr[-2000:]
    template = f"{ws}/.attest/attest.db"
    if latency is not None:
        os.environ["ATTEST_BENCH_MODEL_LATENCY_MS"] = latency

    print(f"{'run':>3} {'client':<8} {'steps':>5} {'median ms':>9} {'p90 ms':>7} "
          f"{'last20/first20':>14} {'split ms':>11} {'file read µs':>12}")
    for n in range(1, runs + 1):
        for client in clients:
            name = f"{root}/floor{n}-{client}"
            ws, env, out = bench_setup.prepare(name, steps)
            srv, url = bench_setup.start_server(server, "openai", False, steps, out, server_cpus)
            run = subprocess.run([floor, template, f"{name}/floor.db", url, f"{ws}/data", client],
                                 capture_output=True, text=True)
            srv.wait(timeout=60)
            assert run.returncode == 0, run.stderr[-2000:]
            r = json.loads(run.stdout)
            wire = json.load(open(f"{out}/wire_times.json"))
            tool_steps = r["steps"]
            assert tool_steps == steps - 1, tool_steps
            per_step = [(wire[k + 1][0] - wire[k][1] - r["tool_us"][k]) / 1000.0
                        for k in range(tool_steps)]
            med = statistics.median(per_step)
            p90 = statistics.quantiles(per_step, n=10)[-1]
            ratio = statistics.median(per_step[-20:]) / statistics.median(per_step[:20])
            first = statistics.median(r["to_commit_us"][:tool_steps]) / 1000.0
            second = (f"{statistics.median(r['to_request_us']) / 1000.0:.3f}"
                      if r["to_request_us"] else "-")
            print(f"{n:>3} {client:<8} {steps:>5} {med:>9.3f} {p90:>7.3f} {ratio:>14.2f} "
                  f"{f'{first:.3f}/{second}':>11} {statistics.median(r['tool_us']):>12.0f}",
                  flush=True)
PY
