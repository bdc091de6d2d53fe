//! Which simple commands only read (the built-in allow rule, SPEC F2).
//!
//! A part is read-only when its program is one of a fixed list of system
//! tools that only read, found on the search path outside the workspace;
//! every argument and input redirection stays inside the working directory;
//! nothing is written through a redirection; no option of the program
//! writes files or runs another program; no variable assignment could
//! change what runs; and no glob could expand into an option. Anything the
//! check cannot see through (a computed argument, an unknown option form)
//! makes the part not read-only, so it is asked.

use super::builtin::operands;
use super::git_config;
use super::shell::Part;
use std::ffi::OsString;
use std::path::PathBuf;

/// What the shell policy may look at beyond the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellContext {
    /// The directory commands run in (the workspace root): relative paths,
    /// globs and the repository's git config are judged against it.
    pub workspace: Option<PathBuf>,
    /// The `PATH` commands run with: a program found in the workspace, or
    /// a relative entry, is not the system tool.
    pub search_path: Option<OsString>,
}

impl ShellContext {
    pub fn new(workspace: impl Into<PathBuf>, search_path: Option<OsString>) -> Self {
        ShellContext {
            workspace: Some(workspace.into()),
            search_path,
        }
    }

    /// Why git commands here may run a program the repository chose.
    pub(crate) fn git_concern(&self) -> Option<String> {
        self.workspace.as_deref().and_then(git_config::concern)
    }

    /// True when `program` resolves to a file outside the workspace (or
    /// is not found, or nothing is known about the search path).
    fn resolves_outside(&self, program: &str) -> bool {
        let Some(path) = &self.search_path else {
            return true;
        };
        let root = self.workspace.as_deref();
        for dir in std::env::split_paths(path) {
            // An empty or relative entry is looked up from the working
            // directory: the workspace.
            if dir.as_os_str().is_empty() || dir.is_relative() {
                return false;
            }
            let candidate = dir.join(program);
            if candidate.is_file() {
                let real = candidate.canonicalize().unwrap_or(candidate);
                return !root.is_some_and(|r| real.starts_with(r));
            }
        }
        true
    }

    /// True when the relative path `arg` exists and leads out of the
    /// workspace (a symlink).
    fn leads_outside(&self, arg: &str) -> bool {
        let Some(root) = &self.workspace else {
            return false;
        };
        match root.join(arg).canonicalize() {
            Ok(real) => !real.starts_with(root.canonicalize().unwrap_or_else(|_| root.clone())),
            Err(_) => false,
        }
    }

    /// True when the glob `pattern` could expand to a name starting with
    /// `-`, which the program would take as an option (`rg x *` in a
    /// directory holding a file named `--pre=./x`).
    fn glob_may_give_options(&self, pattern: &str) -> bool {
        let Some(root) = &self.workspace else {
            return false;
        };
        let glob_at = pattern.find(['*', '?', '[']).unwrap_or(0);
        let dir = match pattern[..glob_at].rfind('/') {
            Some(slash) => root.join(&pattern[..slash]),
            None => root.clone(),
        };
        // A glob in a directory part (`*/x`) is judged by the top level.
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return false;
        };
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with('-'))
    }
}

/// Programs that only read whatever their (local) arguments.
const PLAIN: [&str; 49] = [
    "ls",
    "pwd",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "echo",
    "printf",
    "stat",
    "which",
    "whereis",
    "type",
    "true",
    "false",
    "uname",
    "whoami",
    "id",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "du",
    "df",
    "diff",
    "cmp",
    "cut",
    "tr",
    "nl",
    "comm",
    "jq",
    "test",
    "[",
    "seq",
    "tac",
    "rev",
    "paste",
    "column",
    "fold",
    "od",
    "hexdump",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "b2sum",
    "strings",
];

/// Shell builtins: never looked up on the search path.
const BUILTINS: [&str; 8] = [
    "echo", "printf", "pwd", "true", "false", "test", "[", "type",
];

/// Programs that print their arguments, where a computed argument can
/// only show a value.
const PRINTERS: [&str; 4] = ["echo", "printf", "true", "false"];

const GIT: [&str; 10] = [
    "status",
    "diff",
    "log",
    "show",
    "rev-parse",
    "ls-files",
    "blame",
    "describe",
    "shortlog",
    "grep",
];

