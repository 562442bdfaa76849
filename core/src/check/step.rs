//! Step structure: the kind clause, which clauses and properties are
//! allowed where, and each unit's output type.

use super::context::Ctx;
use super::props::{is_semver, KNOWN};
use super::report::{Loc, Reporter};
use super::types::empty_record;
use super::workflow::{Child, ChildInfo};
use crate::diagnostic::Span;
use crate::ir::{TaskContract, Type};
use crate::syntax::ast::{Clause, Expr, Ident, Property, StepDecl};
use std::collections::BTreeMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum KindTag {
    Task,
    Child,
    Sleep,
    Signal,
}

impl KindTag {
    fn noun(self) -> &'static str {
        match self {
            KindTag::Task => "a task step",
            KindTag::Child => "a workflow step",
            KindTag::Sleep => "a sleep step",
            KindTag::Signal => "a signal step",
        }
    }
}

/// Step-level facts gathered before expressions are checked.
pub(super) struct Plan<'d> {
    pub(super) decl: &'d StepDecl,
    pub(super) kind: Option<(KindTag, &'d Clause)>,
    /// False when the kind is missing or ambiguous (E0200/E0201): clause
    /// placement checks are skipped to avoid follow-on noise.
    pub(super) kind_clear: bool,
    pub(super) with: Option<&'d Expr>,
    pub(super) for_each: Option<(&'d Ident, &'d Expr)>,
    /// `compensate` keyword, clauses, and whether a syntax error was
    /// recovered from inside the block.
    pub(super) compensate: Option<(&'d Ident, &'d [Clause], bool)>,
    pub(super) props: BTreeMap<&'d str, &'d Property>,
    /// Contract of a task step.
    pub(super) contract: Option<TaskContract>,
    /// Child of a workflow step.
    pub(super) child: Option<ChildInfo>,
    /// The output of one unit (`None`: in error).
    pub(super) output: Option<Type>,
}

/// Properties allowed on each kind of step.
pub(super) fn allowed_on(kind: KindTag) -> &'static [&'static str] {
    match kind {
        KindTag::Task => &[
            "idempotency_key",
            "retry",
            "timeout",
            "queue_timeout",
            "after",
            "if",
            "max_concurrency",
        ],
        KindTag::Child => &["after", "if", "max_concurrency"],
        KindTag::Sleep => &["after", "if"],
        KindTag::Signal => &["after", "if", "timeout"],
    }
}

pub(super) fn clause_name(c: &Clause) -> (&str, Span) {
    match c {
        Clause::Worker { kw, .. }
        | Clause::With { kw, .. }
        | Clause::Workflow { kw, .. }
        | Clause::Sleep { kw, .. }
        | Clause::Signal { kw, .. }
        | Clause::For { kw, .. }
        | Clause::Compensate { kw, .. } => (kw.name.as_str(), kw.span),
        Clause::Property(p) => (p.name.name.as_str(), p.name.span),
    }
}

pub(super) fn unknown_property(rep: &mut Reporter, loc: Loc, name: &str, allowed: &[&str]) {
    let list: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
    rep.error_help(
        "E0300",
        format!("unknown property `{name}`"),
        loc,
        format!("properties allowed here: {}", list.join(", ")),
    );
}

