//! `orbit run WORKFLOW --input JSON`: starts an execution, and with `--wait`
//! waits for it to end (exit 1 when it failed or was cancelled, 3 when the
//! wait timed out).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::common::{
    compact, execute, parse_duration, parse_json, print_json, ClientArgs, Outcome, EXIT_FAILED,
    EXIT_OK, EXIT_TIMEOUT,
};
use orbit_sdk::{Client, Execution, StartOptions, Status};

/// `orbit run` options. (`--version` here is the workflow's version, so the
/// automatic `--version` flag is off for this subcommand.)
#[derive(Debug, Clone, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// The workflow to start.
    pub workflow: String,
    /// The workflow's input, as JSON.
    #[arg(long, default_value = "{}")]
    pub input: String,
    /// A version to start (default: the highest registered).
    #[arg(long)]
    pub version: Option<String>,
    /// A client-chosen execution id (starting again with it is a no-op).
    #[arg(long)]
    pub id: Option<String>,
    /// Wait for the execution to end and print its outcome.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits (`30s`, `5m`, or plain seconds).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The `Idempotency-Key` to send (a UUIDv4 is generated otherwise).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Server, token and output options.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit run`.
pub fn run(args: Args) -> ExitCode {
    execute(&args.client, start(&args))
}

async fn start(args: &Args) -> Outcome {
    let input = parse_json("--input", &args.input)?;
    let client = args.client.client()?;
    let started = client
        .start(StartOptions {
            workflow: args.workflow.clone(),
            input,
            version: args.version.clone(),
            execution_id: args.id.clone(),
            idempotency_key: args.idempotency_key.clone(),
            traceparent: None,
        })
        .await?;
    if !args.wait {
        if args.client.json {
            print_json(&started)?;
        } else {
            // stdout is just the id, so scripts can capture it.
            out!("{}", started.execution_id);
            if !started.created {
                eprintln!(
                    "note: {} already exists; it was not started again",
                    started.execution_id
                );
            }
        }
        return Ok(EXIT_OK);
    }
    if !args.client.json {
        let verb = if started.created {
            "started"
        } else {
            "existing"
        };
        eprintln!("{verb} {}; waiting for it to end", started.execution_id);
    }
    match wait_for(
        &client,
        &started.execution_id,
        args.timeout,
        !args.client.json,
    )
    .await?
    {
        Some(execution) => Ok(print_outcome(&execution, args.client.json)?),
        None => {
            let execution = client.get(&started.execution_id).await?;
            if args.client.json {
                print_json(&execution)?;
            }
            eprintln!(
                "error: gave up waiting after {:?}; {} is still {}",
                args.timeout, execution.execution_id, execution.status
            );
            Ok(EXIT_TIMEOUT)
        }
    }
}

/// Long-polls until the execution is terminal (`Some`) or `timeout` passed
/// (`None`), showing progress on stderr when `progress`.
pub async fn wait_for(
    client: &Client,
    id: &str,
    timeout: Duration,
    progress: bool,
) -> Result<Option<Execution>, orbit_sdk::Error> {
    let began = Instant::now();
    let deadline = began + timeout;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let slice = (deadline - now).min(Duration::from_secs(5));
        let execution = client.wait(id, slice).await?;
        if execution.status.is_terminal() {
            return Ok(Some(execution));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        if progress {
            eprintln!(
                "  … {} is {} ({}s)",
                execution.execution_id,
                execution.status,
                began.elapsed().as_secs()
            );
        }
        if slice > Duration::ZERO && Instant::now() - now < slice / 2 {
            // The server answered early without the execution ending (an
            // older server, or a proxy): do not spin.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Prints a terminal execution; exit 0 when completed, 1 otherwise.
fn print_outcome(execution: &Execution, json: bool) -> Outcome {
    if json {
        print_json(execution)?;
    } else {
        match execution.status {
            Status::Completed => {
                out!("{} completed", execution.execution_id);
                out!("output: {}", compact(&execution.output));
            }
            status => {
                out!("{} {status}", execution.execution_id);
                if !execution.error.is_null() {
                    out!("error: {}", describe_error(&execution.error));
                }
            }
        }
    }
    Ok(if execution.status == Status::Completed {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

/// `CODE at step: message` from an execution's error object.
pub fn describe_error(error: &serde_json::Value) -> String {
    let code = error.get("code").and_then(|v| v.as_str()).unwrap_or("");
    let message = error.get("message").and_then(|v| v.as_str()).unwrap_or("");
    let step = error.get("step").and_then(|v| v.as_str());
    let mut text = code.to_string();
    if let Some(step) = step {
        text.push_str(&format!(" (step {step})"));
    }
    if !message.is_empty() {
        text.push_str(": ");
        text.push_str(message);
    }
    if text.is_empty() {
        compact(error)
    } else {
        text
    }
}
