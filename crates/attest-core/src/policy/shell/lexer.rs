//! The tokenizer: words (with quoting, escapes and substitutions),
//! operators, redirections and heredoc bodies.

use super::ParseError;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    Word(Word),
    /// Ends a command and its pipeline.
    Sep,
    /// Ends a command, continues the pipeline.
    Pipe,
    Redirect(&'static str),
    /// `;;`: inside `case`, which is not followed.
    CaseSep,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Word {
    pub text: String,
    /// Some character was quoted or escaped.
    pub quoted: bool,
    /// Contains a substitution or a variable: the value is not known.
    pub expands: bool,
    /// Has an unquoted `*`, `?` or `[`: the shell may expand it to file
    /// names (which can start with `-` and so become options).
    pub glob: bool,
    /// Evaluates a variable's value as arithmetic (`$((x))`, `${s:x}`,
    /// `${a[x]}`, `${!x}`), which in bash runs any `$(…)` inside the value.
    pub evaluates: bool,
}

pub(super) struct Lexer {
    chars: Vec<char>,
    pos: usize,
    /// Substitution bodies and heredoc scripts to split separately.
    pub subs: Vec<String>,
    /// Heredocs whose bodies start after the next newline:
    /// (delimiter, quoted, strip leading tabs).
    heredocs: Vec<(String, bool, bool)>,
    /// Heredoc bodies, in the order their `<<` operators appear, each with
    /// whether expanding it evaluates a value as arithmetic.
    pub heredoc_bodies: Vec<(String, bool)>,
}

impl Lexer {
    pub(super) fn new(text: &str) -> Self {
        Lexer {
            chars: text.chars().collect(),
            pos: 0,
            subs: Vec::new(),
            heredocs: Vec::new(),
            heredoc_bodies: Vec::new(),
        }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(i, c)| self.peek(i) == Some(c))
    }

    pub(super) fn lex(&mut self) -> Result<Vec<Token>, ParseError> {
        let mut tokens = Vec::new();
        loop {
            while matches!(self.peek(0), Some(' ' | '\t')) {
                self.pos += 1;
            }
            let Some(c) = self.peek(0) else { break };
            match c {
                '\n' => {
                    self.pos += 1;
                    tokens.push(Token::Sep);
                    self.read_heredoc_bodies();
                }
                '#' => {
                    while !matches!(self.peek(0), None | Some('\n')) {
                        self.pos += 1;
                    }
                }
                ';' | '&' | '|' | '(' | ')' => tokens.push(self.control()),
                '<' | '>' if self.peek(1) == Some('(') => {
                    self.pos += 2;
                    let body = self.balanced_parens()?;
                    self.subs.push(body);
                    tokens.push(Token::Word(Word {
                        text: format!("{c}(…)"),
                        expands: true,
                        ..Word::default()
                    }));
                }
                '<' | '>' => {
                    let op = self.redirect_op();
                    tokens.push(Token::Redirect(op));
                    if matches!(op, "<<" | "<<-") {
                        self.heredoc_delimiter(op == "<<-", &mut tokens)?;
                    }
                }
                _ => {
                    let word = self.word()?;
                    // `2>`, `1>>`: an unquoted number right before a
                    // redirection is its descriptor, not an argument.
                    let fd = !word.quoted
                        && !word.text.is_empty()
                        && word.text.chars().all(|c| c.is_ascii_digit())
                        && matches!(self.peek(0), Some('<' | '>'));
                    if !fd {
                        tokens.push(Token::Word(word));
                    }
                }
            }
        }
        Ok(tokens)
    }

    fn control(&mut self) -> Token {
        let two: String = self.chars[self.pos..].iter().take(2).collect();
        let (token, len) = match two.as_str() {
            ";;" => (Token::CaseSep, 2),
            "&&" | "||" => (Token::Sep, 2),
            "|&" => (Token::Pipe, 2),
            "&>" => {
                let op = if self.peek(2) == Some('>') {
                    "&>>"
                } else {
                    "&>"
                };
                (Token::Redirect(op), op.len())
            }
            _ if two.starts_with('|') => (Token::Pipe, 1),
            _ => (Token::Sep, 1),
        };
        self.pos += len;
        token
    }

    fn redirect_op(&mut self) -> &'static str {
        const OPS: [&str; 11] = [
            "<<<", "<<-", "&>>", ">>", ">|", ">&", "<<", "<>", "<&", ">", "<",
        ];
        for op in OPS {
            if self.starts_with(op) {
                self.pos += op.len();
                return op;
            }
        }
        // Unreachable: called only at `<` or `>`.
        self.pos += 1;
        ">"
    }

    fn heredoc_delimiter(
        &mut self,
        strip_tabs: bool,
        tokens: &mut Vec<Token>,
    ) -> Result<(), ParseError> {
        while matches!(self.peek(0), Some(' ' | '\t')) {
            self.pos += 1;
        }
        let word = self.word()?;
        self.heredocs
            .push((word.text.clone(), word.quoted, strip_tabs));
        tokens.push(Token::Word(word));
        Ok(())
    }

    /// Consumes the bodies of pending heredocs, line by line, up to each
    /// delimiter. An unquoted heredoc's body still runs substitutions.
    fn read_heredoc_bodies(&mut self) {
        for (delimiter, quoted, strip_tabs) in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            while self.pos < self.chars.len() {
                let start = self.pos;
                while !matches!(self.peek(0), None | Some('\n')) {
                    self.pos += 1;
                }
                let line: String = self.chars[start..self.pos].iter().collect();
                if self.peek(0) == Some('\n') {
                    self.pos += 1;
                }
                let check = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if check == delimiter {
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            let evaluates = !quoted && expansion_evaluates(&body);
            if !quoted {
                self.subs.extend(scan_substitutions(&body));
            }
            self.heredoc_bodies.push((body, evaluates));
        }
    }

    /// One word, up to an unquoted blank or operator.
    fn word(&mut self) -> Result<Word, ParseError> {
        let mut w = Word::default();
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => break,
                '\\' => {
                    self.pos += 1;
                    match self.peek(0) {
                        Some('\n') => self.pos += 1,
                        Some(c) => {
                            w.text.push(c);
                            w.quoted = true;
                            self.pos += 1;
                        }
                        None => w.text.push('\\'),
                    }
                }
                '\'' => {
                    self.pos += 1;
                    w.quoted = true;
                    loop {
                        match self.peek(0) {
                            None => return Err(ParseError::Unbalanced("single quote")),
                            Some('\'') => {
                                self.pos += 1;
                                break;
                            }
                            Some(c) => {
                                w.text.push(c);
                                self.pos += 1;
                            }
                        }
                    }
                }
                '"' => {
                    self.pos += 1;
                    w.quoted = true;
                    self.double_quoted(&mut w)?;
                }
                '$' => self.dollar(&mut w, false)?,
                '`' => {
                    self.pos += 1;
                    let body = self.backtick_body()?;
                    self.subs.push(body);
                    w.text.push_str("`…`");
                    w.expands = true;
                }
                c => {
                    w.glob |= matches!(c, '*' | '?' | '[');
                    w.text.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(w)
    }

    fn double_quoted(&mut self, w: &mut Word) -> Result<(), ParseError> {
        loop {
            match self.peek(0) {
                None => return Err(ParseError::Unbalanced("double quote")),
                Some('"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some('\\') => {
                    match self.peek(1) {
                        Some(c @ ('$' | '`' | '"' | '\\')) => w.text.push(c),
                        Some('\n') => {}
                        Some(c) => {
                            w.text.push('\\');
                            w.text.push(c);
                        }
                        None => return Err(ParseError::Unbalanced("double quote")),
                    }
                    self.pos += 2;
                }
                Some('$') => self.dollar(w, true)?,
                Some('`') => {
                    self.pos += 1;
                    let body = self.backtick_body()?;
                    self.subs.push(body);
                    w.text.push_str("`…`");
                    w.expands = true;
                }
                Some(c) => {
                    w.text.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `$(…)`, `$((…))`, `${…}`, `$NAME`, `$'…'` (ANSI-C quoting, as bash
    /// and zsh read it), `$"…"`, or a lone `$`.
    fn dollar(&mut self, w: &mut Word, in_double_quotes: bool) -> Result<(), ParseError> {
        self.pos += 1;
        match self.peek(0) {
            Some('\'' | '"') if in_double_quotes => w.text.push('$'),
            Some('\'') => {
                self.pos += 1;
                w.quoted = true;
                self.ansi_c_quoted(w)?;
            }
            Some('"') => {
                // bash's locale-translated string: a double-quoted one here.
                self.pos += 1;
                w.quoted = true;
                self.double_quoted(w)?;
            }
            Some('(') => {
                self.pos += 1;
                let arithmetic = self.peek(0) == Some('(');
                let body = self.balanced_parens()?;
                if arithmetic {
                    // `$((…))`: the body (inner parens included) is an
                    // expression; only substitutions inside it run, but a
                    // name in it is evaluated in turn.
                    self.subs.extend(scan_substitutions(&body));
                    w.evaluates |= arithmetic_names(&body);
                    w.text.push_str("$((…))");
                } else {
                    self.subs.push(body);
                    w.text.push_str("$(…)");
                }
                w.expands = true;
            }
            Some('{') => {
                self.pos += 1;
                let start = self.pos;
                let mut depth = 1usize;
                while depth > 0 {
                    match self.peek(0) {
                        None => return Err(ParseError::Unbalanced("${")),
                        Some('{') => depth += 1,
                        Some('}') => depth -= 1,
                        Some('\\') => self.pos += 1,
                        _ => {}
                    }
                    self.pos += 1;
                }
                let body: String = self.chars[start..self.pos - 1].iter().collect();
                self.subs.extend(scan_substitutions(&body));
                w.evaluates |= parameter_evaluates(&body);
                w.text.push_str("${");
                w.text.push_str(&body);
                w.text.push('}');
                w.expands = true;
            }
            Some(c) if c.is_ascii_alphanumeric() || "_@*#?$!-".contains(c) => {
                w.text.push('$');
                if c.is_ascii_alphabetic() || c == '_' {
                    while let Some(c) = self
                        .peek(0)
                        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    {
                        w.text.push(c);
                        self.pos += 1;
                    }
                } else {
                    w.text.push(c);
                    self.pos += 1;
                }
                w.expands = true;
            }
            _ => w.text.push('$'),
        }
        Ok(())
    }

    /// The body of `$'…'` after the opening quote, escapes decoded, so
    /// `$'\x72\x6d'` is the word `rm` it runs as.
    fn ansi_c_quoted(&mut self, w: &mut Word) -> Result<(), ParseError> {
        loop {
            let Some(c) = self.peek(0) else {
                return Err(ParseError::Unbalanced("$' quote"));
            };
            self.pos += 1;
            match c {
                '\'' => return Ok(()),
                '\\' => {
                    let Some(e) = self.peek(0) else {
                        return Err(ParseError::Unbalanced("$' quote"));
                    };
                    self.pos += 1;
                    match e {
                        'a' => w.text.push('\u{7}'),
                        'b' => w.text.push('\u{8}'),
                        'e' | 'E' => w.text.push('\u{1b}'),
                        'f' => w.text.push('\u{c}'),
                        'n' => w.text.push('\n'),
                        'r' => w.text.push('\r'),
                        't' => w.text.push('\t'),
                        'v' => w.text.push('\u{b}'),
                        'x' => self.push_code(w, 16, 2),
                        'u' => self.push_code(w, 16, 4),
                        'U' => self.push_code(w, 16, 8),
                        '0'..='7' => {
                            self.pos -= 1;
                            self.push_code(w, 8, 3);
                        }
                        'c' => {
                            if let Some(ctl) = self.peek(0) {
                                self.pos += 1;
                                w.text.push(char::from((ctl as u8) & 0x1f));
                            }
                        }
                        other => {
                            if !matches!(other, '\\' | '\'' | '"' | '?') {
                                w.text.push('\\');
                            }
                            w.text.push(other);
                        }
                    }
                }
                c => w.text.push(c),
            }
        }
    }

    /// Up to `max` digits in `radix` as one character (`\x41`, `\101`).
    fn push_code(&mut self, w: &mut Word, radix: u32, max: usize) {
        let mut value = 0u32;
        let mut digits = 0;
        while digits < max {
            match self.peek(0).and_then(|c| c.to_digit(radix)) {
                Some(d) => {
                    value = value.saturating_mul(radix).saturating_add(d);
                    self.pos += 1;
                    digits += 1;
                }
                None => break,
            }
        }
        if digits == 0 {
            return;
        }
        // Bytes above ASCII in `\x` form are raw bytes in bash; a
        // replacement character keeps the word text valid and unlike any
        // program name.
        w.text
            .push(char::from_u32(value).unwrap_or(char::REPLACEMENT_CHARACTER));
    }

    /// The body of `( … )` after the opening paren, up to its match,
    /// skipping quoted text and nested substitutions.
    fn balanced_parens(&mut self) -> Result<String, ParseError> {
        let start = self.pos;
        let mut depth = 1usize;
        while let Some(c) = self.peek(0) {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        let body = self.chars[start..self.pos].iter().collect();
                        self.pos += 1;
                        return Ok(body);
                    }
                }
                '\\' => self.pos += 1,
                '\'' => {
                    self.pos += 1;
                    while self.peek(0).is_some_and(|c| c != '\'') {
                        self.pos += 1;
                    }
                    if self.peek(0).is_none() {
                        return Err(ParseError::Unbalanced("single quote"));
                    }
                }
                '"' => {
                    self.pos += 1;
                    while let Some(c) = self.peek(0) {
                        if c == '"' {
                            break;
                        }
                        if c == '\\' {
                            self.pos += 1;
                        }
                        self.pos += 1;
                    }
                    if self.peek(0).is_none() {
                        return Err(ParseError::Unbalanced("double quote"));
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
        Err(ParseError::Unbalanced("parenthesis"))
    }

    fn backtick_body(&mut self) -> Result<String, ParseError> {
        let mut body = String::new();
        loop {
            match self.peek(0) {
                None => return Err(ParseError::Unbalanced("backtick")),
                Some('`') => {
                    self.pos += 1;
                    return Ok(body);
                }
                Some('\\') if matches!(self.peek(1), Some('`' | '\\' | '$')) => {
                    body.push(self.peek(1).unwrap_or('\\'));
                    self.pos += 2;
                }
                Some(c) => {
                    body.push(c);
                    self.pos += 1;
                }
            }
        }
    }
}

/// The command substitutions in text where quotes mean nothing (heredoc
/// bodies, `${…}` and `$((…))` bodies). Unbalanced ones are taken to the end.
fn scan_substitutions(text: &str) -> Vec<String> {
    let mut lexer = Lexer::new(text);
    let mut found = Vec::new();
    while let Some(c) = lexer.peek(0) {
        match c {
            '\\' => lexer.pos += 2,
            '$' if lexer.peek(1) == Some('(') => {
                lexer.pos += 2;
                let start = lexer.pos;
                match lexer.balanced_parens() {
                    Ok(body) => found.push(body),
                    Err(_) => {
                        found.push(lexer.chars[start..].iter().collect());
                        break;
                    }
                }
            }
            '`' => {
                lexer.pos += 1;
                let start = lexer.pos;
                match lexer.backtick_body() {
                    Ok(body) => found.push(body),
                    Err(_) => {
                        found.push(lexer.chars[start..].iter().collect());
                        break;
                    }
                }
            }
            _ => lexer.pos += 1,
        }
    }
    found
}

/// True when an arithmetic expression names a variable (or expands one):
/// its value is then evaluated as arithmetic too.
fn arithmetic_names(expr: &str) -> bool {
    expr.chars()
        .any(|c| c.is_ascii_alphabetic() || c == '_' || c == '$' || c == '[')
}

/// True when a `${…}` body evaluates arithmetic: an offset (`s:x`, but not
/// the `:-` `:=` `:+` `:?` defaults), a subscript (`a[x]`) or indirection
/// (`!x`).
fn parameter_evaluates(body: &str) -> bool {
    if body.starts_with('!') || body.contains('[') {
        return true;
    }
    let name_len = body
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_alphanumeric() || *c == '_' || (*i == 0 && *c == '#')))
        .map_or(body.len(), |(i, _)| i);
    let rest = &body[name_len..];
    rest.strip_prefix(':')
        .is_some_and(|after| !after.starts_with(['-', '=', '+', '?']))
}

/// True when expanding `text` (an unquoted heredoc body) evaluates a
/// value as arithmetic.
fn expansion_evaluates(text: &str) -> bool {
    let mut lexer = Lexer::new(text);
    let mut w = Word::default();
    while let Some(c) = lexer.peek(0) {
        if c == '\\' {
            lexer.pos += 2;
        } else if c == '$' {
            if lexer.dollar(&mut w, true).is_err() {
                // Unbalanced: be safe.
                return true;
            }
        } else {
            lexer.pos += 1;
        }
    }
    w.evaluates
}
