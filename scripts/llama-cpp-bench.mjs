// The llama.cpp side of scripts/bench-local.sh: evaluate a raw prompt file
// greedily on 2 threads and print prompt and generation speed as JSON.
// Needs node-llama-cpp (npm i -E node-llama-cpp@3.21.1) where node finds it.
// Usage: node llama-cpp-bench.mjs MODEL.gguf PROMPT_FILE N_TOKENS
import { getLlama } from "node-llama-cpp";
import fs from "fs";

const [, , modelPath, promptFile, n] = process.argv;
const prompt = fs.readFileSync(promptFile, "utf8");
const llama = await getLlama({ gpu: false, build: "never" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: 4096, threads: 2, batchSize: 512 });
const tokens = model.tokenize(prompt, true);
const out = [];
const start = performance.now();
let first = 0;
for await (const token of context.getSequence().evaluate(tokens, { temperature: 0 })) {
  if (out.length === 0) first = performance.now();
  out.push(token);
  if (out.length >= Number(n)) break;
}
const end = performance.now();
console.log(JSON.stringify({
  prompt_tokens: tokens.length,
  prompt_tps: tokens.length / ((first - start) / 1000),
  gen_tokens: out.length,
  // the first generated token comes with the prompt pass
  gen_tps: (out.length - 1) / ((end - first) / 1000),
}));
