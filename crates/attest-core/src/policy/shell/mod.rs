//! Splits a shell command line into the simple commands it would run, so
//! each can be judged on its own words (SPEC F2).
//!
//! Understood: quoting and escapes, `;` `&&` `||` `&` `|` `|&` newlines,
//! subshell and group parens/braces, redirections (with fd prefixes),
//! heredocs, `$(…)`, backticks, `<(…)`/`>(…)`, `${…}` and `$((…))` bodies,
//! `sh -c`/`bash -c` and `eval` scripts, leading assignments, wrappers
//! (`env`, `timeout`, `nice`, …) and the commands that `xargs` and
//! `find -exec` start. This is not a shell: anything it cannot follow
//! makes the command `Complex` or an error, and the policy asks.

use std::fmt;

/// Nesting depth of substitutions and `sh -c` scripts followed.
const MAX_DEPTH: usize = 8;
/// Most simple commands one line may split into.
const MAX_PARTS: usize = 512;

/// Why a command line could not be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParseError {
    Unbalanced(&'static str),
    TooDeep,
    TooManyParts,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Unbalanced(what) => write!(f, "unbalanced {what}"),
            ParseError::TooDeep => write!(f, "nested more than {MAX_DEPTH} levels deep"),
            ParseError::TooManyParts => write!(f, "more than {MAX_PARTS} commands"),
        }
    }
}

/// A redirection of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    pub op: &'static str,
    pub target: String,
}

impl Redirect {
    /// True when it writes to a file (not a descriptor, not a null sink).
    pub(crate) fn writes_file(&self) -> bool {
        let writes = matches!(self.op, ">" | ">>" | ">|" | "&>" | "&>>" | "<>");
        let sink = matches!(
            self.target.as_str(),
            "/dev/null" | "/dev/stdout" | "/dev/stderr"
        );
        writes && !sink
    }
}

/// One simple command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Part {
    /// The words that run: assignments, keywords and wrappers removed.
    pub words: Vec<String>,
    /// The words as written, when unwrapping changed them.
    pub raw_words: Option<Vec<String>>,
    pub redirects: Vec<Redirect>,
    /// The command name is computed at run time (`$CMD`, `$(…)`).
    pub dynamic: bool,
    /// A construct this splitter does not follow (`case`, functions).
    pub complex: bool,
    /// Replaced by the commands of its script (`sh -c`, `eval`): only deny
    /// and ask rules look at it.
    pub transparent: bool,
    pub pipeline: usize,
    pub stage: usize,
}

impl Part {
    /// The command as matched by rules: words, then redirections.
    pub(crate) fn text(&self) -> String {
        render(&self.words, &self.redirects)
    }

    /// The command as written, when different from [`Part::text`].
    pub(crate) fn raw_text(&self) -> Option<String> {
        self.raw_words.as_ref().map(|w| render(w, &self.redirects))
    }

    pub(crate) fn program(&self) -> Option<&str> {
        self.words.first().map(|w| basename(w))
    }

    pub(crate) fn writes_file(&self) -> bool {
        self.redirects.iter().any(Redirect::writes_file)
    }
}

fn render(words: &[String], redirects: &[Redirect]) -> String {
    let mut out = words.join(" ");
    for r in redirects {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(r.op);
        out.push(' ');
        out.push_str(&r.target);
    }
    out
}

/// The last path component of a command word (`/bin/rm` → `rm`).
pub(crate) fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Splits `command` into its simple commands.
pub(crate) fn split(command: &str) -> Result<Vec<Part>, ParseError> {
    let mut parts = Vec::new();
    let mut next_pipeline = 0usize;
    split_into(command, 0, &mut parts, &mut next_pipeline)?;
    Ok(parts)
}

