#!/usr/bin/env bash
# Per-step harness cost of `attest run` against an HTTP provider (issue 19).
#
# Builds release (attest and the tests' scripted model server as an
# example), then for each wire format (OpenAI chat, Anthropic Messages),
# streaming and not, and N = 100 and 500 steps, runs `attest run` with the
# built-in `read_file` on a small file per step and prints:
#   - harness time per step: the server's gap between handing back response
#     k and receiving request k+1, less the tool's own run time from the
#     step's receipt (started_at..finished_at) — that is, response's last
#     byte → tool start plus tool result → next request on the wire;
#     median, p90, and the ratio of the last 20 steps' median to the first 20's;
#   - start-up: process start → first request at the server;
#   - peak RSS of the attest process (/usr/bin/time -f %M).
#
# Usage: scripts/bench-overhead.sh [STEPS...]   (default: 100 500)
# Set ATTEST_BENCH_NO_BUILD=1 to reuse target/release.
set -euo pipefail
cd "$(dirname "$0")/.."
steps_list=("${@:-100 500}")
read -r -a steps_list <<<"${steps_list[*]}"
if [[ -z "${ATTEST_BENCH_NO_BUILD:-}" ]]; then
  cargo build --release -p attest-cli --bin attest --example scripted_server >&2
fi
bin=target/release/attest
server=target/release/examples/scripted_server
[[ -x $bin && -x $server ]] || { echo "missing $bin or $server" >&2; exit 1; }

python3 - "$bin" "$server" "${steps_list[@]}" <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time
from datetime import datetime

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

def one(wire, stream, steps):
    with tempfile.TemporaryDirectory() as ws:
        os.makedirs(f"{ws}/data")
        for i in range(steps):
            with open(f"{ws}/data/f{i:04}.txt", "w") as f:
                f.write(f"port = {8000 + i}\n")
        # The user's own config (trusted), not the machine's.
        home = tempfile.mkdtemp()
        os.makedirs(f"{home}/attest")
        with open(f"{home}/attest/config.toml", "w") as f:
            f.write("[provider]\ncontext_window = 1000000\n")
        out = tempfile.mkdtemp()
        srv = subprocess.Popen([server, wire, "1" if stream else "0", str(steps), out])
        while not os.path.exists(f"{out}/url"):
            time.sleep(0.01)
        url = open(f"{out}/url").read()
        cmd = ["/usr/bin/time", "-f", "%M", attest, "run", "--json",
               "--provider", wire, "--base-url", url, "--model", "bench-model",
               "--stream" if stream else "--no-stream", "--expect", "observe",
               "--max-steps", str(steps), "-C", ws, "Read every file."]
        env = dict(os.environ, XDG_CONFIG_HOME=home)
        started = time.time()
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        srv.wait(timeout=60)
        violations = open(f"{out}/violations").read()
        times = json.load(open(f"{out}/times.json"))
        events = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")]
        done = events[-1]
        assert done["type"] == "done" and done["state"] == "completed", (done, run.stderr)
        assert not violations, violations
        rss_kb = int(run.stderr.strip().splitlines()[-1])
        receipts = done["receipts"]
        assert len(receipts) == steps - 1, len(receipts)
        per_step = []
        for k, r in enumerate(receipts):
            gap = times[k + 1][0] - times[k][1]
            tool = micros(r["finished_at"]) - micros(r["started_at"])
            per_step.append((gap - tool) / 1000.0)
        startup = (times[0][0] - started * 1_000_000) / 1000.0
        return per_step, rss_kb, startup

print(f"{'wire':<10} {'stream':<6} {'steps':>5} {'median ms':>9} {'p90 ms':>7} "
      f"{'last20/first20':>14} {'start-up ms':>11} {'peak RSS MB':>11}")
for steps in steps_list:
    for wire in ["openai", "anthropic"]:
        for stream in [False, True]:
            per_step, rss_kb, startup = one(wire, stream, steps)
            med = statistics.median(per_step)
            p90 = statistics.quantiles(per_step, n=10)[-1]
            ratio = statistics.median(per_step[-20:]) / statistics.median(per_step[:20])
            print(f"{wire:<10} {str(stream).lower():<6} {steps:>5} {med:>9.3f} {p90:>7.3f} "
                  f"{ratio:>14.2f} {startup:>11.1f} {rss_kb / 1024:>11.1f}", flush=True)
PY
