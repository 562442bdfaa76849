//! Collecting diagnostics against the compile set's sources.

use super::Source;
use crate::diagnostic::{Diagnostic, Label, LineIndex, Span};

/// A location: file index into the compile set, and a span in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    pub file: usize,
    pub span: Span,
}

/// Builds diagnostics with line/column from the sources and collects them.
pub(crate) struct Reporter<'a> {
    sources: &'a [Source],
    lines: Vec<LineIndex>,
    pub diags: Vec<(usize, Diagnostic)>,
}

impl<'a> Reporter<'a> {
    pub fn new(sources: &'a [Source]) -> Reporter<'a> {
        Reporter {
            sources,
            lines: sources.iter().map(|s| LineIndex::new(&s.text)).collect(),
            diags: Vec::new(),
        }
    }

    fn name_text(&self, file: usize) -> (&'a str, &'a str) {
        self.sources
            .get(file)
            .map(|s| (s.name.as_str(), s.text.as_str()))
            .unwrap_or(("", ""))
    }

    /// A diagnostic at `loc` (not yet reported).
    pub fn make(&self, code: &str, message: impl Into<String>, loc: Loc) -> Diagnostic {
        let (name, text) = self.name_text(loc.file);
        match self.lines.get(loc.file) {
            Some(lines) => Diagnostic::indexed(code, message, name, text, lines, loc.span),
            None => Diagnostic::new(code, message, name, text, loc.span),
        }
    }

    /// Adds a secondary label at `loc`.
    pub fn label(&self, mut d: Diagnostic, loc: Loc, message: impl Into<String>) -> Diagnostic {
        let (name, text) = self.name_text(loc.file);
        let Some(lines) = self.lines.get(loc.file) else {
            return d.with_label(name, text, loc.span, message);
        };
        let (line, col) = lines.line_col(text, loc.span.start);
        d.labels.push(Label {
            file: name.to_string(),
            span: loc.span,
            line,
            col,
            message: message.into(),
        });
        d
    }

    /// Records a finished diagnostic that belongs to file `file`.
    pub fn push(&mut self, file: usize, d: Diagnostic) {
        self.diags.push((file, d));
    }

    /// Reports `code: message` at `loc`.
    pub fn error(&mut self, code: &str, message: impl Into<String>, loc: Loc) {
        let d = self.make(code, message, loc);
        self.push(loc.file, d);
    }

    /// Reports `code: message` at `loc` with a `help:`.
    pub fn error_help(
        &mut self,
        code: &str,
        message: impl Into<String>,
        loc: Loc,
        help: impl Into<String>,
    ) {
        let d = self.make(code, message, loc).with_help(help);
        self.push(loc.file, d);
    }

    /// How many diagnostics were reported so far.
    pub fn count(&self) -> usize {
        self.diags.len()
    }
}