fn split_into(
    command: &str,
    depth: usize,
    parts: &mut Vec<Part>,
    next_pipeline: &mut usize,
) -> Result<(), ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError::TooDeep);
    }
    let mut lexer = Lexer::new(command);
    let tokens = lexer.lex()?;
    let mut scripts = lexer.subs;
    for part in assemble(tokens, next_pipeline) {
        let (part, extra_scripts, derived) = normalize(part);
        scripts.extend(extra_scripts);
        if !part.words.is_empty() || !part.redirects.is_empty() || part.complex {
            parts.push(part);
        }
        parts.extend(derived);
        if parts.len() > MAX_PARTS {
            return Err(ParseError::TooManyParts);
        }
    }
    for script in scripts {
        split_into(&script, depth + 1, parts, next_pipeline)?;
    }
    Ok(())
}

mod lexer;
#[cfg(test)]
mod tests;

use lexer::{Lexer, Token, Word};

/// A simple command before normalization.
#[derive(Default)]
struct RawCommand {
    words: Vec<Word>,
    redirects: Vec<Redirect>,
    complex: bool,
    pipeline: usize,
    stage: usize,
}

fn assemble(tokens: Vec<Token>, next_pipeline: &mut usize) -> Vec<RawCommand> {
    let mut out = Vec::new();
    let mut cur = RawCommand {
        pipeline: *next_pipeline,
        ..RawCommand::default()
    };
    let mut pending_redirect: Option<&'static str> = None;
    let finish =
        |cur: &mut RawCommand, out: &mut Vec<RawCommand>, new_pipeline: bool, next: &mut usize| {
            let pipeline = cur.pipeline;
            let stage = cur.stage;
            let done = std::mem::take(cur);
            if !done.words.is_empty() || !done.redirects.is_empty() || done.complex {
                out.push(done);
            }
            if new_pipeline {
                *next += 1;
                cur.pipeline = *next;
                cur.stage = 0;
            } else {
                cur.pipeline = pipeline;
                cur.stage = stage + 1;
            }
        };
    for token in tokens {
        match token {
            Token::Word(word) => match pending_redirect.take() {
                Some(op) => cur.redirects.push(Redirect {
                    op,
                    target: word.text,
                }),
                None => cur.words.push(word),
            },
            Token::Redirect(op) => pending_redirect = Some(op),
            Token::Pipe => finish(&mut cur, &mut out, false, next_pipeline),
            Token::Sep => finish(&mut cur, &mut out, true, next_pipeline),
            Token::CaseSep => {
                cur.complex = true;
                finish(&mut cur, &mut out, true, next_pipeline);
            }
        }
    }
    finish(&mut cur, &mut out, true, next_pipeline);
    out
}

