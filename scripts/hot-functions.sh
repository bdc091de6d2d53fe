#!/usr/bin/env bash
# Regenerates crates/attest-cli/hot-functions.txt: the functions `attest run`
# executes against an HTTP provider, which release builds place together
# (crates/attest-cli/build/hot_layout.rs says why), those that run in every
# step first.
#
# Builds the binary without the embedded model (what scripts/bench-overhead.sh
# measures) in both release profiles — `release-lto` inlines across crates,
# `release` keeps many more small functions, so each runs functions the
# other lacks — runs each under valgrind's callgrind against the tests'
# scripted model server (both wire formats, streaming and not, 100
# `read_file` steps each) and lists every function of the binary that ran,
# in two parts:
# - the functions that ran in the middle of a run, between two of the
#   store's appends (callgrind's `--dump-before`): the code every step runs,
#   by exact name, so that only the step's own copy of a generic function
#   comes first. Packed together, a step touches fewer pages of code.
#   Behind a slow model each page a step touches is cold again at every
#   step, and on some VMs that costs microseconds a page
#   (docs/benchmarks.md);
# - after the line `# Not in every step`, every function that ran, with
#   the parts of their names that change between builds (and profiles)
#   replaced by `*`: start-up, the run's end, and the other copies.
# Each part is in the binary's order, first `release-lto`'s functions,
# then those only `release` ran.
#
# Needs valgrind (Debian: apt-get install valgrind). Run it again when the
# per-step path or the dependencies change much; a stale list only loses
# some of the gain (scripts/bench-footprint.sh counts a step's code pages).
#
# `--append` keeps the list's entries and adds those the `release` build
# runs that are not listed yet, each to its part. A small change to the
# code renames or un-inlines a few dozen functions, which then sit outside
# the hot code. It builds and runs `release` only, about a quarter of the
# full regeneration's time.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
profiles=(release-lto release)
append=
if [[ ${1:-} == --append ]]; then
  profiles=(release)
  append=1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for profile in "${profiles[@]}"; do
cargo build --profile "$profile" -p attest-cli --no-default-features --bin attest --example scripted_server >&2
mkdir -p "$out/$profile"
python3 - "target/$profile/attest" "target/$profile/examples/scripted_server" "$out/$profile" <<'PY'
import subprocess, sys, tempfile
sys.path.insert(0, "scripts")
import bench_setup
attest, server, out = sys.argv[1:4]
steps = 100
for wire in ["openai", "anthropic"]:
    for stream in ["0", "1"]:
        ws, env, srv_out = bench_setup.prepare(tempfile.mkdtemp(dir=out), steps)
        srv, url = bench_setup.start_server(server, wire, stream == "1", steps, srv_out)
        # Plain names in every part file, and a new part at each append.
        cmd = ["valgrind", "--tool=callgrind", "--demangle=no", "--compress-strings=no",
               bench_setup.STEP_CUT,
               f"--callgrind-out-file={out}/callgrind.{wire}{stream}",
               *bench_setup.run_args(attest, wire, stream == "1", url, steps, ws)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        srv.wait(timeout=60)
        assert '"state":"completed"' in run.stdout, run.stderr[-2000:]
PY

cp "target/$profile/attest" "$out/$profile/attest"
done

list=crates/attest-cli/hot-functions.txt
python3 - "$out" "$list" "$append" "${profiles[@]}" > "$out/list" <<'PY'
import glob, os, re, subprocess, sys
out, listed, append, profiles = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
MARK = "# Not in every step"
# Insertion-ordered: each part of the list.
step, rest = {}, {}
appended = 0  # entries added by --append since the last full regeneration
if append:
    lines = open(listed).read().splitlines()
    part = step if MARK in lines else rest  # a list from before the parts
    for line in lines:
        if line.strip() == MARK:
            part = rest
        elif line.strip() and not line.startswith("#"):
            part[line.strip()] = None
    header = re.search(r"the last (\d+) added by --append", "\n".join(lines[:4]))
    appended = int(header.group(1)) if header else 0
kept = len(step) + len(rest)


def names(path):
    """The functions that ran in one part file (callgrind's `fn=` blocks)."""
    found = set()
    for line in open(path, errors="replace"):
        if line.startswith("fn="):
            found.add(re.sub(r"'\d+$", "", line[3:].strip()))  # recursion marks
    return found


def exact(name):
    # LLVM's numbered copies (`.123`, `.llvm.123`) change from build to build.
    return re.sub(r"\.\d+$", ".*", name)


def pattern(name):
    # The legacy mangling's hash (`17h…E`) too: it tells apart the copies of
    # one generic function, and differs between the profiles.
    return exact(re.sub(r"17h[0-9a-f]{16}E", "17h*E", name))


for profile in profiles:
    ran, in_steps = set(), set()
    for run in glob.glob(f"{out}/{profile}/callgrind.*"):
        if re.search(r"\.\d+$", run):
            continue
        parts = sorted(glob.glob(f"{run}.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
        found = [names(p) for p in [*parts, run] if os.path.exists(p)]
        for f in found:
            ran |= f
        if len(parts) < 8:
            print(f"{run}: {len(parts)} parts; is the store's append_all still a function?",
                  file=sys.stderr)
            continue
        for f in found[len(found) // 4: 3 * len(found) // 4]:
            in_steps |= f
    nm = subprocess.run(["nm", "--defined-only", f"{out}/{profile}/attest"],
                        capture_output=True, text=True, check=True)
    code = sorted((int(a, 16), name) for a, kind, name in
                  (l.split() for l in nm.stdout.splitlines() if len(l.split()) == 3)
                  if kind in "tT" and name in ran)
    for _, name in code:
        # The step's own copy of a generic function, by its exact name: a
        # pattern would bring every copy, most of which no step runs. The
        # pattern, in the second part, still gathers the other copies and
        # the other profile's. The linker places each function by the
        # first entry it matches, and an entry that matches nothing costs
        # nothing.
        if name in in_steps:
            step.setdefault(exact(name), None)
        rest.setdefault(pattern(name), None)
print("# The functions `attest run` executes against an HTTP provider, placed together")
print("# by release builds (build/hot_layout.rs). Generated by scripts/hot-functions.sh:")
added = f", the last {appended + len(step) + len(rest) - kept} added by --append" if append else ""
print(f"# {len(step)} functions of every step by exact name, then {len(rest)} patterns{added}.")
print("\n".join(step))
print(MARK)
print("\n".join(rest))
PY
mv "$out/list" "$list"
wc -l "$list" >&2
