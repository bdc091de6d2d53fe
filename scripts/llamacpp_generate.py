"""One greedy generation with llama.cpp (through llama-cpp-python), timed
the way attest-local's `generate` example times its own: model load, the
first (cold) prompt pass, generation tokens per second.

usage: llamacpp_generate.py MODEL.gguf RAW_PROMPT MAX_NEW THREADS
Prints one line: `load_s prompt_tokens prompt_s gen_tokens gen_tps`.
"""
import sys
import time

from llama_cpp import Llama


def main() -> None:
    path, raw, max_new, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t0 = time.perf_counter()
    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads,
                n_ctx=2048, verbose=False)
    load_s = time.perf_counter() - t0
    tokens = llm.tokenize(raw.encode(), add_bos=False, special=True)
    t1 = time.perf_counter()
    llm.eval(tokens)
    prompt_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    generated = 0
    eos = llm.token_eos()
    while generated < max_new:
        tok = llm.sample(temp=0.0)
        generated += 1
        if tok == eos:
            break
        llm.eval([tok])
    gen_s = time.perf_counter() - t2
    print(f"{load_s:.3f} {len(tokens)} {prompt_s:.3f} {generated} {generated / gen_s:.1f}")


if __name__ == "__main__":
    main()