/// Gathers a step's kind and clauses, reporting misplaced or repeated ones.
pub(super) fn plan_step<'d>(
    ctx: &mut Ctx,
    child: &dyn Fn(&str, &str) -> Child,
    step: &'d StepDecl,
) -> Plan<'d> {
    let file = ctx.file;
    let mut plan = Plan {
        decl: step,
        kind: None,
        kind_clear: true,
        with: None,
        for_each: None,
        compensate: None,
        props: BTreeMap::new(),
        contract: None,
        child: None,
        output: None,
    };
    let mut firsts: BTreeMap<&str, Span> = BTreeMap::new();
    for clause in &step.clauses {
        let (name, span) = clause_name(clause);
        let loc = ctx.loc(span);
        let tag = match clause {
            Clause::Worker { .. } => Some(KindTag::Task),
            Clause::Workflow { .. } => Some(KindTag::Child),
            Clause::Sleep { .. } => Some(KindTag::Sleep),
            Clause::Signal { .. } => Some(KindTag::Signal),
            _ => None,
        };
        if let Some(tag) = tag {
            match plan.kind {
                Some((_, first)) => {
                    let (first_name, first_span) = clause_name(first);
                    let d = ctx.rep.make(
                        "E0201",
                        format!(
                            "step `{}` has more than one kind clause (`{first_name}` and `{name}`)",
                            step.name.name
                        ),
                        loc,
                    );
                    let d = ctx
                        .rep
                        .label(d, ctx.loc(first_span), "first kind clause here");
                    let d = d.with_help(
                        "a step is exactly one of: `worker`, `workflow`, `sleep`, `signal`",
                    );
                    ctx.rep.push(file, d);
                    plan.kind_clear = false;
                }
                None => plan.kind = Some((tag, clause)),
            }
            continue;
        }
        if let Clause::Property(p) = clause {
            if !KNOWN.contains(&name) {
                unknown_property(
                    ctx.rep,
                    loc,
                    name,
                    &[
                        "idempotency_key",
                        "retry",
                        "timeout",
                        "queue_timeout",
                        "after",
                        "if",
                        "max_concurrency",
                    ],
                );
                continue;
            }
            if let Some(first) = firsts.get(name) {
                let d = ctx
                    .rep
                    .make("E0301", format!("duplicate property `{name}`"), loc);
                let d = ctx.rep.label(d, ctx.loc(*first), "first set here");
                ctx.rep.push(file, d);
                continue;
            }
            firsts.insert(name, span);
            plan.props.insert(name, p);
            continue;
        }
        if let Some(first) = firsts.get(name) {
            let d = ctx.rep.make(
                "E0301",
                format!("duplicate property: clause `{name}` repeated"),
                loc,
            );
            let d = ctx.rep.label(d, ctx.loc(*first), "first here");
            ctx.rep.push(file, d);
            continue;
        }
        firsts.insert(name, span);
        match clause {
            Clause::With { value, .. } => plan.with = Some(value),
            Clause::For { var, list, .. } => plan.for_each = Some((var, list)),
            Clause::Compensate {
                kw,
                clauses,
                recovered,
                ..
            } => plan.compensate = Some((kw, clauses.as_slice(), *recovered)),
            _ => {}
        }
    }
    let Some((tag, kind_clause)) = plan.kind else {
        if step.recovered {
            return plan;
        }
        let loc = ctx.loc(step.name.span);
        ctx.rep.error_help(
            "E0200",
            format!("step `{}` has no kind clause", step.name.name),
            loc,
            "add one of: `worker \"task.name\"`, `workflow Name version \"1.0.0\"`, `sleep 10s`, `signal \"name\"`",
        );
        return plan;
    };
    if plan.kind_clear {
        // Clause placement.
        if let Some(w) = plan.with {
            if matches!(tag, KindTag::Sleep | KindTag::Signal) {
                let span = firsts.get("with").copied().unwrap_or(w.span);
                let loc = ctx.loc(span);
                ctx.rep.error(
                    "E0307",
                    format!(
                        "property not allowed on this kind of step: `with` on {}",
                        tag.noun()
                    ),
                    loc,
                );
            }
        } else if matches!(tag, KindTag::Task | KindTag::Child) && !step.recovered {
            let loc = ctx.loc(step.name.span);
            ctx.rep.error_help(
                "E0308",
                format!(
                    "missing required clause: {} `{}` needs `with`",
                    tag.noun(),
                    step.name.name
                ),
                loc,
                "add `with { .. }` giving the input",
            );
        }
        if let Some((kw, _)) = plan.for_each {
            if matches!(tag, KindTag::Sleep | KindTag::Signal) {
                let loc = ctx.loc(kw.span);
                ctx.rep.error(
                    "E0303",
                    format!(
                        "`for` on a sleep or signal step (`{}` is {})",
                        step.name.name,
                        tag.noun()
                    ),
                    loc,
                );
            }
        }
        if let Some((kw, _, _)) = plan.compensate {
            if tag != KindTag::Task {
                let loc = ctx.loc(kw.span);
                ctx.rep.error(
                    "E0302",
                    format!(
                        "`compensate` on a step that is not a task step (`{}` is {})",
                        step.name.name,
                        tag.noun()
                    ),
                    loc,
                );
            }
        }
        let allowed = allowed_on(tag);
        let mut not_allowed = Vec::new();
        for (name, p) in &plan.props {
            if !allowed.contains(name) {
                let loc = ctx.loc(p.name.span);
                let help = if *name == "idempotency_key" && tag == KindTag::Child {
                    "a child execution's id is derived from the parent's, so it is never started twice".to_string()
                } else {
                    format!("allowed on {}: {}", tag.noun(), allowed.join(", "))
                };
                ctx.rep.error_help(
                    "E0307",
                    format!(
                        "property not allowed on this kind of step: `{name}` on {}",
                        tag.noun()
                    ),
                    loc,
                    help,
                );
                not_allowed.push(*name);
            } else if *name == "max_concurrency" && plan.for_each.is_none() {
                let loc = ctx.loc(p.name.span);
                ctx.rep.error(
                    "E0307",
                    "property not allowed on this kind of step: `max_concurrency` needs a `for` step",
                    loc,
                );
                not_allowed.push(*name);
            }
        }
        for n in not_allowed {
            plan.props.remove(n);
        }
    }
    // Resolve the kind and the unit's output type.
    match kind_clause {
        Clause::Worker { task, .. } => {
            plan.contract = ctx.task(task);
            plan.output = plan.contract.as_ref().map(|c| c.output.clone());
        }
        Clause::Workflow { name, version, .. } => {
            let semver_ok = is_semver(&version.value);
            if !semver_ok {
                let loc = ctx.loc(version.span);
                ctx.rep.error_help(
                    "E0304",
                    format!("invalid version string `{}`", version.value),
                    loc,
                    "versions are semver: MAJOR.MINOR.PATCH, e.g. \"1.0.0\"",
                );
            }
            match child(&name.name, &version.value) {
                Child::Known(info) => {
                    plan.output = info.output.clone();
                    plan.child = Some(info);
                }
                Child::Silent => {}
                Child::Unknown if !semver_ok => {}
                Child::Unknown => {
                    let loc = ctx.loc(name.span.to(version.span));
                    ctx.rep.error_help(
                        "E0103",
                        format!("unknown workflow or version: `{}` version \"{}\"", name.name, version.value),
                        loc,
                        "declare the child workflow in the files being compiled, or register it on the server first",
                    );
                }
            }
        }
        Clause::Sleep { .. } => plan.output = Some(empty_record()),
        Clause::Signal { .. } => plan.output = Some(Type::Json),
        _ => {}
    }
    plan
}
