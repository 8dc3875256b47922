//! The PEM files of `<data dir>/vasa/`, each replaced whole: written beside
//! as `.tmp`, synced, renamed over, the directory synced.

use std::io::Write as _;
use std::path::Path;

use super::CertError;

pub const KEY: &str = "provider-key.pem";
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
