//! The parser: tokens to a syntax tree. Parsing never aborts: an error is
//! reported once (E0010/E0011/E0012) and the parser resumes at the next clause or
//! declaration boundary (a line start at the same nesting depth, or the end
//! of the enclosing block), so every independent error surfaces in one run.

use super::ast::*;
use super::lexer::lex;
use super::token::{Token, TokenKind};
use crate::diagnostic::{Diagnostic, LineIndex, Span};
use crate::ir::{BinaryOp, UnaryOp};

/// Parses file `file` whose text is `text`. Returns the tree (with the parts
/// that parsed) and every lexical and syntax error.
pub fn parse(file: &str, text: &str) -> (File, Vec<Diagnostic>) {
    let (tokens, errors) = lex(file, text);
    // Nesting depth of every token. A closing token that does not match the
    // innermost opener closes up to its own opener (if there is one), so a
    // stray `(` does not swallow the `}` of the enclosing block.
    let mut depth = Vec::with_capacity(tokens.len());
    let mut open: Vec<&TokenKind> = Vec::new();
    for t in &tokens {
        let opener = match t.kind {
            TokenKind::RBrace => Some(TokenKind::LBrace),
            TokenKind::RBracket => Some(TokenKind::LBracket),
            TokenKind::RParen => Some(TokenKind::LParen),
            _ => None,
        };
        match (&t.kind, opener) {
            (TokenKind::LBrace | TokenKind::LBracket | TokenKind::LParen, _) => {
                depth.push(open.len());
                open.push(&t.kind);
            }
            (_, Some(opener)) => {
                if let Some(at) = open.iter().rposition(|k| **k == opener) {
                    open.truncate(at);
                }
                depth.push(open.len());
            }
            _ => depth.push(open.len()),
        }
    }
    // An unterminated string has swallowed the rest of its line, closing
    // braces included: an unclosed block then is not a separate mistake.
    let eof_reported = errors.iter().any(|e| e.code == "E0002");
    let mut parser = Parser {
        file,
        text,
        tokens,
        depth,
        pos: 0,
        errors,
        eof_reported,
        recoveries: 0,
        nest: 0,
        lines: LineIndex::new(text),
    };
    let tree = parser.file();
    (tree, parser.errors)
}

/// A parse failure already reported; the caller recovers.
struct Fail;

type PResult<T> = Result<T, Fail>;

struct Parser<'a> {
    file: &'a str,
    text: &'a str,
    tokens: Vec<Token>,
    depth: Vec<usize>,
    pos: usize,
    errors: Vec<Diagnostic>,
    eof_reported: bool,
    /// Clause recoveries so far (to mark the enclosing node `recovered`).
    recoveries: usize,
    /// Current nesting of recursive expression/type parsing.
    nest: usize,
    /// Line starts of `text`.
    lines: LineIndex,
}

/// Deepest expression tree accepted. Bounds the recursion of the parser,
/// the checker and the evaluator, and keeps compiled definitions well under
/// JSON decoders' nesting limits.
pub const MAX_EXPR_DEPTH: usize = 32;
/// Deepest written type accepted.
pub const MAX_TYPE_DEPTH: usize = 16;

/// Depth of an expression tree (bounded: the parser never builds one
/// deeper than [`MAX_EXPR_DEPTH`] + 1).
fn depth(e: &Expr) -> usize {
    1 + match &e.kind {
        ExprKind::Member(b, _) | ExprKind::Unary(_, b) => depth(b),
        ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => depth(a).max(depth(b)),
        ExprKind::Call(_, items) | ExprKind::List(items) => {
            items.iter().map(depth).max().unwrap_or(0)
        }
        ExprKind::Record(fields) => fields.iter().map(|(_, v)| depth(v)).max().unwrap_or(0),
        _ => 0,
    }
}

const STEP_CLAUSES: &str =
    "a step clause (`worker`, `with`, `workflow`, `sleep`, `signal`, `for`, `compensate`) or a property (`name: value`)";