/// Git options before the subcommand that change nothing about what runs.
const GIT_GLOBAL: [&str; 8] = [
    "-P",
    "--no-pager",
    "--no-optional-locks",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-replace-objects",
];

/// Variables that change which program runs or what it loads: set on a
/// command line, they make any command need approval.
pub(crate) fn assignment_changes_what_runs(name: &str, value: &str) -> bool {
    const NAMES: [&str; 16] = [
        "PATH",
        "IFS",
        "ENV",
        "BASH_ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "HOME",
        "CDPATH",
        "EDITOR",
        "VISUAL",
        "GCONV_PATH",
        "ZDOTDIR",
        "FPATH",
        "NLSPATH",
    ];
    const PREFIXES: [&str; 11] = [
        "LD_", "DYLD_", "GIT_", "XDG_", "LESS", "PYTHON", "PERL", "RUBY", "NODE_", "LUA_", "BASH_",
    ];
    const SUFFIXES: [&str; 10] = [
        "PATH", "PRELOAD", "PAGER", "_OPTIONS", "_OPTS", "_COMMAND", "_CMD", "_PROGRAM", "_EDITOR",
        "_HOOK",
    ];
    let upper = name.to_ascii_uppercase();
    if upper.ends_with("PAGER") && matches!(value, "" | "cat") {
        return false;
    }
    NAMES.contains(&upper.as_str())
        || PREFIXES.iter().any(|p| upper.starts_with(p))
        || SUFFIXES.iter().any(|s| upper.ends_with(s))
}

/// Variables a read-only command may be run with.
fn assignment_is_harmless(name: &str, value: &str) -> bool {
    const NAMES: [&str; 11] = [
        "LANG",
        "LANGUAGE",
        "TZ",
        "NO_COLOR",
        "CLICOLOR",
        "CLICOLOR_FORCE",
        "FORCE_COLOR",
        "COLUMNS",
        "LINES",
        "TERM",
        "COLORTERM",
    ];
    NAMES.contains(&name)
        || name.starts_with("LC_")
        || (name.ends_with("PAGER") && matches!(value, "" | "cat"))
}

/// The representative pattern of the read-only rule a part satisfies, if
/// any.
pub(crate) fn read_only(part: &Part, ctx: &ShellContext) -> Option<String> {
    if part.dynamic
        || part.complex
        || part.transparent
        || part.reads_program
        || part.evaluates
        || part.writes_file()
        || !part
            .assignments
            .iter()
            .all(|(n, v)| assignment_is_harmless(n, v))
    {
        return None;
    }
    let w = &part.words;
    let name = w.first()?;
    // A path to the program (`./ls`, `/tmp/x/cat`) is not the system tool.
    if name.contains('/') {
        return None;
    }
    let p = name.as_str();
    if !BUILTINS.contains(&p) && !ctx.resolves_outside(p) {
        return None;
    }
    if part.args_expand && !PRINTERS.contains(&p) {
        return None;
    }
    if part.globs.iter().any(|g| ctx.glob_may_give_options(g)) {
        return None;
    }
    // Program text (a sed script, an awk program) is not a path.
    let code = code_words(p, w);
    let args_stay_local = !w
        .iter()
        .enumerate()
        .skip(1)
        .any(|(i, a)| !code.contains(&i) && leaves(a, ctx));
    let inputs_stay_local = part
        .redirects
        .iter()
        .filter_map(|r| r.reads_file())
        .all(|t| !leaves(t, ctx));
    if !args_stay_local || !inputs_stay_local {
        return None;
    }
    // bash's `printf -v NAME` assigns (`printf -v PATH .`).
    if p == "printf" && w.iter().skip(1).any(|a| a.starts_with("-v")) {
        return None;
    }
    if PLAIN.contains(&p) {
        return Some(format!("{p}*"));
    }
    let pattern = format!("{p}*");
    let ok = match p {
        "find" => !w.iter().any(|a| {
            matches!(
                a.as_str(),
                "-delete" | "-exec" | "-execdir" | "-ok" | "-okdir" | "-fls"
            ) || a.starts_with("-fprint")
        }),
        // `--pre` runs a program per file; `-z` runs decompressors found
        // on `PATH`.
        "rg" => !w.iter().skip(1).any(|a| {
            a == "--pre"
                || a.starts_with("--pre=")
                || a == "--search-zip"
                || short_flags(a, "ABCefgjmMrtTEd").contains('z')
        }),
        "sort" => !w.iter().skip(1).any(|a| {
            a.starts_with("--output")
                || a.starts_with("--compress-program")
                || short_flags(a, "kStT").contains('o')
        }),
        "uniq" => operands(w).count() <= 1,
        "tree" => !w.iter().skip(1).any(|a| {
            let flags = short_flags(a, "LPIHT");
            flags.contains('o') || flags.contains('R') || a.starts_with("--fromfile")
        }),
        "file" => !w
            .iter()
            .skip(1)
            .any(|a| a == "--compile" || short_flags(a, "mFfPe").contains('C')),
        "date" => !w
            .iter()
            .skip(1)
            .any(|a| a.starts_with("--set") || short_flags(a, "dfrI").contains('s')),
        "sed" => sed_is_read_only(w),
        "awk" | "gawk" | "mawk" | "nawk" => awk_is_read_only(w),
        "git" => return git_read_only(w),
        _ => false,
    };
    ok.then_some(pattern)
}

