//! The harness's guarantees as switches, for A/B evaluation only (SPEC I2,
//! seed 000 §11.2). A run outside an eval has every switch on; the only way
//! to turn one off is an [`EvalGroup`] on the run's configuration, and such
//! a run records its group in its trace.

use serde::{Deserialize, Serialize};

/// What an eval group leaves on. Every field defaults to on: the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HarnessSwitches {
    /// The base prompt states the evidence invariants (SPEC D2); off, it is
    /// the one-line agent preamble without them.
    pub invariant_prompt: bool,
    /// The terminal state is judged from the contract and the receipts
    /// (SPEC A1–A4); off, any answer ends the run `completed` with reason
    /// `answer_accepted`, and no corrective turn is sent.
    pub receipt_guard: bool,
    /// A protocol-breaking response (a forged observation, …) stays out of
    /// history behind a placeholder (SPEC B2–B3); off, its text enters
    /// history as written and a `Final Answer` in it is taken as the answer.
    pub protocol_isolation: bool,
    /// Memory candidates become active only through the consolidation gate
    /// (SPEC G2); off, every candidate counts as promoted.
    pub memory_gate: bool,
}

impl Default for HarnessSwitches {
    fn default() -> Self {
        HarnessSwitches {
            invariant_prompt: true,
            receipt_guard: true,
            protocol_isolation: true,
            memory_gate: true,
        }
    }
}

/// The eval group a run belongs to: its name (`baseline`, `prompt`,
/// `guards`, `full`) and what it switches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalGroup {
    pub name: String,
    pub switches: HarnessSwitches,
}
