//! Type checking of expressions and their compilation to `ir::Expr`.
//!
//! `check` returns `None` for an expression whose type is in error; the
//! error has been reported already, and enclosing expressions stay silent
//! about it (no cascades).

use super::report::{Loc, Reporter};
use super::types::{assignable, execution_type, join, optional, show, Misfit};
use crate::diagnostic::Span;
use crate::ir::{self, BinaryOp, ExprKind, Function, Type, UnaryOp};
use crate::syntax::ast;
use std::collections::BTreeMap;

/// What names mean where an expression is checked.
pub(crate) struct Scope<'s> {
    /// Type of `input` (`None`: in error).
    pub input: Option<Type>,
    /// Every step's output as readers see it (`None`: in error).
    pub steps: &'s BTreeMap<String, Option<Type>>,
    /// A bound loop variable.
    pub loop_var: Option<(String, Option<Type>)>,
    /// Inside a `compensate` block: the step's own name and the unit's output.
    pub own: Option<(String, Option<Type>)>,
    /// Inside a `compensate` block: the steps it may read.
    pub allowed: Option<&'s dyn Fn(&str) -> bool>,
    /// The step whose expressions these are (reading it is a cycle).
    pub current: Option<String>,
    /// A `for` step's loop variable where it is not bound yet (the list
    /// and `if:` are evaluated before the fan-out): named in the error.
    pub unbound_var: Option<String>,
}

/// Checks expressions of one file, recording which steps they read.
pub(crate) struct Checker<'r, 'a> {
    pub rep: &'r mut Reporter<'a>,
    pub file: usize,
    /// Steps read (name, span of the read), in reading order.
    pub reads: Vec<(String, Span)>,
}

fn ir(ty: Type, kind: ExprKind) -> Option<ir::Expr> {
    Some(ir::Expr { ty, kind })
}

fn is_numeric(t: &Type) -> bool {
    matches!(t, Type::Int | Type::Float)
}

impl Checker<'_, '_> {
    fn loc(&self, span: Span) -> Loc {
        Loc {
            file: self.file,
            span,
        }
    }

    fn error(&mut self, code: &str, message: impl Into<String>, span: Span) {
        let loc = self.loc(span);
        self.rep.error(code, message, loc);
    }

    /// Reports that `found` does not fit `expected` at `span` (E0400 or E0405).
    pub fn mismatch(&mut self, found: &Type, expected: &Type, span: Span) {
        match assignable(found, expected) {
            Ok(()) => {}
            Err(Misfit::Optional) => {
                let loc = self.loc(span);
                self.rep.error_help(
                    "E0405",
                    format!(
                        "optional value where a value is required: expected `{}`, found `{}`",
                        show(expected),
                        show(found)
                    ),
                    loc,
                    "give a default with `??`, e.g. `value ?? default`",
                );
            }
            Err(Misfit::Mismatch) => {
                self.error(
                    "E0400",
                    format!(
                        "type mismatch: expected `{}`, found `{}`",
                        show(expected),
                        show(found)
                    ),
                    span,
                );
            }
        }
    }

    /// Checks `e` and that its type fits `expected`. `None` if in error
    /// (reported).
    pub fn check_as(&mut self, scope: &Scope, e: &ast::Expr, expected: &Type) -> Option<ir::Expr> {
        let x = self.check(scope, e)?;
        if assignable(&x.ty, expected).is_ok() {
            Some(x)
        } else {
            self.mismatch(&x.ty, expected, e.span);
            None
        }
    }

