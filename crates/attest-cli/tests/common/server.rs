//! Driving the real `attest serve`: a server directory with its config, a
//! server process that prints its address, and the API and event-stream
//! calls the tests make.

use super::MockModel;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server's config and data directory.
pub struct ServerDir {
    pub dir: tempfile::TempDir,
}

impl ServerDir {
    pub fn new(model: &MockModel, extra: &str) -> ServerDir {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "[provider]\nname = \"openai\"\nbase_url = \"{}\"\nmodel = \"test-model\"\n\n\
             [run]\nstream = false\n\n\
             [retry]\nmax_retries = 0\n\n\
             [server]\ndata_dir = \"data\"\nworkspaces_root = \"workspaces\"\n\
             heartbeat_secs = 1\n{extra}\n",
            model.base_url()
        );
        std::fs::write(dir.path().join("server.toml"), config).unwrap();
        ServerDir { dir }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("server.toml")
    }

    pub fn workspace(&self, name: &str) -> PathBuf {
        self.dir.path().join("workspaces").join(name)
    }

    /// `attest token create`; the token printed alone on stdout.
    pub fn token(&self, name: &str, scopes: &str) -> String {
        self.token_with(name, scopes, &[])
    }

    /// With more arguments (`--database-url URL`).
    pub fn token_with(&self, name: &str, scopes: &str, more: &[&str]) -> String {
        let config = self.config();
        let mut args = vec![
            "token",
            "create",
            "--config",
            config.to_str().unwrap(),
            "--name",
            name,
            "--scope",
            scopes,
        ];
        args.extend_from_slice(more);
        let out = attest(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout.lines().count(), 1, "the token alone: {stdout:?}");
        stdout.trim().to_string()
    }
}

pub fn attest(args: &[&str]) -> std::process::Output {
    Command::new(assert_cmd::cargo::cargo_bin("attest"))
        .args(args)
        .env("XDG_CONFIG_HOME", super::test_config_home())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap()
}

/// A running `attest serve`.
pub struct Server {
    pub child: Child,
    pub base: String,
    /// What the server printed on stderr so far (also echoed).
    pub stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(dir: &ServerDir) -> Server {
        Self::start_with(dir, &[])
    }

    /// With more arguments (`--database-url URL`).
    pub fn start_with(dir: &ServerDir, args: &[&str]) -> Server {
        Self::start_env(dir, args, &[])
    }

    /// With more arguments and environment variables (secrets the config
    /// names).
    pub fn start_env(dir: &ServerDir, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("attest"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(dir.config())
            .args(args)
            .envs(env.iter().copied())
            .env("XDG_CONFIG_HOME", super::test_config_home())
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        {
            let lines = BufReader::new(child.stderr.take().unwrap()).lines();
            let stderr = std::sync::Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    eprintln!("{line}");
                    stderr.lock().unwrap().push(line);
                }
            });
        }
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next()
            .expect("attest serve printed its address")
            .unwrap();
        let base = line
            .strip_prefix("attest serve: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            base,
            stderr,
        }
    }

    /// Send a signal (`STOP`, `CONT`) to the server process.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn kill(mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

pub async fn submit(server: &Server, token: Option<&str>, body: Value) -> Value {
    let mut req = client().post(server.url("/v1/runs")).json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 202);
    resp.json().await.unwrap()
}

pub async fn get_json(server: &Server, token: Option<&str>, path: &str) -> Value {
    let mut req = client().get(server.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap()
}

/// One SSE message: its id and data, or a comment.
#[derive(Debug, Clone, PartialEq)]
pub enum Sse {
    Event { id: i64, data: Value },
    Comment(String),
}

/// Reads an SSE stream until `stop` says so or it ends.
pub async fn read_sse(
    url: &str,
    token: Option<&str>,
    last_event_id: Option<i64>,
    mut stop: impl FnMut(&[Sse]) -> bool,
) -> Vec<Sse> {
    use futures::StreamExt;
    let mut req = client().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id.to_string());
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{url}");
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = resp.bytes_stream();
    let mut buffer = String::new();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(c) = line.strip_prefix(':') {
                    out.push(Sse::Comment(c.trim().to_string()));
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().parse::<i64>().unwrap());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = Some(serde_json::from_str::<Value>(v.trim()).unwrap());
                }
            }
            if let (Some(id), Some(data)) = (id, data) {
                out.push(Sse::Event { id, data });
            }
            if stop(&out) {
                return out;
            }
        }
    }
    out
}

pub fn events(messages: &[Sse]) -> Vec<(i64, Value)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Sse::Event { id, data } => Some((*id, data.clone())),
            Sse::Comment(_) => None,
        })
        .collect()
}

pub fn types(events: &[(i64, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// A run's whole event stream, from the start to its end.
pub async fn run_events(server: &Server, token: Option<&str>, run_id: &str) -> Vec<(i64, Value)> {
    let url = server.url(&format!("/v1/runs/{run_id}/events"));
    events(&read_sse(&url, token, None, |_| false).await)
}

/// Until the run's state is terminal.
pub async fn wait_for_end(server: &Server, token: Option<&str>, run_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run = get_json(server, token, &format!("/v1/runs/{run_id}")).await;
        let state = run["state"].as_str().unwrap();
        if state != "queued" && state != "running" {
            return run;
        }
        assert!(Instant::now() < deadline, "run {run_id} did not end: {run}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