impl Parser<'_> {
    fn tok(&self) -> &Token {
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[self.pos.min(last)]
    }

    fn kind(&self) -> &TokenKind {
        &self.tok().kind
    }

    fn kind_at(&self, ahead: usize) -> &TokenKind {
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[(self.pos + ahead).min(last)].kind
    }

    fn span(&self) -> Span {
        self.tok().span
    }

    fn prev_span(&self) -> Span {
        if self.pos == 0 {
            return Span::default();
        }
        self.tokens[(self.pos - 1).min(self.tokens.len() - 1)].span
    }

    fn depth_at(&self, i: usize) -> usize {
        self.depth.get(i).copied().unwrap_or(0)
    }

    fn bump(&mut self) -> Token {
        let t = self.tok().clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn at(&self, kind: &TokenKind) -> bool {
        self.kind() == kind
    }

    fn at_eof(&self) -> bool {
        matches!(self.kind(), TokenKind::Eof)
    }

    fn at_kw(&self, kw: &str) -> bool {
        matches!(self.kind(), TokenKind::Ident(n) if n == kw)
    }

    fn eat(&mut self, kind: &TokenKind) -> bool {
        if self.at(kind) {
            self.bump();
            true
        } else {
            false
        }
    }

    /// Reports "expected `expected`, found <current token>".
    fn unexpected(&mut self, expected: &str) -> Fail {
        if self.at_eof() {
            if !self.eof_reported {
                self.eof_reported = true;
                let span = self.span();
                self.errors.push(Diagnostic::indexed(
                    "E0011",
                    format!("unexpected end of file: expected {expected}"),
                    self.file,
                    self.text,
                    &self.lines,
                    span,
                ));
            }
        } else {
            let found = self.kind().describe();
            let span = self.span();
            self.errors.push(Diagnostic::indexed(
                "E0010",
                format!("unexpected token: expected {expected}, found {found}"),
                self.file,
                self.text,
                &self.lines,
                span,
            ));
        }
        Fail
    }

    fn expect(&mut self, kind: TokenKind, what: &str) -> PResult<Span> {
        if self.at(&kind) {
            Ok(self.bump().span)
        } else {
            Err(self.unexpected(what))
        }
    }

    fn ident(&mut self, what: &str) -> PResult<Ident> {
        match self.kind().clone() {
            TokenKind::Ident(name) => {
                let span = self.bump().span;
                Ok(Ident { name, span })
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn keyword(&mut self, kw: &str) -> PResult<Ident> {
        if self.at_kw(kw) {
            self.ident(kw)
        } else {
            Err(self.unexpected(&format!("`{kw}`")))
        }
    }

    fn string(&mut self, what: &str) -> PResult<StrLit> {
        match self.kind().clone() {
            TokenKind::Str(value) => {
                let span = self.bump().span;
                Ok(StrLit { value, span })
            }
            _ => Err(self.unexpected(what)),
        }
    }

    /// After a failed clause that started at token `start`: skip to the next
    /// line start at the clause's depth, or to the end of the enclosing block.
    fn recover_clause(&mut self, start: usize) {
        self.recoveries += 1;
        let d = self.depth_at(start);
        if self.pos == start {
            self.bump();
        }
        while !self.at_eof() {
            let i = self.pos;
            let di = self.depth_at(i);
            if di < d || (di == d && self.tokens[i].line_start && i > start) {
                break;
            }
            self.bump();
        }
    }

    /// After a failed declaration: skip to the next line-start `type`, `task`
    /// or `workflow` at the top level.
    fn recover_decl(&mut self, start: usize) {
        if self.pos == start {
            self.bump();
        }
        while !self.at_eof() {
            let i = self.pos;
            let t = &self.tokens[i];
            if self.depth_at(i) == 0
                && t.line_start
                && matches!(&t.kind, TokenKind::Ident(n) if n == "type" || n == "task" || n == "workflow")
            {
                break;
            }
            self.bump();
        }
    }

    /// Closes a block opened at `open`: eats `}` or reports the missing one.
    fn close_block(&mut self, open: Span) {
        if !self.eat(&TokenKind::RBrace) && !self.eof_reported {
            self.eof_reported = true;
            let span = self.span();
            self.errors.push(
                Diagnostic::indexed(
                    "E0011",
                    "unexpected end of file: expected `}`",
                    self.file,
                    self.text,
                    &self.lines,
                    span,
                )
                .with_label(self.file, self.text, open, "this `{` is never closed"),
            );
        }
    }

    fn file(&mut self) -> File {
        let mut file = File::default();
        while !self.at_eof() {
            let start = self.pos;
            let decl = if self.at_kw("type") {
                self.type_decl().map(Decl::Type)
            } else if self.at_kw("task") {
                self.task_decl().map(Decl::Task)
            } else if self.at_kw("workflow") {
                self.workflow_decl().map(Decl::Workflow)
            } else {
                Err(self.unexpected("`type`, `task` or `workflow`"))
            };
            match decl {
                Ok(decl) => file.decls.push(decl),
                Err(Fail) => self.recover_decl(start),
            }
        }
        file
    }

    fn type_decl(&mut self) -> PResult<TypeDecl> {
        self.keyword("type")?;
        let name = self.ident("a type name")?;
        self.expect(TokenKind::Assign, "`=`")?;
        let ty = self.type_expr()?;
        Ok(TypeDecl { name, ty })
    }

    fn task_decl(&mut self) -> PResult<TaskDecl> {
        let kw = self.keyword("task")?;
        let name = self.string("a task name string (`\"payments.charge\"`)")?;
        self.keyword("version")?;
        let version = Some(self.string("a version string (`\"1.0.0\"`)")?);
        let open = self.expect(TokenKind::LBrace, "`{`")?;
        let before = self.recoveries;
        let mut task = TaskDecl {
            name,
            version,
            inputs: Vec::new(),
            outputs: Vec::new(),
            span: kw.span,
            recovered: false,
        };
        while !self.at(&TokenKind::RBrace) && !self.at_eof() {
            let start = self.pos;
            let clause = if self.at_kw("input") || self.at_kw("output") {
                self.ident("`input` or `output`")
                    .and_then(|kw| Ok((kw, self.type_expr()?)))
            } else {
                Err(self.unexpected("`input` or `output`"))
            };
            match clause {
                Ok((kw, ty)) if kw.name == "input" => task.inputs.push((kw, ty)),
                Ok((kw, ty)) => task.outputs.push((kw, ty)),
                Err(Fail) => self.recover_clause(start),
            }
        }
        self.close_block(open);
        task.span = kw.span.to(self.prev_span());
        task.recovered = self.recoveries > before;
        Ok(task)
    }

    fn workflow_decl(&mut self) -> PResult<WorkflowDecl> {
        let kw = self.keyword("workflow")?;
        let name = self.ident("a workflow name")?;
        self.keyword("version")?;
        let version = Some(self.string("a version string (`\"1.0.0\"`)")?);
        let open = self.expect(TokenKind::LBrace, "`{`")?;
        let mut wf = WorkflowDecl {
            name,
            version,
            inputs: Vec::new(),
            outputs: Vec::new(),
            steps: Vec::new(),
            props: Vec::new(),
            span: kw.span,
        };
        while !self.at(&TokenKind::RBrace) && !self.at_eof() {
            let start = self.pos;
            let result = self.workflow_item(&mut wf);
            if result.is_err() {
                self.recover_clause(start);
            }
        }
        self.close_block(open);
        wf.span = kw.span.to(self.prev_span());
        Ok(wf)
    }

    fn workflow_item(&mut self, wf: &mut WorkflowDecl) -> PResult<()> {
        if matches!(self.kind(), TokenKind::Ident(_)) && matches!(self.kind_at(1), TokenKind::Colon)
        {
            let prop = self.property()?;
            wf.props.push(prop);
        } else if self.at_kw("input") {
            let kw = self.ident("`input`")?;
            let ty = self.type_expr()?;
            wf.inputs.push((kw, ty));
        } else if self.at_kw("output") {
            let kw = self.ident("`output`")?;
            let e = self.expr()?;
            wf.outputs.push((kw, e));
        } else if self.at_kw("step") {
            let step = self.step()?;
            wf.steps.push(step);
        } else {
            return Err(self.unexpected("`input`, `step`, `output` or a property (`name: value`)"));
        }
        Ok(())
    }

    fn property(&mut self) -> PResult<Property> {
        let name = self.ident("a property name")?;
        self.expect(TokenKind::Colon, "`:`")?;
        let value = self.expr()?;
        Ok(Property { name, value })
    }

    fn step(&mut self) -> PResult<StepDecl> {
        let kw = self.keyword("step")?;
        let name = self.ident("a step name")?;
        let open = self.expect(TokenKind::LBrace, "`{`")?;
        let before = self.recoveries;
        let clauses = self.clauses();
        self.close_block(open);
        Ok(StepDecl {
            name,
            clauses,
            span: kw.span.to(self.prev_span()),
            recovered: self.recoveries > before,
        })
    }

    /// Clauses up to (not including) the closing `}`.
    fn clauses(&mut self) -> Vec<Clause> {
        let mut clauses = Vec::new();
        while !self.at(&TokenKind::RBrace) && !self.at_eof() {
            let start = self.pos;
            match self.clause() {
                Ok(c) => clauses.push(c),
                Err(Fail) => self.recover_clause(start),
            }
        }
        clauses
    }

    fn clause(&mut self) -> PResult<Clause> {
        let TokenKind::Ident(word) = self.kind().clone() else {
            return Err(self.unexpected(STEP_CLAUSES));
        };
        if matches!(self.kind_at(1), TokenKind::Colon) {
            return self.property().map(Clause::Property);
        }
        match word.as_str() {
            "worker" => {
                let kw = self.bump_ident();
                let task = self.string("a task name string (`\"payments.charge\"`)")?;
                Ok(Clause::Worker { kw, task })
            }
            "with" => {
                let kw = self.bump_ident();
                let value = self.expr()?;
                Ok(Clause::With { kw, value })
            }
            "workflow" => {
                let kw = self.bump_ident();
                let name = self.ident("a workflow name")?;
                self.keyword("version")?;
                let version = self.string("a version string (`\"1.0.0\"`)")?;
                Ok(Clause::Workflow { kw, name, version })
            }
            "sleep" => {
                let kw = self.bump_ident();
                let duration = self.expr()?;
                Ok(Clause::Sleep { kw, duration })
            }
            "signal" => {
                let kw = self.bump_ident();
                let name = self.string("a signal name string")?;
                Ok(Clause::Signal { kw, name })
            }
            "for" => {
                let kw = self.bump_ident();
                let var = self.ident("a loop variable name")?;
                self.keyword("in")?;
                let list = self.expr()?;
                Ok(Clause::For { kw, var, list })
            }
            "compensate" => {
                let kw = self.bump_ident();
                let open = self.expect(TokenKind::LBrace, "`{`")?;
                let before = self.recoveries;
                let clauses = self.clauses();
                self.close_block(open);
                Ok(Clause::Compensate {
                    span: kw.span.to(self.prev_span()),
                    kw,
                    clauses,
                    recovered: self.recoveries > before,
                })
            }
            _ => Err(self.unexpected(STEP_CLAUSES)),
        }
    }

    fn bump_ident(&mut self) -> Ident {
        let t = self.bump();
        let name = match t.kind {
            TokenKind::Ident(n) => n,
            _ => String::new(),
        };
        Ident { name, span: t.span }
    }

    /// Enters one level of nesting; reports E0012 beyond `max`.
    fn enter(&mut self, max: usize, what: &str) -> PResult<()> {
        if self.nest >= max {
            let span = self.span();
            self.errors.push(Diagnostic::indexed(
                "E0012",
                format!("nested too deeply: {what} nested more than {max} levels deep"),
                self.file,
                self.text,
                &self.lines,
                span,
            ));
            return Err(Fail);
        }
        self.nest += 1;
        Ok(())
    }

    /// Checks a freshly built expression against [`MAX_EXPR_DEPTH`].
    fn bounded(&mut self, e: Expr) -> PResult<Expr> {
        if depth(&e) > MAX_EXPR_DEPTH {
            self.errors.push(Diagnostic::indexed(
                "E0012",
                format!(
                    "nested too deeply: expression nested more than {MAX_EXPR_DEPTH} levels deep"
                ),
                self.file,
                self.text,
                &self.lines,
                e.span,
            ));
            return Err(Fail);
        }
        Ok(e)
    }

    // ----- types -----

    fn type_expr(&mut self) -> PResult<TypeExpr> {
        self.enter(MAX_TYPE_DEPTH, "type")?;
        let result = self.type_expr_inner();
        self.nest -= 1;
        result
    }

    fn type_expr_inner(&mut self) -> PResult<TypeExpr> {
        let start = self.span();
        let mut ty = match self.kind().clone() {
            TokenKind::Ident(name) => {
                self.bump();
                TypeExpr {
                    kind: TypeExprKind::Named(name),
                    span: start,
                }
            }
            TokenKind::LBracket => {
                self.bump();
                let inner = self.type_expr()?;
                self.expect(TokenKind::RBracket, "`]`")?;
                TypeExpr {
                    kind: TypeExprKind::List(Box::new(inner)),
                    span: start.to(self.prev_span()),
                }
            }
            TokenKind::LBrace => {
                self.bump();
                let mut fields = Vec::new();
                while !self.at(&TokenKind::RBrace) {
                    let name = self.ident("a field name or `}`")?;
                    self.expect(TokenKind::Colon, "`:`")?;
                    let ty = self.type_expr()?;
                    fields.push((name, ty));
                    // A comma or a newline separates fields.
                    if !self.eat(&TokenKind::Comma)
                        && !self.at(&TokenKind::RBrace)
                        && !self.tok().line_start
                    {
                        return Err(self.unexpected("`,` or `}`"));
                    }
                }
                self.bump();
                TypeExpr {
                    kind: TypeExprKind::Record(fields),
                    span: start.to(self.prev_span()),
                }
            }
            _ => return Err(self.unexpected("a type")),
        };
        while self.at(&TokenKind::Question) {
            self.bump();
            if matches!(ty.kind, TypeExprKind::Optional(_)) {
                // `T??` is `T?`.
                continue;
            }
            ty = TypeExpr {
                span: ty.span.to(self.prev_span()),
                kind: TypeExprKind::Optional(Box::new(ty)),
            };
        }
        Ok(ty)
    }

    // ----- expressions -----

    /// An expression (lowest precedence: `??`).
    pub(crate) fn expr(&mut self) -> PResult<Expr> {
        self.enter(MAX_EXPR_DEPTH, "expression")?;
        let result = self.binary(0);
        self.nest -= 1;
        result
    }

    fn binary(&mut self, level: usize) -> PResult<Expr> {
        const LEVELS: usize = 6;
        if level == LEVELS {
            return self.unary();
        }
        let mut left = self.binary(level + 1)?;
        loop {
            let op = match (level, self.kind()) {
                (0, TokenKind::QuestionQuestion) => BinaryOp::Coalesce,
                (1, TokenKind::OrOr) => BinaryOp::Or,
                (2, TokenKind::AndAnd) => BinaryOp::And,
                (3, TokenKind::EqEq) => BinaryOp::Eq,
                (3, TokenKind::NotEq) => BinaryOp::Ne,
                (3, TokenKind::Lt) => BinaryOp::Lt,
                (3, TokenKind::Le) => BinaryOp::Le,
                (3, TokenKind::Gt) => BinaryOp::Gt,
                (3, TokenKind::Ge) => BinaryOp::Ge,
                (4, TokenKind::Plus) => BinaryOp::Add,
                (4, TokenKind::Minus) => BinaryOp::Sub,
                (5, TokenKind::Star) => BinaryOp::Mul,
                (5, TokenKind::Slash) => BinaryOp::Div,
                (5, TokenKind::Percent) => BinaryOp::Rem,
                _ => break,
            };
            self.bump();
            let right = self.binary(level + 1)?;
            left = self.bounded(Expr {
                span: left.span.to(right.span),
                kind: ExprKind::Binary(op, Box::new(left), Box::new(right)),
            })?;
        }
        Ok(left)
    }

    fn unary(&mut self) -> PResult<Expr> {
        let op = match self.kind() {
            TokenKind::Bang => UnaryOp::Not,
            TokenKind::Minus => UnaryOp::Neg,
            _ => return self.postfix(),
        };
        let start = self.bump().span;
        self.enter(MAX_EXPR_DEPTH, "expression")?;
        let operand = self.unary();
        self.nest -= 1;
        let operand = operand?;
        self.bounded(Expr {
            span: start.to(operand.span),
            kind: ExprKind::Unary(op, Box::new(operand)),
        })
    }

    fn postfix(&mut self) -> PResult<Expr> {
        let mut e = self.primary()?;
        loop {
            if self.at(&TokenKind::Dot) {
                self.bump();
                let field = self.ident("a field name")?;
                e = self.bounded(Expr {
                    span: e.span.to(field.span),
                    kind: ExprKind::Member(Box::new(e), field),
                })?;
            } else if self.at(&TokenKind::LBracket) && !self.tok().line_start {
                self.bump();
                let index = self.expr()?;
                let end = self.expect(TokenKind::RBracket, "`]`")?;
                e = self.bounded(Expr {
                    span: e.span.to(end),
                    kind: ExprKind::Index(Box::new(e), Box::new(index)),
                })?;
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> PResult<Expr> {
        let span = self.span();
        let lit = |kind| Ok(Expr { kind, span });
        match self.kind().clone() {
            TokenKind::Str(s) => {
                self.bump();
                lit(ExprKind::Str(s))
            }
            TokenKind::Int(i) => {
                self.bump();
                lit(ExprKind::Int(i))
            }
            TokenKind::Float(f) => {
                self.bump();
                lit(ExprKind::Float(f))
            }
            TokenKind::Duration(ms) => {
                self.bump();
                lit(ExprKind::Duration(ms))
            }
            TokenKind::Invalid => {
                self.bump();
                lit(ExprKind::Error)
            }
            TokenKind::Ident(name) => {
                self.bump();
                match name.as_str() {
                    "true" => return lit(ExprKind::Bool(true)),
                    "false" => return lit(ExprKind::Bool(false)),
                    "null" => return lit(ExprKind::Null),
                    _ => {}
                }
                if self.at(&TokenKind::LParen) {
                    self.bump();
                    let mut args = Vec::new();
                    while !self.at(&TokenKind::RParen) {
                        args.push(self.expr()?);
                        if !self.eat(&TokenKind::Comma) && !self.at(&TokenKind::RParen) {
                            return Err(self.unexpected("`,` or `)`"));
                        }
                    }
                    let end = self.bump().span;
                    return self.bounded(Expr {
                        kind: ExprKind::Call(Ident { name, span }, args),
                        span: span.to(end),
                    });
                }
                lit(ExprKind::Name(name))
            }
            TokenKind::LParen => {
                self.bump();
                let mut inner = self.expr()?;
                let end = self.expect(TokenKind::RParen, "`)`")?;
                inner.span = span.to(end);
                Ok(inner)
            }
            TokenKind::LBracket => {
                self.bump();
                let mut items = Vec::new();
                while !self.at(&TokenKind::RBracket) {
                    items.push(self.expr()?);
                    if !self.eat(&TokenKind::Comma) && !self.at(&TokenKind::RBracket) {
                        return Err(self.unexpected("`,` or `]`"));
                    }
                }
                let end = self.bump().span;
                self.bounded(Expr {
                    kind: ExprKind::List(items),
                    span: span.to(end),
                })
            }
            TokenKind::LBrace => {
                self.bump();
                let mut fields = Vec::new();
                while !self.at(&TokenKind::RBrace) {
                    let name = self.ident("a field name or `}`")?;
                    self.expect(TokenKind::Colon, "`:`")?;
                    let value = self.expr()?;
                    fields.push((name, value));
                    if !self.eat(&TokenKind::Comma)
                        && !self.at(&TokenKind::RBrace)
                        && !self.tok().line_start
                    {
                        return Err(self.unexpected("`,` or `}`"));
                    }
                }
                let end = self.bump().span;
                self.bounded(Expr {
                    kind: ExprKind::Record(fields),
                    span: span.to(end),
                })
            }
            _ => Err(self.unexpected("an expression")),
        }
    }
}
