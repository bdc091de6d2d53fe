//! `attest eval …`: flags and the commands behind them.

use super::boundary::serve::{serve, Served};
use super::boundary::{BoundaryCaseFixture, ContextField, RuleGrader};
use super::compare::{compare, render as render_comparison, same_name_pairs};
use super::group::{parse_group_list, Group};
use super::report_html;
use super::report_json::{EvalResult, ResultStatus};
use super::scheduler::{run_eval, AttemptRunner, EvalPlan};
use super::suite::Suite;
use super::table::{progress_line, render as render_table};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Exit code for usage and configuration errors.
const EXIT_USAGE: u8 = 2;
/// Exit code when a fixture's data tool serves a failure.
const EXIT_SERVED_FAILURE: u8 = 1;
/// Exit code of an eval stopped by Ctrl-C (its result is partial).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: Option<EvalCommand>,
    #[command(flatten)]
    pub run: RunEvalArgs,
}

/// `attest eval SUITE.yaml …`
#[derive(Debug, Args)]
pub struct RunEvalArgs {
    /// The suite file (YAML; see docs/eval.md).
    pub suite: Option<PathBuf>,
    /// Attempts per case and group (default: the suite's `repeat`).
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Groups to run, comma-separated: baseline, prompt, guards, full
    /// (default: the suite's `groups`).
    #[arg(long)]
    pub groups: Option<String>,
    /// Attempts run at once.
    #[arg(short = 'j', long, default_value_t = 1)]
    pub jobs: usize,
    /// Write the result file here, after every attempt; an existing partial
    /// result of the same suite is resumed.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The k of pass@k and pass^k (default: the smaller of 3 and the repeat).
    #[arg(long)]
    pub k: Option<u32>,
    /// Where attempt workspaces (and their run stores) go (default:
    /// `FILE.d/` beside `--json FILE`, else `.attest-eval/<suite>/<time>/`).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// When resuming, run attempts that failed for infrastructure reasons
    /// again (by default every finished attempt is kept).
    #[arg(long)]
    pub retry_infra: bool,
    #[command(flatten)]
    pub model: EvalModelArgs,
}

/// The model of cases that do not script their own (`model:` left out of
/// the case). Everything else about a run comes from the suite.
#[derive(Debug, Clone, Default, Args)]
pub struct EvalModelArgs {
    /// local (default), openai, openai-responses, anthropic, or replay
    /// (`--from RUN_ID`: a recorded run's raw model outputs fed back
    /// through today's engine).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model name (HTTP providers).
    #[arg(long)]
    pub model: Option<String>,
    /// Endpoint base URL (OpenAI: including `/v1`).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Read the API key from this variable.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// GGUF file for `--provider local` (default: the cached default model).
    #[arg(long)]
    pub model_path: Option<PathBuf>,
    /// Inference threads for `--provider local`.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Most tokens per model response (default: the engine's); the same
    /// for every group.
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Sample at this temperature instead of the provider's default (the
    /// embedded model decodes greedily, so its repeats are identical);
    /// attempt i of every group gets seed i, so groups differ only in the
    /// harness.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// `--provider replay`: the recorded run to replay.
    #[arg(long, value_name = "RUN_ID")]
    pub from: Option<String>,
    /// The workspace whose store holds the runs that `--from` and a case's
    /// `model: {replay: RUN_ID}` name (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub runs_in: PathBuf,
}

/// Makes the engine's runner for a suite: the binary's, which knows
/// providers and the engine.
pub type RunnerFactory =
    dyn Fn(&RunEvalArgs, &Suite) -> Result<Arc<dyn AttemptRunner>> + Send + Sync;

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Write a self-contained HTML report of a result file.
    Report {
        /// The result file (`attest eval … --json FILE`).
        result: PathBuf,
        #[arg(long, value_name = "FILE")]
        html: PathBuf,
    },
    /// Compare two result files: per group and metric, B − A with its 95%
    /// interval and whether it is significant.
    Compare {
        a: PathBuf,
        b: PathBuf,
        /// Compare this group of A (default: every group both have, by name).
        #[arg(long, requires = "b_group")]
        a_group: Option<Group>,
        /// … with this group of B.
        #[arg(long, requires = "a_group")]
        b_group: Option<Group>,
        /// Also write the comparison as JSON.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Serve one field of a boundary fixture as a command tool: the call's
    /// arguments on stdin, the value with its data quality on stdout, or a
    /// failure on stderr with exit status 1.
    #[command(hide = true)]
    ServeFixture {
        fixture: PathBuf,
        #[arg(long)]
        field: ContextField,
    },
}