    /// Checks `e`, returning its compiled form (`None` if in error).
    pub fn check(&mut self, scope: &Scope, e: &ast::Expr) -> Option<ir::Expr> {
        use ast::ExprKind as A;
        match &e.kind {
            A::Error => None,
            A::Str(s) => ir(
                Type::String,
                ExprKind::Literal {
                    value: s.clone().into(),
                },
            ),
            A::Int(i) => ir(Type::Int, ExprKind::Literal { value: (*i).into() }),
            A::Float(f) => {
                let value = serde_json::Number::from_f64(*f).map(serde_json::Value::Number)?;
                ir(Type::Float, ExprKind::Literal { value })
            }
            A::Bool(b) => ir(Type::Bool, ExprKind::Literal { value: (*b).into() }),
            A::Null => ir(
                Type::Null,
                ExprKind::Literal {
                    value: serde_json::Value::Null,
                },
            ),
            A::Duration(ms) => ir(
                Type::Duration,
                ExprKind::Literal {
                    value: (*ms).into(),
                },
            ),
            A::Name(name) => self.name(scope, name, e.span),
            A::Member(base, field) => {
                let b = self.check(scope, base)?;
                let ty = self.member_type(&b.ty, field, base.span)?;
                ir(
                    ty,
                    ExprKind::Member {
                        base: Box::new(b),
                        field: field.name.clone(),
                    },
                )
            }
            A::Index(base, index) => {
                let b = self.check(scope, base);
                let i = self.check(scope, index);
                let (b, i) = (b?, i?);
                let ty = self.index_type(&b.ty, &i.ty, base.span, index.span)?;
                ir(
                    ty,
                    ExprKind::Index {
                        base: Box::new(b),
                        index: Box::new(i),
                    },
                )
            }
            A::Unary(op, operand) => {
                let x = self.check(scope, operand)?;
                let ty = match (op, &x.ty) {
                    (_, Type::Json) => Type::Json,
                    (UnaryOp::Not, Type::Bool) => Type::Bool,
                    (UnaryOp::Neg, t @ (Type::Int | Type::Float | Type::Duration)) => t.clone(),
                    (op, t @ (Type::Optional(_) | Type::Null)) => {
                        let sym = if *op == UnaryOp::Not { "!" } else { "-" };
                        let loc = self.loc(operand.span);
                        self.rep.error_help(
                            "E0405",
                            format!(
                                "optional value where a value is required: `{sym}` on `{}`",
                                show(t)
                            ),
                            loc,
                            "give a default with `??`, e.g. `value ?? default`",
                        );
                        return None;
                    }
                    (op, t) => {
                        let sym = if *op == UnaryOp::Not { "!" } else { "-" };
                        self.error(
                            "E0403",
                            format!(
                                "operator not defined for these types: `{sym}` on `{}`",
                                show(t)
                            ),
                            e.span,
                        );
                        return None;
                    }
                };
                ir(
                    ty,
                    ExprKind::Unary {
                        op: *op,
                        operand: Box::new(x),
                    },
                )
            }
            A::Binary(op, l, r) => {
                let lx = self.check(scope, l);
                let rx = self.check(scope, r);
                let (lx, rx) = (lx?, rx?);
                let ty = self.binary_type(*op, &lx.ty, &rx.ty, l.span, r.span, e.span)?;
                ir(
                    ty,
                    ExprKind::Binary {
                        op: *op,
                        left: Box::new(lx),
                        right: Box::new(rx),
                    },
                )
            }
            A::Call(name, args) => self.call(scope, name, args, e.span),
            A::List(items) => {
                let mut out = Vec::new();
                let mut elem: Option<Type> = None;
                let mut ok = true;
                for item in items {
                    let Some(x) = self.check(scope, item) else {
                        ok = false;
                        continue;
                    };
                    elem = match elem {
                        None => Some(x.ty.clone()),
                        Some(t) => match join(&t, &x.ty) {
                            Some(j) => Some(j),
                            None => {
                                self.mismatch(&x.ty, &t, item.span);
                                ok = false;
                                Some(t)
                            }
                        },
                    };
                    out.push(x);
                }
                if !ok {
                    return None;
                }
                // An empty list takes any element type.
                let elem = elem.unwrap_or(Type::Json);
                ir(Type::List(Box::new(elem)), ExprKind::List { items: out })
            }
            A::Record(fields) => {
                let mut out = Vec::new();
                let mut types = BTreeMap::new();
                let mut ok = true;
                for (name, value) in fields {
                    if types.contains_key(&name.name) {
                        self.error(
                            "E0104",
                            format!("duplicate declaration of field `{}`", name.name),
                            name.span,
                        );
                        ok = false;
                        continue;
                    }
                    match self.check(scope, value) {
                        Some(x) => {
                            types.insert(name.name.clone(), x.ty.clone());
                            out.push((name.name.clone(), x));
                        }
                        None => {
                            // Keep the field known so that contract checks do not
                            // report it missing.
                            types.insert(name.name.clone(), Type::Json);
                            ok = false;
                        }
                    }
                }
                if !ok {
                    return None;
                }
                ir(Type::Record(types), ExprKind::Record { fields: out })
            }
        }
    }

