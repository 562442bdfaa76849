//! What the client commands (`deploy`, `run`, `status`, `ls`, `logs`,
//! `signal`, `cancel`) share: the `--server`/`--token`/`--json` options, the
//! exit codes of `api.md`, error printing and duration parsing.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use orbit_sdk::{Client, Error, DEFAULT_SERVER};

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: the operation failed or was refused (a 4xx, or a `--wait`ed
/// execution that ended failed or cancelled).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: usage, I/O or connection error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: `--wait` timed out before the execution finished.
pub const EXIT_TIMEOUT: u8 = 3;

/// Options every client command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The server's URL; for a `--cluster`, several comma-separated (the
    /// client follows `NOT_LEADER` to the leader and tries the others when
    /// one cannot be reached).
    #[arg(long, env = "ORBIT_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// API token, sent as `Authorization: Bearer <token>`.
    #[arg(long, env = "ORBIT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A command's failure: what to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// The error, as JSON (`{"error": {...}}`).
    pub body: serde_json::Value,
    /// One line for humans.
    pub text: String,
}

impl Failure {
    /// A usage or I/O error (exit 2).
    pub fn usage(code: &str, text: impl Into<String>) -> Self {
        let text = text.into();
        Failure {
            code: EXIT_USAGE,
            body: serde_json::json!({"error": {"code": code, "message": text}}),
            text,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::Api {
                status,
                code,
                message,
                details,
            } => {
                let mut body = match details {
                    serde_json::Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                body.insert("code".into(), code.clone().into());
                body.insert("message".into(), message.clone().into());
                body.insert("status".into(), status.into());
                Failure {
                    code: EXIT_FAILED,
                    body: serde_json::json!({ "error": body }),
                    text: if message.is_empty() {
                        code
                    } else {
                        format!("{code}: {message}")
                    },
                }
            }
            Error::Transport(t) => Failure::usage("CONNECTION_ERROR", t.to_string()),
            Error::Decode { .. } => Failure::usage("BAD_ANSWER", e.to_string()),
            Error::InvalidArgument(m) => Failure::usage("INVALID_ARGUMENT", m),
        }
    }
}

/// What a command prints on success.
pub type Outcome = Result<u8, Failure>;

impl ClientArgs {
    /// The server URL (an empty `ORBIT_SERVER` means "not set").
    pub fn server_url(&self) -> &str {
        if self.server.trim().is_empty() {
            DEFAULT_SERVER
        } else {
            self.server.trim()
        }
    }

    /// A client for these options.
    pub fn client(&self) -> Result<Client, Failure> {
        Ok(Client::connect(self.server_url())
            .map_err(Failure::from)?
            .with_token(self.token.clone()))
    }

    /// Prints a failure the way this command's output mode wants it.
    pub fn report(&self, failure: &Failure) {
        if self.json {
            out!("{}", failure.body);
        }
        eprintln!("error: {}", failure.text);
    }
}

/// Runs an async command body on a fresh runtime and turns its outcome into
/// the process exit code.
pub fn execute<F>(args: &ClientArgs, body: F) -> ExitCode
where
    F: Future<Output = Outcome>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match runtime.block_on(body) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            args.report(&failure);
            ExitCode::from(failure.code)
        }
    }
}

/// Parses a JSON command-line argument (`--input`, `--payload`).
pub fn parse_json(flag: &str, text: &str) -> Result<serde_json::Value, Failure> {
    serde_json::from_str(text)
        .map_err(|e| Failure::usage("INVALID_JSON", format!("{flag} is not valid JSON: {e}")))
}

/// Parses a duration: a plain number of seconds (`5`, `0.5`) or a number with
/// a unit (`500ms`, `5s`, `2m`, `1h`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (examples: 5, 500ms, 5s, 2m, 1h)"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("unknown duration unit `{other}` (ms, s, m, h)")),
    };
    let secs = value * scale;
    if !secs.is_finite() || !(0.0..=1.0e9).contains(&secs) {
        return Err(format!("`{text}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Prints a JSON value on stdout, pretty.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::usage("INTERNAL", e.to_string()))?;
    out!("{text}");
    Ok(())
}

/// A compact one-line rendering of a JSON value.
pub fn compact(value: &serde_json::Value) -> String {
    value.to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("abc").is_err());
    }

    #[test]
    fn api_errors_exit_1_and_connection_errors_exit_2() {
        let api = Failure::from(Error::Api {
            status: 404,
            code: "UNKNOWN_EXECUTION".into(),
            message: "no execution `x`".into(),
            details: serde_json::json!({"code": "UNKNOWN_EXECUTION"}),
        });
        assert_eq!(api.code, EXIT_FAILED);
        assert_eq!(api.body["error"]["code"], "UNKNOWN_EXECUTION");
        let conn = Failure::from(Error::Transport(orbit_sdk::TransportError::Connect {
            target: "x".into(),
            message: "refused".into(),
        }));
        assert_eq!(conn.code, EXIT_USAGE);
    }
}
