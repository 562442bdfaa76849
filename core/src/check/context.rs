//! The per-workflow checking context: reporting, task resolution, and the
//! checks shared by steps and compensate blocks (contract inputs,
//! idempotency keys, conditions, `for` lists).

use super::expr::{Checker, Scope};
use super::props::Consts;
use super::report::{Loc, Reporter};
use super::types::{assignable, show};
use super::workflow::Tasks;
use crate::diagnostic::Span;
use crate::ir::{self, TaskContract, Type};
use crate::syntax::ast::{Expr, ExprKind, StrLit};
use std::collections::BTreeMap;

pub(super) struct Ctx<'r, 'a, 't> {
    pub(super) rep: &'r mut Reporter<'a>,
    pub(super) file: usize,
    pub(super) tasks: &'t Tasks,
    /// Every task contract this workflow uses.
    pub(super) used: BTreeMap<String, TaskContract>,
}

impl<'a> Ctx<'_, 'a, '_> {
    pub(super) fn loc(&self, span: Span) -> Loc {
        Loc {
            file: self.file,
            span,
        }
    }

    pub(super) fn consts(&mut self) -> Consts<'_, 'a> {
        Consts {
            rep: self.rep,
            file: self.file,
        }
    }

    /// Resolves `worker "name"` (E0102 for unknown and reserved names).
    pub(super) fn task(&mut self, name: &StrLit) -> Option<TaskContract> {
        if crate::builtin::is_reserved(&name.value) {
            if let Some(c) = crate::builtin::contract(&name.value) {
                self.used.insert(c.name.clone(), c.clone());
                return Some(c);
            }
            let loc = self.loc(name.span);
            self.rep.error_help(
                "E0102",
                format!(
                    "unknown task `{}`: `orbit.*` names are reserved for built-in tasks",
                    name.value
                ),
                loc,
                format!(
                    "the only built-in task is `{}`; declare your own task under another name",
                    crate::builtin::HTTP_TASK
                ),
            );
            return None;
        }
        match self.tasks.get(&name.value) {
            Some(Some(c)) => {
                self.used.insert(c.name.clone(), c.clone());
                Some(c.clone())
            }
            Some(None) => None,
            None => {
                let loc = self.loc(name.span);
                self.rep.error_help(
                    "E0102",
                    format!("unknown task `{}`", name.value),
                    loc,
                    format!(
                        "declare it: `task \"{}\" version \"1.0.0\" {{ input {{ .. }} output {{ .. }} }}`",
                        name.value
                    ),
                );
                None
            }
        }
    }

    /// Checks `e` as the input of a contract (`what` names it): a record
    /// with every required field (E0404) and no other (E0406).
    pub(super) fn contract_input(
        &mut self,
        scope: &Scope,
        e: &Expr,
        expected: &Type,
        what: &str,
    ) -> (Option<ir::Expr>, Vec<String>) {
        let mut checker = Checker {
            rep: self.rep,
            file: self.file,
            reads: Vec::new(),
        };
        let x = checker.check(scope, e);
        let reads = checker.reads.iter().map(|(n, _)| n.clone()).collect();
        let Some(x) = x else { return (None, reads) };
        let fields_of_literal: BTreeMap<&str, (Span, Span)> = match &e.kind {
            ExprKind::Record(fields) => fields
                .iter()
                .map(|(n, v)| (n.name.as_str(), (n.span, v.span)))
                .collect(),
            _ => BTreeMap::new(),
        };
        let ok = match (&x.ty, expected) {
            (Type::Json, _) => true,
            (Type::Record(found), Type::Record(exp)) => {
                let mut ok = true;
                for (name, fty) in found {
                    let (name_span, value_span) = fields_of_literal
                        .get(name.as_str())
                        .copied()
                        .unwrap_or((e.span, e.span));
                    match exp.get(name) {
                        None => {
                            let loc = self.loc(name_span);
                            let known: Vec<&str> = exp.keys().map(String::as_str).collect();
                            self.rep.error_help(
                                "E0406",
                                format!("field `{name}` is not in the contract of {what}"),
                                loc,
                                format!("the contract's fields are: {}", known.join(", ")),
                            );
                            ok = false;
                        }
                        Some(ety) => {
                            if assignable(fty, ety).is_err() {
                                let mut c = Checker {
                                    rep: self.rep,
                                    file: self.file,
                                    reads: Vec::new(),
                                };
                                c.mismatch(fty, ety, value_span);
                                ok = false;
                            }
                        }
                    }
                }
                let missing: Vec<&String> = exp
                    .iter()
                    .filter(|(n, t)| {
                        !found.contains_key(*n) && !matches!(t, Type::Optional(_) | Type::Json)
                    })
                    .map(|(n, _)| n)
                    .collect();
                for name in missing {
                    let loc = self.loc(e.span);
                    self.rep.error(
                        "E0404",
                        format!(
                            "missing field `{name}` required by the contract of {what} (`{}`)",
                            show(&exp[name])
                        ),
                        loc,
                    );
                    ok = false;
                }
                ok
            }
            (found, _) => {
                let found = found.clone();
                let mut c = Checker {
                    rep: self.rep,
                    file: self.file,
                    reads: Vec::new(),
                };
                c.mismatch(&found, expected, e.span);
                false
            }
        };
        (if ok { Some(x) } else { None }, reads)
    }

