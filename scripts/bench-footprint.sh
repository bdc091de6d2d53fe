#!/usr/bin/env bash
# How much code one step runs (issue 19): distinct 64-byte lines of machine
# code executed in one step of a run, counted under
# `valgrind --tool=callgrind`, for `attest run` (the run of
# scripts/bench-overhead.sh: OpenAI wire, not streamed, `read_file` of a
# small file per step, against the scripted model server) and for the
# floor clients of scripts/bench-floor.sh, which replay the same run's log
# through the same store.
#
# Why lines and not instructions: behind a slow model a step starts with
# the CPU's caches cold, and every line of code it runs is fetched from
# memory again, once per step however often the step runs it. On the VMs
# of docs/benchmarks.md a step behind a 200 ms model costs about what its
# code lines predict, not its instructions. Like instruction counts, these
# figures are the same on a busy machine or a quiet one.
#
# Callgrind cuts the run into parts at each call of the store's
# `append_all` (a run calls it a fixed number of times a step); the lines
# of consecutive parts that make up one step are joined, for the steps in
# the middle of the run (start-up and the run's end left out). The code
# that runs natively differs a little from valgrind's: SHA-256 runs in
# software there (about 180 lines a step, in attest and the floors alike),
# where this CPU has SHA instructions.
#
# Also printed: the distinct 4 KiB pages of code those lines lie on. On a
# VM whose page mappings go cold while it idles, each page a step touches
# after the wait costs microseconds (docs/benchmarks.md, "An Intel VM
# where every page is cold after the wait").
#
# Usage: scripts/bench-footprint.sh [STEPS [CLIENTS]]   (default: 40 "blocking reqwest")
# Set ATTEST_BENCH_FOOTPRINT_CRATES=N to list the N crates with the most
# lines in attest's step beside the floors' (default 0: none).
# Needs valgrind. ATTEST_BENCH_NO_BUILD and ATTEST_BENCH_PROFILE as in
# scripts/bench-overhead.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-40}
clients=${2:-blocking reqwest}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
source scripts/bench-binaries.sh

python3 - "$bin" "$server" "$floor" "$steps" $clients <<'PY'
import collections, glob, json, os, re, statistics, subprocess, sys, tempfile
sys.path.insert(0, "scripts")
import bench_setup

attest, server, floor = sys.argv[1:4]
steps = int(sys.argv[4])
clients = sys.argv[5:]
top_crates = int(os.environ.get("ATTEST_BENCH_FOOTPRINT_CRATES", "0"))
os.environ.pop("ATTEST_BENCH_MODEL_LATENCY_MS", None)
CALLGRIND = ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--dump-line=no",
             "--compress-pos=no", "--compress-strings=no",
             bench_setup.STEP_CUT]


def part(path):
    """The code lines a part ran, each with its function's name, and its
    instruction count."""
    lines, obj, fn, skip, total = {}, None, None, False, 0
    for text in open(path):
        if skip:  # the inclusive cost of the call named on the line before
            skip = False
        elif text.startswith("0x"):
            lines.setdefault((obj, int(text.split()[0], 16) // 64), fn)
        elif text.startswith("ob="):
            obj = text[3:].strip()
        elif text.startswith("fn="):
            fn = text[3:].strip()
        elif text.startswith("calls="):
            skip = True
        elif text.startswith("summary:"):
            total = int(text.split()[1])
    return lines, total


def crate_of(fn):
    name = re.sub(r"^[<&*\s]*(mut\s+|dyn\s+)?", "", fn or "")
    return name.split("::")[0] if "::" in name else "(C: libc, SQLite)"


def footprint(prefix):
    """Per step in the middle of the run: (lines, instructions), and the
    lines of the middle step by crate."""
    files = glob.glob(f"{prefix}.*")
    n = len(files)
    per = round((n - 1) / steps)
    assert per >= 1, (n, steps)
    parts = [part(f"{prefix}.{i}") for i in range(1, n)]
    rows, crates = [], None
    middle = range(len(parts) // 4, 3 * len(parts) // 4 - per, per)
    for start in middle:
        joined = {}
        for lines, _ in parts[start:start + per]:
            joined.update(lines)
        pages = len({(obj, line // 64) for obj, line in joined})
        rows.append((len(joined), sum(t for _, t in parts[start:start + per]), pages))
        if start == middle[len(middle) // 2]:
            crates = collections.Counter(crate_of(fn) for fn in joined.values())
    return rows, crates


def show(name, rows):
    lines = [r[0] for r in rows]
    instr = [r[1] for r in rows]
    pages = [r[2] for r in rows]
    print(f"{name:<16} {statistics.median(lines):>8.0f} {min(lines):>6}–{max(lines):<6} "
          f"{statistics.median(lines) * 64 / 1024:>7.0f} {statistics.median(pages):>6.0f} "
          f"{statistics.median(instr):>13,.0f}", flush=True)


with tempfile.TemporaryDirectory() as root:
    ws, env, out = bench_setup.prepare(f"{root}/attest", steps)
    srv, url = bench_setup.start_server(server, "openai", False, steps, out)
    run = subprocess.run([*CALLGRIND, f"--callgrind-out-file={root}/attest.cg",
                          *bench_setup.run_args(attest, "openai", False, url, steps, ws)],
                         env=env, capture_output=True, text=True)
    srv.wait(timeout=120)
    done = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")][-1]
    assert done["type"] == "done" and done["state"] == "completed", (done, run.stderr[-2000:])
    template = f"{ws}/.attest/attest.db"

    print(f"{'binary':<16} {'lines/step':>8} {'range':>13} {'KiB':>7} {'pages':>6} {'instructions':>13}")
    results = {"attest": footprint(f"{root}/attest.cg")}
    show("attest", results["attest"][0])
    for client in clients:
        name = f"{root}/floor-{client}"
        fws, _, fout = bench_setup.prepare(name, steps)
        srv, url = bench_setup.start_server(server, "openai", False, steps, fout)
        run = subprocess.run([*CALLGRIND, f"--callgrind-out-file={name}.cg", floor, template,
                              f"{name}/floor.db", url, f"{fws}/data", client],
                             capture_output=True, text=True)
        srv.wait(timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        results[f"floor {client}"] = footprint(f"{name}.cg")
        show(f"floor {client}", results[f"floor {client}"][0])

    if top_crates:
        names = list(results)
        print(f"\nlines in the middle step, by crate\n{'crate':<22}"
              + "".join(f"{n:>16}" for n in names))
        for crate, _ in results["attest"][1].most_common(top_crates):
            print(f"{crate:<22}" + "".join(f"{results[n][1][crate]:>16}" for n in names))
PY
