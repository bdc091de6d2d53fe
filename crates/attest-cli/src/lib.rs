//! The library half of the `attest` binary: the parts that need no engine
//! and are worth testing on their own. Today that is `attest eval`'s suite
//! schema, metrics, boundary-case evaluator, scheduler and reports; the
//! binary (`main.rs`) wires them to flags and, later, to the engine.

pub mod eval;
