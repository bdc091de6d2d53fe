#!/usr/bin/env bash
# Per-step harness cost of `attest run` against an HTTP provider (issue 19).
#
# Builds release (attest and the tests' scripted model server as an
# example), then for each wire format (OpenAI chat, Anthropic Messages),
# streaming and not, and N = 100 and 500 steps, runs `attest run` with the
# built-in `read_file` on a small file per step and prints:
#   - harness time per step: the gap between response k's last byte
#     leaving the server's socket (timed as the write that sends it begins,
#     so attest running on the server's CPU before that write returns is
#     counted too) and request k+1's first byte arriving there, less the
#     tool's own run time from the step's receipt (started_at..finished_at)
#     — that is, response's last byte → tool start
#     plus tool result → next request on the wire; median, p90, and the
#     ratio of the last 20 steps' median to the first 20's; and the two
#     parts' medians apart ("split ms": response → tool start / tool
#     result → request), since only the first follows a wait for the model;
#   - the same median and ratio measured up to the server having read
#     request k+1 whole ("whole"), which adds moving the body across
#     loopback: at 500 steps a body is over a hundred kilobytes;
#   - the model's time to answer, request's first byte in → response's
#     last byte out, median of the first 20 and of the last 20 steps
#     ("model ms"): attest sits idle for that long before each step;
#   - start-up: process start → first request at the server;
#   - peak RSS of the attest process, and the CPU time it used (user plus
#     system, from its rusage) over the number of steps: attest's own work
#     whether or not it waited for a CPU, start-up and the run's end
#     included; with two or more step counts, also the CPU time each added
#     step took between consecutive counts (start-up cancels out; work done
#     once at the run's end that grows with the run stays in).
#
# The model server is kept to one CPU (the last), which attest may share,
# as a real provider runs on another machine; ATTEST_BENCH_NO_PIN=1 lets
# the server run on every CPU too; ATTEST_BENCH_PIN_ATTEST=1 keeps attest
# off the server's CPU.
#
# The server answers each request from its script at once and checks every
# body against the wire rules after the run (a broken one fails the
# benchmark), so its time to answer, and attest's idle time before a step,
# is about the same at the 500th step as at the first.
# ATTEST_BENCH_CHECK_INLINE=1 checks (and emulates the prompt cache)
# before answering instead, as the tests' server does: that takes it about
# 0.3 ms at the first step and 4 to 5 ms at the 500th, and attest then
# starts each late step colder, which on some VMs makes late steps slower
# without attest doing more. ATTEST_BENCH_MODEL_LATENCY_MS=T holds each
# response until T ms after its request's first byte (a model's constant
# latency; a real one's is 200 ms and more); `A..B` makes it grow from A
# to B ms over the run instead (the scripted server's docs).
#
# Usage: scripts/bench-overhead.sh [STEPS...]   (default: 100 500)
# Set ATTEST_BENCH_NO_BUILD=1 to reuse the build, ATTEST_BENCH_PROFILE to
# measure another cargo profile than `release` (`release-lto`), and
# ATTEST_BENCH_SERIES=DIR to keep each run's per-step moments there as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
steps_list=("${@:-100 500}")
read -r -a steps_list <<<"${steps_list[*]}"
profile=${ATTEST_BENCH_PROFILE:-release}
if [[ -z "${ATTEST_BENCH_NO_BUILD:-}" ]]; then
  # Without the embedded model (candle): the HTTP-provider binary.
  cargo build --profile "$profile" -p attest-cli --no-default-features --bin attest --example scripted_server >&2
fi
bin=target/$profile/attest
server=target/$profile/examples/scripted_server
[[ -x $bin && -x $server ]] || { echo "missing $bin or $server" >&2; exit 1; }

python3 - "$bin" "$server" "${steps_list[@]}" <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time
from datetime import datetime
sys.path.insert(0, "scripts")
import bench_setup

attest, server = sys.argv[1], sys.argv[2]
steps_list = [int(s) for s in sys.argv[3:]]

def micros(ts):
    # RFC 3339 with up to nanoseconds; Python parses microseconds.
    ts = ts.replace("Z", "+00:00")
    if "." in ts:
        head, rest = ts.split(".", 1)
        frac, tz = rest[:rest.index("+")], rest[rest.index("+"):]
        ts = f"{head}.{(frac + '000000')[:6]}{tz}"
    return int(datetime.fromisoformat(ts).timestamp() * 1_000_000)

cpus = sorted(os.sched_getaffinity(0))
pin = len(cpus) >= 2 and not os.environ.get("ATTEST_BENCH_NO_PIN")
server_cpus = cpus[-1:] if pin else cpus
# Optionally attest on the other CPUs only, so the two never share one.
attest_cpus = cpus[:-1] if pin and os.environ.get("ATTEST_BENCH_PIN_ATTEST") else cpus
print(f"model server on CPU {server_cpus}, attest on CPU {attest_cpus}", file=sys.stderr)
checks = "before answering" if os.environ.get("ATTEST_BENCH_CHECK_INLINE") == "1" else "after the run"
print(f"the server checks requests {checks}", file=sys.stderr)

