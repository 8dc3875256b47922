//! Names of volumes, snapshots and containers: one safe alphabet for all of them.

use crate::{EngineError, Result};

/// Volume names are NBD export names and, later, parts of snapshot names
/// (`VOL@SNAP`): keep them to a safe alphabet.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidArgument(format!(
            "invalid volume name '{name}': use 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')"
        )))
    }
}
