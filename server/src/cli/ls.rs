//! `orbit ls [--status S]`: lists executions, newest first.

use std::process::ExitCode;

use super::common::{execute, print_json, ClientArgs, Outcome, EXIT_OK};
use orbit_sdk::{ExecutionSummary, ListOptions, Status};

/// `orbit ls` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Only executions with this status (pending, running, compensating,
    /// completed, failed, cancelled).
    #[arg(long)]
    pub status: Option<Status>,
    /// Only executions of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Server, token and output options.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit ls`.
pub fn run(args: Args) -> ExitCode {
    execute(&args.client, list(&args))
}

async fn list(args: &Args) -> Outcome {
    let page = args
        .client
        .client()?
        .list(&ListOptions {
            status: args.status,
            workflow: args.workflow.clone(),
            limit: Some(args.limit),
            cursor: None,
        })
        .await?;
    if args.client.json {
        print_json(&page)?;
        return Ok(EXIT_OK);
    }
    if page.executions.is_empty() {
        out!("no executions");
        return Ok(EXIT_OK);
    }
    let width = page
        .executions
        .iter()
        .map(|e| e.execution_id.len())
        .max()
        .unwrap_or(2)
        .max(2);
    out!(
        "{:<width$}  {:<12}  {:<20}  CREATED",
        "ID",
        "STATUS",
        "WORKFLOW"
    );
    for e in &page.executions {
        let workflow = format!("{} {}", e.workflow, e.version);
        out!(
            "{:<width$}  {:<12}  {:<20}  {}",
            e.execution_id,
            e.status.as_str(),
            workflow,
            created(e)
        );
    }
    if page.next_cursor.is_some() {
        out!("… more (use --limit)");
    }
    Ok(EXIT_OK)
}

/// The creation timestamp.
fn created(e: &ExecutionSummary) -> String {
    e.created_at.clone()
}
