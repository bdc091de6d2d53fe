// The parser.
pub fn parse() {}
