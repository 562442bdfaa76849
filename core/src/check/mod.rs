//! Name resolution, dependency graphs, type checking and compilation of the
//! syntax tree into the definition IR.
//!
//! The entry point is [`compile`]: it parses every [`Source`], checks them
//! together (types, tasks and workflows may be declared in any file, in any
//! order) and returns every definition that compiled plus every diagnostic
//! found. Compilation never stops at the first error.

mod compensate;
mod context;
mod expr;
mod graph;
mod hash;
mod props;
mod report;
mod step;
mod types;
mod workflow;

pub use hash::{canonical_json, canonical_workflow, definition_hash};

use crate::diagnostic::Diagnostic;
use crate::ir::{self, Type};
use crate::syntax::ast::{Clause, Decl, TaskDecl, TypeDecl, WorkflowDecl};
use report::{Loc, Reporter};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use types::{empty_record, show, TypeTable};
use workflow::{Child, ChildInfo};

/// One `.orbit` source file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// File name shown in diagnostics (e.g. `order.orbit`).
    pub name: String,
    /// The file's text.
    pub text: String,
}

/// A compiled workflow and its `definition_hash`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// The compiled workflow (with the task contracts it uses and the pinned
    /// hashes of its children).
    pub workflow: ir::Workflow,
    /// [`definition_hash`] of `workflow`.
    pub hash: String,
    /// The file the workflow was declared in (empty for definitions that
    /// came from a server rather than from source).
    pub file: String,
}

impl Definition {
    /// Wraps a compiled workflow, computing its hash.
    pub fn new(workflow: ir::Workflow, file: impl Into<String>) -> Definition {
        let hash = definition_hash(&workflow);
        Definition {
            workflow,
            hash,
            file: file.into(),
        }
    }
}

/// The result of [`compile`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compiled {
    /// Every workflow that compiled without errors, children before parents
    /// (so registering them in this order never references an unknown child).
    pub definitions: Vec<Definition>,
    /// Every task contract declared by the sources, sorted by name.
    pub tasks: Vec<ir::TaskContract>,
    /// Every error found, in file order then source order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Compiled {
    /// True when there is no diagnostic.
    pub fn is_ok(&self) -> bool {
        self.diagnostics.is_empty()
    }
}