    fn name(&mut self, scope: &Scope, name: &str, span: Span) -> Option<ir::Expr> {
        if let Some((var, ty)) = &scope.loop_var {
            if var == name {
                return ir(
                    ty.clone()?,
                    ExprKind::Var {
                        name: name.to_string(),
                    },
                );
            }
        }
        if let Some((own, ty)) = &scope.own {
            if own == name {
                return ir(
                    ty.clone()?,
                    ExprKind::Step {
                        name: name.to_string(),
                    },
                );
            }
        }
        match name {
            "input" => return ir(scope.input.clone()?, ExprKind::Input),
            "execution" => return ir(execution_type(), ExprKind::Execution),
            _ => {}
        }
        if let Some(ty) = scope.steps.get(name) {
            if scope.current.as_deref() == Some(name) {
                self.error(
                    "E0105",
                    format!("dependency cycle between steps: step `{name}` reads its own output"),
                    span,
                );
                return None;
            }
            if let Some(allowed) = scope.allowed {
                if !allowed(name) {
                    let loc = self.loc(span);
                    self.rep.error_help(
                        "E0100",
                        format!("unknown name: step `{name}` cannot be read in this `compensate` block"),
                        loc,
                        "a compensate block may read `input`, `execution`, the loop variable, the step itself and the steps it depends on",
                    );
                    return None;
                }
            }
            self.reads.push((name.to_string(), span));
            return ir(
                ty.clone()?,
                ExprKind::Step {
                    name: name.to_string(),
                },
            );
        }
        let loc = self.loc(span);
        if scope.unbound_var.as_deref() == Some(name) {
            self.rep.error_help(
                "E0100",
                format!("unknown name `{name}`: the loop variable is not in scope here"),
                loc,
                "a `for` step's list and its `if:` are evaluated once, before the fan-out",
            );
            return None;
        }
        self.rep.error_help(
            "E0100",
            format!("unknown name `{name}`"),
            loc,
            "names are `input`, `execution`, step names and the loop variable",
        );
        None
    }

    fn member_type(&mut self, base: &Type, field: &ast::Ident, base_span: Span) -> Option<Type> {
        match base {
            Type::Json => Some(Type::Json),
            Type::Record(fields) => match fields.get(&field.name) {
                Some(t) => Some(t.clone()),
                None => {
                    let known: Vec<&str> = fields.keys().map(String::as_str).collect();
                    let loc = self.loc(field.span);
                    let help = if known.is_empty() {
                        "this record has no fields".to_string()
                    } else {
                        format!("its fields are: {}", known.join(", "))
                    };
                    self.rep.error_help(
                        "E0101",
                        format!("unknown field `{}` of `{}`", field.name, show(base)),
                        loc,
                        help,
                    );
                    None
                }
            },
            Type::Optional(inner) => self.member_type(inner, field, base_span).map(optional),
            other => {
                self.error(
                    "E0409",
                    format!(
                        "`{}` has no fields (accessing `.{}`)",
                        show(other),
                        field.name
                    ),
                    base_span,
                );
                None
            }
        }
    }

    fn index_type(
        &mut self,
        base: &Type,
        index: &Type,
        base_span: Span,
        index_span: Span,
    ) -> Option<Type> {
        match base {
            Type::Json => match index {
                Type::Int | Type::String | Type::Json => Some(Type::Json),
                other => {
                    self.mismatch(other, &Type::Int, index_span);
                    None
                }
            },
            Type::List(elem) => {
                if assignable(index, &Type::Int).is_err() {
                    self.mismatch(index, &Type::Int, index_span);
                    return None;
                }
                Some((**elem).clone())
            }
            Type::Optional(inner) => self
                .index_type(inner, index, base_span, index_span)
                .map(optional),
            other => {
                self.error(
                    "E0409",
                    format!("`{}` cannot be indexed", show(other)),
                    base_span,
                );
                None
            }
        }
    }

