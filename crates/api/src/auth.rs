//! The API token: created once, compared in constant time.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::routes::error_body;
use crate::ApiState;

const TOKEN_FILE: &str = "api-token";

/// Reads `<data_dir>/api-token`, creating it (32 random bytes, hex, mode 0600)
/// on first start.
pub fn load_or_create_token(data_dir: &Path) -> io::Result<String> {
    let path = data_dir.join(TOKEN_FILE);
    match fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => {
            let mode = fs::metadata(&path)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600))?;
            }
            return Ok(token.trim().to_string());
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut random = [0u8; 32];
    fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    file.write_all(token.as_bytes())?;
    file.sync_all()?;
    Ok(token)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Middleware: refuses requests without the right bearer token.
pub async fn require_token(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(token) if constant_time_eq(token.trim().as_bytes(), state.token.as_bytes()) => {
            next.run(request).await
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            error_body("missing or wrong API token (Authorization: Bearer …)"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_created_private_and_stable() {
        let dir = std::env::temp_dir().join(format!("lacuna-token-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let a = load_or_create_token(&dir).unwrap();
        assert_eq!(a.len(), 64);
        let mode = fs::metadata(dir.join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_create_token(&dir).unwrap(), a);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
