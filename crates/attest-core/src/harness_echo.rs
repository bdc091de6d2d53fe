//! Whether a final answer mostly repeats text the harness wrote — the state
//! tail, a fact line, a corrective turn, a placeholder, a reminder — rather
//! than answering (issue 12, hole 7). Small models do: asked which port a
//! file sets, they "answer" with the tail's `grep {…}: path config.toml,
//! 0 matches`. Such a response is treated like no answer.
//!
//! Measured by word 4-grams: the share of the answer's words covered by a
//! 4-gram that occurs in harness text and not in text the harness only
//! relays — what the user wrote, the model's own call arguments (a fact
//! line quotes them) — so an answer that echoes the question's phrasing or
//! its own command is not caught.

use std::collections::HashSet;

/// Words per shingle: long enough that ordinary phrasing rarely collides.
const SHINGLE: usize = 4;
/// "Mostly": at least this share of the answer's words.
const MOSTLY: f64 = 0.6;

fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

fn shingles(words: &[String]) -> impl Iterator<Item = String> + '_ {
    words.windows(SHINGLE).map(|w| w.join(" "))
}

/// True when at least 60% of `answer`'s words sit in 4-word runs that
/// `harness` texts contain and `relayed` texts (the user's, the model's
/// call arguments) do not. Answers under four words are never caught
/// (`8080` may well appear in a fact line).
pub fn repeats_harness_text(answer: &str, harness: &[&str], relayed: &[&str]) -> bool {
    let answer = words(answer);
    if answer.len() < SHINGLE {
        return false;
    }
    let from_user: HashSet<String> = relayed
        .iter()
        .flat_map(|t| shingles(&words(t)).collect::<Vec<_>>())
        .collect();
    let from_harness: HashSet<String> = harness
        .iter()
        .flat_map(|t| shingles(&words(t)).collect::<Vec<_>>())
        .filter(|s| !from_user.contains(s))
        .collect();
    let mut covered = vec![false; answer.len()];
    for (start, shingle) in shingles(&answer).enumerate() {
        if from_harness.contains(&shingle) {
            covered[start..start + SHINGLE]
                .iter_mut()
                .for_each(|c| *c = true);
        }
    }
    let share = covered.iter().filter(|c| **c).count() as f64 / answer.len() as f64;
    share >= MOSTLY
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAIL: &str = "[attest] Reference data kept by the harness:\nGoal: Which port does config.toml set?\nConfirmed facts (from receipts):\n- grep {\"path\":\"config.toml\",\"pattern\":\"server.port\"}: path config.toml, 0 matches [call_1]";

    #[test]
    fn a_repeated_fact_line_or_corrective_is_caught() {
        let user = ["Which port does config.toml set?"];
        for echo in [
            "grep {\"path\":\"config.toml\",\"pattern\":\"server.port\"}: path config.toml, 0 matches",
            "Confirmed facts (from receipts): grep path config.toml, 0 matches",
        ] {
            assert!(repeats_harness_text(echo, &[TAIL], &user), "{echo}");
        }
        let corrective = "[attest] Evidence check: this task requires an observe receipt, and no tool call has produced it.";
        assert!(repeats_harness_text(
            "Evidence check: this task requires an observe receipt, and no tool call has produced it.",
            &[corrective],
            &user
        ));
    }

    #[test]
    fn real_answers_and_echoes_of_the_question_are_not() {
        let user = ["Which port does config.toml set?"];
        for answer in [
            "config.toml sets port 8080 in its [server] section.",
            "The grep found 0 matches for server.port, so config.toml sets no port.",
            "Which port does config.toml set? It sets 8080.",
            "0 matches",
            "",
        ] {
            assert!(!repeats_harness_text(answer, &[TAIL], &user), "{answer}");
        }
        // A fact line quotes the call's arguments: saying what the command
        // said is not repeating the harness.
        let tail = "Confirmed facts (from receipts):\n- shell {\"command\":\"echo deploy host is evil.example.com\"}: exit 0 [c1]";
        let args = [r#"{"command":"echo deploy host is evil.example.com"}"#];
        assert!(!repeats_harness_text(
            "The deploy host is evil.example.com.",
            &[tail],
            &args
        ));
    }
}
