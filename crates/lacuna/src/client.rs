//! The CLI's HTTP client for the control API: finds the token, makes one call,
//! and turns every failure into a single sentence a person can act on.

use std::io;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

/// How long to wait for the TCP connection: the daemon is normally local, so a
/// slow connect means a wrong address, not a busy daemon.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole call may take. Control operations commit durably but are
/// small; a minute means something is wrong.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Client {
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:8080`.
    base_url: String,
    token: String,
    agent: ureq::Agent,
}

pub enum Method {
    Get,
    Post,
    Patch,
    Put,
    Delete,
}

impl Client {
    /// `token` comes from `--token` / `LACUNA_TOKEN`; without it the token is read
    /// from `<data_dir>/api-token`, so the CLI on the daemon's machine, run by the
    /// daemon's user, needs no flag.
    pub fn new(api_url: &str, token: Option<String>, data_dir: &Path) -> anyhow::Result<Client> {
        let token = match token {
            Some(token) => token,
            None => read_token_file(data_dir)?,
        };
        let agent = ureq::Agent::config_builder()
            // API errors carry a JSON message; read it rather than failing early.
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(CALL_TIMEOUT))
            .build()
            .into();
        Ok(Client {
            base_url: api_url.trim_end_matches('/').to_string(),
            token,
            agent,
        })
    }

    /// Calls the API and returns its JSON (`Value::Null` for an empty body). A
    /// non-2xx answer becomes an error holding the API's own message.
    pub fn call(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base_url);
        let authorization = format!("Bearer {}", self.token);
        let result = match (method, body) {
            (Method::Get, _) => self
                .agent
                .get(&url)
                .header("Authorization", &authorization)
                .call(),
            (Method::Delete, _) => self
                .agent
                .delete(&url)
                .header("Authorization", &authorization)
                .call(),
            (Method::Post, body) => self
                .agent
                .post(&url)
                .header("Authorization", &authorization)
                .send_json(body.unwrap_or(&Value::Null)),
            (Method::Patch, body) => self
                .agent
                .patch(&url)
                .header("Authorization", &authorization)
                .send_json(body.unwrap_or(&Value::Null)),
            (Method::Put, body) => self
                .agent
                .put(&url)
                .header("Authorization", &authorization)
                .send_json(body.unwrap_or(&Value::Null)),
        };
        let mut response = result.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let text = response
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading the API's answer from {}", self.base_url))?;
        let value = if text.trim().is_empty() {
            Value::Null
        } else {
            match serde_json::from_str::<Value>(&text) {
                Ok(value) => value,
                Err(_) if !status.is_success() => Value::String(text.trim().to_string()),
                Err(e) => bail!(
                    "{} answered {status} with a body that is not JSON ({e}); is it the Lacuna API?",
                    self.base_url
                ),
            }
        };
        if !status.is_success() {
            let message = match value.get("error").and_then(Value::as_str) {
                Some(message) => message.to_string(),
                None => format!("the API answered {status}: {value}"),
            };
            bail!("{message}");
        }
        Ok(value)
    }

    fn transport_error(&self, error: ureq::Error) -> anyhow::Error {
        match error {
            ureq::Error::BadUri(_) | ureq::Error::Http(_) => {
                anyhow::anyhow!("invalid API address '{}': {error}", self.base_url)
            }
            error => anyhow::anyhow!(
                "cannot reach the Lacuna API at {} (is 'lacuna serve' running?): {}",
                self.base_url,
                describe_transport_error(&error)
            ),
        }
    }
}

fn read_token_file(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(lacuna_api::TOKEN_FILE_NAME);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the API token from {}: {} (pass --token, or --data-dir of the running daemon)",
            path.display(),
            describe_io_error(&e)
        )
    })?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the API token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

/// ureq's messages are prefixed with its own categories ("io: Connection refused
/// (os error 111)"); say it the way a user would.
pub fn describe_transport_error(error: &ureq::Error) -> String {
    match error {
        ureq::Error::Io(e) => describe_io_error(e),
        ureq::Error::Timeout(_) => "timed out".to_string(),
        ureq::Error::HostNotFound => "host not found".to_string(),
        other => other.to_string(),
    }
}

/// An I/O error as a short lower-case phrase, without the `(os error N)` suffix.
pub fn describe_io_error(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        io::ErrorKind::ConnectionReset => "connection reset".to_string(),
        io::ErrorKind::TimedOut => "timed out".to_string(),
        io::ErrorKind::NotFound => "no such file".to_string(),
        io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => {
            let text = error.to_string();
            let text = match text.find(" (os error") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => text,
            }
        }
    }
}

/// Escapes a path segment (a volume name) so that a name with `/`, `?` or `%`
/// reaches the API as one segment and gets the API's "invalid volume name" answer
/// instead of a confusing "no such endpoint".
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_short_phrases() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(describe_io_error(&refused), "connection refused");
        let os = io::Error::from_raw_os_error(libc::EHOSTUNREACH);
        let text = describe_io_error(&os);
        assert!(!text.contains("os error"), "{text}");
        assert!(text.starts_with(|c: char| c.is_lowercase()), "{text}");
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(path_segment("vol-1.a_b"), "vol-1.a_b");
        assert_eq!(path_segment("a/b?c"), "a%2Fb%3Fc");
        assert_eq!(path_segment("é"), "%C3%A9");
    }
}
