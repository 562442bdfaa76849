//! `orbit logs ID [--follow]`: an execution's history, one line per event in
//! the format of seed `003` (`+ 39ms #4 StepDispatched step=work …`), using
//! the core's formatter. `--follow` keeps printing events as they are
//! recorded until the execution ends.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use orbit_core::history::logs::format_event;
use orbit_core::history::Millis;

use super::common::{execute, ClientArgs, Failure, Outcome, EXIT_OK};
use crate::sdk::{Client, RecordedEvent};

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

async fn logs(args: &Args) -> Outcome {
    let client = args.client.client()?;
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
    while !printer.ended {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let page = follow_page(&client, &args.id, printer.last_seq).await?;
        printer.print(&page)?;
    }
    Ok(EXIT_OK)
}

async fn follow_page(client: &Client, id: &str, after: u64) -> Result<Vec<RecordedEvent>, Failure> {
    Ok(client.history(id, after).await?.events)
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
        let mut out = std::io::stdout().lock();
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
                let event = recorded
                    .to_event()
                    .map_err(|e| Failure::usage("BAD_ANSWER", e))?;
                let origin = *self.origin.get_or_insert(event.at);
                format_event(&self.id, origin, &event)
            };
            writeln!(out, "{line}")
                .map_err(|e| Failure::usage("IO_ERROR", format!("cannot write: {e}")))?;
        }
        out.flush()
            .map_err(|e| Failure::usage("IO_ERROR", format!("cannot write: {e}")))?;
        Ok(())
    }
}
