//! Names of volumes, snapshots, groups, containers and hosts: one safe alphabet
//! for all of them.

use std::fmt;

use crate::{EngineError, Result};

/// What a name names, for the message that refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Volume,
    Snapshot,
    Group,
    Container,
    Host,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Volume => "volume",
            NameKind::Snapshot => "snapshot",
            NameKind::Group => "group",
            NameKind::Container => "container",
            NameKind::Host => "host",
        })
    }
}

/// Names are NBD export names, parts of snapshot names (`VOL@SNAP`) and CLI
/// arguments: keep them to a safe alphabet, and let none start with `.` (hidden
/// files, relative paths) or `-` (taken for an option by every command line).
pub fn validate_name(kind: NameKind, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidArgument(format!(
            "invalid {kind} name '{name}': use 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.' or '-')"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_refused_with_what_they_name() {
        assert!(validate_name(NameKind::Volume, "vm-01.disk_a").is_ok());
        for bad in ["", ".hidden", "-rf", "a b", "a@b", "é", &"x".repeat(65)] {
            let e = validate_name(NameKind::Snapshot, bad).unwrap_err();
            assert!(e.to_string().contains("invalid snapshot name"), "{e}");
        }
        let e = validate_name(NameKind::Host, "-h").unwrap_err();
        assert!(e.to_string().contains("invalid host name '-h'"), "{e}");
    }
}
