#!/usr/bin/env bash
# Generation and prompt speed of the embedded model against llama.cpp on the
# same GGUF, the two run alternately so that machine load hits both alike.
# Usage: scripts/bench-local.sh [rounds]   (needs node-llama-cpp in
# $NODE_LLAMA_DIR, default /tmp/nlc: `npm i --prefix /tmp/nlc -E node-llama-cpp@3.21.1`)
set -euo pipefail
rounds=${1:-3}
model=${MODEL:-$HOME/.cache/attest/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
nlc=${NODE_LLAMA_DIR:-/tmp/nlc}
cargo build --release -p attest-local --example generate >/dev/null
gen=target/release/examples/generate
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# generation: a short prompt and 128 new tokens
printf '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a long story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n' > "$tmp/story.txt"
# prompt: about 900 tokens of this repository's ARCHITECTURE.md, 1 new token
{ printf '<|im_start|>user\nSummarize:\n'; head -c 3600 ARCHITECTURE.md; printf '<|im_end|>\n<|im_start|>assistant\n'; } > "$tmp/long.txt"
cp "$(dirname "$0")/llama-cpp-bench.mjs" "$nlc/"
for round in $(seq "$rounds"); do
  a=$("$gen" "$model" "RAW:$(cat "$tmp/story.txt")
" 128 2>&1 >/dev/null | tail -n 1)
  echo "round $round attest:    ${a#*; }  (load $(cut -d' ' -f1 /proc/loadavg))"
  l=$(cd "$nlc" && node llama-cpp-bench.mjs "$model" "$tmp/story.txt" 128 2>/dev/null | tail -n 1)
  echo "round $round llama.cpp: $l  (load $(cut -d' ' -f1 /proc/loadavg))"
  a=$("$gen" "$model" "RAW:$(cat "$tmp/long.txt")
" 1 2>&1 >/dev/null | tail -n 1)
  echo "round $round attest prompt:    ${a#*; }"
  l=$(cd "$nlc" && node llama-cpp-bench.mjs "$model" "$tmp/long.txt" 1 2>/dev/null | tail -n 1)
  echo "round $round llama.cpp prompt: $l"
done
