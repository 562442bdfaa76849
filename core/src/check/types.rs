//! Type resolution (written types to `ir::Type`, named types expanded),
//! display, and assignability.

use super::report::{Loc, Reporter};
use crate::ir::Type;
use crate::syntax::ast::{TypeDecl, TypeExpr, TypeExprKind};
use std::collections::{BTreeMap, BTreeSet};

/// Type of `execution`.
pub(crate) fn execution_type() -> Type {
    let mut fields = BTreeMap::new();
    fields.insert("id".to_string(), Type::String);
    fields.insert("workflow".to_string(), Type::String);
    fields.insert("version".to_string(), Type::String);
    Type::Record(fields)
}

/// The empty record `{}`.
pub(crate) fn empty_record() -> Type {
    Type::Record(BTreeMap::new())
}

/// `T?` without nesting optionals (`T??` is `T?`; `null?` is `null`).
pub(crate) fn optional(t: Type) -> Type {
    match t {
        Type::Optional(_) | Type::Null | Type::Json => t,
        other => Type::Optional(Box::new(other)),
    }
}

/// Human-readable form used in messages: `String`, `[Int]`, `{ a: Int }`, `Int?`.
pub(crate) fn show(t: &Type) -> String {
    match t {
        Type::String => "String".into(),
        Type::Int => "Int".into(),
        Type::Float => "Float".into(),
        Type::Bool => "Bool".into(),
        Type::Duration => "Duration".into(),
        Type::Json => "Json".into(),
        Type::Null => "null".into(),
        Type::List(inner) => format!("[{}]", show(inner)),
        Type::Record(fields) if fields.is_empty() => "{}".into(),
        Type::Record(fields) => {
            let inner: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{k}: {}", show(v)))
                .collect();
            format!("{{ {} }}", inner.join(", "))
        }
        Type::Optional(inner) => format!("{}?", show(inner)),
    }
}

/// Why a value of one type does not fit another.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Misfit {
    /// An optional (or `null`) where a value is required: E0405.
    Optional,
    /// Plain mismatch: E0400.
    Mismatch,
}

/// Whether a value of type `found` may be used where `expected` is required.
/// Records are structural: every non-optional expected field must be
/// present; extra fields are allowed (contracts check them separately).
pub(crate) fn assignable(found: &Type, expected: &Type) -> Result<(), Misfit> {
    match (found, expected) {
        (Type::Json, _) | (_, Type::Json) => Ok(()),
        (Type::Null, Type::Optional(_)) => Ok(()),
        (Type::Optional(f), Type::Optional(e)) => assignable(f, e),
        (f, Type::Optional(e)) => assignable(f, e),
        (Type::Optional(f), e) => match assignable(f, e) {
            Ok(()) => Err(Misfit::Optional),
            Err(m) => Err(m),
        },
        (Type::List(f), Type::List(e)) => assignable(f, e),
        (Type::Record(f), Type::Record(e)) => {
            for (name, ety) in e {
                match f.get(name) {
                    Some(fty) => assignable(fty, ety)?,
                    None if matches!(ety, Type::Optional(_) | Type::Json) => {}
                    None => return Err(Misfit::Mismatch),
                }
            }
            Ok(())
        }
        (f, e) if f == e => Ok(()),
        _ => Err(Misfit::Mismatch),
    }
}

/// The common type of two values (list elements), if there is one.
pub(crate) fn join(a: &Type, b: &Type) -> Option<Type> {
    match (a, b) {
        _ if a == b => Some(a.clone()),
        (Type::Json, _) | (_, Type::Json) => Some(Type::Json),
        (Type::Null, t) | (t, Type::Null) => Some(optional(t.clone())),
        (Type::Optional(x), y) | (y, Type::Optional(x)) => join(x, y).map(optional),
        (Type::List(x), Type::List(y)) => join(x, y).map(|t| Type::List(Box::new(t))),
        _ => {
            if assignable(a, b).is_ok() {
                Some(b.clone())
            } else if assignable(b, a).is_ok() {
                Some(a.clone())
            } else {
                None
            }
        }
    }
}

/// Deepest resolved type accepted (records, lists and optionals nested in
/// each other, through named types included).
pub(crate) const MAX_TYPE_DEPTH: usize = 24;
/// Longest chain of named types referring to one another.
const MAX_NAMED_CHAIN: usize = 64;

