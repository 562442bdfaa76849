//! Constant property values: durations, counts, flags, `after` lists and
//! retry policies. These are fixed at compile time (they become plain
//! numbers in the IR), so they must be literals.

use super::report::{Loc, Reporter};
use crate::ir::RetryPolicy;
use crate::syntax::ast::{Expr, ExprKind, Ident};
use std::collections::BTreeSet;

/// Every property name the language knows, anywhere.
pub(crate) const KNOWN: &[&str] = &[
    "idempotency_key",
    "retry",
    "timeout",
    "queue_timeout",
    "after",
    "if",
    "max_concurrency",
    "requires_idempotency_key",
    "max_active",
];

fn literal_kind(e: &Expr) -> Option<&'static str> {
    Some(match e.kind {
        ExprKind::Str(_) => "String",
        ExprKind::Int(_) => "Int",
        ExprKind::Float(_) => "Float",
        ExprKind::Bool(_) => "Bool",
        ExprKind::Null => "null",
        ExprKind::Duration(_) => "Duration",
        ExprKind::List(_) => "a list",
        ExprKind::Record(_) => "a record",
        _ => return None,
    })
}

/// Checks constant property values of one file.
pub(crate) struct Consts<'r, 'a> {
    pub rep: &'r mut Reporter<'a>,
    pub file: usize,
}

impl Consts<'_, '_> {
    fn loc(&self, e: &Expr) -> Loc {
        Loc {
            file: self.file,
            span: e.span,
        }
    }

    fn wrong(&mut self, e: &Expr, prop: &str, expected: &str, example: &str) {
        let loc = self.loc(e);
        match literal_kind(e) {
            Some(found) if found != expected => self.rep.error_help(
                "E0400",
                format!("type mismatch: expected `{expected}`, found `{found}`"),
                loc,
                format!("write it as a literal, e.g. `{prop}: {example}`"),
            ),
            _ => self.rep.error_help(
                "E0306",
                format!("invalid property value: `{prop}` must be a `{expected}` literal"),
                loc,
                format!("e.g. `{prop}: {example}`"),
            ),
        }
    }

    /// A duration literal, in milliseconds.
    pub fn duration(&mut self, e: &Expr, prop: &str) -> Option<u64> {
        match e.kind {
            ExprKind::Duration(ms) => Some(ms),
            ExprKind::Error => None,
            _ => {
                self.wrong(e, prop, "Duration", "30s");
                None
            }
        }
    }

    /// A positive integer literal.
    pub fn positive_int(&mut self, e: &Expr, prop: &str) -> Option<u64> {
        match e.kind {
            ExprKind::Int(n) if n >= 1 => Some(n as u64),
            ExprKind::Int(n) => {
                let loc = self.loc(e);
                self.rep.error(
                    "E0306",
                    format!("invalid property value: `{prop}` must be at least 1, found {n}"),
                    loc,
                );
                None
            }
            ExprKind::Error => None,
            _ => {
                self.wrong(e, prop, "Int", "10");
                None
            }
        }
    }

    /// A Bool literal.
    pub fn bool(&mut self, e: &Expr, prop: &str) -> Option<bool> {
        match e.kind {
            ExprKind::Bool(b) => Some(b),
            ExprKind::Error => None,
            _ => {
                self.wrong(e, prop, "Bool", "true");
                None
            }
        }
    }

