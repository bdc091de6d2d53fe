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
        // `>& FILE` (bash) sends both streams to FILE; `>&2` duplicates a
        // descriptor.
        let duplicates = |t: &str| t == "-" || t.chars().all(|c| c.is_ascii_digit());
        let writes = matches!(self.op, ">" | ">>" | ">|" | "&>" | "&>>" | "<>")
            || (self.op == ">&" && !duplicates(&self.target));
        let sink = matches!(
            self.target.as_str(),
            "/dev/null" | "/dev/stdout" | "/dev/stderr"
        );
        writes && !sink
    }

    /// The file it reads from, for `<` and `<>` (not heredocs, not
    /// descriptors).
    pub(crate) fn reads_file(&self) -> Option<&str> {
        matches!(self.op, "<" | "<>").then_some(self.target.as_str())
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
    /// Variables it sets: for the command alone (`NAME=v cmd`,
    /// `env NAME=v cmd`), or for the rest of the script when it has no
    /// words (`NAME=v` alone).
    pub assignments: Vec<(String, String)>,
    /// The command name is computed at run time (`$CMD`, `$(…)`).
    pub dynamic: bool,
    /// Some argument is computed at run time (`$X`, `$(…)`): where it
    /// points is not known.
    pub args_expand: bool,
    /// Arguments with unquoted glob characters, as written.
    pub globs: Vec<String>,
    /// A shell or interpreter that reads its program from standard input
    /// (a pipe, a redirection, a heredoc): code the policy cannot read.
    pub reads_program: bool,
    /// Some word (or heredoc) evaluates a value as arithmetic, which in
    /// bash runs any command substitution the value holds.
    pub evaluates: bool,
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
    let mut scripts = std::mem::take(&mut lexer.subs);
    let bodies = std::mem::take(&mut lexer.heredoc_bodies);
    let mut queue: Vec<(RawCommand, usize)> = assemble(tokens, next_pipeline)
        .into_iter()
        .map(|raw| (raw, depth))
        .collect();
    queue.reverse();
    while let Some((raw, level)) = queue.pop() {
        if level > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        let normalized = normalize(raw, &bodies);
        let part = normalized.part;
        scripts.extend(normalized.scripts);
        if !part.words.is_empty()
            || !part.redirects.is_empty()
            || !part.assignments.is_empty()
            || part.complex
        {
            parts.push(part);
        }
        // Commands this one starts run next, in order.
        for derived in normalized.derived.into_iter().rev() {
            queue.push((derived, level + 1));
        }
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
    /// Indices into the heredoc bodies, one per `<<` redirection.
    heredocs: Vec<usize>,
    /// A redirection target evaluates a value as arithmetic.
    redirect_evaluates: bool,
    complex: bool,
    pipeline: usize,
    stage: usize,
}

impl RawCommand {
    /// A command another one starts with these exact words (`xargs CMD`,
    /// `find -exec CMD ;`): no shell reads them, so nothing is stripped.
    fn derived(words: &[String], pipeline: usize, stage: usize) -> RawCommand {
        RawCommand {
            words: words
                .iter()
                .map(|w| Word {
                    text: w.clone(),
                    quoted: true,
                    ..Word::default()
                })
                .collect(),
            pipeline,
            stage,
            ..RawCommand::default()
        }
    }
}

fn assemble(tokens: Vec<Token>, next_pipeline: &mut usize) -> Vec<RawCommand> {
    let mut out = Vec::new();
    let mut cur = RawCommand {
        pipeline: *next_pipeline,
        ..RawCommand::default()
    };
    let mut pending_redirect: Option<&'static str> = None;
    let mut heredoc_count = 0usize;
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
                Some(op) => {
                    if matches!(op, "<<" | "<<-") {
                        cur.heredocs.push(heredoc_count);
                        heredoc_count += 1;
                    }
                    cur.redirect_evaluates |= word.evaluates;
                    cur.redirects.push(Redirect {
                        op,
                        target: word.text,
                    })
                }
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

/// True for shells and script interpreters (`python3.12`, `lua5.4` too).
pub(crate) fn is_interpreter(program: &str) -> bool {
    const NAMES: [&str; 30] = [
        "sh",
        "bash",
        "zsh",
        "dash",
        "ksh",
        "ash",
        "mksh",
        "fish",
        "csh",
        "tcsh",
        "busybox",
        "python",
        "pypy",
        "ruby",
        "irb",
        "perl",
        "lua",
        "luajit",
        "php",
        "node",
        "nodejs",
        "deno",
        "bun",
        "tclsh",
        "wish",
        "expect",
        "pwsh",
        "osascript",
        "rscript",
        "julia",
    ];
    let name = program.to_ascii_lowercase();
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    NAMES.contains(&name.as_str()) || NAMES.contains(&stem)
}

/// What [`normalize`] makes of one raw command.
struct Normalized {
    part: Part,
    /// Scripts it runs (`sh -c`, `eval`, a heredoc fed to a shell).
    scripts: Vec<String>,
    /// Commands it starts (`xargs CMD`, `find -exec CMD`, `rg --pre CMD`).
    derived: Vec<RawCommand>,
}

/// Strips what does not decide the command, and finds scripts and
/// commands that this one runs.
fn normalize(raw: RawCommand, heredoc_bodies: &[(String, bool)]) -> Normalized {
    let mut part = Part {
        redirects: raw.redirects,
        complex: raw.complex,
        pipeline: raw.pipeline,
        stage: raw.stage,
        ..Part::default()
    };
    let mut words = raw.words;
    let original: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
    // Assignments and wrapper words are stripped below, but their
    // expansion happens all the same.
    part.evaluates = words.iter().any(|w| w.evaluates)
        || raw.redirect_evaluates
        || raw
            .heredocs
            .iter()
            .any(|&i| heredoc_bodies.get(i).is_some_and(|(_, e)| *e));
    let mut scripts = Vec::new();
    let mut derived = Vec::new();

    while let Some(first) = words.first() {
        let t = first.text.as_str();
        if first.quoted {
            break;
        }
        if is_assignment(t) {
            if let Some((name, value)) = t.split_once('=') {
                let name = name.strip_suffix('+').unwrap_or(name);
                part.assignments.push((name.to_string(), value.to_string()));
            }
            words.remove(0);
        } else if PREFIX_KEYWORDS.contains(&t) {
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
    let unwrapped = unwrap(words);
    let words = unwrapped.words;
    part.assignments.extend(unwrapped.assignments);
    part.complex |= unwrapped.complex;
    part.dynamic = words.first().is_some_and(|w| w.expands);
    // A process substitution is a pipe's path (`/dev/fd/N`); its command
    // is judged on its own.
    part.args_expand = words
        .iter()
        .skip(1)
        .any(|w| w.expands && w.text != "<(…)" && w.text != ">(…)");
    part.globs = words
        .iter()
        .skip(1)
        .filter(|w| w.glob)
        .map(|w| w.text.clone())
        .collect();
    part.words = words.iter().map(|w| w.text.clone()).collect();
    if part.words != original {
        part.raw_words = Some(original);
    }

    let starts = |inner: &[String]| RawCommand::derived(inner, raw.pipeline, raw.stage);
    if let Some(program) = part.program().map(str::to_string) {
        let program = program.as_str();
        // A shell given by a relative path is a program of the workspace,
        // not the system shell.
        let system_program = part
            .words
            .first()
            .is_some_and(|w| !w.contains('/') || w.starts_with('/'));
        if SHELLS.contains(&program) && system_program {
            if let Some(script) = dash_c_script(&part.words) {
                scripts.push(script);
                part.transparent = true;
            }
        } else if program == "eval" && part.words.len() > 1 {
            scripts.push(part.words[1..].join(" "));
            part.transparent = true;
        }
        match program {
            "xargs" => {
                let inner = xargs_command(&part.words);
                if !inner.is_empty() {
                    derived.push(starts(&inner));
                }
            }
            "find" => derived.extend(find_exec_commands(&part.words).iter().map(|c| starts(c))),
            _ => scripts.extend(option_commands(program, &part.words)),
        }
        if is_interpreter(program) && !part.transparent {
            // A heredoc or here-string given to a shell is its script.
            if SHELLS.contains(&program) {
                let here_strings = part.redirects.iter().filter(|r| r.op == "<<<");
                scripts.extend(here_strings.map(|r| r.target.clone()));
                let heredocs = raw.heredocs.iter().filter_map(|&i| heredoc_bodies.get(i));
                scripts.extend(heredocs.map(|(body, _)| body.clone()));
            }
            let stdin_fed = part.stage > 0
                || part
                    .redirects
                    .iter()
                    .any(|r| matches!(r.op, "<" | "<<" | "<<-" | "<<<" | "<&" | "<>"));
            part.reads_program = stdin_fed && reads_program_from_stdin(&part.words);
        }
    }
    Normalized {
        part,
        scripts,
        derived,
    }
}

/// An interpreter's command line names no program of its own (no script
/// file, no inline code), or says `-`/`-s`: it runs what it reads.
fn reads_program_from_stdin(words: &[String]) -> bool {
    let mut rest = words.iter().skip(1);
    for w in rest.by_ref() {
        match w.as_str() {
            "-" | "-s" | "--" => return true,
            "-c" | "-e" | "-E" | "-r" | "-m" | "--eval" | "--command" | "eval" | "run" => {
                return false
            }
            s if s.starts_with('-') => {
                if !s.starts_with("--") && (s.contains('c') || s.contains('e')) {
                    return false;
                }
                if !s.starts_with("--") && s.contains('s') {
                    return true;
                }
            }
            _ => return false,
        }
    }
    true
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

/// A command line with its wrappers removed.
struct Unwrapped {
    words: Vec<Word>,
    /// Set by `env NAME=value`.
    assignments: Vec<(String, String)>,
    /// A wrapper option this splitter does not follow (`env -C DIR`).
    complex: bool,
}

/// Removes wrappers that run the rest of the line unchanged.
fn unwrap(mut words: Vec<Word>) -> Unwrapped {
    let mut out = Unwrapped {
        words: Vec::new(),
        assignments: Vec::new(),
        complex: false,
    };
    loop {
        let Some(first) = words.first() else {
            out.words = words;
            return out;
        };
        let program = basename(&first.text).to_string();
        // Options of each wrapper that take a separate value.
        let takes_value: &[&str] = match program.as_str() {
            "env" => &["-u", "--unset"],
            "nice" => &["-n", "--adjustment"],
            "timeout" => &["-s", "-k", "--signal", "--kill-after"],
            "ionice" => &["-c", "-n", "-p", "--class", "--classdata"],
            "stdbuf" => &["-i", "-o", "-e"],
            "exec" => &["-a"],
            "nohup" | "command" | "builtin" | "time" => &[],
            _ => {
                out.words = words;
                return out;
            }
        };
        // `command -v x` looks a name up; it runs nothing.
        if program == "command"
            && words
                .get(1)
                .is_some_and(|w| w.text == "-v" || w.text == "-V")
        {
            out.words = words;
            return out;
        }
        let mut i = 1;
        while let Some(w) = words.get(i) {
            let t = w.text.clone();
            if t == "--" {
                i += 1;
                break;
            }
            if program == "env" && t.starts_with('-') && t.len() > 1 {
                // `env -S STRING` splits STRING into more arguments for env
                // itself; `--chdir`, `-P` (a search path) and unknown
                // options change what runs in ways not followed here.
                match split_string_option(&words, i) {
                    Some(Ok((consumed, split))) => {
                        words.splice(i..i + consumed, split);
                        continue;
                    }
                    Some(Err(())) => {
                        out.complex = true;
                        i += if t == "-S" || t == "--split-string" {
                            2
                        } else {
                            1
                        };
                        continue;
                    }
                    None => {}
                }
                let known = matches!(
                    t.as_str(),
                    "-i" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug"
                ) || takes_value.contains(&t.as_str())
                    || t.starts_with("--unset=")
                    || (t.starts_with("-u") && t.len() > 2);
                if !known {
                    out.complex = true;
                }
                i += if takes_value.contains(&t.as_str()) {
                    2
                } else {
                    1
                };
            } else if t.starts_with('-') && t.len() > 1 {
                i += if takes_value.contains(&t.as_str()) {
                    2
                } else {
                    1
                };
            } else if program == "env" && is_assignment(&t) {
                if let Some((name, value)) = t.split_once('=') {
                    out.assignments.push((name.to_string(), value.to_string()));
                }
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
            out.words = words;
            return out;
        }
        words.drain(..i);
    }
}

/// `env -S STRING` / `-SSTRING` / `--split-string[=]STRING` at `i`: how
/// many words it spans and the words STRING splits into; `Err` when the
/// string uses syntax not followed here. `None`: not that option.
#[allow(clippy::type_complexity)]
fn split_string_option(words: &[Word], i: usize) -> Option<Result<(usize, Vec<Word>), ()>> {
    let t = words[i].text.as_str();
    let (consumed, value) = if t == "-S" || t == "--split-string" {
        (2, words.get(i + 1).map(|w| w.text.clone()))
    } else if let Some(v) = t.strip_prefix("--split-string=") {
        (1, Some(v.to_string()))
    } else if let Some(v) = t.strip_prefix("-S") {
        (1, Some(v.to_string()))
    } else if t.starts_with('-') && !t.starts_with("--") && t.contains('S') {
        // `-iS…` and friends.
        return Some(Err(()));
    } else {
        return None;
    };
    let Some(value) = value else {
        return Some(Err(()));
    };
    let mut lexer = Lexer::new(&value);
    let Ok(tokens) = lexer.lex() else {
        return Some(Err(()));
    };
    let mut split = Vec::new();
    for token in tokens {
        match token {
            Token::Word(w) => split.push(w),
            _ => return Some(Err(())),
        }
    }
    Some(Ok((consumed, split)))
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

/// Commands named by an option of another program, which runs them:
/// `rg --pre CMD`, `sort --compress-program=CMD`, `git grep -O[CMD]`,
/// `tar --to-command=CMD` / `-I CMD` / `--use-compress-program=CMD`,
/// `rsync -e CMD`, `zip -TT CMD`, `man -P CMD`, `git … --upload-pack=CMD`.
/// Each value is split as a script of its own: several of these programs
/// hand it to `sh -c`.
fn option_commands(program: &str, words: &[String]) -> Vec<String> {
    let git_options = |words: &[String]| -> &'static [&'static str] {
        let sub = words
            .iter()
            .skip(1)
            .find(|w| !w.starts_with('-'))
            .map_or("", String::as_str);
        match sub {
            "grep" => &[
                "-O",
                "--open-files-in-pager",
                "--upload-pack",
                "--receive-pack",
            ],
            "rebase" => &["-x", "--exec", "--upload-pack", "--receive-pack"],
            "difftool" | "mergetool" => &["-x", "--extcmd", "--tool"],
            _ => &["--upload-pack", "--receive-pack"],
        }
    };
    let options: &[&str] = match program {
        "rg" => &["--pre"],
        "sort" => &["--compress-program"],
        "git" => git_options(words),
        "tar" => &[
            "--to-command",
            "--use-compress-program",
            "-I",
            "--info-script",
            "--new-volume-script",
            "-F",
            "--checkpoint-action",
            "--rsh-command",
        ],
        "rsync" => &["-e", "--rsh", "--rsync-path"],
        "zip" => &["-TT", "--unzip-command"],
        "man" => &["-P", "--pager"],
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate().skip(1) {
        for &opt in options {
            let value = if w == opt {
                words.get(i + 1).cloned()
            } else if opt.starts_with("--") {
                w.strip_prefix(opt)
                    .and_then(|v| v.strip_prefix('='))
                    .map(str::to_string)
            } else {
                // Short options may take their value attached (`-Oless`).
                w.strip_prefix(opt)
                    .filter(|v| !v.is_empty() && opt.len() == 2)
                    .map(str::to_string)
            };
            if let Some(value) = value.filter(|v| !v.trim().is_empty()) {
                out.push(value);
            }
        }
    }
    out
}
