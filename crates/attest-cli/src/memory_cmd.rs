//! `attest memory list|show|promote|retract|verify|import|sync`: the
//! user's view of and say over durable memory (SPEC G1–G4, J1).

use crate::inspect::WorkspaceArg;
use crate::render::one_line;
use anyhow::{bail, Context, Result};
use attest::memory::{refresh_projection, Projection};
use attest::open_store;
use attest_core::context::skills::SkillCatalog;
use attest_core::memory::{
    detect_edits, legacy_item, parse_legacy, promote_by_user, provenance_label, user_item, verify,
    PROJECTION_FILE,
};
use attest_core::tool::Workspace;
use attest_core::Redactor;
use attest_protocol::{MemoryItem, MemoryStatus};
use attest_store::{SqliteStore, Store};
use chrono::Utc;
use clap::{Args, Subcommand};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(subcommand)]
    pub command: MemoryCommand,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List remembered items: active, stale and candidates (never injected
    /// as facts). --all adds retracted ones.
    List {
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        ws: WorkspaceArg,
    },
    /// Show one item with its source, dates and policy.
    Show {
        /// Item id or unique prefix.
        id: String,
        #[command(flatten)]
        ws: WorkspaceArg,
    },
    /// Vouch for an item: it becomes your own statement, active.
    Promote {
        id: String,
        #[command(flatten)]
        ws: WorkspaceArg,
    },
    /// Withdraw an item; it is no longer injected.
    Retract {
        id: String,
        #[command(flatten)]
        ws: WorkspaceArg,
    },
    /// Re-check items against their sources (file hash, skill version);
    /// changed sources make items stale.
    Verify {
        /// One item (default: all active and stale items).
        id: Option<String>,
        #[command(flatten)]
        ws: WorkspaceArg,
    },
    /// Import an old memory file (Markdown, text or JSON) as
    /// `legacy_unverified` candidates.
    Import {
        file: PathBuf,
        #[command(flatten)]
        ws: WorkspaceArg,
    },
    /// Import hand edits of MEMORY.md (added lines become your statements,
    /// removed lines are retracted) after confirmation, then regenerate it.
    Sync {
        /// Import without asking.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        ws: WorkspaceArg,
    },
}