    fn binary_type(
        &mut self,
        op: BinaryOp,
        l: &Type,
        r: &Type,
        ls: Span,
        rs: Span,
        whole: Span,
    ) -> Option<Type> {
        use BinaryOp::*;
        let sym = op_symbol(op);
        match op {
            Coalesce => match l {
                Type::Null => Some(r.clone()),
                // A `Json` may hold anything (null included): the result stays dynamic.
                Type::Json => Some(Type::Json),
                Type::Optional(inner) => {
                    let inner = (**inner).clone();
                    match assignable(r, &optional(inner.clone())) {
                        Ok(()) => Some(if matches!(r, Type::Optional(_) | Type::Null) {
                            optional(inner)
                        } else {
                            inner
                        }),
                        Err(_) => {
                            self.mismatch(r, &inner, rs);
                            None
                        }
                    }
                }
                other => {
                    if assignable(r, other).is_err() {
                        self.mismatch(r, other, rs);
                        return None;
                    }
                    Some(other.clone())
                }
            },
            And | Or => {
                match l {
                    Type::Bool | Type::Json => {}
                    Type::Optional(_) | Type::Null => {
                        self.mismatch(l, &Type::Bool, ls);
                        return None;
                    }
                    other => {
                        self.error(
                            "E0403",
                            format!(
                                "operator not defined for these types: `{sym}` on `{}`",
                                show(other)
                            ),
                            whole,
                        );
                        return None;
                    }
                }
                if assignable(r, &Type::Bool).is_err() {
                    self.mismatch(r, &Type::Bool, rs);
                    return None;
                }
                Some(Type::Bool)
            }
            Eq | Ne => {
                if join(l, r).is_none() {
                    self.error(
                        "E0400",
                        format!("type mismatch: expected `{}`, found `{}`", show(l), show(r)),
                        rs,
                    );
                    return None;
                }
                Some(Type::Bool)
            }
            Lt | Le | Gt | Ge => {
                match l {
                    Type::Json => return Some(Type::Bool),
                    Type::Int | Type::Float | Type::String | Type::Duration => {}
                    Type::Optional(_) | Type::Null => {
                        let loc = self.loc(ls);
                        self.rep.error_help(
                            "E0405",
                            format!(
                                "optional value where a value is required: `{sym}` on `{}`",
                                show(l)
                            ),
                            loc,
                            "give a default with `??`, e.g. `value ?? default`",
                        );
                        return None;
                    }
                    other => {
                        self.error(
                            "E0403",
                            format!(
                                "operator not defined for these types: `{sym}` on `{}`",
                                show(other)
                            ),
                            whole,
                        );
                        return None;
                    }
                }
                if assignable(r, l).is_err() {
                    self.mismatch(r, l, rs);
                    return None;
                }
                Some(Type::Bool)
            }
            Add | Sub | Mul | Div | Rem => {
                let expected_right: Type = match (op, l) {
                    (_, Type::Json) => return Some(Type::Json),
                    (_, Type::Optional(_) | Type::Null) => {
                        let loc = self.loc(ls);
                        self.rep.error_help(
                            "E0405",
                            format!(
                                "optional value where a value is required: `{sym}` on `{}`",
                                show(l)
                            ),
                            loc,
                            "give a default with `??`, e.g. `value ?? default`",
                        );
                        return None;
                    }
                    (_, t) if is_numeric(t) => t.clone(),
                    (Add, Type::String) => Type::String,
                    (Add, t @ Type::List(_)) => t.clone(),
                    (Add | Sub, Type::Duration) => Type::Duration,
                    (Mul | Div, Type::Duration) => Type::Int,
                    (_, other) => {
                        self.error(
                            "E0403",
                            format!(
                                "operator not defined for these types: `{sym}` on `{}`",
                                show(other)
                            ),
                            whole,
                        );
                        return None;
                    }
                };
                if let (Type::List(a), Type::List(b)) = (l, r) {
                    return match join(a, b) {
                        Some(t) => Some(Type::List(Box::new(t))),
                        None => {
                            self.mismatch(r, l, rs);
                            None
                        }
                    };
                }
                if assignable(r, &expected_right).is_err() {
                    self.mismatch(r, &expected_right, rs);
                    return None;
                }
                Some(l.clone())
            }
        }
    }

