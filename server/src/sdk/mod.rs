//! The Rust SDK now lives in its own crate, `orbit-sdk` (`sdk/rust`), which
//! depends on reqwest, serde and tokio, not on the server. This module
//! re-exports it for code that still names `orbit_server::sdk`, and adds
//! what needs the server's crates: [`InProcessTransport`] (the SDK straight
//! into an axum router) and the conversion of API events into the core's
//! history events for `orbit logs`.

mod in_process;

pub use in_process::InProcessTransport;
pub use orbit_sdk::*;

use orbit_core::history::Event;

/// The core event behind an API event (`at` back to milliseconds since the
/// epoch), for formatting histories as `orbit logs` does.
pub fn core_event(e: &RecordedEvent) -> Result<Event, String> {
    let at = time::OffsetDateTime::parse(&e.at, &time::format_description::well_known::Rfc3339)
        .map_err(|err| format!("event #{}: bad timestamp `{}`: {err}", e.seq, e.at))?;
    let millis = at.unix_timestamp_nanos() / 1_000_000;
    let at = u64::try_from(millis)
        .map_err(|_| format!("event #{}: timestamp `{}` before 1970", e.seq, e.at))?;
    let mut value = e.to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("at".to_owned(), serde_json::Value::from(at));
    }
    serde_json::from_value(value).map_err(|err| format!("event #{}: {err}", e.seq))
}

/// The execution's whole history formatted as `orbit logs` prints it (seed
/// `003`'s format, one line per event).
pub async fn logs(client: &Client, execution_id: &str) -> Result<String, Error> {
    let page = client.history(execution_id, 0).await?;
    let events = page
        .events
        .iter()
        .map(core_event)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|message| Error::Decode {
            status: 200,
            message,
        })?;
    Ok(orbit_core::history::logs::format_history(
        execution_id,
        &events,
    ))
}
