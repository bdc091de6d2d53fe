#!/usr/bin/env bash
# Whether attest's own work per step grows with the history, counted
# rather than timed (issue 19): the same `attest run` as
# scripts/bench-overhead.sh (OpenAI wire, not streamed, `read_file` of a
# small file per step, against the scripted model server) under
# `valgrind --tool=cachegrind`, for several step counts. Instructions and
# simulated L1 data read misses are counted in attest's user space only,
# the same from one run to the next, so a busy or slow machine does not
# move them (the kernel's share, such as copying each request into the
# socket, is not in them). Valgrind's CPU has no SHA instructions, so the
# hash chain's SHA-256 runs in software here: more instructions per step
# than natively, the same for every step.
#
# Prints each run's totals, then what each extra step adds between
# consecutive step counts: a per-step path that is flat with the history
# adds the same number of instructions late in a run as early. Work done
# once at the end of a run counts here too, spread over the extra steps.
#
# Usage: scripts/bench-instructions.sh [STEPS...]   (default: 100 300 700 1000)
# Needs valgrind (Debian: `apt-get install valgrind`). Set
# ATTEST_BENCH_NO_BUILD=1 to reuse the release build, and
# ATTEST_BENCH_PROFILE to use target/PROFILE/ instead of target/release/ (as
# scripts/bench-overhead.sh does; a folder holding another build's `attest`
# and `examples/scripted_server` works too, for comparing two binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
steps_list=("${@:-100 300 700 1000}")
read -r -a steps_list <<<"${steps_list[*]}"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
profile=${ATTEST_BENCH_PROFILE:-release}
if [[ -z "${ATTEST_BENCH_NO_BUILD:-}" ]]; then
  cargo build --profile "$profile" -p attest-cli --no-default-features --bin attest --example scripted_server >&2
fi
bin=target/$profile/attest
server=target/$profile/examples/scripted_server
[[ -x $bin && -x $server ]] || { echo "missing $bin or $server" >&2; exit 1; }

python3 - "$bin" "$server" "${steps_list[@]}" <<'PY'
import json, subprocess, sys, tempfile
sys.path.insert(0, "scripts")
import bench_setup

attest, server = sys.argv[1], sys.argv[2]
steps_list = [int(s) for s in sys.argv[3:]]

def counts(steps):
    with tempfile.TemporaryDirectory() as tmp:
        ws, env, out = bench_setup.prepare(tmp, steps)
        srv, url = bench_setup.start_server(server, "openai", False, steps, out)
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=yes",
               f"--cachegrind-out-file={tmp}/cg.out",
               *bench_setup.run_args(attest, "openai", False, url, steps, ws)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        srv.wait(timeout=120)
        done = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")][-1]
        assert done["type"] == "done" and done["state"] == "completed", (done, run.stderr[-2000:])
        violations = open(f"{out}/violations").read()
        assert not violations, violations
        # The summary line: "summary: Ir I1mr ILmr Dr D1mr ..." in events order.
        events = summary = None
        for line in open(f"{tmp}/cg.out"):
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                summary = [int(x) for x in line.split()[1:]]
        totals = dict(zip(events, summary))
        return totals["Ir"], totals["D1mr"]

print(f"{'steps':>5} {'instructions':>14} {'L1d read misses':>16}")
rows = []
for steps in steps_list:
    ir, d1 = counts(steps)
    rows.append((steps, ir, d1))
    print(f"{steps:>5} {ir:>14,} {d1:>16,}", flush=True)
print()
print(f"{'steps':>11} {'instructions/step':>18} {'L1d misses/step':>16}")
marginal = []
for (a, ia, da), (b, ib, db) in zip(rows, rows[1:]):
    per = ((ib - ia) / (b - a), (db - da) / (b - a))
    marginal.append(per)
    print(f"{a:>5}–{b:<5} {per[0]:>18,.0f} {per[1]:>16,.0f}")
if len(marginal) >= 2:
    print(f"\nlast / first: instructions {marginal[-1][0] / marginal[0][0]:.3f}, "
          f"L1d misses {marginal[-1][1] / marginal[0][1]:.3f}")
PY
