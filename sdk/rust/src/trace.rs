//! A task's W3C trace context, for handlers that run their own OpenTelemetry
//! SDK: the server names the span of each attempt in the task's
//! `traceparent`, so a span the handler starts as its child joins the
//! execution's trace. The SDK itself records nothing and depends on no
//! tracing library.
//!
//! ```
//! # use orbit_sdk::Task;
//! # fn demo(task: &Task) {
//! if let Some(cx) = task.trace_context() {
//!     // With the opentelemetry crate:
//!     //   let parent = SpanContext::new(
//!     //       TraceId::from_hex(cx.trace_id()).unwrap(),
//!     //       SpanId::from_hex(cx.span_id()).unwrap(),
//!     //       if cx.sampled() { TraceFlags::SAMPLED } else { TraceFlags::default() },
//!     //       true, TraceState::default());
//!     //   let cx = Context::new().with_remote_span_context(parent);
//!     //   let span = tracer.start_with_context("charge", &cx);
//!     println!("trace {} parent {}", cx.trace_id(), cx.span_id());
//! }
//! # }
//! ```

use crate::wire::Task;

/// A parsed `traceparent` (version `00`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: String,
    span_id: String,
    flags: u8,
}

impl TraceContext {
    /// Parses a `traceparent` header value; `None` when it is not valid W3C
    /// trace context of version `00` (lower-case hex, ids not all zero).
    pub fn parse(text: &str) -> Option<TraceContext> {
        let mut parts = text.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let zero = |s: &str| s.bytes().all(|b| b == b'0');
        if parts.next().is_some()
            || version != "00"
            || !hex(trace, 32)
            || !hex(span, 16)
            || !hex(flags, 2)
            || zero(trace)
            || zero(span)
        {
            return None;
        }
        Some(TraceContext {
            trace_id: trace.to_owned(),
            span_id: span.to_owned(),
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }

    /// The trace id: 32 lower-case hex digits.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The parent span id (the attempt's span): 16 lower-case hex digits.
    pub fn span_id(&self) -> &str {
        &self.span_id
    }

    /// The trace flags.
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the sampled flag is set.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

impl Task {
    /// The trace context of this attempt, when the server sent a valid one
    /// (servers before trace propagation send none).
    pub fn trace_context(&self) -> Option<TraceContext> {
        self.traceparent.as_deref().and_then(TraceContext::parse)
    }
}

#[cfg(test)]
mod tests {
    use super::TraceContext;

    #[test]
    fn parses_valid_and_refuses_invalid() {
        let cx = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(cx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(cx.span_id(), "00f067aa0ba902b7");
        assert!(cx.sampled());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
    }
}
