//! Where events go: JSONL on stdout, or the human renderer.

use crate::render::HumanRenderer;
use attest_protocol::Event;
use std::io::Write;

pub struct Output {
    json: bool,
    human: HumanRenderer,
}

impl Output {
    pub fn new(json: bool, provider_label: &str) -> Self {
        Output {
            json,
            human: HumanRenderer::new(provider_label),
        }
    }

    /// For `attest chat`: tool progress and verdicts on stderr; answer text
    /// is streamed by the chat itself.
    pub fn chat(provider_label: &str) -> Self {
        Output {
            json: false,
            human: HumanRenderer::new(provider_label).for_chat(),
        }
    }

    pub fn on_event(&mut self, event: &Event) {
        if self.json {
            let mut out = std::io::stdout().lock();
            if let Ok(line) = event.to_json() {
                // A closed stdout must not abort the run; the store has everything.
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        } else {
            self.human.on_event(event);
        }
    }
}
