//! The units the engine counts in — bytes, sectors, grains, seconds since the
//! epoch — and the checks that tie them together.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::{EngineError, Result};

/// Bytes per logical sector exposed to hosts.
pub const SECTOR_BYTES: u64 = 512;
/// Bytes per mapping grain: the unit of dedup, compression and mapping.
pub const GRAIN_BYTES: u64 = 4096;
/// Largest volume: 1 PiB (grain numbers and bitmaps stay well inside limits).
pub const MAX_VOLUME_BYTES: u64 = 1 << 50;
const _: () = assert!(
    GRAIN_BYTES.is_multiple_of(SECTOR_BYTES),
    "a grain is whole sectors"
);
const _: () = assert!(
    MAX_VOLUME_BYTES.is_multiple_of(GRAIN_BYTES),
    "the largest volume is whole grains"
);

pub(crate) fn grains_of(size_bytes: u64) -> u64 {
    size_bytes.div_ceil(GRAIN_BYTES)
}

pub(crate) fn check_range(size_bytes: u64, offset_bytes: u64, length_bytes: u64) -> Result<()> {
    match offset_bytes.checked_add(length_bytes) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(EngineError::OutOfRange {
            offset_bytes,
            length_bytes,
            size_bytes,
        }),
    }
}

pub(crate) fn now_unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
