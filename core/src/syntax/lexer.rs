//! The lexer: source text to tokens. It never stops: a bad character or
//! literal is reported (E0001..E0004) and lexing continues after it.

use super::token::{Token, TokenKind};
use crate::diagnostic::{Diagnostic, LineIndex, Span};

/// Lexical errors reported per file; past this many the rest are noise.
pub const MAX_LEXICAL_ERRORS: usize = 100;

/// Splits `text` (of file `file`) into tokens, ending with [`TokenKind::Eof`].
pub fn lex(file: &str, text: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut lexer = Lexer {
        file,
        text,
        bytes: text.as_bytes(),
        pos: 0,
        line_start: true,
        tokens: Vec::new(),
        errors: Vec::new(),
        lines: LineIndex::new(text),
    };
    lexer.run();
    (lexer.tokens, lexer.errors)
}

struct Lexer<'a> {
    file: &'a str,
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    line_start: bool,
    tokens: Vec<Token>,
    errors: Vec<Diagnostic>,
    lines: LineIndex,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> u8 {
        self.bytes.get(self.pos + ahead).copied().unwrap_or(0)
    }

    fn error(&mut self, code: &str, message: String, span: Span) {
        let d = Diagnostic::indexed(code, message, self.file, self.text, &self.lines, span);
        self.report(d);
    }

    fn report(&mut self, d: Diagnostic) {
        if self.errors.len() < MAX_LEXICAL_ERRORS {
            self.errors.push(d);
        }
    }

    fn push(&mut self, kind: TokenKind, start: usize) {
        self.tokens.push(Token {
            kind,
            span: Span::new(start, self.pos),
            line_start: self.line_start,
        });
        self.line_start = false;
    }

    fn run(&mut self) {
        while self.pos < self.bytes.len() {
            let start = self.pos;
            let c = self.peek(0);
            match c {
                b'\n' => {
                    self.pos += 1;
                    self.line_start = true;
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'/' if self.peek(1) == b'/' => {
                    while self.pos < self.bytes.len() && self.peek(0) != b'\n' {
                        self.pos += 1;
                    }
                }
                b'"' => self.string(),
                b'0'..=b'9' => self.number(),
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                    while matches!(self.peek(0), b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_') {
                        self.pos += 1;
                    }
                    let name = self.text[start..self.pos].to_string();
                    self.push(TokenKind::Ident(name), start);
                }
                _ => {
                    let two = [c, self.peek(1)];
                    let kind = match &two {
                        b"??" => Some(TokenKind::QuestionQuestion),
                        b"==" => Some(TokenKind::EqEq),
                        b"!=" => Some(TokenKind::NotEq),
                        b"<=" => Some(TokenKind::Le),
                        b">=" => Some(TokenKind::Ge),
                        b"&&" => Some(TokenKind::AndAnd),
                        b"||" => Some(TokenKind::OrOr),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        self.pos += 2;
                        self.push(kind, start);
                        continue;
                    }
                    let kind = match c {
                        b'{' => Some(TokenKind::LBrace),
                        b'}' => Some(TokenKind::RBrace),
                        b'[' => Some(TokenKind::LBracket),
                        b']' => Some(TokenKind::RBracket),
                        b'(' => Some(TokenKind::LParen),
                        b')' => Some(TokenKind::RParen),
                        b',' => Some(TokenKind::Comma),
                        b':' => Some(TokenKind::Colon),
                        b'.' => Some(TokenKind::Dot),
                        b'?' => Some(TokenKind::Question),
                        b'=' => Some(TokenKind::Assign),
                        b'+' => Some(TokenKind::Plus),
                        b'-' => Some(TokenKind::Minus),
                        b'*' => Some(TokenKind::Star),
                        b'/' => Some(TokenKind::Slash),
                        b'%' => Some(TokenKind::Percent),
                        b'!' => Some(TokenKind::Bang),
                        b'<' => Some(TokenKind::Lt),
                        b'>' => Some(TokenKind::Gt),
                        _ => None,
                    };
                    match kind {
                        Some(kind) => {
                            self.pos += 1;
                            self.push(kind, start);
                        }
                        None => {
                            let ch = self.text[start..].chars().next().unwrap_or('\u{fffd}');
                            self.pos += ch.len_utf8().max(1);
                            self.error(
                                "E0001",
                                format!("unexpected character `{}`", ch.escape_debug()),
                                Span::new(start, self.pos),
                            );
                        }
                    }
                }
            }
        }
        let end = self.bytes.len();
        self.tokens.push(Token {
            kind: TokenKind::Eof,
            span: Span::new(end, end),
            line_start: true,
        });
    }

    fn string(&mut self) {
        let start = self.pos;
        self.pos += 1;
        let mut value = String::new();
        loop {
            let c = self.peek(0);
            if self.pos >= self.bytes.len() || c == b'\n' {
                self.error(
                    "E0002",
                    "unterminated string literal".to_string(),
                    Span::new(start, self.pos),
                );
                break;
            }
            match c {
                b'"' => {
                    self.pos += 1;
                    break;
                }
                b'\\' => {
                    let esc_start = self.pos;
                    self.pos += 1;
                    match self.peek(0) {
                        b'"' => value.push('"'),
                        b'\\' => value.push('\\'),
                        b'n' => value.push('\n'),
                        b't' => value.push('\t'),
                        b'u' if self.peek(1) == b'{' => {
                            self.pos += 2;
                            let digits_start = self.pos;
                            while self.peek(0).is_ascii_hexdigit() {
                                self.pos += 1;
                            }
                            let digits = &self.text[digits_start..self.pos];
                            let closed = self.peek(0) == b'}';
                            let ch = u32::from_str_radix(digits, 16)
                                .ok()
                                .and_then(char::from_u32);
                            match (closed, ch, digits.len()) {
                                (true, Some(ch), 1..=6) => value.push(ch),
                                _ => {
                                    if closed {
                                        self.pos += 1;
                                    }
                                    self.error(
                                        "E0004",
                                        "invalid unicode escape: expected `\\u{` 1 to 6 hex digits `}` naming a character"
                                            .to_string(),
                                        Span::new(esc_start, self.pos),
                                    );
                                    continue;
                                }
                            }
                        }
                        b'\n' | 0 => {
                            self.error(
                                "E0004",
                                "invalid escape sequence `\\`".to_string(),
                                Span::new(esc_start, self.pos),
                            );
                            continue;
                        }
                        _ => {
                            let ch = self.text[self.pos..].chars().next().unwrap_or('?');
                            self.pos += ch.len_utf8();
                            self.error(
                                "E0004",
                                format!("invalid escape sequence `\\{ch}`"),
                                Span::new(esc_start, self.pos),
                            );
                            continue;
                        }
                    }
                    self.pos += 1;
                }
                _ => {
                    let ch = self.text[self.pos..].chars().next().unwrap_or('?');
                    value.push(ch);
                    self.pos += ch.len_utf8();
                }
            }
        }
        self.push(TokenKind::Str(value), start);
    }

    fn number(&mut self) {
        let start = self.pos;
        while self.peek(0).is_ascii_digit() || self.peek(0) == b'_' {
            self.pos += 1;
        }
        let mut is_float = false;
        if self.peek(0) == b'.' && self.peek(1).is_ascii_digit() {
            is_float = true;
            self.pos += 1;
            while self.peek(0).is_ascii_digit() {
                self.pos += 1;
            }
        }
        if matches!(self.peek(0), b'e' | b'E')
            && (self.peek(1).is_ascii_digit()
                || (matches!(self.peek(1), b'+' | b'-') && self.peek(2).is_ascii_digit()))
        {
            is_float = true;
            self.pos += 2;
            while self.peek(0).is_ascii_digit() {
                self.pos += 1;
            }
        }
        let digits_end = self.pos;
        while self.peek(0).is_ascii_alphanumeric() || self.peek(0) == b'_' {
            self.pos += 1;
        }
        let digits: String = self.text[start..digits_end]
            .chars()
            .filter(|c| *c != '_')
            .collect();
        let suffix = &self.text[digits_end..self.pos];
        let span = Span::new(start, self.pos);
        let literal = &self.text[start..self.pos];
        let kind = if suffix.is_empty() {
            if is_float {
                digits
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(TokenKind::Float)
            } else {
                digits.parse::<i64>().ok().map(TokenKind::Int)
            }
        } else {
            let unit: Option<u64> = match suffix {
                "ms" => Some(1),
                "s" => Some(1_000),
                "m" => Some(60_000),
                "h" => Some(3_600_000),
                "d" => Some(86_400_000),
                _ => None,
            };
            match (unit, is_float) {
                (Some(unit), false) => digits
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| n.checked_mul(unit))
                    .filter(|ms| *ms <= i64::MAX as u64)
                    .map(TokenKind::Duration),
                _ => None,
            }
        };
        match kind {
            Some(kind) => self.push(kind, start),
            None => {
                let d = Diagnostic::indexed(
                        "E0003",
                        format!("malformed number or duration literal `{literal}`"),
                        self.file,
                        self.text,
                        &self.lines,
                        span,
                    )
                    .with_help("integers are digits (`42`), floats have a fraction or exponent (`2.5`, `1e3`), durations are an integer with a unit: `250ms`, `10s`, `5m`, `2h`, `1d`");
                self.report(d);
                self.push(TokenKind::Invalid, start);
            }
        }
    }
}