    /// Checks an expression, returning it and the steps it reads.
    pub(super) fn expr(&mut self, scope: &Scope, e: &Expr) -> (Option<ir::Expr>, Vec<String>) {
        let mut checker = Checker {
            rep: self.rep,
            file: self.file,
            reads: Vec::new(),
        };
        let x = checker.check(scope, e);
        (x, checker.reads.into_iter().map(|(n, _)| n).collect())
    }

    /// `idempotency_key: EXPR` — must be a `String` (seed 000).
    pub(super) fn idempotency_key(
        &mut self,
        scope: &Scope,
        e: &Expr,
    ) -> (Option<ir::Expr>, Vec<String>) {
        let (x, reads) = self.expr(scope, e);
        let x = x.and_then(|x| {
            if assignable(&x.ty, &Type::String).is_ok() {
                Some(x)
            } else {
                let mut c = Checker {
                    rep: self.rep,
                    file: self.file,
                    reads: Vec::new(),
                };
                c.mismatch(&x.ty, &Type::String, e.span);
                None
            }
        });
        (x, reads)
    }

    /// `if: EXPR` — a `Bool`.
    pub(super) fn condition(&mut self, scope: &Scope, e: &Expr) -> (Option<ir::Expr>, Vec<String>) {
        let (x, reads) = self.expr(scope, e);
        let x = x.and_then(|x| match &x.ty {
            Type::Bool | Type::Json => Some(x),
            Type::Optional(inner) if **inner == Type::Bool => {
                let loc = self.loc(e.span);
                self.rep.error_help(
                    "E0405",
                    "optional value where a value is required: the condition is `Bool?`",
                    loc,
                    "give a default with `??`, e.g. `if: flag ?? false`",
                );
                None
            }
            other => {
                let loc = self.loc(e.span);
                self.rep.error(
                    "E0408",
                    format!("condition is not `Bool`: found `{}`", show(other)),
                    loc,
                );
                None
            }
        });
        (x, reads)
    }

    /// `for VAR in EXPR` — a list; returns the list and the element type.
    pub(super) fn for_list(
        &mut self,
        scope: &Scope,
        e: &Expr,
    ) -> (Option<(ir::Expr, Type)>, Vec<String>) {
        let (x, reads) = self.expr(scope, e);
        let x = x.and_then(|x| match &x.ty {
            Type::List(elem) => {
                let elem = (**elem).clone();
                Some((x, elem))
            }
            Type::Json => Some((x, Type::Json)),
            Type::Optional(inner) if matches!(**inner, Type::List(_)) => {
                let loc = self.loc(e.span);
                self.rep.error_help(
                    "E0405",
                    format!(
                        "optional value where a value is required: `for` needs a list, found `{}`",
                        show(&x.ty)
                    ),
                    loc,
                    "give a default with `??`, e.g. `for x in items ?? []`",
                );
                None
            }
            other => {
                let loc = self.loc(e.span);
                self.rep.error(
                    "E0407",
                    format!("`for` expression is not a list: found `{}`", show(other)),
                    loc,
                );
                None
            }
        });
        (x, reads)
    }
}