/// Compiles `sources` together. `registered(name, version)` resolves child
/// workflows that are not declared in `sources` (e.g. already registered on a
/// server); pass `&|_, _| None` when there are none.
///
/// When any diagnostic is reported, `definitions` holds only the workflows
/// that compiled cleanly; callers that register definitions must refuse the
/// whole set when `diagnostics` is not empty.
pub fn compile(
    sources: &[Source],
    registered: &dyn Fn(&str, &str) -> Option<Definition>,
) -> Compiled {
    let mut rep = Reporter::new(sources);
    let mut trees = Vec::new();
    // Offsets of lexical/syntax errors per file: a workflow containing one
    // does not compile even if what parsed of it checks.
    let mut syntax_errors: Vec<Vec<usize>> = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        let (tree, errors) = crate::syntax::parse(&source.name, &source.text);
        // An unexpected end of file breaks whatever declaration was open.
        syntax_errors.push(
            errors
                .iter()
                .map(|e| {
                    if e.code == "E0011" {
                        usize::MAX
                    } else {
                        e.span.start
                    }
                })
                .collect(),
        );
        for e in errors {
            rep.push(i, e);
        }
        trees.push(tree);
    }
    let mut type_decls: Vec<(usize, &TypeDecl)> = Vec::new();
    let mut task_decls: Vec<(usize, &TaskDecl)> = Vec::new();
    let mut workflow_decls: Vec<(usize, &WorkflowDecl)> = Vec::new();
    for (i, tree) in trees.iter().enumerate() {
        for decl in &tree.decls {
            match decl {
                Decl::Type(t) => type_decls.push((i, t)),
                Decl::Task(t) => task_decls.push((i, t)),
                Decl::Workflow(w) => workflow_decls.push((i, w)),
            }
        }
    }
    let mut types = TypeTable::new(&type_decls, &mut rep);
    let tasks = check_tasks(&task_decls, &mut types, &mut rep);

    // Workflows by (name, version); duplicates are reported and dropped.
    let mut keyed: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut unique: Vec<(usize, &WorkflowDecl)> = Vec::new();
    for (file, w) in &workflow_decls {
        let version = w
            .version
            .as_ref()
            .map(|v| v.value.clone())
            .unwrap_or_default();
        let key = (w.name.name.clone(), version);
        if let Some(&j) = keyed.get(&key) {
            let (f0, w0) = unique[j];
            let loc = Loc {
                file: *file,
                span: w.name.span,
            };
            let d = rep.make(
                "E0104",
                format!(
                    "duplicate declaration of workflow `{}` version \"{}\"",
                    key.0, key.1
                ),
                loc,
            );
            let d = rep.label(
                d,
                Loc {
                    file: f0,
                    span: w0.name.span,
                },
                "first declared here",
            );
            rep.push(*file, d);
            continue;
        }
        keyed.insert(key, unique.len());
        unique.push((*file, w));
    }

    // Child references between workflows of the set, and their cycles.
    let refs: Vec<Vec<(usize, Loc)>> = unique
        .iter()
        .map(|(file, w)| {
            let mut out = Vec::new();
            for step in &w.steps {
                for clause in &step.clauses {
                    if let Clause::Workflow { name, version, .. } = clause {
                        let key = (name.name.clone(), version.value.clone());
                        if let Some(&j) = keyed.get(&key) {
                            out.push((
                                j,
                                Loc {
                                    file: *file,
                                    span: name.span.to(version.span),
                                },
                            ));
                        }
                    }
                }
            }
            out
        })
        .collect();
    let edges: Vec<Vec<usize>> = refs
        .iter()
        .map(|r| r.iter().map(|(j, _)| *j).collect())
        .collect();
    for cycle in graph::cycles(&edges) {
        let names: Vec<String> = cycle
            .iter()
            .map(|&j| {
                format!(
                    "{} {}",
                    unique[j].1.name.name,
                    unique[j]
                        .1
                        .version
                        .as_ref()
                        .map(|v| v.value.as_str())
                        .unwrap_or("")
                )
            })
            .collect();
        let (from, to) = (cycle[0], cycle[1]);
        if let Some((_, loc)) = refs[from].iter().find(|(j, _)| *j == to) {
            rep.error_help(
                "E0107",
                format!("cycle between workflows: `{}`", names.join("` -> `")),
                *loc,
                "a workflow cannot start itself, directly or through its children",
            );
        }
    }

    // Children before parents; workflows caught in (or behind) a cycle last.
    let order = graph::dependencies_first(&edges);

    let mut infos: BTreeMap<usize, ChildInfo> = BTreeMap::new();
    let mut definitions = Vec::new();
    for &i in &order {
        let (file, decl) = unique[i];
        let child = |name: &str, version: &str| -> Child {
            if let Some(&j) = keyed.get(&(name.to_string(), version.to_string())) {
                return match infos.get(&j) {
                    Some(info) => Child::Known(info.clone()),
                    None => Child::Silent,
                };
            }
            match registered(name, version) {
                Some(def) => Child::Known(ChildInfo {
                    input: Some(def.workflow.input.clone()),
                    output: Some(
                        def.workflow
                            .output
                            .as_ref()
                            .map(|o| o.ty.clone())
                            .unwrap_or_else(empty_record),
                    ),
                    hash: Some(def.hash.clone()),
                }),
                None => Child::Unknown,
            }
        };
        let checked = workflow::check(&mut rep, &mut types, &tasks, &child, file, decl);
        let mut info = checked.info;
        let broken = syntax_errors.get(file).is_some_and(|offsets| {
            offsets
                .iter()
                .any(|o| *o >= decl.span.start && (*o <= decl.span.end || *o == usize::MAX))
        });
        let checked_workflow = checked.workflow.filter(|_| !broken).filter(|wf| {
            let levels = json_depth(&serde_json::to_value(wf).unwrap_or_default());
            if levels > MAX_DEFINITION_DEPTH {
                rep.error_help(
                    "E0012",
                    format!(
                        "nested too deeply: the compiled workflow `{}` is {levels} levels deep in JSON (at most {MAX_DEFINITION_DEPTH})",
                        decl.name.name
                    ),
                    Loc { file, span: decl.name.span },
                    "flatten deeply nested record literals or types",
                );
            }
            levels <= MAX_DEFINITION_DEPTH
        });
        if let Some(wf) = checked_workflow {
            let def = Definition::new(
                wf,
                sources
                    .get(file)
                    .map(|s| s.name.clone())
                    .unwrap_or_default(),
            );
            info.hash = Some(def.hash.clone());
            definitions.push(def);
        }
        infos.insert(i, info);
    }

    let mut diags = rep.diags;
    diags.sort_by_key(|(file, d)| (*file, d.span.start));
    diags.dedup_by(|a, b| a.1 == b.1);
    Compiled {
        definitions,
        tasks: tasks.into_values().flatten().collect(),
        diagnostics: diags.into_iter().map(|(_, d)| d).collect(),
    }
}

