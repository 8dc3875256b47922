//! Asymmetric logical unit access (ALUA, SPC-5 5.16): the target port groups an
//! initiator's multipath software asks about with REPORT TARGET PORT GROUPS, and the
//! group of the port a command came through (VPD 83h).
//!
//! Why: with several gateways presenting the same logical units (scale-out on RADOS,
//! docs/SCALE-OUT.md) only the owner of the units serves them; dm-multipath (`prio alua`)
//! and ESXi's `VMW_SATP_ALUA` choose the path whose group is active/optimized and keep the
//! others for failover. Each gateway is one target port group with one target port, so
//! the group id and the relative target port id are the same number. A single array is
//! one group, active/optimized: implicit ALUA with nothing to choose, as LIO's default
//! group is. The states are decided by whoever knows the gateways (the binary); this
//! layer only encodes them, and knows nothing of gateways or the cluster.

use crate::block::{be32, truncate};
use crate::dispatch::{CommandResult, Request};
use crate::sense::Sense;

/// Most target port groups one report names (each gateway of a pool is one group).
pub const MAX_PORT_GROUPS: usize = 64;

/// The asymmetric access state of a target port group (SPC-5 table 34).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AccessState {
    ActiveOptimized = 0x0,
    Standby = 0x2,
    Offline = 0xe,
}

/// One target port group as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortGroup {
    /// The target port group id (1-based; also the relative target port id of its one port).
    pub id: u16,
    pub state: AccessState,
}

/// Who decides the groups: the array (one group) or the gateways of a pool.
pub trait PortGroups: Send + Sync + std::fmt::Debug {
    /// This target port's group.
    fn own_group(&self) -> u16;
    /// Every group, this one included.
    fn groups(&self) -> Vec<PortGroup>;
}

/// One group, id 1, active/optimized: a single array.
#[derive(Debug, Default)]
pub struct OnePortGroup;

impl PortGroups for OnePortGroup {
    fn own_group(&self) -> u16 {
        1
    }

    fn groups(&self) -> Vec<PortGroup> {
        vec![PortGroup {
            id: 1,
            state: AccessState::ActiveOptimized,
        }]
    }
}

/// Supported states in every descriptor: active/optimized, standby, offline.
const SUPPORTED_STATES: u8 = 0x40 | 0x04 | 0x01; // O_SUP, S_SUP, AO_SUP
/// STATUS CODE: the state was last changed by the target's implicit behaviour.
const STATUS_IMPLICIT_CHANGE: u8 = 0x02;
/// IMPLICIT TRANSITION TIME (extended header), seconds: a takeover's lease and open.
const IMPLICIT_TRANSITION_TIME_S: u8 = 10;

/// REPORT TARGET PORT GROUPS (MAINTENANCE IN, service action 0Ah; SPC-5 6.36).
pub(crate) fn report_target_port_groups(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let format = cdb[1] >> 5;
    if format > 1 {
        return Err(Sense::invalid_cdb_field(1, Some(7)).into());
    }
    let allocation_len = be32(cdb, 6) as usize;
    let mut groups = request.core.port_groups().groups();
    groups.sort_by_key(|group| group.id);
    groups.dedup_by_key(|group| group.id);
    groups.truncate(MAX_PORT_GROUPS);
    Ok(truncate(encode(&groups, format == 1), allocation_len))
}

/// The parameter data: header (length only, or extended), then a descriptor per group.
fn encode(groups: &[PortGroup], extended: bool) -> Vec<u8> {
    let mut data = vec![0u8; 4];
    if extended {
        data.extend_from_slice(&[0x10, IMPLICIT_TRANSITION_TIME_S, 0, 0]);
    }
    for group in groups {
        assert!(group.id != 0, "target port group 0 is reserved");
        data.push(group.state as u8);
        data.push(SUPPORTED_STATES);
        data.extend_from_slice(&group.id.to_be_bytes());
        data.push(0);
        data.push(STATUS_IMPLICIT_CHANGE);
        data.push(0);
        data.push(1); // TARGET PORT COUNT
        data.extend_from_slice(&[0, 0]);
        data.extend_from_slice(&group.id.to_be_bytes()); // its one relative target port
    }
    let return_data_len = (data.len() - 4) as u32;
    data[..4].copy_from_slice(&return_data_len.to_be_bytes());
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_is_a_descriptor_with_its_one_port() {
        let groups = [
            PortGroup {
                id: 1,
                state: AccessState::ActiveOptimized,
            },
            PortGroup {
                id: 7,
                state: AccessState::Standby,
            },
        ];
        let data = encode(&groups, false);
        assert_eq!(data.len(), 4 + 2 * 12);
        assert_eq!(be32(&data, 0), 24);
        assert_eq!(&data[4..16], &[0x0, 0x45, 0, 1, 0, 2, 0, 1, 0, 0, 0, 1]);
        assert_eq!(&data[16..28], &[0x2, 0x45, 0, 7, 0, 2, 0, 1, 0, 0, 0, 7]);

        let extended = encode(&groups, true);
        assert_eq!(be32(&extended, 0), 28);
        assert_eq!(extended[4], 0x10, "FORMAT TYPE 001b");
        assert_eq!(extended[5], IMPLICIT_TRANSITION_TIME_S);
        assert_eq!(&extended[8..], &data[4..]);
    }
}
