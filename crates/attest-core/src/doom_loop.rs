//! The doom-loop guard (SPEC F10, seed 004): a model that keeps making the
//! same failing call gets a reminder as the latest user-role message on the
//! third identical failure, and the run ends if it carries on.
//!
//! "Identical" means the same failure fingerprint (see
//! [`FailureTracker`](crate::failure::FailureTracker)). The guard is a pure state
//! machine: the engine feeds it every tool outcome in order and acts on the
//! signal.

use crate::failure::hint_text;
use attest_protocol::HintCode;

/// What the engine should do after a tool outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoomLoopSignal {
    None,
    /// Append `text` as the latest user-role message before the next model
    /// request. `count` is the number of consecutive identical failures.
    InjectReminder {
        text: String,
        count: u32,
    },
    /// End the run: `incomplete`, reason `doom_loop`.
    Stop,
}

/// Counts consecutive failures with the same fingerprint.
#[derive(Debug, Clone)]
pub struct DoomLoopGuard {
    threshold: u32,
    extra_repeats: u32,
    current: Option<String>,
    count: u32,
}

impl Default for DoomLoopGuard {
    fn default() -> Self {
        DoomLoopGuard::new(3, 2)
    }
}

impl DoomLoopGuard {
    /// `threshold`: the identical failure that triggers the reminder (at
    /// least 1). `extra_repeats`: further identical failures after the
    /// reminder that stop the run (at least 1).
    pub fn new(threshold: u32, extra_repeats: u32) -> Self {
        DoomLoopGuard {
            threshold: threshold.max(1),
            extra_repeats: extra_repeats.max(1),
            current: None,
            count: 0,
        }
    }

    /// Consecutive identical failures so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Feeds one outcome; the tool name is unknown to the reminder.
    pub fn on_result(&mut self, fingerprint: Option<&str>, success: bool) -> DoomLoopSignal {
        self.on_tool_result("the same tool", fingerprint, success)
    }

    /// Feeds one outcome. A success, a failure without a fingerprint or a
    /// failure with another fingerprint starts the count afresh.
    pub fn on_tool_result(
        &mut self,
        tool_name: &str,
        fingerprint: Option<&str>,
        success: bool,
    ) -> DoomLoopSignal {
        let Some(fp) = fingerprint.filter(|_| !success) else {
            self.current = None;
            self.count = 0;
            return DoomLoopSignal::None;
        };
        self.count_repeat(fp, tool_name, self.threshold, failure_reminder)
    }

    /// Feeds a call that was not run because an identical call already
    /// succeeded (`fingerprint` names tool and arguments). The first repeat
    /// already brings a reminder — there is nothing to retry, the result is
    /// in context — and repeats after it end the run as failures would.
    pub fn on_repeated_call(&mut self, tool_name: &str, fingerprint: &str) -> DoomLoopSignal {
        let fp = format!("repeat:{fingerprint}");
        self.count_repeat(&fp, tool_name, 1, repeat_reminder)
    }

    fn count_repeat(
        &mut self,
        fp: &str,
        tool_name: &str,
        threshold: u32,
        reminder: fn(&str, u32) -> String,
    ) -> DoomLoopSignal {
        if self.current.as_deref() == Some(fp) {
            self.count = self.count.saturating_add(1);
        } else {
            self.current = Some(fp.to_string());
            self.count = 1;
        }
        if self.count >= threshold.saturating_add(self.extra_repeats) {
            DoomLoopSignal::Stop
        } else if self.count == threshold {
            DoomLoopSignal::InjectReminder {
                text: reminder(tool_name, self.count),
                count: self.count,
            }
        } else {
            DoomLoopSignal::None
        }
    }
}

/// The reminder for a repeated call whose result is already in context.
fn repeat_reminder(tool_name: &str, _count: u32) -> String {
    format!(
        "[attest reminder] You called `{tool_name}` again with the same arguments. \
         Its result is already in the conversation above; calling it again returns nothing new. \
         Answer the user's question from that result now, or say plainly what it does not tell you."
    )
}