    fn call(
        &mut self,
        scope: &Scope,
        name: &ast::Ident,
        args: &[ast::Expr],
        span: Span,
    ) -> Option<ir::Expr> {
        let (function, arity) = match name.name.as_str() {
            "string" => (Function::String, 1),
            "int" => (Function::Int, 1),
            "float" => (Function::Float, 1),
            "len" => (Function::Len, 1),
            "keys" => (Function::Keys, 1),
            "contains" => (Function::Contains, 2),
            "lower" => (Function::Lower, 1),
            "upper" => (Function::Upper, 1),
            "json" => (Function::Json, 1),
            "seconds" => (Function::Seconds, 1),
            "millis" => (Function::Millis, 1),
            other => {
                let loc = self.loc(name.span);
                self.rep.error_help(
                    "E0401",
                    format!("unknown function `{other}`"),
                    loc,
                    "functions are string, int, float, len, keys, contains, lower, upper, json, seconds, millis",
                );
                // Still check the arguments for their own errors.
                for a in args {
                    self.check(scope, a);
                }
                return None;
            }
        };
        let checked: Vec<Option<ir::Expr>> = args.iter().map(|a| self.check(scope, a)).collect();
        if args.len() != arity {
            let plural = if arity == 1 { "" } else { "s" };
            self.error(
                "E0402",
                format!(
                    "wrong number of arguments: `{}` takes {arity} argument{plural}, found {}",
                    name.name,
                    args.len()
                ),
                span,
            );
            return None;
        }
        let checked: Vec<ir::Expr> = checked.into_iter().collect::<Option<Vec<_>>>()?;
        let t0 = checked[0].ty.clone();
        let s0 = args[0].span;
        let ty = match function {
            Function::String => Type::String,
            Function::Json => Type::Json,
            Function::Int | Function::Float => {
                let result = if function == Function::Int {
                    Type::Int
                } else {
                    Type::Float
                };
                match &t0 {
                    Type::Int | Type::Float | Type::String | Type::Json => result,
                    other => {
                        self.arg_mismatch(other, "Int, Float or String", s0);
                        return None;
                    }
                }
            }
            Function::Len => match &t0 {
                Type::String | Type::List(_) | Type::Json => Type::Int,
                other => {
                    self.arg_mismatch(other, "String or a list", s0);
                    return None;
                }
            },
            Function::Keys => match &t0 {
                Type::Record(_) | Type::Json => Type::List(Box::new(Type::String)),
                other => {
                    self.arg_mismatch(other, "a record", s0);
                    return None;
                }
            },
            Function::Contains => {
                let t1 = checked[1].ty.clone();
                let elem = match &t0 {
                    Type::String => Type::String,
                    Type::List(e) => (**e).clone(),
                    Type::Json => Type::Json,
                    other => {
                        self.arg_mismatch(other, "String or a list", s0);
                        return None;
                    }
                };
                if join(&t1, &elem).is_none() {
                    self.mismatch(&t1, &elem, args[1].span);
                    return None;
                }
                Type::Bool
            }
            Function::Lower | Function::Upper => {
                if assignable(&t0, &Type::String).is_err() {
                    self.mismatch(&t0, &Type::String, s0);
                    return None;
                }
                Type::String
            }
            Function::Seconds | Function::Millis => {
                if assignable(&t0, &Type::Int).is_err() {
                    self.mismatch(&t0, &Type::Int, s0);
                    return None;
                }
                Type::Duration
            }
        };
        ir(
            ty,
            ExprKind::Call {
                function,
                args: checked,
            },
        )
    }

    fn arg_mismatch(&mut self, found: &Type, expected: &str, span: Span) {
        if matches!(found, Type::Optional(_) | Type::Null) {
            let loc = self.loc(span);
            self.rep.error_help(
                "E0405",
                format!(
                    "optional value where a value is required: expected {expected}, found `{}`",
                    show(found)
                ),
                loc,
                "give a default with `??`, e.g. `value ?? default`",
            );
        } else {
            self.error(
                "E0400",
                format!(
                    "type mismatch: expected {expected}, found `{}`",
                    show(found)
                ),
                span,
            );
        }
    }
}

fn op_symbol(op: BinaryOp) -> &'static str {
    use BinaryOp::*;
    match op {
        Mul => "*",
        Div => "/",
        Rem => "%",
        Add => "+",
        Sub => "-",
        Eq => "==",
        Ne => "!=",
        Lt => "<",
        Le => "<=",
        Gt => ">",
        Ge => ">=",
        And => "&&",
        Or => "||",
        Coalesce => "??",
    }
}