def one(wire, stream, steps):
    with tempfile.TemporaryDirectory() as root:
        ws, env, out = bench_setup.prepare(root, steps)
        srv, url = bench_setup.start_server(server, wire, stream, steps, out, server_cpus)
        cmd = bench_setup.run_args(attest, wire, stream, url, steps, ws)
        started = time.time()
        with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
            proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True, env=env,
                                    preexec_fn=lambda: os.sched_setaffinity(0, attest_cpus))
            # wait4 for the child's own rusage: peak RSS and CPU time.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            stdout.seek(0)
            stderr.seek(0)
            out_text, err_text = stdout.read(), stderr.read()
        srv.wait(timeout=60)
        violations = open(f"{out}/violations").read()
        times = json.load(open(f"{out}/times.json"))
        wire_times = json.load(open(f"{out}/wire_times.json"))
        assert len(wire_times) == len(times) == steps, (len(wire_times), len(times))
        events = [json.loads(l) for l in out_text.splitlines() if l.startswith("{")]
        done = events[-1]
        assert done["type"] == "done" and done["state"] == "completed", (done, err_text)
        assert not violations, violations
        rss_kb = usage.ru_maxrss
        cpu_ms = (usage.ru_utime + usage.ru_stime) * 1000.0
        receipts = done["receipts"]
        assert len(receipts) == steps - 1, len(receipts)
        # Each step's moments, in µs of the wall clock both processes read.
        moments = [{"response_sent": wire_times[k][1],
                    "tool_started": micros(r["started_at"]),
                    "tool_finished": micros(r["finished_at"]),
                    "next_request": wire_times[k + 1][0]}
                   for k, r in enumerate(receipts)]
        # Response → tool start, tool result → next request.
        parts = [((m["tool_started"] - m["response_sent"]) / 1000.0,
                  (m["next_request"] - m["tool_finished"]) / 1000.0) for m in moments]
        per_step = [a + b for a, b in parts]
        whole = [(times[k + 1][0] - m["response_sent"]
                  - (m["tool_finished"] - m["tool_started"])) / 1000.0
                 for k, m in enumerate(moments)]
        startup = (wire_times[0][0] - started * 1_000_000) / 1000.0
        series = os.environ.get("ATTEST_BENCH_SERIES")
        if series:
            os.makedirs(series, exist_ok=True)
            name = f"{wire}-{'stream' if stream else 'plain'}-{steps}-{int(started)}.json"
            with open(f"{series}/{name}", "w") as f:
                json.dump(moments, f)
        model = [(b - a) / 1000.0 for a, b in wire_times]
        split = tuple(statistics.median(p[i] for p in parts) for i in (0, 1))
        return per_step, whole, rss_kb, startup, model, cpu_ms, split

def ratio(xs):
    return statistics.median(xs[-20:]) / statistics.median(xs[:20])

print(f"{'wire':<10} {'stream':<6} {'steps':>5} {'median ms':>9} {'p90 ms':>7} "
      f"{'last20/first20':>14} {'start-up ms':>11} {'peak RSS MB':>11} "
      f"{'whole: median':>13} {'ratio':>5} {'model ms':>11} {'CPU ms/step':>11} {'split ms':>11}")
cpu_totals = {}
for steps in steps_list:
    for wire in ["openai", "anthropic"]:
        for stream in [False, True]:
            per_step, whole, rss_kb, startup, model, cpu_ms, split = one(wire, stream, steps)
            cpu_totals.setdefault((wire, stream), []).append((steps, cpu_ms))
            waits = f"{statistics.median(model[:20]):.2f}→{statistics.median(model[-20:]):.2f}"
            med = statistics.median(per_step)
            p90 = statistics.quantiles(per_step, n=10)[-1]
            print(f"{wire:<10} {str(stream).lower():<6} {steps:>5} {med:>9.3f} {p90:>7.3f} "
                  f"{ratio(per_step):>14.2f} {startup:>11.1f} {rss_kb / 1024:>11.1f} "
                  f"{statistics.median(whole):>13.3f} {ratio(whole):>5.2f} {waits:>11} "
                  f"{cpu_ms / steps:>11.3f} {f'{split[0]:.3f}/{split[1]:.3f}':>11}", flush=True)
if len(steps_list) > 1:
    print(f"\n{'wire':<10} {'stream':<6} {'steps':>9} {'CPU ms per added step':>21}")
    for (wire, stream), totals in cpu_totals.items():
        for (n1, c1), (n2, c2) in zip(totals, totals[1:]):
            print(f"{wire:<10} {str(stream).lower():<6} {f'{n1}→{n2}':>9} {(c2 - c1) / (n2 - n1):>21.3f}")
PY
