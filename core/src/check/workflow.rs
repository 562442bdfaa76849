//! Checking one workflow declaration and compiling it to `ir::Workflow`:
//! step kinds and clauses, properties, expressions, the step dependency
//! graph, compensate scoping and the output expression.

use super::expr::{Checker, Scope};
use super::graph;
use super::props::{is_semver, Consts, KNOWN};
use super::report::{Loc, Reporter};
use super::types::{assignable, empty_record, optional, show, TypeTable};
use crate::diagnostic::Span;
use crate::ir::{self, RetryPolicy, TaskContract, Type};
use crate::syntax::ast::{Clause, Expr, ExprKind, Ident, Property, StepDecl, StrLit, WorkflowDecl};
use std::collections::{BTreeMap, BTreeSet};

/// What a parent needs to know about a child workflow.
#[derive(Debug, Clone)]
pub(crate) struct ChildInfo {
    /// The child's input record type (`None`: in error).
    pub input: Option<Type>,
    /// The child's output type (`None`: in error).
    pub output: Option<Type>,
    /// The child's `definition_hash` (`None`: the child did not compile).
    pub hash: Option<String>,
}

/// How a child reference resolves.
pub(crate) enum Child {
    /// Declared in the compile set or registered.
    Known(ChildInfo),
    /// Part of a workflow cycle (already reported as E0107).
    Silent,
    /// Neither declared nor registered.
    Unknown,
}

/// Task contracts of the compile set by name (`None`: declared but broken,
/// already reported).
pub(crate) type Tasks = BTreeMap<String, Option<TaskContract>>;

/// The result of checking one workflow.
pub(crate) struct Checked {
    /// The compiled workflow, when it and everything it uses is error-free.
    pub workflow: Option<ir::Workflow>,
    /// What parents see.
    pub info: ChildInfo,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum KindTag {
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
struct Plan<'d> {
    decl: &'d StepDecl,
    kind: Option<(KindTag, &'d Clause)>,
    /// False when the kind is missing or ambiguous (E0200/E0201): clause
    /// placement checks are skipped to avoid follow-on noise.
    kind_clear: bool,
    with: Option<&'d Expr>,
    for_each: Option<(&'d Ident, &'d Expr)>,
    /// `compensate` keyword, clauses, and whether a syntax error was
    /// recovered from inside the block.
    compensate: Option<(&'d Ident, &'d [Clause], bool)>,
    props: BTreeMap<&'d str, &'d Property>,
    /// Contract of a task step.
    contract: Option<TaskContract>,
    /// Child of a workflow step.
    child: Option<ChildInfo>,
    /// The output of one unit (`None`: in error).
    output: Option<Type>,
}

struct Ctx<'r, 'a, 't> {
    rep: &'r mut Reporter<'a>,
    file: usize,
    tasks: &'t Tasks,
    /// Every task contract this workflow uses.
    used: BTreeMap<String, TaskContract>,
}

impl<'a> Ctx<'_, 'a, '_> {
    fn loc(&self, span: Span) -> Loc {
        Loc {
            file: self.file,
            span,
        }
    }

    fn consts(&mut self) -> Consts<'_, 'a> {
        Consts {
            rep: self.rep,
            file: self.file,
        }
    }

