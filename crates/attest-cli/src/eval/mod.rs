//! `attest eval` (SPEC I1–I4, seed 000 §11, seed 002 §5, seed 003 P6): a
//! suite of cases, each run K times per A/B group in a fresh workspace;
//! honest metrics with intervals; boundary-case fixtures graded for what
//! they must disclose and must not claim; a versioned result file, an HTML
//! report and a comparison of two results.
//!
//! Map: [`suite`] (the suite file), [`group`] (the A/B switches),
//! [`record`] (what a runner reports per attempt), [`expect`] (checks),
//! [`boundary`] (fixtures, their data tools, grading), [`stats`] and
//! [`metrics`], [`scheduler`] (the [`scheduler::AttemptRunner`] interface,
//! `-j`, resume, cancel), [`workspace`], [`report_json`] (the result file),
//! [`report_html`], [`compare`], [`table`] (terminal output), [`cli`].

pub mod boundary;
pub mod cli;
pub mod compare;
pub mod expect;
pub mod group;
pub mod metrics;
pub mod record;
pub mod report_html;
pub mod report_json;
pub mod scheduler;
pub mod stats;
pub mod suite;
pub mod table;
pub mod workspace;