/// The indices of the words that are program text for `sed` and `awk`:
/// the script after `-e` (or the first operand), the awk program.
fn code_words(program: &str, w: &[String]) -> Vec<usize> {
    let (value_options, script_options): (&[&str], &[&str]) = match program {
        "sed" => (&["-l", "--line-length"], &["-e", "--expression"]),
        "awk" | "gawk" | "mawk" | "nawk" => (&["-F", "-v", "--field-separator", "--assign"], &[]),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut i = 1;
    while i < w.len() {
        let a = w[i].as_str();
        if script_options.contains(&a) {
            out.push(i + 1);
            i += 2;
            continue;
        }
        if value_options.contains(&a) {
            i += 2;
            continue;
        }
        if a == "--" {
            if out.is_empty() {
                out.push(i + 1);
            }
            break;
        }
        if !a.starts_with('-') || a == "-" {
            if out.is_empty() {
                out.push(i);
            }
            break;
        }
        i += 1;
    }
    out
}

/// `git` with plain global options and a listing subcommand.
fn git_read_only(w: &[String]) -> Option<String> {
    let mut i = 1;
    while w.get(i).is_some_and(|a| GIT_GLOBAL.contains(&a.as_str())) {
        i += 1;
    }
    let sub = w.get(i).map_or("", String::as_str);
    let rest = w.get(i + 1..).unwrap_or(&[]);
    if rest.iter().any(|a| a.starts_with("--output")) {
        return None;
    }
    if sub == "grep"
        && rest.iter().any(|a| {
            a.starts_with("--open-files-in-pager") || (a.starts_with("-O") && !a.starts_with("--"))
        })
    {
        return None;
    }
    if GIT.contains(&sub) {
        return Some(format!("git {sub}*"));
    }
    let listing = |allowed: &[&str]| rest.iter().all(|a| allowed.contains(&a.as_str()));
    match sub {
        "branch" if listing(&["-a", "-r", "-v", "-vv", "--list", "--show-current"]) => {
            Some("git branch".to_string())
        }
        "remote" if listing(&["-v"]) => Some("git remote".to_string()),
        _ => None,
    }
}

/// `sed` printing its input: no in-place edit, no script file, and every
/// script free of the commands that run programs or touch files (`e`,
/// `w`, `W`, `r`, `R`, the `e` and `w` flags of `s`). `--sandbox` (GNU)
/// turns those off, so any script is fine with it.
fn sed_is_read_only(w: &[String]) -> bool {
    let mut scripts = Vec::new();
    let mut sandboxed = false;
    let mut i = 1;
    let mut script_given = false;
    while i < w.len() {
        let a = w[i].as_str();
        match a {
            "--sandbox" => sandboxed = true,
            "--" => {
                if !script_given {
                    scripts.extend(w.get(i + 1).cloned());
                }
                break;
            }
            "-e" | "--expression" => {
                scripts.extend(w.get(i + 1).cloned());
                script_given = true;
                i += 1;
            }
            "-l" | "--line-length" => i += 1,
            _ if a.starts_with("--expression=") => {
                scripts.push(a["--expression=".len()..].to_string());
                script_given = true;
            }
            _ if a.starts_with("--in-place") || a.starts_with("--file") => return false,
            _ if a.starts_with("--")
                && !matches!(
                    a,
                    "--quiet"
                        | "--silent"
                        | "--regexp-extended"
                        | "--separate"
                        | "--null-data"
                        | "--posix"
                        | "--debug"
                        | "--unbuffered"
                        | "--zero-terminated"
                ) =>
            {
                return false
            }
            _ if a.starts_with("--") => {}
            _ if a.starts_with('-') && a.len() > 1 => {
                for (j, c) in a.char_indices().skip(1) {
                    match c {
                        'n' | 'E' | 'r' | 's' | 'u' | 'z' => {}
                        'e' => {
                            let attached = &a[j + 1..];
                            if attached.is_empty() {
                                scripts.extend(w.get(i + 1).cloned());
                                i += 1;
                            } else {
                                scripts.push(attached.to_string());
                            }
                            script_given = true;
                            break;
                        }
                        'l' => {
                            if a[j + 1..].is_empty() {
                                i += 1;
                            }
                            break;
                        }
                        // -i (in place), -f (script file), anything else.
                        _ => return false,
                    }
                }
            }
            _ if !script_given => {
                scripts.push(a.to_string());
                script_given = true;
            }
            _ => {}
        }
        i += 1;
    }
    sandboxed || scripts.iter().all(|s| sed_script_is_safe(s))
}

/// A sed script without `e`, `w`, `W`, `r`, `R` commands or the `e`/`w`
/// flags of `s` (nor any command this scanner does not know).
pub(crate) fn sed_script_is_safe(script: &str) -> bool {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_blank = |i: &mut usize| {
        while *i < chars.len() && matches!(chars[*i], ' ' | '\t' | '\n' | ';') {
            *i += 1;
        }
    };
    // Reads a delimited field (regex or replacement) ending at `delim`.
    let field = |i: &mut usize, delim: char| -> bool {
        while *i < chars.len() {
            match chars[*i] {
                '\\' => *i += 2,
                c if c == delim => {
                    *i += 1;
                    return true;
                }
                '\n' => return false,
                _ => *i += 1,
            }
        }
        false
    };
    loop {
        skip_blank(&mut i);
        if i >= chars.len() {
            return true;
        }
        // Addresses: numbers, `$`, `/re/`, `\cREc`, `first~step`, with
        // `,` between two, then an optional `!`.
        loop {
            match chars.get(i) {
                Some(c) if c.is_ascii_digit() || matches!(c, '$' | '~' | '+' | ',' | ' ') => i += 1,
                Some('/') => {
                    i += 1;
                    if !field(&mut i, '/') {
                        return false;
                    }
                    while matches!(chars.get(i), Some('I' | 'M')) {
                        i += 1;
                    }
                }
                Some('\\') => {
                    let Some(&delim) = chars.get(i + 1) else {
                        return false;
                    };
                    i += 2;
                    if !field(&mut i, delim) {
                        return false;
                    }
                }
                _ => break,
            }
        }
        while matches!(chars.get(i), Some('!' | ' ')) {
            i += 1;
        }
        let Some(&cmd) = chars.get(i) else {
            return false;
        };
        i += 1;
        match cmd {
            's' | 'y' => {
                let Some(&delim) = chars.get(i) else {
                    return false;
                };
                if delim == '\n' || delim == '\\' {
                    return false;
                }
                i += 1;
                if !field(&mut i, delim) || !field(&mut i, delim) {
                    return false;
                }
                if cmd == 's' {
                    while let Some(&f) = chars.get(i) {
                        match f {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' => i += 1,
                            c if c.is_ascii_digit() => i += 1,
                            // `e` runs the pattern space, `w` writes a file.
                            'e' | 'w' => return false,
                            _ => break,
                        }
                    }
                }
            }
            'p' | 'P' | 'd' | 'D' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H' | 'x' | '=' | 'l' | 'z'
            | 'F' | '{' | '}' => {}
            'q' | 'Q' => {
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_ascii_digit() || *c == ' ')
                {
                    i += 1;
                }
            }
            // Labels and branches: a name to the end of the command.
            ':' | 'b' | 't' | 'T' => {
                while chars.get(i).is_some_and(|c| !matches!(c, ';' | '\n')) {
                    i += 1;
                }
            }
            // Text commands (GNU one-line form): the rest of the line.
            'a' | 'i' | 'c' => {
                while chars.get(i).is_some_and(|c| *c != '\n') {
                    i += 1;
                }
            }
            // e, w, W, r, R and anything unknown.
            _ => return false,
        }
    }
}

