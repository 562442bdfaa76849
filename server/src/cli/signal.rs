//! `orbit signal ID NAME [--payload JSON]`: sends a signal to an execution.

use std::process::ExitCode;

use super::common::{execute, parse_json, print_json, ClientArgs, Outcome, EXIT_OK};

/// `orbit signal` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The execution id.
    pub id: String,
    /// The signal's name.
    pub name: String,
    /// The signal's payload, as JSON.
    #[arg(long, default_value = "null")]
    pub payload: String,
    /// The `Idempotency-Key` to send (a UUIDv4 is generated otherwise).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Server, token and output options.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit signal`.
pub fn run(args: Args) -> ExitCode {
    execute(&args.client, signal(&args))
}

async fn signal(args: &Args) -> Outcome {
    let payload = parse_json("--payload", &args.payload)?;
    let ack = args
        .client
        .client()?
        .signal(&args.id, &args.name, payload, args.idempotency_key.clone())
        .await?;
    if args.client.json {
        print_json(&ack)?;
    } else {
        match ack.seq {
            Some(seq) => out!("signal {} recorded as #{seq} of {}", args.name, args.id),
            None => out!("signal {} sent to {}", args.name, args.id),
        }
    }
    Ok(EXIT_OK)
}