pub fn run(args: MemoryArgs) -> Result<()> {
    match args.command {
        MemoryCommand::List { all, ws } => list(all, &ws),
        MemoryCommand::Show { id, ws } => show(&id, &ws),
        MemoryCommand::Promote { id, ws } => promote(&id, &ws),
        MemoryCommand::Retract { id, ws } => retract(&id, &ws),
        MemoryCommand::Verify { id, ws } => verify_cmd(id.as_deref(), &ws),
        MemoryCommand::Import { file, ws } => import(&file, &ws),
        MemoryCommand::Sync { yes, ws } => sync(yes, &ws),
    }
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn summary_line(item: &MemoryItem) -> String {
    format!(
        "{}  {:<9} {:<17} {}  ({})",
        item.id,
        item.status.as_str(),
        item.provenance.as_str(),
        one_line(&item.content, 100),
        provenance_label(item)
    )
}

/// Keeps `MEMORY.md` in step after a change; its notes go to stderr.
fn project(store: &mut SqliteStore, ws: &WorkspaceArg) {
    match refresh_projection(store, &ws.workspace) {
        Ok(outcome) => {
            if let Some(message) = outcome.message() {
                eprintln!("attest: {message}");
            }
        }
        Err(e) => eprintln!("attest: {PROJECTION_FILE} not updated: {e:#}"),
    }
}

fn list(all: bool, ws: &WorkspaceArg) -> Result<()> {
    let store = open_store(&ws.workspace)?;
    let statuses: &[MemoryStatus] = if all {
        &[]
    } else {
        &[
            MemoryStatus::Active,
            MemoryStatus::Stale,
            MemoryStatus::Candidate,
        ]
    };
    let items = store.memory_items(statuses)?;
    if ws.json {
        return print_json(&items);
    }
    if items.is_empty() {
        println!("nothing remembered");
    }
    for item in &items {
        println!("{}", summary_line(item));
    }
    Ok(())
}

fn show(id: &str, ws: &WorkspaceArg) -> Result<()> {
    let store = open_store(&ws.workspace)?;
    let item = store.memory_item(id)?;
    if ws.json {
        return print_json(&item);
    }
    let src = serde_json::to_string(&item.source_ref)?;
    let date = |t: Option<chrono::DateTime<Utc>>| t.map_or("-".into(), |t| t.to_rfc3339());
    println!("{}", item.id);
    println!("  content     {}", item.content);
    println!("  status      {}", item.status.as_str());
    println!(
        "  provenance  {} ({})",
        item.provenance.as_str(),
        provenance_label(&item)
    );
    println!("  kind        {}", item.kind.as_str());
    println!("  source      {src}");
    println!("  confidence  {:?}", item.confidence);
    println!("  conflicts   {:?}", item.conflict_policy);
    println!("  verified    {}", date(item.verified_at));
    println!("  expires     {}", date(item.expires_at));
    println!("  created     {}", item.created_at.to_rfc3339());
    println!("  updated     {}", item.updated_at.to_rfc3339());
    Ok(())
}

fn promote(id: &str, ws: &WorkspaceArg) -> Result<()> {
    let mut store = open_store(&ws.workspace)?;
    let item = store.memory_item(id)?;
    let promoted = promote_by_user(&item, Utc::now());
    store.put_memory(&promoted)?;
    project(&mut store, ws);
    if ws.json {
        return print_json(&promoted);
    }
    println!(
        "promoted {}: active, {}",
        promoted.id,
        provenance_label(&promoted)
    );
    Ok(())
}

fn retract(id: &str, ws: &WorkspaceArg) -> Result<()> {
    let mut store = open_store(&ws.workspace)?;
    let item = store.memory_item(id)?;
    let retracted = store.set_memory_status(&item.id, MemoryStatus::Retracted)?;
    project(&mut store, ws);
    if ws.json {
        return print_json(&retracted);
    }
    println!("retracted {}", retracted.id);
    Ok(())
}

#[derive(serde::Serialize)]
struct VerifyLine {
    id: String,
    status: MemoryStatus,
    result: String,
    reason: String,
}

fn verify_cmd(id: Option<&str>, ws: &WorkspaceArg) -> Result<()> {
    let mut store = open_store(&ws.workspace)?;
    let root = ws.workspace.as_path();
    let skills = SkillCatalog::load(root).skills;
    let items = match id {
        Some(id) => vec![store.memory_item(id)?],
        None => store.memory_items(&[MemoryStatus::Active, MemoryStatus::Stale])?,
    };
    let mut lines = Vec::new();
    for item in items {
        let line = match verify(&item, root, &skills) {
            Some(v) => {
                let updated = store.update_memory_verification(&item.id, Utc::now(), v.status)?;
                VerifyLine {
                    id: item.id,
                    status: updated.status,
                    result: v.decision.as_str().to_string(),
                    reason: v.reason,
                }
            }
            None => VerifyLine {
                reason: format!("{}: no file or skill to re-check", provenance_label(&item)),
                id: item.id,
                status: item.status,
                result: "not_checkable".into(),
            },
        };
        lines.push(line);
    }
    project(&mut store, ws);
    if ws.json {
        return print_json(&lines);
    }
    if lines.is_empty() {
        println!("nothing to verify");
    }
    for l in &lines {
        println!(
            "{}  {:<9} {}: {}",
            l.id,
            l.status.as_str(),
            l.result,
            l.reason
        );
    }
    Ok(())
}

/// Largest memory file `import` reads.
const MAX_IMPORT_BYTES: u64 = 4 * 1024 * 1024;

fn import(file: &std::path::Path, ws: &WorkspaceArg) -> Result<()> {
    let size = std::fs::metadata(file)
        .with_context(|| format!("cannot read {}", file.display()))?
        .len();
    if size > MAX_IMPORT_BYTES {
        bail!(
            "{} is {size} bytes; memory files over {MAX_IMPORT_BYTES} bytes are not imported",
            file.display()
        );
    }
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read {} as UTF-8 text", file.display()))?;
    let mut store = open_store(&ws.workspace)?;
    let origin = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let redactor = Redactor::new();
    let now = Utc::now();
    let (mut imported, mut known, mut refused) = (Vec::new(), 0, Vec::new());
    for entry in parse_legacy(&text) {
        match legacy_item(&entry, &origin, &redactor, now) {
            Err(r) => refused.push(format!("{} ({})", r.preview, r.reason)),
            Ok(item) => match store.memory_item(&item.id) {
                Ok(_) => known += 1,
                Err(attest_store::StoreError::UnknownMemory(_)) => {
                    store.put_memory(&item)?;
                    imported.push(item);
                }
                Err(e) => return Err(e.into()),
            },
        }
    }
    if ws.json {
        return print_json(&serde_json::json!({
            "imported": imported,
            "already_known": known,
            "refused": refused,
        }));
    }
    println!(
        "imported {} item(s) from {} as legacy_unverified candidates (never injected as facts; `attest memory promote ID` to vouch for one); {known} already known",
        imported.len(),
        file.display()
    );
    for item in &imported {
        println!("  {}", summary_line(item));
    }
    for r in &refused {
        println!("  refused: {r}");
    }
    Ok(())
}

fn confirm(question: &str) -> Result<bool> {
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

fn sync(yes: bool, ws: &WorkspaceArg) -> Result<()> {
    let mut store = open_store(&ws.workspace)?;
    let path = Workspace::new(&ws.workspace)?
        .resolve_for_write(PROJECTION_FILE)
        .with_context(|| format!("cannot use {PROJECTION_FILE}"))?;
    let current = std::fs::read_to_string(&path).ok();
    let last = store.memory_projection()?;
    let edits = match (&current, &last) {
        (Some(cur), Some(last)) => detect_edits(cur, last),
        _ => Default::default(),
    };
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    if !edits.is_empty() {
        println!("{PROJECTION_FILE} was edited by hand:");
        for a in &edits.added {
            println!("  + {a}  (would become your statement, active)");
        }
        for id in &edits.removed {
            let what = store
                .memory_item(id)
                .map(|i| one_line(&i.content, 100))
                .unwrap_or_else(|_| "(unknown item)".into());
            println!("  - {id} {what}  (would be retracted)");
        }
        let go = if yes {
            true
        } else if std::io::stdin().is_terminal() {
            confirm("import these edits?")?
        } else {
            bail!("{PROJECTION_FILE} has hand edits; nothing imported. Rerun with --yes to import them, or in a terminal to be asked");
        };
        if !go {
            println!("nothing imported; {PROJECTION_FILE} left as is");
            return Ok(());
        }
        let redactor = Redactor::new();
        let now = Utc::now();
        for content in &edits.added {
            match user_item(
                content,
                "MEMORY.md edit, confirmed by the user",
                &redactor,
                now,
            ) {
                Ok(item) => {
                    store.put_memory(&item)?;
                    added.push(item.id);
                }
                Err(r) => println!("  refused: {} ({})", r.preview, r.reason),
            }
        }
        for id in &edits.removed {
            if let Ok(item) = store.set_memory_status(id, MemoryStatus::Retracted) {
                removed.push(item.id);
            }
        }
        // The edited file is now accounted for: regenerate from the store.
        if let Some(cur) = &current {
            store.set_memory_projection(cur)?;
        }
    }
    let outcome = refresh_projection(&mut store, &ws.workspace)?;
    if let Some(message) = outcome.message() {
        eprintln!("attest: {message}");
    }
    if ws.json {
        return print_json(&serde_json::json!({
            "added": added,
            "retracted": removed,
            "projection": format!("{outcome:?}"),
        }));
    }
    match outcome {
        Projection::Written => println!("{PROJECTION_FILE} regenerated"),
        Projection::Unchanged => println!("{PROJECTION_FILE} is up to date"),
        Projection::NotNeeded => println!("nothing active to project"),
        Projection::PendingEdits(_) | Projection::Foreign => {}
    }
    Ok(())
}