/// The reminder: what failed, how often, and what to do instead.
fn failure_reminder(tool_name: &str, count: u32) -> String {
    format!(
        "[attest reminder] The call to `{tool_name}` has now failed {count} times in a row with the \
         same arguments and the same error. Repeating it will not help. {} If you cannot make \
         progress with the tools you have, stop and tell the user exactly what help you need.",
        hint_text(HintCode::ChangeStrategyOrAskForHelp)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(g: &mut DoomLoopGuard, fp: &str) -> DoomLoopSignal {
        g.on_tool_result("shell", Some(fp), false)
    }

    #[test]
    fn third_identical_failure_reminds_then_two_more_stop() {
        let mut g = DoomLoopGuard::default();
        assert_eq!(fail(&mut g, "a"), DoomLoopSignal::None);
        assert_eq!(fail(&mut g, "a"), DoomLoopSignal::None);
        match fail(&mut g, "a") {
            DoomLoopSignal::InjectReminder { text, count } => {
                assert_eq!(count, 3);
                assert!(text.contains("`shell`"), "{text}");
                assert!(text.contains("failed 3 times in a row"), "{text}");
                assert!(
                    text.contains("tell the user exactly what help you need"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fail(&mut g, "a"), DoomLoopSignal::None);
        assert_eq!(fail(&mut g, "a"), DoomLoopSignal::Stop);
        // It stays stopped while the loop goes on.
        assert_eq!(fail(&mut g, "a"), DoomLoopSignal::Stop);
    }

    #[test]
    fn repeated_calls_get_their_own_reminder_and_stop_like_failures() {
        let mut g = DoomLoopGuard::default();
        // The first repeat is reminded at once: nothing is left to retry.
        match g.on_repeated_call("read_file", "fp") {
            DoomLoopSignal::InjectReminder { text, count } => {
                assert_eq!(count, 1);
                assert!(
                    text.contains("called `read_file` again with the same arguments"),
                    "{text}"
                );
                assert!(
                    !text.contains("failed"),
                    "a repeat is not a failure: {text}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(g.on_repeated_call("read_file", "fp"), DoomLoopSignal::None);
        assert_eq!(g.on_repeated_call("read_file", "fp"), DoomLoopSignal::Stop);
        // A failure with the same fingerprint text is another loop.
        assert_eq!(fail(&mut g, "fp"), DoomLoopSignal::None);
    }

    #[test]
    fn success_resets() {
        let mut g = DoomLoopGuard::default();
        fail(&mut g, "a");
        fail(&mut g, "a");
        assert_eq!(g.on_result(Some("a"), true), DoomLoopSignal::None);
        assert_eq!(g.count(), 0);
        assert_eq!(fail(&mut g, "a"), DoomLoopSignal::None);
        assert_eq!(fail(&mut g, "a"), DoomLoopSignal::None);
        assert!(matches!(
            fail(&mut g, "a"),
            DoomLoopSignal::InjectReminder { .. }
        ));
    }

    #[test]
    fn another_fingerprint_resets() {
        let mut g = DoomLoopGuard::default();
        fail(&mut g, "a");
        fail(&mut g, "a");
        assert_eq!(fail(&mut g, "b"), DoomLoopSignal::None);
        assert_eq!(g.count(), 1);
        fail(&mut g, "b");
        assert!(matches!(
            fail(&mut g, "b"),
            DoomLoopSignal::InjectReminder { count: 3, .. }
        ));
        // Alternating never builds up.
        let mut g = DoomLoopGuard::default();
        for i in 0..10 {
            let fp = if i % 2 == 0 { "a" } else { "b" };
            assert_eq!(fail(&mut g, fp), DoomLoopSignal::None);
        }
    }

    #[test]
    fn failure_without_fingerprint_resets() {
        let mut g = DoomLoopGuard::default();
        fail(&mut g, "a");
        fail(&mut g, "a");
        assert_eq!(g.on_result(None, false), DoomLoopSignal::None);
        assert_eq!(g.count(), 0);
    }

    #[test]
    fn custom_thresholds_and_generic_text() {
        let mut g = DoomLoopGuard::new(1, 1);
        match g.on_result(Some("x"), false) {
            DoomLoopSignal::InjectReminder { text, count: 1 } => {
                assert!(text.contains("`the same tool`"), "{text}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(g.on_result(Some("x"), false), DoomLoopSignal::Stop);
        // Zeros are raised to 1 rather than stopping at once.
        let mut g = DoomLoopGuard::new(0, 0);
        assert!(matches!(
            g.on_result(Some("x"), false),
            DoomLoopSignal::InjectReminder { .. }
        ));
    }
}
