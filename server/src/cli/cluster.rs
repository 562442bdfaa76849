//! `orbit cluster status`: the nodes of a `--cluster`, its leader, the
//! epoch and when the lease runs out, as the leader reports them (the
//! client follows `NOT_LEADER` to it).

use std::process::ExitCode;

use super::common::{execute, print_json, ClientArgs, Outcome, EXIT_OK};

/// `orbit cluster` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The `orbit cluster` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Print the nodes, the leader, the epoch and the lease's expiry.
    Status(StatusArgs),
}

/// `orbit cluster status` options.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// Server, token and output options (`--server` takes several URLs,
    /// comma-separated).
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit cluster`.
pub fn run(args: Args) -> ExitCode {
    match args.command {
        Command::Status(a) => execute(&a.client, status(&a)),
    }
}

async fn status(args: &StatusArgs) -> Outcome {
    let status = args.client.client()?.cluster().await?;
    if args.client.json {
        print_json(&status)?;
        return Ok(EXIT_OK);
    }
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    out!("mode       {}", status.mode);
    if status.mode == "single" {
        out!("(a single server, not started with --cluster)");
        return Ok(EXIT_OK);
    }
    if status.mode == "shared" {
        // No leader, epoch or lease: every member owns its executions.
        out!("answered   {}", or_none(&status.node_id));
    } else {
        out!(
            "leader     {} {}",
            or_none(&status.leader_node_id),
            or_none(&status.leader)
        );
        out!(
            "epoch      {}",
            status.epoch.map_or("-".to_owned(), |e| e.to_string())
        );
        out!("lease      expires {}", or_none(&status.lease_expires_at));
    }
    out!("nodes      {}", status.nodes.len());
    let width = status
        .nodes
        .iter()
        .map(|n| n.node_id.len())
        .max()
        .unwrap_or(0);
    for n in &status.nodes {
        out!(
            "  {:<width$}  {:<8} {:<5} {}  last seen {}",
            n.node_id,
            n.role,
            if n.live { "live" } else { "gone" },
            n.advertise,
            n.last_seen,
        );
    }
    Ok(EXIT_OK)
}
