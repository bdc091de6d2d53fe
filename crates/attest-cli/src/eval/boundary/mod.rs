//! Boundary cases (seed 003 P6): fixtures of market situations with data
//! problems, the data tools that serve them through the real tool path, and
//! the grading of answers against what they must disclose and not claim.

pub mod decision;
pub mod fixture;
pub mod serve;
pub mod verdict;

pub use decision::{read_answer, AnswerReading, FinancialDecision};
pub use fixture::{BoundaryCaseFixture, ContextFacts, ContextField};
pub use verdict::{grade, judge_reading, AnswerGrader, BoundaryVerdict, RuleGrader};
