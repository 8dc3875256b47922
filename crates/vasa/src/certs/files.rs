//! The PEM files of `<data dir>/vasa/`, each replaced whole: written beside
//! as `.tmp`, synced, renamed over, the directory synced.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::CertError;

/// The provider's key and certificate chain in one file, so that one rename
/// replaces both: a crash leaves the old pair or the new, never a key with
/// another key's certificate.
pub const IDENTITY: &str = "provider-identity.pem";
/// A copy of the chain alone, for an administrator or a client to trust;
/// written after [`IDENTITY`] and made again from it at open.
pub const CERT: &str = "provider-cert.pem";
pub const CLIENTS: &str = "trusted-clients.pem";
pub const CA: &str = "trusted-ca.pem";
pub const CRLS: &str = "trusted-ca-crls.pem";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub fn create_dir(dir: &Path) -> Result<(), CertError> {
    std::fs::create_dir_all(dir).map_err(io(dir))
}

pub fn read(dir: &Path, name: &str) -> Result<Option<String>, CertError> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

pub fn write(dir: &Path, name: &str, text: &str) -> Result<(), CertError> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io(&tmp))?;
        file.write_all(text.as_bytes()).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

const KEY_END: &str = "-----END PRIVATE KEY-----";

/// The text of [`IDENTITY`]: the key, then the chain.
pub fn identity_text(key_pem: &str, chain_pem: &str) -> String {
    format!("{}\n{}", key_pem.trim_end(), chain_pem.trim_start())
}

/// Splits [`IDENTITY`]'s text into the key and the chain (PEM each).
pub fn split_identity(text: &str) -> Option<(String, String)> {
    let end = text.find(KEY_END)? + KEY_END.len();
    let (key, chain) = text.split_at(end);
    Some((format!("{key}\n"), chain.trim_start().to_string()))
}
