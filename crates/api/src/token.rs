//! The API's bearer token: a secret created once per data directory and kept in
//! `<data_dir>/api-token`, readable only by its owner. Anyone who can read that file
//! can administer the array, which is exactly the set of users who could read the
//! array's data files anyway.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use subtle::ConstantTimeEq;

/// Name of the token file inside the data directory.
pub const TOKEN_FILE_NAME: &str = "api-token";

/// Random bytes in a token (hex-encoded, so the token is twice as many characters).
const TOKEN_RANDOM_BYTES: usize = 32;

/// Returns the token stored in `<data_dir>/api-token`, creating the file with a fresh
/// random token (mode 0600) if it does not exist.
///
/// Creation is atomic: the token is written to a private temporary file which is
/// then hard-linked into place, so a concurrent start never reads a half-written
/// token and two starts agree on one token. An existing file that group or others
/// can access is refused rather than used, as ssh refuses a readable private key:
/// the secret may already have leaked.
pub fn load_or_create_token(data_dir: &Path) -> io::Result<String> {
    let path = data_dir.join(TOKEN_FILE_NAME);
    match read_token(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    let token = random_token()?;
    let tmp = data_dir.join(format!(".{TOKEN_FILE_NAME}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = write_private(&tmp, &token).and_then(|()| fs::hard_link(&tmp, &path));
    let _ = fs::remove_file(&tmp);
    match result {
        Ok(()) => {
            fs::File::open(data_dir)?.sync_all()?;
            Ok(token)
        }
        // Another process created it first: use theirs.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_token(&path),
        Err(e) => Err(e),
    }
}

fn read_token(path: &Path) -> io::Result<String> {
    let mut file = fs::File::open(path)?;
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is accessible by group or others (mode {:o}); run 'chmod 600' on it, or delete it to generate a new token",
                path.display(),
                mode & 0o777
            ),
        ));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is empty; delete it to generate a new token",
                path.display()
            ),
        ));
    }
    Ok(token.to_string())
}

fn write_private(path: &Path, token: &str) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // The umask can only remove bits, but verify anyway: this file is a secret.
    let mode = file.metadata()?.permissions().mode() & 0o777;
    if mode != 0o600 {
        return Err(io::Error::other(format!(
            "{} was created with mode {mode:o}, expected 600",
            path.display()
        )));
    }
    file.write_all(token.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

fn random_token() -> io::Result<String> {
    let mut bytes = [0u8; TOKEN_RANDOM_BYTES];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares a presented token with the expected one in time independent of where
/// they differ (`subtle`'s constant-time equality), so response timing does not
/// reveal a prefix of the secret. (The length is not secret: every generated
/// token has the same length, and tokens of other lengths differ at once.)
pub fn tokens_match(presented: &[u8], expected: &[u8]) -> bool {
    presented.ct_eq(expected).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_private_token_once_and_reuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_token(dir.path()).unwrap();
        assert_eq!(first.len(), 2 * TOKEN_RANDOM_BYTES);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        let meta = fs::metadata(dir.path().join(TOKEN_FILE_NAME)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(load_or_create_token(dir.path()).unwrap(), first);
        // No temporary file left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn different_directories_get_different_tokens() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_ne!(
            load_or_create_token(a.path()).unwrap(),
            load_or_create_token(b.path()).unwrap()
        );
    }

    #[test]
    fn refuses_a_token_readable_by_others() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create_token(dir.path()).unwrap();
        let path = dir.path().join(TOKEN_FILE_NAME);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create_token(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }

    #[test]
    fn refuses_an_empty_token() {
        let dir = tempfile::tempdir().unwrap();
        write_private(&dir.path().join(TOKEN_FILE_NAME), "").unwrap();
        let err = load_or_create_token(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_match(b"abcd", b"abcd"));
        assert!(!tokens_match(b"abce", b"abcd"));
        assert!(!tokens_match(b"abc", b"abcd"));
        assert!(!tokens_match(b"", b"abcd"));
    }
}
