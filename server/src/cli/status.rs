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
    out!("execution  {}", execution.execution_id);
    out!("workflow   {} {}", execution.workflow, execution.version);
    if let Some(hash) = &execution.definition_hash {
        out!("hash       {hash}");
    }
    out!("status     {}", execution.status);
    out!("input      {}", compact(&execution.input));
    if !execution.output.is_null() {
        out!("output     {}", compact(&execution.output));
    }
    if !execution.error.is_null() {
        out!("error      {}", describe_error(&execution.error));
    }
    // The remaining fields, in the order the JSON object lists them.
    if !execution.created_at.is_empty() {
        out!("{:<10} {}", "created_at", execution.created_at);
    }
    if let Some(parent) = &execution.parent {
        out!("{:<10} {parent}", "parent");
    }
    if let Ok(units) = serde_json::to_value(&execution.units) {
        print_units(&units);
    }
    if !execution.updated_at.is_empty() {
        out!("{:<10} {}", "updated_at", execution.updated_at);
    }
    Ok(EXIT_OK)
}

/// One line per unit: name, status, attempt, and the error code if any.
fn print_units(units: &serde_json::Value) {
    let Some(map) = units.as_object().filter(|m| !m.is_empty()) else {
        return;
    };
    let width = map.keys().map(String::len).max().unwrap_or(0);
    out!("units:");
    for (name, unit) in map {
        let status = unit.get("status").and_then(|v| v.as_str()).unwrap_or("?");
        let mut line = format!("  {name:<width$}  {status:<10}");
        if let Some(attempt) = unit.get("attempt").and_then(|v| v.as_u64()) {
            line.push_str(&format!(" attempt={attempt}"));
        }
        if let Some(code) = unit
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(|c| c.as_str())
        {
            line.push_str(&format!(" error={code}"));
        }
        if let Some(child) = unit.get("child_id").and_then(|v| v.as_str()) {
            line.push_str(&format!(" child={child}"));
        }
        out!("{}", line.trim_end());
    }
}
