#!/usr/bin/env bash
# Where a step's harness time goes (issue 19), read from the system calls
# of attest and of the tests' scripted model server: one `attest run` (OpenAI
# wire, no streaming, one `read_file` a step) per model latency, under
# `perf record` with a few syscall tracepoints, and per step the medians of
#   send→wake      the server starting to send the response → attest's event
#                  loop returning with it (the kernel's and the VM's wake-up,
#                  not attest's work);
#   →commit 1      reading and checking the response, up to the step's first
#                  store call;
#   commit 1       the call made durable before the tool runs: its first to
#                  last store call (WAL locks and frames);
#   tool+result    the tool's run in the blocking pool and recording its
#                  result, up to the second group of store calls;
#   commit 2       the result made durable before the model sees it;
#   →request       building the next request, up to writing it to the socket.
# A step counts only if its store calls form exactly two groups, and the
# first 5 steps are left out. Tracing makes every traced call dearer: compare
# the lines with each other, not with scripts/bench-overhead.sh's figures.
#
# Needs perf and access to the syscall tracepoints (root, or
# kernel.perf_event_paranoid=-1 and a readable tracefs). Records system wide
# (the server is another process), so run it on an otherwise idle machine.
#
# Usage: scripts/bench-phases.sh [STEPS [LATENCY_MS...]]   (default: 60 0 200)
# ATTEST_BENCH_NO_BUILD and ATTEST_BENCH_PROFILE as in scripts/bench-overhead.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
shift || true
latencies=("${@:-0 200}")
read -r -a latencies <<<"${latencies[*]}"
profile=${ATTEST_BENCH_PROFILE:-release}
command -v perf >/dev/null || { echo "needs perf (Debian: apt-get install linux-perf)" >&2; exit 1; }
if [[ -z "${ATTEST_BENCH_NO_BUILD:-}" ]]; then
  cargo build --profile "$profile" -p attest-cli --no-default-features --bin attest --example scripted_server >&2
fi
bin=target/$profile/attest
server=target/$profile/examples/scripted_server
[[ -x $bin && -x $server ]] || { echo "missing $bin or $server" >&2; exit 1; }

python3 - "$bin" "$server" "$steps" "${latencies[@]}" <<'PY'
import json, os, re, statistics, subprocess, sys, tempfile
sys.path.insert(0, "scripts")
import bench_setup

attest, server, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
latencies = sys.argv[4:]
# `write` and `futex` only end a group of store calls (the tool's hop, stdout).
EVENTS = ",".join(f"syscalls:{e}" for e in [
    "sys_enter_sendto", "sys_exit_epoll_wait", "sys_enter_recvfrom", "sys_enter_fcntl",
    "sys_enter_pwrite64", "sys_enter_write", "sys_enter_futex", "sys_enter_writev"])
STORE = {"sys_enter_fcntl", "sys_enter_pwrite64"}
LINE = re.compile(r"\s*(.*?)\s+(\d+)/(\d+)\s+([\d.]+):\s+syscalls:(\w+):")
NAMES = ["send→wake", "→commit 1", "commit 1", "tool+result", "commit 2", "→request"]
cpus = sorted(os.sched_getaffinity(0))

def record(latency, root):
    """One run under perf; its events as (µs, command, pid, tid, syscall), in
    order."""
    ws, env, out = bench_setup.prepare(root, steps)
    env["ATTEST_BENCH_MODEL_LATENCY_MS"] = latency
    os.environ["ATTEST_BENCH_MODEL_LATENCY_MS"] = latency  # the server's
    srv, url = bench_setup.start_server(server, "openai", False, steps, out, cpus[-1:])
    data = f"{root}/perf.data"
    run = subprocess.run(["perf", "record", "-q", "-a", "-o", data, "-e", EVENTS,
                          "--exclude-perf", "--",
                          *bench_setup.run_args(attest, "openai", False, url, steps, ws)],
                         capture_output=True, text=True, env=env)
    srv.wait(timeout=60)
    done = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")]
    assert done and done[-1]["state"] == "completed", run.stderr[-2000:]
    text = subprocess.run(["perf", "script", "-i", data, "--ns", "-F", "comm,pid,tid,time,event"],
                          capture_output=True, text=True, check=True).stdout
    events = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            comm, pid, tid, t, name = m.groups()
            events.append((float(t) * 1e6, comm, int(pid), int(tid), name))
    return events, srv.pid

def phases(events, server_pid):
    """Each whole step's six parts, in µs."""
    # attest's main thread, which runs the engine (current-thread runtime).
    main = next(tid for _, comm, pid, tid, _ in events if comm == "attest" and pid == tid)
    rows, send, wake, step = [], None, None, None
    for t, _, pid, tid, name in events:
        if pid == server_pid and name == "sys_enter_sendto":
            send = t
        elif tid != main:
            continue
        elif name == "sys_exit_epoll_wait" and step is None:
            wake = t
        elif name == "sys_enter_recvfrom" and step is None and send and wake:
            # The response is in: collect the store calls' groups until the
            # next request is written.
            step = {"send": send, "wake": wake, "groups": [], "open": False}
        elif step is not None and name in STORE:
            if not step["open"]:
                step["groups"].append([t, t])
                step["open"] = True
            step["groups"][-1][1] = t
        elif step is not None and name == "sys_enter_writev":
            g = step["groups"]
            if len(g) == 2:
                rows.append((step["wake"] - step["send"], g[0][0] - step["wake"],
                             g[0][1] - g[0][0], g[1][0] - g[0][1], g[1][1] - g[1][0],
                             t - g[1][1]))
            step, send, wake = None, None, None
        elif step is not None:
            step["open"] = False
    return rows[5:]

print(f"{'model ms':>8} {'steps':>5}  " + "  ".join(f"{n:>11}" for n in NAMES) + f"  {'sum':>7}"
      "   (medians, µs)")
for latency in latencies:
    with tempfile.TemporaryDirectory() as root:
        events, server_pid = record(latency, root)
        rows = phases(events, server_pid)
    assert rows, "no whole step found in the trace"
    meds = [statistics.median(r[i] for r in rows) for i in range(len(NAMES))]
    print(f"{latency:>8} {len(rows):>5}  " + "  ".join(f"{m:>11.1f}" for m in meds)
          + f"  {sum(meds):>7.1f}", flush=True)
PY
