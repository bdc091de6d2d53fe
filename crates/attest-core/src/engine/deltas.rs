//! Live token deltas of one model call (`RunConfig::stream_progress`),
//! redacted before they are shown.
//!
//! A secret can arrive split over several deltas, and redaction patterns
//! need the whole of it. So text is held back to its last whitespace (secret
//! values and key shapes contain none), and the current line is redacted
//! whole each time it grows; only what the redacted line adds to what was
//! already shown goes out. Shown text cannot be taken back: when redaction
//! would change it (a match that began in shown text, like a private-key
//! header), nothing more of the response is streamed. The full response is
//! recorded either way; deltas are display only.

/// The redaction of one text (the run's `redact`).
pub(super) type Redact<'r> = &'r dyn Fn(&str) -> String;

#[derive(Debug, Default)]
pub(super) struct DeltaStream {
    /// Raw text since the start of the line being shown.
    raw: String,
    /// The redacted form of the part of `raw` already shown.
    shown: String,
    /// Bytes of `raw` that `shown` covers.
    covered: usize,
    /// Redaction rewrote shown text: the rest of this response is not streamed.
    stopped: bool,
}

impl DeltaStream {
    /// Add raw text; returns what can be shown now, if anything.
    pub(super) fn push(&mut self, delta: &str, redact: Redact<'_>) -> Option<String> {
        if self.stopped {
            return None;
        }
        self.raw.push_str(delta);
        let cut = self
            .raw
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace())
            .map(|(i, c)| i + c.len_utf8())?;
        self.show(cut, redact)
    }

    /// The call returned: show what was held back.
    pub(super) fn finish(&mut self, redact: Redact<'_>) -> Option<String> {
        if self.stopped || self.raw.is_empty() {
            return None;
        }
        let out = self.show(self.raw.len(), redact);
        self.raw.clear();
        self.shown.clear();
        self.covered = 0;
        out
    }

    fn show(&mut self, cut: usize, redact: Redact<'_>) -> Option<String> {
        if cut == self.covered {
            // Nothing new up to a whitespace: no need to redact again.
            return None;
        }
        let redacted = redact(&self.raw[..cut]);
        let Some(new) = redacted
            .strip_prefix(self.shown.as_str())
            .map(str::to_string)
        else {
            self.stopped = true;
            return None;
        };
        self.shown = redacted;
        self.covered = cut;
        // Lines shown whole leave the window, so each redaction covers the
        // current line and the one before it (a `key:` line and its value
        // on the next line are redacted together) rather than the whole
        // response so far.
        // A line leaves only where the split changes no redaction: what
        // stays must redact alone to what was shown of it.
        let last_nl = self.raw[..cut].rfind('\n');
        if let Some(nl) = last_nl.and_then(|nl| self.raw[..nl].rfind('\n')) {
            let done = redact(&self.raw[..=nl]);
            let stable = self.shown.starts_with(&done)
                && self.shown[done.len()..] == redact(&self.raw[nl + 1..cut]);
            if stable {
                self.raw.drain(..=nl);
                self.shown.drain(..done.len());
                self.covered -= nl + 1;
            }
        }
        (!new.is_empty()).then_some(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Redactor;

    fn stream(pieces: &[&str], redactor: &Redactor) -> Vec<String> {
        let redact = |t: &str| redactor.redact_to(t, usize::MAX);
        let mut s = DeltaStream::default();
        let mut out: Vec<String> = pieces.iter().filter_map(|p| s.push(p, &redact)).collect();
        out.extend(s.finish(&redact));
        out
    }

    #[test]
    fn pieces_come_out_whole_words_at_a_time_and_concatenate_to_the_input() {
        let r = Redactor::new();
        let pieces = [
            "The po",
            "rt is ",
            "80",
            "80.\n",
            "<tool_call>\n{\"name\": ",
            "\"read_file\"}",
            "\n</tool_call>",
            "é",
            "ü ",
        ];
        let out = stream(&pieces, &r);
        assert_eq!(out.concat(), pieces.concat());
        assert_eq!(out[0], "The ");
        assert!(out.iter().all(|p| !p.is_empty()));
    }

    #[test]
    fn a_secret_split_over_deltas_is_redacted() {
        let key = "sk-proj-CANARYabcdefghijklmnop1234";
        let r = Redactor::new().with_secrets(["hunter2-secret-value"]);
        let out = stream(
            &[
                "use ",
                &key[..10],
                &key[10..],
                " and hunter2-",
                "secret-value",
                " now\n",
            ],
            &r,
        )
        .concat();
        assert!(!out.contains("CANARY"), "{out}");
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.starts_with("use [REDACTED]"), "{out}");
        assert!(out.ends_with(" now\n"), "{out}");
        // key = value spread over several deltas.
        let out = stream(&["api_key", " = ", "abc", "def123 ", "ok"], &r).concat();
        assert!(!out.contains("abcdef123"), "{out}");
        assert!(out.ends_with("ok"), "{out}");
        // The key on one line, its value on the next (YAML style).
        let out = stream(
            &["config:\n", "api_key:\n", "  abc123", "def456\n", "done\n"],
            &r,
        )
        .concat();
        assert!(!out.contains("abc123def456"), "{out}");
        assert!(out.ends_with("done\n"), "{out}");
    }

    #[test]
    fn redaction_that_would_rewrite_shown_text_stops_the_stream() {
        let r = Redactor::new();
        let out = stream(
            &[
                "-----BEGIN ",
                "RSA PRIVATE ",
                "KEY-----\n",
                "MIIEpAIBAAKCAQEA7 ",
                "more\n",
            ],
            &r,
        )
        .concat();
        assert_eq!(out, "-----BEGIN RSA PRIVATE ");
    }
}
