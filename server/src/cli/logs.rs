//! `orbit logs ID [--follow]`: an execution's history, one line per event in
//! the format of seed `003` (`+ 39ms #4 StepDispatched step=work …`), using
//! the core's formatter. `--follow` keeps printing events as they are
//! recorded until the execution ends.

use std::process::ExitCode;
use std::time::Duration;

use orbit_core::history::logs::format_event;
use orbit_core::history::Millis;

use super::common::{execute, ClientArgs, Failure, Outcome, EXIT_OK};
use orbit_sdk::{split_urls, Client, FailoverTransport, RecordedEvent, ReqwestTransport};
use std::sync::Arc;

/// `orbit logs` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The execution id.
    pub id: String,
    /// Keep printing new events until the execution ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Server, token and output options.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit logs`.
pub fn run(args: Args) -> ExitCode {
    execute(&args.client, logs(&args))
}

/// Polls between two tries at streaming, after a stream could not be
/// opened (every 250 ms: a try every 5 s).
const POLLS_PER_STREAM_TRY: u32 = 20;

async fn logs(args: &Args) -> Outcome {
    // The client and the stream share one transport: the stream goes to
    // the server that answered last (with `--server a,b,c`, the leader).
    let failover = Arc::new(
        FailoverTransport::new(&split_urls(args.client.server_url()))
            .map_err(orbit_sdk::Error::from)?,
    );
    let client = Client::with_transport(failover.clone()).with_token(args.client.token.clone());
    let mut printer = Printer {
        id: args.id.clone(),
        origin: None,
        json: args.client.json,
        last_seq: 0,
        ended: false,
    };
    let page = client.history(&args.id, 0).await?;
    printer.print(&page.events)?;
    if !args.follow {
        return Ok(EXIT_OK);
    }
    // Follow with server-sent events; when the stream drops, read what
    // was missed with a plain request and open it again. A server that
    // cannot stream (or a standby) is polled every 250 ms, and streaming
    // is tried again now and then, and whenever another server answers.
    let mut polls_left = 0;
    let mut url = failover.current_url();
    while !printer.ended {
        if polls_left == 0 {
            let streamed = stream(&url, args, &mut printer).await?;
            if printer.ended {
                break;
            }
            polls_left = if streamed { 0 } else { POLLS_PER_STREAM_TRY };
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        let page = follow_page(&client, &args.id, printer.last_seq).await?;
        printer.print(&page)?;
        let answered = failover.current_url();
        if answered != url {
            url = answered;
            polls_left = 0;
        } else {
            polls_left = polls_left.saturating_sub(1);
        }
    }
    Ok(EXIT_OK)
}

async fn follow_page(client: &Client, id: &str, after: u64) -> Result<Vec<RecordedEvent>, Failure> {
    Ok(client.history(id, after).await?.events)
}

/// Reads `GET …/history` from `server` as `text/event-stream` from the
/// printer's last `seq`, printing each event, until the stream ends.
/// Returns whether streaming worked (false: the server refused it or could
/// not be reached, so the caller polls instead).
async fn stream(server: &str, args: &Args, printer: &mut Printer) -> Result<bool, Failure> {
    let Ok(transport) = ReqwestTransport::new(server) else {
        return Ok(false);
    };
    let url = format!(
        "{}/v1/executions/{}/history?after_seq={}",
        transport.base_url(),
        escape(&args.id),
        printer.last_seq
    );
    let mut request = transport
        .http_client()
        .get(&url)
        .header("accept", "text/event-stream");
    if let Some(token) = args.client.token.as_deref().filter(|t| !t.is_empty()) {
        request = request.bearer_auth(token);
    }
    let mut response = match request.send().await {
        Ok(r) if r.status().is_success() => r,
        _ => return Ok(false),
    };
    let is_sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_sse {
        return Ok(false);
    }
    let mut buffer: Vec<u8> = Vec::new();
    let mut data = String::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) | Err(_) => return Ok(true),
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !data.is_empty() {
                    if let Ok(event) = serde_json::from_str::<RecordedEvent>(&data) {
                        printer.print(std::slice::from_ref(&event))?;
                    }
                    data.clear();
                }
                if printer.ended {
                    return Ok(true);
                }
            } else if let Some(rest) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            }
        }
    }
}

/// Percent-encodes an id for a URL path.
fn escape(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prints events as they come, remembering the origin of the offsets.
struct Printer {
    id: String,
    origin: Option<Millis>,
    json: bool,
    last_seq: u64,
    ended: bool,
}

impl Printer {
    fn print(&mut self, events: &[RecordedEvent]) -> Result<(), Failure> {
        for recorded in events {
            if recorded.seq <= self.last_seq {
                continue;
            }
            self.last_seq = recorded.seq;
            self.ended |= recorded.is_terminal();
            let line = if self.json {
                serde_json::to_string(recorded)
                    .map_err(|e| Failure::usage("INTERNAL", e.to_string()))?
            } else {
                let event = crate::sdk::core_event(recorded)
                    .map_err(|e| Failure::usage("BAD_ANSWER", e))?;
                let origin = *self.origin.get_or_insert(event.at);
                format_event(&self.id, origin, &event)
            };
            // Flushed line by line (`--follow`); a reader that went away
            // (`orbit logs ID | head`) ends the command quietly.
            out!("{line}");
        }
        Ok(())
    }
}
