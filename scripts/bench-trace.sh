#!/usr/bin/env bash
# Builds a workspace holding one run with 5,000 events (2,499 scripted tool
# calls), then times `attest trace` on it with hyperfine.
# Usage: scripts/bench-trace.sh [path-to-attest-binary]
set -euo pipefail
bin=${1:-target/release/attest}
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
python3 - "$ws/script.json" <<'PY'
import json, sys
steps = 2499  # run_started + 2 events per call + final + done = 5,000 events
responses = [{"text": "", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]} for _ in range(steps)]
responses.append({"text": "done"})
json.dump({"responses": responses}, open(sys.argv[1], "w"))
PY
"$bin" run --json --provider scripted --script "$ws/script.json" --max-steps 2600 -C "$ws" "list" > "$ws/events.jsonl"
events=$(wc -l < "$ws/events.jsonl")
run=$(tail -n 1 "$ws/events.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
echo "run $run: $events events"
hyperfine --warmup 2 --runs 10 \
  "$bin trace $run -C $ws > /dev/null" \
  "$bin trace $run --json -C $ws > /dev/null"