/// Deepest JSON encoding of a compiled workflow accepted, well below the
/// nesting limits of common JSON decoders (serde_json stops at 128).
pub const MAX_DEFINITION_DEPTH: usize = 100;

/// Nesting depth of a JSON value (iterative: no recursion on the input).
fn json_depth(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                deepest = deepest.max(d);
                stack.extend(m.values().map(|c| (c, d + 1)));
            }
            serde_json::Value::Array(a) => {
                deepest = deepest.max(d);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            _ => deepest = deepest.max(d - 1),
        }
    }
    deepest
}

/// Checks task declarations: reserved and duplicate names, versions, and
/// that input and output are record types.
fn check_tasks(
    decls: &[(usize, &TaskDecl)],
    types: &mut TypeTable,
    rep: &mut Reporter,
) -> workflow::Tasks {
    let mut tasks: workflow::Tasks = BTreeMap::new();
    let mut first: BTreeMap<String, Loc> = BTreeMap::new();
    for (file, t) in decls {
        let file = *file;
        let name_loc = Loc {
            file,
            span: t.name.span,
        };
        if t.name.value.starts_with("orbit.") {
            rep.error_help(
                "E0108",
                format!("reserved task name `{}`", t.name.value),
                name_loc,
                "names starting with `orbit.` belong to built-in tasks; choose another name",
            );
            continue;
        }
        if t.name.value.is_empty() {
            rep.error(
                "E0306",
                "invalid property value: a task name cannot be empty",
                name_loc,
            );
            continue;
        }
        if let Some(loc0) = first.get(&t.name.value) {
            let d = rep.make(
                "E0104",
                format!("duplicate declaration of task `{}`", t.name.value),
                name_loc,
            );
            let d = rep
                .label(d, *loc0, "first declared here")
                .with_help("a compile set declares one version of each task");
            rep.push(file, d);
            continue;
        }
        first.insert(t.name.value.clone(), name_loc);
        let mut ok = true;
        let version = t
            .version
            .as_ref()
            .map(|v| v.value.clone())
            .unwrap_or_default();
        if let Some(v) = &t.version {
            if !is_semver_str(&v.value) {
                rep.error_help(
                    "E0304",
                    format!("invalid version string `{}`", v.value),
                    Loc { file, span: v.span },
                    "versions are semver: MAJOR.MINOR.PATCH, e.g. \"1.0.0\"",
                );
                ok = false;
            }
        }
        let mut side = |list: &[(crate::syntax::ast::Ident, crate::syntax::ast::TypeExpr)],
                        what: &str,
                        rep: &mut Reporter|
         -> Option<Type> {
            for (kw, _) in list.iter().skip(1) {
                rep.error(
                    "E0301",
                    format!("duplicate property: `{what}` is declared more than once"),
                    Loc {
                        file,
                        span: kw.span,
                    },
                );
            }
            let Some((_, te)) = list.first() else {
                if t.recovered {
                    return None;
                }
                rep.error_help(
                    "E0308",
                    format!(
                        "missing required clause: task `{}` needs `{what}`",
                        t.name.value
                    ),
                    name_loc,
                    format!("add `{what} {{ .. }}` (a record type; `{{ }}` for none)"),
                );
                return None;
            };
            match types.resolve(te, file, rep) {
                Some(t @ Type::Record(_)) => Some(t),
                Some(other) => {
                    rep.error_help(
                        "E0410",
                        format!(
                            "task contract {what} is not a record type: found `{}`",
                            show(&other)
                        ),
                        Loc {
                            file,
                            span: te.span,
                        },
                        "wrap the value in a record, e.g. `{ value: Int }`",
                    );
                    None
                }
                None => None,
            }
        };
        let input = side(&t.inputs, "input", rep);
        let output = side(&t.outputs, "output", rep);
        let contract = match (input, output, ok) {
            (Some(input), Some(output), true) => Some(ir::TaskContract {
                name: t.name.value.clone(),
                version,
                input,
                output,
            }),
            _ => None,
        };
        tasks.insert(t.name.value.clone(), contract);
    }
    tasks
}

fn is_semver_str(v: &str) -> bool {
    props::is_semver(v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests;