    /// `after: [a, b]`: the names, with their spans.
    pub fn after_list(&mut self, e: &Expr) -> Option<Vec<Ident>> {
        let ExprKind::List(items) = &e.kind else {
            if !matches!(e.kind, ExprKind::Error) {
                let loc = self.loc(e);
                self.rep.error_help(
                    "E0306",
                    "invalid property value: `after` takes a list of step names",
                    loc,
                    "e.g. `after: [validate_order, reserve]`",
                );
            }
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for item in items {
            match &item.kind {
                ExprKind::Name(name) => out.push(Ident {
                    name: name.clone(),
                    span: item.span,
                }),
                _ => {
                    let loc = self.loc(item);
                    self.rep.error_help(
                        "E0306",
                        "invalid property value: `after` takes a list of step names",
                        loc,
                        "write the step's name, e.g. `after: [validate_order]`",
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// `retry: { .. }` over `base` (fields not given keep `base`'s value).
    pub fn retry(&mut self, e: &Expr, base: &RetryPolicy) -> Option<RetryPolicy> {
        const HELP: &str =
            "a retry policy is `{ max_attempts: 5, backoff: 1s, factor: 2.0, max_backoff: 30s, non_retryable: [\"CODE\"] }` (every field optional)";
        let ExprKind::Record(fields) = &e.kind else {
            if !matches!(e.kind, ExprKind::Error) {
                let loc = self.loc(e);
                self.rep.error_help(
                    "E0305",
                    "invalid retry policy: expected a record literal",
                    loc,
                    HELP,
                );
            }
            return None;
        };
        let mut policy = base.clone();
        let mut ok = true;
        let mut seen = BTreeSet::new();
        let mut backoff_set = false;
        for (name, value) in fields {
            let vloc = self.loc(value);
            if !seen.insert(name.name.as_str()) {
                self.rep.error(
                    "E0104",
                    format!("duplicate declaration of field `{}`", name.name),
                    Loc {
                        file: self.file,
                        span: name.span,
                    },
                );
                ok = false;
                continue;
            }
            let bad = |rep: &mut Reporter, what: &str| {
                rep.error_help("E0305", format!("invalid retry policy: {what}"), vloc, HELP);
            };
            match (name.name.as_str(), &value.kind) {
                (_, ExprKind::Error) => ok = false,
                ("max_attempts", ExprKind::Int(n)) if *n >= 1 && *n <= u32::MAX as i64 => {
                    policy.max_attempts = *n as u32
                }
                ("max_attempts", _) => {
                    bad(self.rep, "`max_attempts` must be an integer of at least 1");
                    ok = false;
                }
                ("backoff", ExprKind::Duration(ms)) => {
                    policy.backoff_ms = *ms;
                    backoff_set = true;
                }
                ("max_backoff", ExprKind::Duration(ms)) => policy.max_backoff_ms = *ms,
                ("backoff" | "max_backoff", _) => {
                    bad(
                        self.rep,
                        &format!("`{}` must be a duration literal such as `1s`", name.name),
                    );
                    ok = false;
                }
                ("factor", ExprKind::Float(f)) if *f >= 1.0 => policy.factor = *f,
                ("factor", ExprKind::Int(n)) if *n >= 1 => policy.factor = *n as f64,
                ("factor", _) => {
                    bad(self.rep, "`factor` must be a number of at least 1.0");
                    ok = false;
                }
                ("non_retryable", ExprKind::List(items)) => {
                    let mut codes = Vec::new();
                    for item in items {
                        match &item.kind {
                            ExprKind::Str(s) if !s.is_empty() => codes.push(s.clone()),
                            _ => {
                                let loc = self.loc(item);
                                self.rep.error_help(
                                    "E0305",
                                    "invalid retry policy: `non_retryable` lists error codes as non-empty strings",
                                    loc,
                                    HELP,
                                );
                                ok = false;
                            }
                        }
                    }
                    policy.non_retryable = codes;
                }
                ("non_retryable", _) => {
                    bad(
                        self.rep,
                        "`non_retryable` must be a list of error-code strings",
                    );
                    ok = false;
                }
                (other, _) => {
                    self.rep.error_help(
                        "E0305",
                        format!("invalid retry policy: unknown field `{other}`"),
                        Loc {
                            file: self.file,
                            span: name.span,
                        },
                        HELP,
                    );
                    ok = false;
                }
            }
        }
        if ok && policy.max_backoff_ms < policy.backoff_ms {
            let loc = self.loc(e);
            let what = if backoff_set {
                "`backoff`"
            } else {
                "the default `backoff`"
            };
            self.rep.error_help(
                "E0305",
                format!(
                    "invalid retry policy: `max_backoff` ({}ms) is shorter than {what} ({}ms)",
                    policy.max_backoff_ms, policy.backoff_ms
                ),
                loc,
                HELP,
            );
            ok = false;
        }
        ok.then_some(policy)
    }
}

/// Whether `v` is a semantic version (`MAJOR.MINOR.PATCH`, optional
/// `-prerelease` and `+build`, numbers without leading zeros).
pub(crate) fn is_semver(v: &str) -> bool {
    let (rest, build) = match v.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (v, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    let ident_ok = |s: &str| {
        !s.is_empty()
            && s.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| numeric(p))
        && pre.is_none_or(ident_ok)
        && build.is_none_or(ident_ok)
}

#[cfg(test)]
mod tests {
    use super::is_semver;

    #[test]
    fn semver_accepts_release_prerelease_and_build() {
        for ok in [
            "1.0.0",
            "0.1.10",
            "2.0.0-rc.1",
            "1.2.3+build.5",
            "1.2.3-alpha-1+b",
        ] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in [
            "1", "1.0", "01.0.0", "1.0.0.0", "v1.0.0", "1.0.0-", "1..0", "",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
    }
}
