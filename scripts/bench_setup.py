"""The set-up the benchmark scripts share (issue 19): a workspace with one
small file per step, the user's own config, the tests' scripted model
server, and the `attest run` command line that reads one file per step.

The scripts run from the repository root and import this module with
`sys.path.insert(0, "scripts")`.
"""
import os
import subprocess
import time


# Callgrind's option that starts a new part of its output at each call of
# the store's `append_all`: a run calls it a fixed number of times a step,
# so the parts in the middle of a run are its steps (bench-footprint.sh,
# hot-functions.sh).
STEP_CUT = "--dump-before=*SqliteStore*as*Store*append_all*"


def prepare(root, steps):
    """Makes, under `root`, `ws/data/f0000.txt`… (one small file per step),
    the user's own config in `home/` (trusted, unlike the machine's: a
    context window large enough that no run compacts), and `out/` for the
    server's files. Returns (workspace, environment for attest, out)."""
    ws, home, out = (os.path.join(root, d) for d in ("ws", "home", "out"))
    os.makedirs(f"{ws}/data")
    os.makedirs(f"{home}/attest")
    os.makedirs(out)
    for i in range(steps):
        with open(f"{ws}/data/f{i:04}.txt", "w") as f:
            f.write(f"port = {8000 + i}\n")
    with open(f"{home}/attest/config.toml", "w") as f:
        f.write("[provider]\ncontext_window = 1000000\n")
    return ws, dict(os.environ, XDG_CONFIG_HOME=home), out


def start_server(server, wire, stream, steps, out, cpus=None):
    """Starts the scripted model server (kept to `cpus` if given), scripted
    for `steps` steps, writing its files to `out`. Returns (process, url)."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    srv = subprocess.Popen([server, wire, "1" if stream else "0", str(steps), out],
                           preexec_fn=pin)
    while not os.path.exists(f"{out}/url"):
        time.sleep(0.01)
    return srv, open(f"{out}/url").read()


def run_args(attest, wire, stream, url, steps, ws):
    """`attest run` against the server: one `read_file` a step."""
    return [attest, "run", "--json", "--provider", wire, "--base-url", url,
            "--model", "bench-model", "--stream" if stream else "--no-stream",
            "--expect", "observe", "--max-steps", str(steps), "-C", ws,
            "Read every file."]
