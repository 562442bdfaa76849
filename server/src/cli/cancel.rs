//! `orbit cancel ID [--reason R]`: asks for an execution to be cancelled;
//! its compensations then run.

use std::process::ExitCode;

use super::common::{execute, print_json, ClientArgs, Outcome, EXIT_OK};

/// `orbit cancel` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The execution id.
    pub id: String,
    /// Why (recorded in `WorkflowCancelRequested`).
    #[arg(long)]
    pub reason: Option<String>,
    /// The `Idempotency-Key` to send (a UUIDv4 is generated otherwise).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Server, token and output options.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit cancel`.
pub fn run(args: Args) -> ExitCode {
    execute(&args.client, cancel(&args))
}

async fn cancel(args: &Args) -> Outcome {
    args.client
        .client()?
        .cancel(
            &args.id,
            args.reason.as_deref(),
            args.idempotency_key.clone(),
        )
        .await?;
    if args.client.json {
        print_json(&serde_json::json!({"execution_id": args.id, "cancel_requested": true}))?;
    } else {
        out!("cancellation of {} requested", args.id);
    }
    Ok(EXIT_OK)
}
