//! `orbit status ID`: one execution — status, workflow, input, output or
//! error, and whatever else the server shows (timestamps, units).

use std::process::ExitCode;

use super::common::{compact, execute, print_json, ClientArgs, Outcome, EXIT_OK};
use super::run::describe_error;

/// `orbit status` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The execution id.
    pub id: String,
    /// Server, token and output options.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit status`.
pub fn run(args: Args) -> ExitCode {
    execute(&args.client, status(&args))
}

async fn status(args: &Args) -> Outcome {
    let execution = args.client.client()?.get(&args.id).await?;
    if args.client.json {
        print_json(&execution)?;
        return Ok(EXIT_OK);
    }
    println!("execution  {}", execution.execution_id);
    println!("workflow   {} {}", execution.workflow, execution.version);
    if let Some(hash) = &execution.definition_hash {
        println!("hash       {hash}");
    }
    println!("status     {}", execution.status);
    println!("input      {}", compact(&execution.input));
    if !execution.output.is_null() {
        println!("output     {}", compact(&execution.output));
    }
    if !execution.error.is_null() {
        println!("error      {}", describe_error(&execution.error));
    }
    for (key, value) in &execution.extra {
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) => println!("{key:<10} {s}"),
            serde_json::Value::Object(map) if !map.is_empty() => {
                println!("{key}:");
                for (k, v) in map {
                    println!("  {k:<20} {}", compact(v));
                }
            }
            serde_json::Value::Array(items) if !items.is_empty() => {
                println!("{key}:");
                for item in items {
                    println!("  {}", compact(item));
                }
            }
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => {}
            other => println!("{key:<10} {}", compact(other)),
        }
    }
    Ok(EXIT_OK)
}
