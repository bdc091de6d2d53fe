// The lexer.
pub fn lex() {}
