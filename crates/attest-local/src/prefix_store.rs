//! The stable prompt prefix's KV cache on disk, so that a new process does
//! not evaluate the system prompt and tool block again (SPEC D5, across
//! runs).
//!
//! Within a process, [`crate::session`] keeps the KV cache between calls.
//! A new `attest run` starts cold, and for the default model the system
//! message (base prompt, workspace files, the tool block: about 950 tokens)
//! costs some ten seconds on two cores. That message is the same from run
//! to run, so after it has been evaluated once its K/V are written here and
//! the next process reads them back instead.
//!
//! One file per model, `<sha256(key)>.kv`, replaced atomically (write to a
//! temp file, rename). The key names the model file (canonical path, size,
//! modification time) and this format's version; the file repeats the key
//! and ends with a SHA-256 of everything before it, so a file from another
//! model, a truncated write or a flipped bit is ignored, never used. What is
//! stored is what the prompt already holds (secrets never reach prompts).

use crate::model::{Model, ModelConfig};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"ATTESTKV";
/// Bump when the model code changes what the cache holds.
const FORMAT_VERSION: u32 = 1;

/// Where one model's prefix lives on disk.
#[derive(Debug, Clone)]
pub struct PrefixStore {
    file: PathBuf,
    key: String,
}

impl PrefixStore {
    /// The store for the model at `model_path`, in `dir`. `None` when the
    /// model file cannot be described (it was loaded, so this is rare).
    pub fn new(dir: &Path, model_path: &Path) -> Option<PrefixStore> {
        let canonical = model_path.canonicalize().ok()?;
        let meta = std::fs::metadata(&canonical).ok()?;
        let mtime = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        // The crate version too: K/V computed by other model code are not
        // this code's, even for the same file.
        let key = format!(
            "v{FORMAT_VERSION} attest-local {} {} {} {mtime}",
            env!("CARGO_PKG_VERSION"),
            canonical.display(),
            meta.len()
        );
        let name = hex::encode(&Sha256::digest(key.as_bytes())[..16]);
        Some(PrefixStore {
            file: dir.join(format!("{name}.kv")),
            key,
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Restore into `model` (whose cache must be empty) the stored K/V of
    /// the longest stored prefix of `prompt`; returns how many positions.
    /// A missing, foreign or damaged file restores nothing.
    pub fn load(&self, prompt: &[u32], model: &mut Model) -> usize {
        let Some(bytes) = self.read_bounded(model) else {
            return 0;
        };
        match self.parse(&bytes, prompt, model) {
            Some(n) => n,
            None => {
                model.truncate(0);
                0
            }
        }
    }

    /// The file's bytes, if it is a plain file no larger than the largest
    /// prefix this model instance could have stored.
    fn read_bounded(&self, model: &Model) -> Option<Vec<u8>> {
        let meta = std::fs::symlink_metadata(&self.file).ok()?;
        let max = max_file_len(model, self.key.len())?;
        if !meta.is_file() || meta.len() > max {
            return None;
        }
        std::fs::read(&self.file).ok()
    }

    fn parse(&self, bytes: &[u8], prompt: &[u32], model: &mut Model) -> Option<usize> {
        let (body, digest) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
        if Sha256::digest(body).as_slice() != digest {
            return None;
        }
        let mut r = Reader(body);
        let cfg = model.config();
        let header_ok = r.take(8)? == MAGIC
            && r.u32()? == FORMAT_VERSION
            && r.u32()? as usize == cfg.n_layer
            && r.u32()? as usize == cfg.n_kv_head
            && r.u32()? as usize == cfg.head_dim;
        let key_len = r.u32()? as usize;
        if !header_ok || r.take(key_len)? != self.key.as_bytes() {
            return None;
        }
        let stored = r.u32()? as usize;
        let tokens: Vec<u32> = (0..stored).map(|_| r.u32()).collect::<Option<_>>()?;
        let common = tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // Keep the last prompt token for the pass that yields the logits.
        let n = common.min(prompt.len().saturating_sub(1));
        if n == 0 {
            return None;
        }
        model.restore_prefix(stored, n, r.rest()).ok()?;
        Some(n)
    }

    /// Store the K/V of `tokens` (positions `0..tokens.len()` of `model`'s
    /// cache). Best effort: a failure leaves the previous file in place.
    pub fn save(&self, tokens: &[u32], model: &Model) -> std::io::Result<()> {
        let dir = self.file.parent().unwrap_or(Path::new("."));
        create_private_dir(dir)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".attest-prefix-")
            .tempfile_in(dir)?;
        let cfg = model.config();
        let size = max_file_len_for(cfg, self.key.len(), tokens.len()).unwrap_or(0);
        let mut body = Vec::with_capacity(size as usize);
        body.extend_from_slice(MAGIC);
        for v in [
            FORMAT_VERSION,
            cfg.n_layer as u32,
            cfg.n_kv_head as u32,
            cfg.head_dim as u32,
            self.key.len() as u32,
        ] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(self.key.as_bytes());
        body.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
        for t in tokens {
            body.extend_from_slice(&t.to_le_bytes());
        }
        model.export_prefix(tokens.len(), &mut body);
        let digest = Sha256::digest(&body);
        tmp.write_all(&body)?;
        tmp.write_all(&digest)?;
        tmp.persist(&self.file).map_err(|e| e.error)?;
        Ok(())
    }
}

/// The size of a file holding `tokens` positions for a model shaped `cfg`.
fn max_file_len_for(cfg: &ModelConfig, key_len: usize, tokens: usize) -> Option<u64> {
    let header = MAGIC.len() + 6 * 4 + key_len + 4 * tokens + 32;
    let kv = cfg
        .n_layer
        .checked_mul(2)?
        .checked_mul(cfg.n_kv_head)?
        .checked_mul(tokens)?
        .checked_mul(cfg.head_dim)?
        .checked_mul(4)?;
    u64::try_from(header.checked_add(kv)?).ok()
}

/// The largest file this model instance could have written.
fn max_file_len(model: &Model, key_len: usize) -> Option<u64> {
    let cfg = model.config();
    max_file_len_for(cfg, key_len, cfg.context_limit)
}

/// Create `dir` readable by its owner only (the K/V encode the prompt).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Little-endian reads from a byte slice; `None` past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn rest(self) -> &'a [u8] {
        self.0
    }
}
