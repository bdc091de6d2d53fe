#!/usr/bin/env bash
# The embedded model against llama.cpp built natively (llama-cpp-python from
# PyPI compiles it for this CPU), on the same GGUF, 2 threads, greedy, run
# alternately so that machine load hits both alike.
# Usage: scripts/bench-local.sh [rounds]
# Needs llama-cpp-python in the Python named by $LLAMA_PYTHON (default
# /work/venvs/llama/bin/python):
#   python3 -m venv /work/venvs/llama && /work/venvs/llama/bin/pip install 'llama-cpp-python==0.3.36'
# On a VM that advertises AMX, the native build's AMX code crashed on
# prompts of more than one token; build it without (docs/benchmarks.md,
# "The Intel VM, and the decode kernels prefetching"):
#   CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
#     -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
#     -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
#     /work/venvs/llama/bin/pip install --force-reinstall --no-deps --no-binary llama-cpp-python \
#     'llama-cpp-python==0.3.36'
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
model=${MODEL:-$HOME/.cache/attest/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
py=${LLAMA_PYTHON:-/work/venvs/llama/bin/python}
cargo build --release -p attest-local --example generate >/dev/null
gen=target/release/examples/generate
story=$'<|im_start|>user\nWrite a long story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n'
long=$'<|im_start|>user\nSummarize:\n'"$(head -c 3600 ARCHITECTURE.md)"$'<|im_end|>\n<|im_start|>assistant\n'
# attest: "finish …; load L s; prompt N tok in T (… tok/s); gen G tok in … (R tok/s)"
attest() {
  "$gen" "$model" "RAW:$1" "$2" 2>&1 >/dev/null | tail -n 1 |
    sed -E 's/.*load ([0-9.]+) s; prompt ([0-9]+) tok in ([0-9.]+)(m?s).*gen ([0-9]+) tok.*\(([0-9.]+) tok\/s\)/\1 \2 \3 \4 \5 \6/' |
    awk '{p=($4=="ms")?$3/1000:$3; printf "load %.2f s, prompt %d tok %.2f s, first token at %.2f s, gen %d tok %.1f tok/s\n", $1, $2, p, $1+p, $5, $6}'
}
llama() {
  "$py" scripts/llamacpp_generate.py "$model" "$1" "$2" 2 |
    awk '{printf "load %.2f s, prompt %d tok %.2f s, first token at %.2f s, gen %d tok %.1f tok/s\n", $1, $2, $3, $1+$3, $4, $5}'
}
for round in $(seq "$rounds"); do
  echo "round $round (load average $(cut -d' ' -f1 /proc/loadavg))"
  echo "  story, attest:    $(attest "$story" 128)"
  echo "  story, llama.cpp: $(llama "$story" 128)"
  echo "  long,  attest:    $(attest "$long" 1)"
  echo "  long,  llama.cpp: $(llama "$long" 1)"
done
