//! `attest init` and `attest doctor`: bootstrap the workspace files and
//! report on them. The rules (what is a default, what may be written) are in
//! `attest_core::context::bootstrap`; this is the terminal side.

use anyhow::{Context, Result};
use attest_core::context::bootstrap::{self, Action, Applied, FileReport, FileStatus};
use attest_core::context::skills::SkillCatalog;
use attest_core::context::workspace_files::{FileLimits, WorkspaceFiles};
use clap::Args;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Workspace root; created if it does not exist.
    #[arg(short = 'C', long, default_value = ".")]
    pub workspace: PathBuf,
    /// Also update files that are an unedited older attest default: shows
    /// the diff and asks (without a terminal: only shows it, see --yes).
    /// Edited files are never touched.
    #[arg(long)]
    pub migrate: bool,
    /// With --migrate: update without asking.
    #[arg(long, requires = "migrate")]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Workspace root.
    #[arg(short = 'C', long, default_value = ".")]
    pub workspace: PathBuf,
}

/// How a status reads in a report.
fn describe(status: &FileStatus) -> String {
    match status {
        FileStatus::Missing => "missing".into(),
        FileStatus::Empty => "empty".into(),
        FileStatus::Current { version } => format!("current default ({version})"),
        FileStatus::Outdated { version, current } => {
            format!("outdated default ({version}; current is {current})")
        }
        FileStatus::Customized { based_on: Some(v) } => {
            format!("customized (from the {v} default)")
        }
        FileStatus::Customized { based_on: None } => "customized".into(),
        FileStatus::Unmanaged { reason } => format!("left alone: {reason}"),
    }
}

pub fn init(args: InitArgs) -> Result<()> {
    let root = &args.workspace;
    if !root.exists() {
        std::fs::create_dir_all(root)
            .with_context(|| format!("cannot create workspace {}", root.display()))?;
    }
    let reports = bootstrap::inspect(root)?;
    let interactive = std::io::stdin().is_terminal();
    // Without a terminal to ask and without --yes, --migrate only shows
    // what it would do, and writes nothing at all.
    let preview = args.migrate && !args.yes && !interactive;
    let mut pending = 0;
    let mut outdated = Vec::new();
    for report in &reports {
        match report.action(args.migrate) {
            Action::Create | Action::Fill if preview => {
                println!("would create {}", report.path);
            }
            Action::Create | Action::Fill => {
                print_applied(report.path, apply(root, report, false)?)
            }
            Action::Migrate => {
                let diff = bootstrap::migration_diff(report).unwrap_or_default();
                print!("{diff}");
                if args.yes || (interactive && confirm(report.path)?) {
                    print_applied(report.path, apply(root, report, true)?);
                } else if preview {
                    pending += 1;
                } else {
                    println!("kept {}", report.path);
                }
            }
            Action::Keep => {
                if matches!(report.status, FileStatus::Outdated { .. }) {
                    outdated.push(report.path);
                }
                println!("kept {}: {}", report.path, describe(&report.status));
            }
        }
    }
    if preview {
        if pending > 0 {
            println!("nothing changed; re-run with `attest init --migrate --yes` to update {pending} file(s)");
        } else {
            println!("nothing changed; no outdated defaults to migrate");
        }
    } else if !outdated.is_empty() {
        println!(
            "{} still hold(s) an older attest default; `attest init --migrate` shows the update",
            outdated.join(", ")
        );
    }
    Ok(())
}

fn apply(root: &Path, report: &FileReport, migrate: bool) -> Result<Applied> {
    Ok(bootstrap::apply(root, report.path, migrate)?)
}

fn print_applied(path: &str, applied: Applied) {
    match applied {
        Applied::Created { version } => println!("created {path} (default {version})"),
        Applied::Filled { version } => println!("filled empty {path} (default {version})"),
        Applied::Migrated { from, to } => println!("updated {path} (default {from} -> {to})"),
        Applied::Unchanged { status } => {
            println!("kept {path}: {} (it changed meanwhile)", describe(&status))
        }
    }
}

fn confirm(path: &str) -> Result<bool> {
    print!("update {path} to the current default? [y/N] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

/// Prints the report; the exit code is 0 when nothing needs attention, 1
/// when something does, 2 when the workspace cannot be inspected.
pub fn doctor(args: DoctorArgs) -> u8 {
    match doctor_report(&args.workspace) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("attest: {e:#}");
            2
        }
    }
}

/// True when all is well.
fn doctor_report(root: &Path) -> Result<bool> {
    let reports = bootstrap::inspect(root)?;
    let mut healthy = true;
    println!("workspace {}", root.display());
    println!(
        "files (attest defaults policy {}):",
        bootstrap::POLICY_VERSION
    );
    let width = reports.iter().map(|r| r.path.len()).max().unwrap_or(0);
    for report in &reports {
        healthy &= !report.needs_attention();
        let todo = match report.action(true) {
            Action::Create => " -> `attest init` would create it",
            Action::Fill => " -> `attest init` would fill it",
            Action::Migrate => " -> `attest init --migrate` would update it (shows the diff first)",
            Action::Keep => "",
        };
        println!(
            "  {:width$}  {}{todo}",
            report.path,
            describe(&report.status)
        );
    }

    println!("context:");
    match WorkspaceFiles::load(root, &FileLimits::default()) {
        Ok(files) => {
            if files.layers.is_empty() && files.skipped.is_empty() {
                println!("  no workspace files in the prompt");
            }
            for layer in &files.layers {
                let mut notes = String::new();
                if layer.truncated {
                    notes.push_str(", truncated to fit the prompt budget");
                }
                if layer.lossy {
                    notes.push_str(", not valid UTF-8");
                }
                println!(
                    "  {} in the prompt ({} bytes, sha256 {}{notes})",
                    layer.name,
                    layer.bytes,
                    &layer.sha256[..12.min(layer.sha256.len())]
                );
            }
            for skipped in &files.skipped {
                healthy = false;
                println!("  problem: {} skipped: {}", skipped.name, skipped.reason);
            }
        }
        Err(e) => {
            healthy = false;
            println!("  problem: {e}");
        }
    }

    let catalog = SkillCatalog::load(root);
    if catalog.is_empty() {
        println!("skills: none");
    } else {
        println!("skills: {}", catalog.names().join(", "));
    }
    for problem in &catalog.problems {
        healthy = false;
        println!("  problem: {problem}");
    }
    Ok(healthy)
}

#[cfg(test)]
mod tests {
    use attest::config::ConfigFile;
    use attest_core::context::bootstrap::{current_default, defaults_for};

    /// `#key = value` and `#[table]` lines are settings; `# text` is prose.
    fn uncomment(text: &str) -> String {
        text.lines()
            .map(|line| match line.strip_prefix('#') {
                Some(rest) if rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '[') => {
                    rest
                }
                _ => line,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_setting_in_the_default_attest_toml_parses() {
        for default in defaults_for("attest.toml") {
            let as_shipped: ConfigFile = toml::from_str(default.content).unwrap();
            assert!(as_shipped.tools.is_empty());
            let all_on = uncomment(default.content);
            assert_ne!(all_on, default.content);
            let cfg: ConfigFile = toml::from_str(&all_on)
                .unwrap_or_else(|e| panic!("{}: {e}\n{all_on}", default.version));
            assert_eq!(cfg.run.max_steps, Some(20));
            assert_eq!(cfg.provider.name.as_deref(), Some("openai"));
            assert_eq!(cfg.retry.max_retries, Some(3));
            assert_eq!(cfg.tools.len(), 1);
        }
        assert!(current_default("attest.toml").is_some());
    }
}
