//! `compensate { .. }` blocks: their clauses and their restricted scope.

use super::context::Ctx;
use super::expr::Scope;
use super::props::KNOWN;
use super::step::{clause_name, unknown_property, Plan};
use crate::diagnostic::Span;
use crate::ir::{self, RetryPolicy};
use crate::syntax::ast::{Clause, Expr, Property, StrLit};
use std::collections::BTreeMap;

/// Checks a `compensate { .. }` block.
pub(super) fn compensation(
    ctx: &mut Ctx,
    scope: &Scope,
    clauses: &[Clause],
    plan: &Plan,
    wf_retry: &RetryPolicy,
) -> Option<ir::Compensation> {
    let file = ctx.file;
    let mut worker: Option<&StrLit> = None;
    let mut with: Option<&Expr> = None;
    let mut props: BTreeMap<&str, &Property> = BTreeMap::new();
    let mut firsts: BTreeMap<&str, Span> = BTreeMap::new();
    let mut ok = true;
    const ALLOWED: &[&str] = &["idempotency_key", "retry", "timeout"];
    for clause in clauses {
        let (name, span) = clause_name(clause);
        let loc = ctx.loc(span);
        if let Clause::Property(_) = clause {
            if !KNOWN.contains(&name) {
                unknown_property(ctx.rep, loc, name, ALLOWED);
                ok = false;
                continue;
            }
            if !ALLOWED.contains(&name) {
                ctx.rep.error_help(
                    "E0307",
                    format!("property not allowed on this kind of step: `{name}` in a `compensate` block"),
                    loc,
                    "a compensate block takes `worker`, `with`, `idempotency_key`, `retry` and `timeout`",
                );
                ok = false;
                continue;
            }
        } else if !matches!(clause, Clause::Worker { .. } | Clause::With { .. }) {
            ctx.rep.error_help(
                "E0307",
                format!("property not allowed on this kind of step: `{name}` in a `compensate` block"),
                loc,
                "a compensate block takes `worker`, `with`, `idempotency_key`, `retry` and `timeout`",
            );
            ok = false;
            continue;
        }
        if let Some(first) = firsts.get(name) {
            let d = ctx
                .rep
                .make("E0301", format!("duplicate property `{name}`"), loc);
            let d = ctx.rep.label(d, ctx.loc(*first), "first set here");
            ctx.rep.push(file, d);
            ok = false;
            continue;
        }
        firsts.insert(name, span);
        match clause {
            Clause::Worker { task, .. } => worker = Some(task),
            Clause::With { value, .. } => with = Some(value),
            Clause::Property(p) => {
                props.insert(name, p);
            }
            _ => {}
        }
    }
    let (kw, _, recovered) = plan.compensate?;
    let (Some(worker), Some(with)) = (worker, with) else {
        if recovered {
            return None;
        }
        let missing = if worker.is_none() {
            "`worker`"
        } else {
            "`with`"
        };
        let loc = ctx.loc(kw.span);
        ctx.rep.error_help(
            "E0308",
            format!(
                "missing required clause: the `compensate` block of `{}` needs {missing}",
                plan.decl.name.name
            ),
            loc,
            "a compensate block runs a task: `compensate { worker \"task.name\" with { .. } }`",
        );
        return None;
    };
    let contract = ctx.task(worker);
    let input = match &contract {
        Some(c) => {
            ctx.contract_input(scope, with, &c.input, &format!("task `{}`", c.name))
                .0
        }
        None => {
            ctx.expr(scope, with);
            None
        }
    };
    let idempotency_key = match props.get("idempotency_key") {
        Some(p) => match ctx.idempotency_key(scope, &p.value).0 {
            Some(x) => Some(x),
            None => {
                ok = false;
                None
            }
        },
        None => None,
    };
    let retry = match props.get("retry") {
        Some(p) => ctx.consts().retry(&p.value, wf_retry),
        None => Some(wf_retry.clone()),
    };
    let timeout_ms = match props.get("timeout") {
        Some(p) => match ctx.consts().duration(&p.value, "timeout") {
            Some(ms) => Some(ms),
            None => {
                ok = false;
                None
            }
        },
        None => None,
    };
    let (contract, input, retry) = (contract?, input?, retry?);
    if !ok {
        return None;
    }
    Some(ir::Compensation {
        call: ir::TaskCall {
            task: contract.name,
            input,
            idempotency_key,
            retry,
            timeout_ms,
            queue_timeout_ms: None,
        },
    })
}
