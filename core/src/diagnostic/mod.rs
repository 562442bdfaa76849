//! Diagnostics: plain data (code, message, labelled spans, help) produced by
//! the front end, the code registry, and rendering (terminal and JSON).
//!
//! A [`Diagnostic`] carries everything a reader needs without the source
//! text: the file name, the byte span and its 1-based line and column. The
//! rustc-style rendering ([`render`]) needs the source text again to show the
//! underlined line; JSON ([`to_json`]) does not.

pub mod codes;
pub mod explain;

use codespan_reporting::diagnostic as cs;
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term;
use serde::{Deserialize, Serialize};

/// A byte range `start..end` in one source file.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// The span `start..end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// A secondary location attached to a diagnostic ("first declared here").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    /// File the label points into.
    pub file: String,
    /// Byte span in that file.
    pub span: Span,
    /// 1-based line of `span.start`.
    pub line: usize,
    /// 1-based column (in characters) of `span.start`.
    pub col: usize,
    /// What this location is.
    pub message: String,
}

/// One compile error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Stable code from [`codes::CODES`], e.g. `E0400`.
    pub code: String,
    /// One-line message, e.g. ``type mismatch: expected `String`, found `Int` ``.
    pub message: String,
    /// Name of the file the primary span points into.
    pub file: String,
    /// Primary byte span.
    pub span: Span,
    /// 1-based line of `span.start`.
    pub line: usize,
    /// 1-based column (in characters) of `span.start`.
    pub col: usize,
    /// Secondary locations.
    pub labels: Vec<Label>,
    /// A suggestion, when one helps.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with code `code` at `span` of file `file` whose text is
    /// `text` (used to compute line and column).
    pub fn new(
        code: &str,
        message: impl Into<String>,
        file: &str,
        text: &str,
        span: Span,
    ) -> Diagnostic {
        let (line, col) = line_col(text, span.start);
        Diagnostic {
            code: code.to_string(),
            message: message.into(),
            file: file.to_string(),
            span,
            line,
            col,
            labels: Vec::new(),
            help: None,
        }
    }

    /// Like [`Diagnostic::new`], with the line/column looked up in `lines`
    /// (the [`LineIndex`] of `text`).
    pub fn indexed(
        code: &str,
        message: impl Into<String>,
        file: &str,
        text: &str,
        lines: &LineIndex,
        span: Span,
    ) -> Diagnostic {
        let (line, col) = lines.line_col(text, span.start);
        Diagnostic {
            code: code.to_string(),
            message: message.into(),
            file: file.to_string(),
            span,
            line,
            col,
            labels: Vec::new(),
            help: None,
        }
    }

    /// Adds a secondary label at `span` of `file` (whose text is `text`).
    pub fn with_label(
        mut self,
        file: &str,
        text: &str,
        span: Span,
        message: impl Into<String>,
    ) -> Diagnostic {
        let (line, col) = line_col(text, span.start);
        self.labels.push(Label {
            file: file.to_string(),
            span,
            line,
            col,
            message: message.into(),
        });
        self
    }

    /// Sets the `help:` line.
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }
}

/// Where the lines of a text start, for (line, column) lookups in
/// logarithmic time (diagnostics of a big file do not rescan it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes `text`.
    pub fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex { starts }
    }

    /// 1-based (line, column) of byte offset `at` in `text` (the text this
    /// index was built from); the column counts characters.
    pub fn line_col(&self, text: &str, at: usize) -> (usize, usize) {
        let at = at.min(text.len());
        let line = self.starts.partition_point(|&s| s <= at).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0).min(at);
        let col = text
            .get(start..at)
            .map(|s| s.chars().count())
            .unwrap_or(at - start)
            + 1;
        (line, col)
    }
}

/// 1-based (line, column) of byte offset `at` in `text` (column counted in
/// characters). Offsets past the end map to the end.
pub fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let mut line = 1;
    let mut line_start = 0;
    for (i, b) in text.bytes().enumerate() {
        if i >= at {
            break;
        }
        if b == b'\n' {
            line += 1;
            line_start = i + 1;
        }
    }
    let col = text
        .get(line_start..at)
        .map(|s| s.chars().count())
        .unwrap_or(at - line_start)
        + 1;
    (line, col)
}

/// Renders diagnostics rustc-style (no colors) against the sources they
/// point into, given as `(file name, text)` pairs. A diagnostic whose file is
/// not among `sources` is rendered without a source snippet.
pub fn render(diagnostics: &[Diagnostic], sources: &[(&str, &str)]) -> String {
    let mut files = SimpleFiles::new();
    let ids: Vec<(String, usize)> = sources
        .iter()
        .map(|(name, text)| {
            (
                name.to_string(),
                files.add(name.to_string(), text.to_string()),
            )
        })
        .collect();
    let find = |name: &str| ids.iter().find(|(n, _)| n == name).map(|(_, id)| *id);
    let config = term::Config::default();
    let mut out = term::termcolor::NoColor::new(Vec::<u8>::new());
    for d in diagnostics {
        let mut diag = cs::Diagnostic::error()
            .with_code(d.code.clone())
            .with_message(d.message.clone());
        let mut labels = Vec::new();
        if let Some(id) = find(&d.file) {
            labels.push(cs::Label::primary(id, d.span.start..d.span.end));
        }
        for l in &d.labels {
            if let Some(id) = find(&l.file) {
                labels.push(
                    cs::Label::secondary(id, l.span.start..l.span.end)
                        .with_message(l.message.clone()),
                );
            }
        }
        let mut notes = Vec::new();
        if labels.is_empty() {
            notes.push(format!("at {}:{}:{}", d.file, d.line, d.col));
        }
        if let Some(help) = &d.help {
            notes.push(format!("help: {help}"));
        }
        diag = diag.with_labels(labels).with_notes(notes);
        if term::emit(&mut out, &config, &files, &diag).is_err() {
            // A span outside its file: fall back to the plain header.
            let line = format!(
                "error[{}]: {}\n  at {}:{}:{}\n\n",
                d.code, d.message, d.file, d.line, d.col
            );
            out.get_mut().extend_from_slice(line.as_bytes());
        }
    }
    String::from_utf8_lossy(&out.into_inner()).into_owned()
}

/// The diagnostics as a JSON array (the same objects the server returns in a
/// `422 COMPILE_ERROR`).
pub fn to_json(diagnostics: &[Diagnostic]) -> serde_json::Value {
    serde_json::to_value(diagnostics).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_agrees_with_scanning() {
        let text = "ab\nçé🚀x\n\n  z\r\nlast";
        let index = LineIndex::new(text);
        for at in (0..=text.len() + 3).filter(|i| *i > text.len() || text.is_char_boundary(*i)) {
            assert_eq!(index.line_col(text, at), line_col(text, at), "offset {at}");
        }
        assert_eq!(index.line_col(text, 7), (2, 3));
    }
}
