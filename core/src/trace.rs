//! W3C trace context: parsing a caller's `traceparent`, and the trace and
//! span ids of an execution's spans, derived from the execution id and event
//! sequence numbers so the engine (which hands each task its `traceparent`)
//! and the span exporter name the same spans the same way, across restarts.

use sha2::{Digest, Sha256};
use std::fmt;

/// A parsed `traceparent` header (version `00`):
/// `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id (never all zero).
    pub trace_id: [u8; 16],
    /// The caller's span id (never all zero).
    pub parent_id: [u8; 8],
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value; `None` for anything W3C calls invalid
    /// (wrong length or separators, upper-case or non-hex digits, an all-zero
    /// trace or parent id) and for versions other than `00`.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let text = text.trim_matches([' ', '\t']);
        let mut parts = text.split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" {
            return None;
        }
        let trace_id: [u8; 16] = lower_hex(trace)?.try_into().ok()?;
        let parent_id: [u8; 8] = lower_hex(parent)?.try_into().ok()?;
        let [flags]: [u8; 1] = lower_hex(flags)?.try_into().ok()?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 55 bytes, written without an allocation per part: one is made
        // for every task handed out.
        let mut out = [0u8; 55];
        out[..3].copy_from_slice(b"00-");
        hex::encode_to_slice(self.trace_id, &mut out[3..35]).map_err(|_| fmt::Error)?;
        out[35] = b'-';
        hex::encode_to_slice(self.parent_id, &mut out[36..52]).map_err(|_| fmt::Error)?;
        out[52] = b'-';
        hex::encode_to_slice([self.flags], &mut out[53..55]).map_err(|_| fmt::Error)?;
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

fn lower_hex(s: &str) -> Option<Vec<u8>> {
    if !s
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    hex::decode(s).ok()
}

fn hash(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

/// The trace of an execution: its caller's when the start carried a valid
/// `traceparent` (`caller`, as kept on `WorkflowCreated`; children inherit
/// it), else one derived from its top-level ancestor's id.
pub fn trace_id(execution_id: &str, caller: Option<&str>) -> [u8; 16] {
    if let Some(tp) = caller.and_then(TraceParent::parse) {
        return tp.trace_id;
    }
    let root = execution_id.split('.').next().unwrap_or(execution_id);
    first(&hash(&["trace", root]))
}

/// The span of an execution.
pub fn execution_span_id(execution_id: &str) -> [u8; 8] {
    first(&hash(&["execution", execution_id]))
}

/// The span of one attempt: `seq` is the seq of its `StepScheduled`.
pub fn attempt_span_id(execution_id: &str, seq: u64) -> [u8; 8] {
    event_span_id(execution_id, "attempt", seq)
}

/// A span started by the event `seq` of an execution (`kind`: `attempt`,
/// `child`).
pub fn event_span_id(execution_id: &str, kind: &str, seq: u64) -> [u8; 8] {
    first(&hash(&[kind, execution_id, &seq.to_string()]))
}

/// The `traceparent` handed to a worker with a task: the attempt's span
/// (scheduled at `seq`) as parent, in the execution's trace, sampled (the
/// server records every attempt).
/// `trace_id` is the execution's ([`trace_id`], kept on its projection).
pub fn task_traceparent(trace_id: [u8; 16], execution_id: &str, seq: u64) -> String {
    TraceParent {
        trace_id,
        parent_id: attempt_span_id(execution_id, seq),
        flags: 1,
    }
    .to_string()
}

fn first<const N: usize>(h: &[u8; 32]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&h[..N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn valid_traceparents_round_trip() {
        let tp = TraceParent::parse(VALID).expect("valid");
        assert_eq!(hex::encode(tp.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex::encode(tp.parent_id), "00f067aa0ba902b7");
        assert_eq!(tp.flags, 1);
        assert_eq!(tp.to_string(), VALID);
        let unsampled = VALID.replace("-01", "-00");
        assert_eq!(TraceParent::parse(&unsampled).map(|t| t.flags), Some(0));
    }

    #[test]
    fn invalid_traceparents_are_none() {
        for bad in [
            "",
            "garbage",
            // Other versions, upper case, wrong lengths, separators.
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // All-zero ids.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn trace_ids_follow_the_caller_or_the_root() {
        let caller = TraceParent::parse(VALID).expect("valid").trace_id;
        assert_eq!(trace_id("o-1", Some(VALID)), caller);
        assert_eq!(trace_id("o-1.ship", Some(VALID)), caller);
        assert_eq!(trace_id("o-1.ship", None), trace_id("o-1", None));
        assert_ne!(trace_id("o-1", None), trace_id("o-2", None));
        assert_eq!(trace_id("o-1", Some("invalid")), trace_id("o-1", None));
    }

    #[test]
    fn a_task_names_its_attempt_span() {
        let tp = TraceParent::parse(&task_traceparent(trace_id("o-1", Some(VALID)), "o-1", 7))
            .expect("valid");
        assert_eq!(tp.trace_id, trace_id("o-1", Some(VALID)));
        assert_eq!(tp.parent_id, attempt_span_id("o-1", 7));
        assert_ne!(attempt_span_id("o-1", 7), attempt_span_id("o-1", 8));
        assert_eq!(tp.flags, 1);
    }
}