/// Reserved words that only introduce the command after them.
const PREFIX_KEYWORDS: [&str; 13] = [
    "!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time",
];
/// Constructs whose words are not a command line.
const COMPLEX_KEYWORDS: [&str; 5] = ["case", "esac", "function", "coproc", "select"];
const SHELLS: [&str; 8] = ["sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "busybox"];

/// Strips what does not decide the command, and finds scripts and
/// commands that this one runs. Returns the part, scripts to split, and
/// derived parts (`xargs CMD`, `find -exec CMD`).
fn normalize(raw: RawCommand) -> (Part, Vec<String>, Vec<Part>) {
    let mut part = Part {
        redirects: raw.redirects,
        complex: raw.complex,
        pipeline: raw.pipeline,
        stage: raw.stage,
        ..Part::default()
    };
    let mut words = raw.words;
    let original: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
    let mut scripts = Vec::new();
    let mut derived = Vec::new();

    while let Some(first) = words.first() {
        let t = first.text.as_str();
        if !first.quoted && (PREFIX_KEYWORDS.contains(&t) || is_assignment(t)) {
            words.remove(0);
        } else {
            break;
        }
    }
    if let Some(first) = words.first().filter(|w| !w.quoted) {
        match first.text.as_str() {
            // `for x in a b c`: a loop header runs nothing itself.
            "for" => words.clear(),
            t if COMPLEX_KEYWORDS.contains(&t) => part.complex = true,
            _ => {}
        }
    }
    let words = unwrap(words);
    part.dynamic = words.first().is_some_and(|w| w.expands);
    part.words = words.iter().map(|w| w.text.clone()).collect();
    if part.words != original {
        part.raw_words = Some(original);
    }

    if let Some(program) = part.program() {
        if SHELLS.contains(&program) {
            if let Some(script) = dash_c_script(&part.words) {
                scripts.push(script);
                part.transparent = true;
            }
        } else if program == "eval" && part.words.len() > 1 {
            scripts.push(part.words[1..].join(" "));
            part.transparent = true;
        } else if program == "xargs" {
            let inner = xargs_command(&part.words);
            if !inner.is_empty() {
                derived.push(Part {
                    words: inner,
                    pipeline: part.pipeline,
                    stage: part.stage,
                    ..Part::default()
                });
            }
        } else if program == "find" {
            for inner in find_exec_commands(&part.words) {
                derived.push(Part {
                    words: inner,
                    pipeline: part.pipeline,
                    stage: part.stage,
                    ..Part::default()
                });
            }
        }
    }
    (part, scripts, derived)
}

fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let name = name.strip_suffix('+').unwrap_or(name);
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Removes wrappers that run the rest of the line unchanged.
fn unwrap(mut words: Vec<Word>) -> Vec<Word> {
    loop {
        let Some(first) = words.first() else {
            return words;
        };
        let program = basename(&first.text).to_string();
        // Options of each wrapper that take a separate value.
        let takes_value: &[&str] = match program.as_str() {
            "env" => &["-u", "-C", "-S", "--unset", "--chdir"],
            "nice" => &["-n", "--adjustment"],
            "timeout" => &["-s", "-k", "--signal", "--kill-after"],
            "ionice" => &["-c", "-n", "-p", "--class", "--classdata"],
            "stdbuf" => &["-i", "-o", "-e"],
            "exec" => &["-a"],
            "nohup" | "command" | "builtin" | "time" => &[],
            _ => return words,
        };
        // `command -v x` looks a name up; it runs nothing.
        if program == "command"
            && words
                .get(1)
                .is_some_and(|w| w.text == "-v" || w.text == "-V")
        {
            return words;
        }
        let mut i = 1;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if t == "--" {
                i += 1;
                break;
            }
            if t.starts_with('-') && t.len() > 1 {
                i += if takes_value.contains(&t) { 2 } else { 1 };
            } else if program == "env" && is_assignment(t) {
                i += 1;
            } else {
                break;
            }
        }
        // `timeout` takes a duration before the command.
        if program == "timeout" && i < words.len() {
            i += 1;
        }
        if i >= words.len() {
            // A bare `env`, `time`: the wrapper is the command.
            return words;
        }
        words.drain(..i);
    }
}

/// The script of `sh -c SCRIPT` (options may be combined: `-ec`, `-lc`).
fn dash_c_script(words: &[String]) -> Option<String> {
    let mut saw_c = false;
    for w in words.iter().skip(1) {
        if saw_c {
            return Some(w.clone());
        }
        if w == "--" {
            return None;
        }
        if w.starts_with('-') && !w.starts_with("--") {
            saw_c |= w.contains('c');
        } else if !w.starts_with('-') {
            return None;
        }
    }
    None
}

/// The command `xargs` runs: its words after xargs's own options.
fn xargs_command(words: &[String]) -> Vec<String> {
    const TAKES_VALUE: [&str; 9] = ["-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "-i"];
    let mut i = 1;
    while let Some(w) = words.get(i) {
        if w == "--" {
            i += 1;
            break;
        }
        if !w.starts_with('-') {
            break;
        }
        i += if TAKES_VALUE.contains(&w.as_str()) {
            2
        } else {
            1
        };
    }
    words.get(i..).map(<[String]>::to_vec).unwrap_or_default()
}

/// The commands of `find … -exec CMD ;` (also `-execdir`, `-ok`, `-okdir`).
fn find_exec_commands(words: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if matches!(words[i].as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            let start = i + 1;
            let mut end = start;
            while end < words.len() && words[end] != ";" && words[end] != "+" {
                end += 1;
            }
            if end > start {
                out.push(words[start..end].to_vec());
            }
            i = end;
        }
        i += 1;
    }
    out
}