    /// Resolves `worker "name"` (E0102 for unknown and reserved names).
    fn task(&mut self, name: &StrLit) -> Option<TaskContract> {
        if name.value.starts_with("orbit.") {
            let loc = self.loc(name.span);
            self.rep.error_help(
                "E0102",
                format!("unknown task `{}`: `orbit.*` names are reserved for built-in tasks", name.value),
                loc,
                "no built-in task is available in this version; declare your own task under another name",
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
    fn contract_input(
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
    fn expr(&mut self, scope: &Scope, e: &Expr) -> (Option<ir::Expr>, Vec<String>) {
        let mut checker = Checker {
            rep: self.rep,
            file: self.file,
            reads: Vec::new(),
        };
        let x = checker.check(scope, e);
        (x, checker.reads.into_iter().map(|(n, _)| n).collect())
    }

    /// `idempotency_key: EXPR` — must be a `String` (seed 000).
    fn idempotency_key(&mut self, scope: &Scope, e: &Expr) -> (Option<ir::Expr>, Vec<String>) {
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
    fn condition(&mut self, scope: &Scope, e: &Expr) -> (Option<ir::Expr>, Vec<String>) {
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
    fn for_list(&mut self, scope: &Scope, e: &Expr) -> (Option<(ir::Expr, Type)>, Vec<String>) {
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

/// Properties allowed on each kind of step.
fn allowed_on(kind: KindTag) -> &'static [&'static str] {
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

fn clause_name(c: &Clause) -> (&str, Span) {
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

fn unknown_property(rep: &mut Reporter, loc: Loc, name: &str, allowed: &[&str]) {
    let list: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
    rep.error_help(
        "E0300",
        format!("unknown property `{name}`"),
        loc,
        format!("properties allowed here: {}", list.join(", ")),
    );
}

/// Checks workflow `decl` of file `file`.
pub(crate) fn check(
    rep: &mut Reporter,
    types: &mut TypeTable,
    tasks: &Tasks,
    child: &dyn Fn(&str, &str) -> Child,
    file: usize,
    decl: &WorkflowDecl,
) -> Checked {
    let errors_before = rep.count();
    let mut ctx = Ctx {
        rep,
        file,
        tasks,
        used: BTreeMap::new(),
    };
    let mut ok = true;

    // ----- header: version, input, workflow properties -----
    let version = decl
        .version
        .as_ref()
        .map(|v| v.value.clone())
        .unwrap_or_default();
    if let Some(v) = &decl.version {
        if !is_semver(&v.value) {
            let loc = ctx.loc(v.span);
            ctx.rep.error_help(
                "E0304",
                format!("invalid version string `{}`", v.value),
                loc,
                "versions are semver: MAJOR.MINOR.PATCH, e.g. \"1.0.0\"",
            );
        }
    }
    for (kw, _) in decl.inputs.iter().skip(1) {
        let loc = ctx.loc(kw.span);
        ctx.rep.error(
            "E0301",
            "duplicate property: `input` is declared more than once",
            loc,
        );
    }
    let input: Option<Type> = match decl.inputs.first() {
        None => Some(empty_record()),
        Some((_, te)) => {
            match types.resolve(te, file, ctx.rep) {
                Some(t @ Type::Record(_)) => Some(t),
                Some(other) => {
                    let loc = ctx.loc(te.span);
                    ctx.rep.error(
                    "E0400",
                    format!("type mismatch: expected a record type for the workflow input, found `{}`", show(&other)),
                    loc,
                );
                    None
                }
                None => None,
            }
        }
    };
    let mut wf_props: BTreeMap<&str, &Property> = BTreeMap::new();
    for p in &decl.props {
        let name = p.name.name.as_str();
        let loc = ctx.loc(p.name.span);
        const WF: &[&str] = &["requires_idempotency_key", "retry", "max_active"];
        if !KNOWN.contains(&name) {
            unknown_property(ctx.rep, loc, name, WF);
        } else if !WF.contains(&name) {
            ctx.rep.error(
                "E0307",
                format!("property not allowed here: `{name}` is a step property, not a workflow property"),
                loc,
            );
        } else if let Some(first) = wf_props.get(name) {
            let d = ctx
                .rep
                .make("E0301", format!("duplicate property `{name}`"), loc);
            let d = ctx.rep.label(d, ctx.loc(first.name.span), "first set here");
            ctx.rep.push(file, d);
        } else {
            wf_props.insert(name, p);
        }
    }
    let requires_idempotency_key = match wf_props.get("requires_idempotency_key") {
        Some(p) => ctx
            .consts()
            .bool(&p.value, "requires_idempotency_key")
            .unwrap_or_else(|| {
                ok = false;
                false
            }),
        None => false,
    };
    let max_active = match wf_props.get("max_active") {
        Some(p) => {
            let v = ctx.consts().positive_int(&p.value, "max_active");
            ok &= v.is_some();
            v
        }
        None => None,
    };
    let wf_retry = match wf_props.get("retry") {
        Some(p) => ctx
            .consts()
            .retry(&p.value, &RetryPolicy::default())
            .unwrap_or_else(|| {
                ok = false;
                RetryPolicy::default()
            }),
        None => RetryPolicy::default(),
    };

    // ----- steps: names, kinds, clause placement -----
    let mut plans: Vec<Plan> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for step in &decl.steps {
        if let Some(&i) = index.get(step.name.name.as_str()) {
            let loc = ctx.loc(step.name.span);
            let d = ctx.rep.make(
                "E0104",
                format!("duplicate declaration of step `{}`", step.name.name),
                loc,
            );
            let d = ctx
                .rep
                .label(d, ctx.loc(plans[i].decl.name.span), "first declared here");
            ctx.rep.push(file, d);
            continue;
        }
        if matches!(step.name.name.as_str(), "input" | "execution") {
            let loc = ctx.loc(step.name.span);
            ctx.rep.error(
                "E0104",
                format!(
                    "duplicate declaration: `{}` is a built-in name and cannot name a step",
                    step.name.name
                ),
                loc,
            );
            continue;
        }
        index.insert(step.name.name.as_str(), plans.len());
        plans.push(plan_step(&mut ctx, child, step));
    }

    // Reader-visible output types.
    let reader_types: BTreeMap<String, Option<Type>> = plans
        .iter()
        .map(|p| {
            let t = p.output.clone().map(|t| {
                let t = if p.for_each.is_some() {
                    Type::List(Box::new(t))
                } else {
                    t
                };
                if p.props.contains_key("if") {
                    optional(t)
                } else {
                    t
                }
            });
            (p.decl.name.name.clone(), t)
        })
        .collect();

    // ----- expressions and dependencies -----
    struct Body {
        for_each: Option<Option<ir::ForEach>>,
        condition: Option<Option<ir::Expr>>,
        kind: Option<ir::StepKind>,
        max_concurrency: Option<Option<u32>>,
        deps: BTreeSet<usize>,
    }
    let mut bodies: Vec<Body> = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let name = plan.decl.name.name.clone();
        let base = Scope {
            input: input.clone(),
            steps: &reader_types,
            loop_var: None,
            own: None,
            allowed: None,
            current: Some(name.clone()),
        };
        let mut reads: Vec<String> = Vec::new();
        let mut part_ok = true;
        let mut loop_var: Option<(String, Option<Type>)> = None;
        let for_each = plan.for_each.map(|(var, list)| {
            let (x, r) = ctx.for_list(&base, list);
            reads.extend(r);
            loop_var = Some((var.name.clone(), x.as_ref().map(|(_, t)| t.clone())));
            x.map(|(list, _)| ir::ForEach {
                var: var.name.clone(),
                list,
            })
        });
        let condition = plan.props.get("if").map(|p| {
            let (x, r) = ctx.condition(&base, &p.value);
            reads.extend(r);
            x
        });
        let scope = Scope {
            loop_var: loop_var.clone(),
            ..base
        };
        let mut idem: Option<Option<ir::Expr>> = None;
        if let Some(p) = plan.props.get("idempotency_key") {
            if plan.kind.map(|k| k.0) == Some(KindTag::Task) {
                let (x, r) = ctx.idempotency_key(&scope, &p.value);
                reads.extend(r);
                idem = Some(x);
            }
        }
        let timeout = match plan.props.get("timeout") {
            Some(p)
                if matches!(
                    plan.kind.map(|k| k.0),
                    Some(KindTag::Task | KindTag::Signal)
                ) =>
            {
                let v = ctx.consts().duration(&p.value, "timeout");
                part_ok &= v.is_some();
                v
            }
            _ => None,
        };
        let queue_timeout = match plan.props.get("queue_timeout") {
            Some(p) if plan.kind.map(|k| k.0) == Some(KindTag::Task) => {
                let v = ctx.consts().duration(&p.value, "queue_timeout");
                part_ok &= v.is_some();
                v
            }
            _ => None,
        };
        let retry = match plan.props.get("retry") {
            Some(p) if plan.kind.map(|k| k.0) == Some(KindTag::Task) => {
                let v = ctx.consts().retry(&p.value, &wf_retry);
                part_ok &= v.is_some();
                v.unwrap_or_else(|| wf_retry.clone())
            }
            _ => wf_retry.clone(),
        };
        let max_concurrency = plan.props.get("max_concurrency").map(|p| {
            ctx.consts()
                .positive_int(&p.value, "max_concurrency")
                .and_then(|n| u32::try_from(n).ok())
        });
        let mut after_deps = Vec::new();
        if let Some(p) = plan.props.get("after") {
            match ctx.consts().after_list(&p.value) {
                Some(names) => {
                    for n in names {
                        let loc = ctx.loc(n.span);
                        if n.name == name {
                            ctx.rep.error(
                                "E0105",
                                format!(
                                    "dependency cycle between steps: step `{name}` is after itself"
                                ),
                                loc,
                            );
                        } else if let Some(&j) = index.get(n.name.as_str()) {
                            after_deps.push(j);
                        } else {
                            ctx.rep.error_help(
                                "E0106",
                                format!("unknown step `{}` in `after`", n.name),
                                loc,
                                "`after` names steps of this workflow",
                            );
                        }
                    }
                }
                None => part_ok = false,
            }
        }
        let kind = match plan.kind.map(|k| k.0) {
            Some(KindTag::Task) => {
                let input_x = match (plan.with, &plan.contract) {
                    (Some(w), Some(c)) => {
                        let (x, r) =
                            ctx.contract_input(&scope, w, &c.input, &format!("task `{}`", c.name));
                        reads.extend(r);
                        x
                    }
                    (Some(w), None) => {
                        // Unknown task: still check the expression on its own.
                        let (_, r) = ctx.expr(&scope, w);
                        reads.extend(r);
                        None
                    }
                    _ => None,
                };
                match (&plan.contract, input_x, idem.clone()) {
                    (Some(c), Some(input_x), idem) if idem.as_ref().is_none_or(|x| x.is_some()) => {
                        Some(ir::StepKind::Task(ir::TaskCall {
                            task: c.name.clone(),
                            input: input_x,
                            idempotency_key: idem.flatten(),
                            retry,
                            timeout_ms: timeout,
                            queue_timeout_ms: queue_timeout,
                        }))
                    }
                    _ => None,
                }
            }
            Some(KindTag::Child) => {
                let input_x = match (plan.with, &plan.child) {
                    (
                        Some(w),
                        Some(ChildInfo {
                            input: Some(ci), ..
                        }),
                    ) => {
                        let what = match plan.kind {
                            Some((_, Clause::Workflow { name, version, .. })) => {
                                format!("workflow `{}` version \"{}\"", name.name, version.value)
                            }
                            _ => "the child workflow".to_string(),
                        };
                        let (x, r) = ctx.contract_input(&scope, w, ci, &what);
                        reads.extend(r);
                        x
                    }
                    (Some(w), _) => {
                        let (_, r) = ctx.expr(&scope, w);
                        reads.extend(r);
                        None
                    }
                    _ => None,
                };
                match (plan.kind, &plan.child, input_x) {
                    (
                        Some((_, Clause::Workflow { name, version, .. })),
                        Some(ChildInfo { hash: Some(h), .. }),
                        Some(input_x),
                    ) => Some(ir::StepKind::Workflow {
                        workflow: name.name.clone(),
                        version: version.value.clone(),
                        definition_hash: h.clone(),
                        input: input_x,
                    }),
                    _ => None,
                }
            }
            Some(KindTag::Sleep) => match plan.kind {
                Some((_, Clause::Sleep { duration, .. })) => {
                    let mut c = Checker {
                        rep: ctx.rep,
                        file,
                        reads: Vec::new(),
                    };
                    let x = c.check_as(&scope, duration, &Type::Duration);
                    reads.extend(c.reads.into_iter().map(|(n, _)| n));
                    x.map(|duration| ir::StepKind::Sleep { duration })
                }
                _ => None,
            },
            Some(KindTag::Signal) => match plan.kind {
                Some((_, Clause::Signal { name: sig, .. })) => {
                    if sig.value.is_empty() {
                        let loc = ctx.loc(sig.span);
                        ctx.rep.error(
                            "E0306",
                            "invalid property value: a signal name cannot be empty",
                            loc,
                        );
                        None
                    } else {
                        Some(ir::StepKind::Signal {
                            name: sig.value.clone(),
                            timeout_ms: timeout,
                        })
                    }
                }
                _ => None,
            },
            None => None,
        };
        let mut deps: BTreeSet<usize> = after_deps.into_iter().collect();
        for r in reads {
            if let Some(&j) = index.get(r.as_str()) {
                if j != i {
                    deps.insert(j);
                }
            }
        }
        ok &= part_ok;
        bodies.push(Body {
            for_each,
            condition,
            kind,
            max_concurrency,
            deps,
        });
    }

    // ----- the dependency graph -----
    let edges: Vec<Vec<usize>> = bodies
        .iter()
        .map(|b| b.deps.iter().copied().collect())
        .collect();
    for cycle in graph::cycles(&edges) {
        let names: Vec<&str> = cycle
            .iter()
            .map(|&j| plans[j].decl.name.name.as_str())
            .collect();
        let first = cycle[0];
        let loc = ctx.loc(plans[first].decl.name.span);
        let mut d = ctx.rep.make(
            "E0105",
            format!("dependency cycle between steps: `{}`", names.join("` -> `")),
            loc,
        );
        for &j in cycle.iter().skip(1).take(cycle.len().saturating_sub(2)) {
            d = ctx
                .rep
                .label(d, ctx.loc(plans[j].decl.name.span), "part of the cycle");
        }
        let d = d.with_help(
            "steps depend on the steps their expressions read and the steps named in `after`",
        );
        ctx.rep.push(file, d);
        ok = false;
    }
    let reach = graph::reachability(&edges);

    // ----- compensate blocks -----
    let mut compensations: Vec<Option<Option<ir::Compensation>>> = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let Some((_, clauses, _)) = plan.compensate else {
            compensations.push(None);
            continue;
        };
        if plan.kind.map(|k| k.0) != Some(KindTag::Task) {
            compensations.push(None);
            continue;
        }
        let allowed: BTreeSet<String> = reach[i]
            .iter()
            .map(|&j| plans[j].decl.name.name.clone())
            .collect();
        let loop_var = match (plan.for_each, &bodies[i].for_each) {
            (Some((var, _)), Some(fe)) => Some((
                var.name.clone(),
                fe.as_ref().and_then(|fe| match &fe.list.ty {
                    Type::List(e) => Some((**e).clone()),
                    Type::Json => Some(Type::Json),
                    _ => None,
                }),
            )),
            (Some((var, _)), None) => Some((var.name.clone(), None)),
            _ => None,
        };
        let scope = Scope {
            input: input.clone(),
            steps: &reader_types,
            loop_var,
            own: Some((plan.decl.name.name.clone(), plan.output.clone())),
            allowed: Some(&allowed),
            current: None,
        };
        compensations.push(Some(compensation(
            &mut ctx, &scope, clauses, plan, &wf_retry,
        )));
    }

    // ----- output -----
    for (kw, _) in decl.outputs.iter().skip(1) {
        let loc = ctx.loc(kw.span);
        ctx.rep.error(
            "E0301",
            "duplicate property: `output` is declared more than once",
            loc,
        );
    }
    let output_scope = Scope {
        input: input.clone(),
        steps: &reader_types,
        loop_var: None,
        own: None,
        allowed: None,
        current: None,
    };
    let output: Option<Option<ir::Expr>> = decl
        .outputs
        .first()
        .map(|(_, e)| ctx.expr(&output_scope, e).0);
    let output_type = match &output {
        None => Some(empty_record()),
        Some(x) => x.as_ref().map(|x| x.ty.clone()),
    };

    // ----- assemble -----
    let mut steps = Vec::new();
    for (i, (plan, body)) in plans.iter().zip(bodies).enumerate() {
        let for_each = match body.for_each {
            Some(Some(fe)) => Some(fe),
            Some(None) => {
                ok = false;
                None
            }
            None => None,
        };
        let condition = match body.condition {
            Some(Some(c)) => Some(c),
            Some(None) => {
                ok = false;
                None
            }
            None => None,
        };
        let max_concurrency = match body.max_concurrency {
            Some(Some(n)) => Some(n),
            Some(None) => {
                ok = false;
                None
            }
            None => None,
        };
        let compensate = match compensations[i].take() {
            Some(Some(c)) => Some(c),
            Some(None) => {
                ok = false;
                None
            }
            None => None,
        };
        let Some(kind) = body.kind else {
            ok = false;
            continue;
        };
        let depends_on = body
            .deps
            .iter()
            .map(|&j| plans[j].decl.name.name.clone())
            .collect();
        steps.push(ir::Step {
            name: plan.decl.name.name.clone(),
            kind,
            for_each,
            condition,
            depends_on,
            max_concurrency,
            compensate,
        });
    }
    let output = match output {
        Some(Some(x)) => Some(x),
        Some(None) => {
            ok = false;
            None
        }
        None => None,
    };
    let clean = ok && ctx.rep.count() == errors_before && input.is_some();
    let workflow = match (&input, clean) {
        (Some(input_t), true) => Some(ir::Workflow {
            name: decl.name.name.clone(),
            version,
            input: input_t.clone(),
            output,
            steps,
            requires_idempotency_key,
            retry: wf_retry,
            max_active,
            tasks: std::mem::take(&mut ctx.used),
        }),
        _ => None,
    };
    Checked {
        workflow,
        info: ChildInfo {
            input,
            output: output_type,
            hash: None,
        },
    }
}

/// Gathers a step's kind and clauses, reporting misplaced or repeated ones.
fn plan_step<'d>(
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

/// Checks a `compensate { .. }` block.
fn compensation(
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
