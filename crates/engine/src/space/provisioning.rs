//! Provisioning types (seed 004's virtual disk types) and the space rules that
//! follow from them.
//!
//! - thin: nothing reserved; writes fail with out-of-space once the array (less
//!   what thick volumes hold in reserve) is full.
//! - zeroedthick: every grain not yet holding data keeps a full record's worth of
//!   physical space in reserve, so the volume's writes never lack space.
//! - eagerzeroedthick: zeroedthick, created already zeroed with one range record —
//!   as fast to create as thin.
//!
//! Thin writes also leave a headroom free: thick volumes overwrite into it (an
//! overwrite needs a new record before the old one's space comes back).

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::segment::log::{RECORD_HEADER_BYTES, SEGMENT_TARGET_BYTES};
use crate::{Engine, GRAIN_BYTES};

/// How a volume's space is provisioned: thin (reserves nothing), zeroedthick (reserves the full
/// size so writes never lack space) or eagerzeroedthick (zeroedthick, created already zeroed
/// with one metadata record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Provisioning {
    #[default]
    Thin,
    ZeroedThick,
    EagerZeroedThick,
}

impl Provisioning {
    pub fn is_thick(self) -> bool {
        !matches!(self, Provisioning::Thin)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Provisioning::Thin => "thin",
            Provisioning::ZeroedThick => "zeroedthick",
            Provisioning::EagerZeroedThick => "eagerzeroedthick",
        }
    }
}

impl std::str::FromStr for Provisioning {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "thin" => Ok(Provisioning::Thin),
            "zeroedthick" => Ok(Provisioning::ZeroedThick),
            "eagerzeroedthick" => Ok(Provisioning::EagerZeroedThick),
            other => Err(format!(
                "unknown provisioning type '{other}': use thin, zeroedthick or eagerzeroedthick"
            )),
        }
    }
}

impl std::fmt::Display for Provisioning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Physical bytes one unwritten thick grain holds in reserve: a whole
/// uncompressed record.
pub const RESERVED_BYTES_PER_GRAIN: u64 = GRAIN_BYTES + RECORD_HEADER_BYTES as u64;

/// Space thin volumes leave free for thick volumes' overwrites: 1/32 of the
/// capacity, at most two segments.
pub fn headroom_bytes(capacity_bytes: u64) -> u64 {
    (capacity_bytes / 32).min(2 * SEGMENT_TARGET_BYTES)
}

/// Physical space kept for the cleaner: host data never fills it (writes get
/// ENOSPC first), so the cleaner always has room to relocate into and stale
/// space left by overwrites can be absorbed while it catches up. A sixteenth of
/// the capacity, between two segments (room for a victim's live records) and
/// four, and never more than a quarter of a small array.
pub fn cleaning_reserve_bytes(capacity_bytes: u64) -> u64 {
    (capacity_bytes / 16)
        .clamp(2 * SEGMENT_TARGET_BYTES, 4 * SEGMENT_TARGET_BYTES)
        .min(capacity_bytes / 4)
}

impl Engine {
    /// Checks physical use against the soft threshold after a commit; counts a
    /// crossing upwards once (the SCSI layer raises UNIT ATTENTION 38h/07h on it).
    pub(crate) fn check_soft_threshold(&self, used_bytes: u64) {
        let threshold = self.soft_threshold_bytes();
        let above = used_bytes >= threshold;
        let was_above = self
            .space_watch
            .above_soft_threshold
            .swap(above, Ordering::SeqCst);
        if above && !was_above {
            self.stats
                .soft_threshold_events
                .fetch_add(1, Ordering::SeqCst);
            tracing::warn!(
                used_bytes,
                threshold_bytes = threshold,
                "physical use crossed the soft threshold"
            );
        }
    }

    pub(crate) fn soft_threshold_bytes(&self) -> u64 {
        (u128::from(self.config.capacity_bytes) * u128::from(self.config.soft_threshold_percent)
            / 100) as u64
    }
}
