//! Checking one workflow declaration and compiling it to `ir::Workflow`:
//! step kinds and clauses, properties, expressions, the step dependency
//! graph, compensate scoping and the output expression.

use super::compensate::compensation;
use super::context::Ctx;
use super::expr::{Checker, Scope};
use super::graph;
use super::props::{is_semver, KNOWN};
use super::report::Reporter;
use super::step::unknown_property;
use super::step::{plan_step, KindTag, Plan};
use super::types::{empty_record, optional, show, TypeTable};
use crate::ir::{self, RetryPolicy, TaskContract, Type};
use crate::syntax::ast::{Clause, Property, WorkflowDecl};
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
            unbound_var: plan.for_each.map(|(var, _)| var.name.clone()),
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
            unbound_var: None,
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
        // The steps this one depends on, directly or not.
        let allowed = |name: &str| {
            index
                .get(name)
                .is_some_and(|&j| graph::reaches(&edges, i, j))
        };
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
            unbound_var: None,
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
        unbound_var: None,
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