impl clap::ValueEnum for ContextField {
    fn value_variants<'a>() -> &'a [Self] {
        &ContextField::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

impl clap::ValueEnum for Group {
    fn value_variants<'a>() -> &'a [Self] {
        &Group::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

/// Run `attest eval`; `runner` makes what drives the engine. Returns the
/// exit code.
pub async fn run(args: EvalArgs, runner: &RunnerFactory) -> u8 {
    let outcome = match args.command {
        Some(EvalCommand::Report { result, html }) => report(&result, &html),
        Some(EvalCommand::Compare {
            a,
            b,
            a_group,
            b_group,
            json,
        }) => compare_files(&a, &b, a_group.zip(b_group), json.as_deref()),
        Some(EvalCommand::ServeFixture { fixture, field }) => {
            return serve_fixture(&fixture, field)
        }
        None => run_suite(args.run, runner).await,
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("attest: {e:#}");
            EXIT_USAGE
        }
    }
}

fn report(result: &Path, html: &Path) -> Result<u8> {
    let r = EvalResult::read(result)?;
    let page = report_html::render(&r).context("cannot render the report")?;
    std::fs::write(html, page).with_context(|| format!("cannot write {}", html.display()))?;
    println!(
        "wrote {}{}",
        html.display(),
        if r.status == ResultStatus::Partial {
            " (from a partial result)"
        } else {
            ""
        }
    );
    Ok(0)
}

fn compare_files(
    a: &Path,
    b: &Path,
    pair: Option<(Group, Group)>,
    json: Option<&Path>,
) -> Result<u8> {
    let ra = EvalResult::read(a)?;
    let rb = EvalResult::read(b)?;
    let pairs = match pair {
        Some(p) => vec![p],
        None => same_name_pairs(&ra, &rb),
    };
    if pairs.is_empty() {
        bail!("the results have no group in common; name them with --a-group and --b-group");
    }
    let c = compare(
        &ra,
        &a.display().to_string(),
        &rb,
        &b.display().to_string(),
        &pairs,
    )
    .map_err(|e| anyhow!(e))?;
    print!("{}", render_comparison(&c));
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&c)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(0)
}

fn serve_fixture(path: &Path, field: ContextField) -> u8 {
    let fixture = match BoundaryCaseFixture::load(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("attest: {e}");
            return EXIT_USAGE;
        }
    };
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("attest: cannot read the call's arguments: {e}");
        return EXIT_USAGE;
    }
    let args: serde_json::Value = if input.trim().is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_str(&input) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("invalid_arguments: the arguments are not JSON ({e})");
                return EXIT_SERVED_FAILURE;
            }
        }
    };
    match serve(&fixture, field, &args) {
        Served::Data(v) => {
            println!("{v}");
            0
        }
        Served::Failure(line) => {
            eprintln!("{line}");
            EXIT_SERVED_FAILURE
        }
    }
}

fn plan_for(args: &RunEvalArgs, suite: Suite) -> Result<EvalPlan> {
    let repeat = args.repeat.unwrap_or(suite.repeat);
    if repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let groups = match &args.groups {
        Some(text) => parse_group_list(text).map_err(|e| anyhow!("--groups: {e}"))?,
        None => suite.groups.clone(),
    };
    let k = args.k.unwrap_or(repeat.min(3));
    if k == 0 || k > repeat {
        bail!("--k must be between 1 and the repeat count ({repeat})");
    }
    if args.jobs == 0 {
        bail!("-j must be at least 1");
    }
    let work_dir = match (&args.work_dir, &args.json) {
        (Some(dir), _) => dir.clone(),
        (None, Some(json)) => {
            let mut d = json.as_os_str().to_owned();
            d.push(".d");
            PathBuf::from(d)
        }
        (None, None) => PathBuf::from(".attest-eval")
            .join(&suite.name)
            .join(chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string()),
    };
    Ok(EvalPlan {
        suite: Arc::new(suite),
        groups,
        repeat,
        k,
        jobs: args.jobs,
        work_dir,
        result_path: args.json.clone(),
        retry_infra: args.retry_infra,
    })
}

async fn run_suite(args: RunEvalArgs, runner: &RunnerFactory) -> Result<u8> {
    let Some(path) = &args.suite else {
        bail!("name a suite file (`attest eval SUITE.yaml`), or use `attest eval report` / `attest eval compare`");
    };
    let suite = Suite::load(path)?;
    let plan = plan_for(&args, suite)?;
    let runner = runner(&args, &plan.suite)?;
    let previous = match &plan.result_path {
        Some(p) if p.exists() => Some(EvalResult::read(p)?),
        _ => None,
    };
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let tty = std::io::stderr().is_terminal();
    let progress = move |p: &super::scheduler::Progress| {
        let line = progress_line(p);
        let mut err = std::io::stderr().lock();
        let _ = if tty {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    };
    let result = run_eval(
        &plan,
        runner,
        Arc::new(RuleGrader),
        previous,
        cancel.clone(),
        &progress,
    )
    .await?;
    if tty {
        eprintln!();
    }
    print!("{}", render_table(&result));
    if let Some(p) = &plan.result_path {
        println!("result: {}", p.display());
    }
    Ok(match result.status {
        ResultStatus::Complete => 0,
        ResultStatus::Partial if cancel.is_cancelled() => EXIT_INTERRUPTED,
        ResultStatus::Partial => EXIT_USAGE,
    })
}