/// Nesting depth of a type (bounded: types deeper than [`MAX_TYPE_DEPTH`]
/// are never built).
pub(crate) fn depth(t: &Type) -> usize {
    1 + match t {
        Type::List(inner) | Type::Optional(inner) => depth(inner),
        Type::Record(fields) => fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Declared named types and their resolved forms.
pub(crate) struct TypeTable<'a> {
    decls: BTreeMap<String, (usize, &'a TypeDecl)>,
    resolved: BTreeMap<String, Option<Type>>,
}

impl<'a> TypeTable<'a> {
    /// Registers every `type` declaration (E0104 for duplicates; the first
    /// one wins) and resolves them all.
    pub fn new(decls: &[(usize, &'a TypeDecl)], rep: &mut Reporter) -> TypeTable<'a> {
        let mut table = TypeTable {
            decls: BTreeMap::new(),
            resolved: BTreeMap::new(),
        };
        for (file, decl) in decls {
            let loc = Loc {
                file: *file,
                span: decl.name.span,
            };
            if is_builtin(&decl.name.name) {
                rep.error(
                    "E0104",
                    format!(
                        "duplicate declaration: `{}` is a built-in type",
                        decl.name.name
                    ),
                    loc,
                );
                continue;
            }
            if let Some((f0, d0)) = table.decls.get(&decl.name.name) {
                let d = rep.make(
                    "E0104",
                    format!("duplicate declaration of type `{}`", decl.name.name),
                    loc,
                );
                let d = rep.label(
                    d,
                    Loc {
                        file: *f0,
                        span: d0.name.span,
                    },
                    "first declared here",
                );
                rep.push(*file, d);
                continue;
            }
            table.decls.insert(decl.name.name.clone(), (*file, decl));
        }
        let names: Vec<String> = table.decls.keys().cloned().collect();
        for name in names {
            let mut stack = Vec::new();
            table.resolve_named(&name, &mut stack, rep);
        }
        table
    }

    fn resolve_named(
        &mut self,
        name: &str,
        stack: &mut Vec<String>,
        rep: &mut Reporter,
    ) -> Option<Type> {
        if let Some(t) = self.resolved.get(name) {
            return t.clone();
        }
        let (file, decl) = *self.decls.get(name)?;
        stack.push(name.to_string());
        let t = self.resolve_in(&decl.ty, file, stack, rep);
        stack.pop();
        // A recursive reference may have recorded `None` for this name already.
        let t = match self.resolved.get(name) {
            Some(None) => None,
            _ => t,
        };
        self.resolved.insert(name.to_string(), t.clone());
        t
    }

    /// Resolves a written type in file `file`.
    pub fn resolve(&mut self, te: &TypeExpr, file: usize, rep: &mut Reporter) -> Option<Type> {
        let mut stack = Vec::new();
        self.resolve_in(te, file, &mut stack, rep)
    }

    fn resolve_in(
        &mut self,
        te: &TypeExpr,
        file: usize,
        stack: &mut Vec<String>,
        rep: &mut Reporter,
    ) -> Option<Type> {
        let loc = Loc {
            file,
            span: te.span,
        };
        match &te.kind {
            TypeExprKind::Error => None,
            TypeExprKind::Named(name) => {
                if let Some(t) = builtin(name) {
                    return Some(t);
                }
                if stack.iter().any(|s| s == name) {
                    let cycle = stack
                        .iter()
                        .chain(std::iter::once(name))
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("` -> `");
                    rep.error_help(
                        "E0109",
                        format!("recursive type definition: `{cycle}`"),
                        loc,
                        "a type cannot contain itself; use `Json` for recursive data",
                    );
                    for s in stack.iter() {
                        self.resolved.insert(s.clone(), None);
                    }
                    return None;
                }
                if self.decls.contains_key(name) {
                    if stack.len() >= MAX_NAMED_CHAIN {
                        rep.error(
                            "E0012",
                            format!("nested too deeply: more than {MAX_NAMED_CHAIN} named types refer to one another"),
                            loc,
                        );
                        return None;
                    }
                    return self.resolve_named(name, stack, rep);
                }
                rep.error("E0100", format!("unknown name: no type `{name}`"), loc);
                None
            }
            TypeExprKind::List(inner) => {
                let t = self
                    .resolve_in(inner, file, stack, rep)
                    .map(|t| Type::List(Box::new(t)));
                bounded(t, loc, rep)
            }
            TypeExprKind::Optional(inner) => self.resolve_in(inner, file, stack, rep).map(optional),
            TypeExprKind::Record(fields) => {
                let mut out = BTreeMap::new();
                let mut seen = BTreeSet::new();
                let mut ok = true;
                for (name, fty) in fields {
                    if !seen.insert(name.name.clone()) {
                        rep.error(
                            "E0104",
                            format!("duplicate declaration of field `{}`", name.name),
                            Loc {
                                file,
                                span: name.span,
                            },
                        );
                        continue;
                    }
                    match self.resolve_in(fty, file, stack, rep) {
                        Some(t) => {
                            out.insert(name.name.clone(), t);
                        }
                        None => ok = false,
                    }
                }
                bounded(ok.then_some(Type::Record(out)), loc, rep)
            }
        }
    }
}

/// `t` if it is not deeper than [`MAX_TYPE_DEPTH`]; E0012 otherwise.
fn bounded(t: Option<Type>, loc: Loc, rep: &mut Reporter) -> Option<Type> {
    let t = t?;
    if depth(&t) > MAX_TYPE_DEPTH {
        rep.error(
            "E0012",
            format!("nested too deeply: type nested more than {MAX_TYPE_DEPTH} levels deep"),
            loc,
        );
        return None;
    }
    Some(t)
}

fn is_builtin(name: &str) -> bool {
    builtin(name).is_some()
}

fn builtin(name: &str) -> Option<Type> {
    Some(match name {
        "String" => Type::String,
        "Int" => Type::Int,
        "Float" => Type::Float,
        "Bool" => Type::Bool,
        "Duration" => Type::Duration,
        "Json" => Type::Json,
        _ => return None,
    })
}