/// `awk` with an inline program that runs nothing and writes nothing:
/// no `system`, no pipes, no output redirection, no `getline`, no gawk
/// `@` directives; no program file, include or extension load. gawk's
/// `--sandbox` turns those off, so any program is fine with it.
fn awk_is_read_only(w: &[String]) -> bool {
    let mut i = 1;
    let mut program = None;
    let mut sandboxed = false;
    while i < w.len() {
        let a = w[i].as_str();
        match a {
            "--sandbox" | "-S" => sandboxed = true,
            "-F" | "-v" | "--field-separator" | "--assign" => i += 1,
            "--" => {
                program = w.get(i + 1).cloned();
                break;
            }
            _ if a.starts_with("-F") || a.starts_with("-v") => {}
            _ if a.starts_with('-') && a.len() > 1 => return false,
            _ => {
                program = Some(a.to_string());
                break;
            }
        }
        i += 1;
    }
    match program {
        Some(p) => sandboxed || awk_program_is_safe(&p),
        None => false,
    }
}

pub(crate) fn awk_program_is_safe(program: &str) -> bool {
    // String literals cannot run anything; blank them out first.
    let mut code = String::with_capacity(program.len());
    let mut in_string = false;
    let mut chars = program.chars();
    while let Some(c) = chars.next() {
        match (in_string, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => {
                in_string = false;
                code.push('"');
            }
            (true, _) => {}
            (false, '"') => {
                in_string = true;
                code.push('"');
            }
            (false, c) => code.push(c),
        }
    }
    if in_string {
        return false;
    }
    let without_or = code.replace("||", "");
    if without_or.contains('|')
        || code.contains("system")
        || code.contains("getline")
        || code.contains('@')
    {
        return false;
    }
    // `>` after `print`/`printf` in the same statement redirects output;
    // elsewhere it compares.
    code.split([';', '{', '}', '\n']).all(|stmt| {
        let s = stmt.trim_start();
        !((s.starts_with("print") || s.contains(" print")) && s.contains('>'))
    })
}

/// The short flags of an option word (`-uo` → `uo`), up to the first one
/// in `takes_value` (whose value follows attached). Empty for long options
/// and operands.
fn short_flags(arg: &str, takes_value: &str) -> String {
    if !arg.starts_with('-') || arg.starts_with("--") || arg.len() < 2 {
        return String::new();
    }
    let mut out = String::new();
    for c in arg[1..].chars() {
        out.push(c);
        if takes_value.contains(c) {
            break;
        }
    }
    out
}

/// True when an argument (or an option's value) may point outside the
/// working directory: an absolute path, home, a parent directory, a brace
/// expansion or `.*` glob that can reach one, or a symlink out.
fn leaves(arg: &str, ctx: &ShellContext) -> bool {
    let value = arg.split_once('=').map_or(arg, |(_, v)| v);
    // `-f/etc/x`: a short option with its value attached.
    let attached = arg
        .strip_prefix('-')
        .filter(|_| !arg.starts_with("--"))
        .map(|rest| rest.trim_start_matches(|c: char| c.is_ascii_alphabetic()));
    let outside = |v: &str| {
        (v.starts_with('/') && !is_sink(v))
            || v.starts_with('~')
            || is_parent(v)
            || v.starts_with(".*")
            || v.starts_with(".?")
            || v.starts_with(".[")
            || (v.contains('{') && ["{/", ",/", "{~", ",~", ".."].iter().any(|s| v.contains(s)))
    };
    outside(value)
        || attached.is_some_and(outside)
        || arg.starts_with("--output")
        || (!arg.starts_with('-') && ctx.leads_outside(arg))
}

pub(crate) fn is_parent(t: &str) -> bool {
    t == ".." || t.starts_with("../") || t.contains("/../") || t.ends_with("/..")
}

pub(crate) fn is_sink(t: &str) -> bool {
    matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/zero")
}
