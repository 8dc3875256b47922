//! REPORT LUNS, REPORT SUPPORTED OPERATION CODES and REPORT SUPPORTED TASK MANAGEMENT
//! FUNCTIONS (SPC-5 6.33, 6.35, 6.36).
//!
//! Operation codes are reported straight from the command table, so what we advertise is
//! by construction what the dispatcher accepts.

use parking_lot::Mutex;

use crate::backend::LogicalUnit;
use crate::block::{be16, be32, truncate};
use crate::commands::{self, opcode, CommandSpec, COMMANDS};
use crate::dispatch::{CommandResult, Request};
use crate::lun::Lun;
use crate::lun_map::Membership;
use crate::sense::Sense;
use crate::unit_attention::NexusState;

/// Nominal and recommended command timeouts reported with RCTD, in seconds.
const NOMINAL_TIMEOUT_SECONDS: u32 = 1;
const RECOMMENDED_TIMEOUT_SECONDS: u32 = 60;

/// REPORT LUNS: the LUNs this initiator may address (LUN masking), as SELECT REPORT
/// (SPC-5 6.33) picks them with logical unit conglomerates:
/// - 00h, 02h, 11h: the LUs not in a conglomerate and the administrative LUs. Subsidiary
///   LUs are left out of every inventory but 12h's: a vVol is reached through its
///   protocol endpoint, never scanned for as a LUN of its own;
/// - 01h: the well-known LUs, of which there are none;
/// - 10h: the administrative LUs only;
/// - 12h: addressed to an administrative LU, that LU and then its subsidiaries, each by
///   its full two-level LUN (sg3_utils documents this select report as the administrative
///   LU's own LUN plus its subsidiaries'); addressed to any other LUN, an empty list.
///
/// Not confirmed from SPC-5's text here, so done leniently: whether 10h and 11h must be
/// addressed to LUN 0 or the REPORT LUNS well-known LU (sg3_utils says so), and whether
/// 12h sent to an LU that is not administrative is an error rather than an empty list.
/// Both are answered, from whichever LUN they are sent to.
pub(crate) fn report_luns(
    cdb: &[u8],
    nexus_state: &Mutex<NexusState>,
    addressed: Lun,
) -> CommandResult {
    let select_report = cdb[2];
    let allocation_len = be32(cdb, 6) as usize;
    if allocation_len < 16 {
        return Err(Sense::invalid_cdb_field(6, None).into());
    }
    let luns = {
        let nexus = nexus_state.lock();
        let map = &nexus.lun_map;
        match select_report {
            0x00 | 0x02 | 0x11 => map.first_level_luns(|_| true),
            0x01 => Vec::new(),
            0x10 => map.first_level_luns(|membership| membership == Membership::Administrative),
            0x12 => map.conglomerate(addressed).unwrap_or_default(),
            _ => return Err(Sense::invalid_cdb_field(2, None).into()),
        }
    };
    let mut data = ((luns.len() * 8) as u32).to_be_bytes().to_vec();
    data.extend_from_slice(&[0, 0, 0, 0]);
    for lun in luns {
        data.extend_from_slice(&lun.0);
    }
    Ok(truncate(data, allocation_len))
}

fn timeouts_descriptor() -> [u8; 12] {
    let mut bytes = [0u8; 12];
    bytes[0..2].copy_from_slice(&0x000au16.to_be_bytes());
    bytes[4..8].copy_from_slice(&NOMINAL_TIMEOUT_SECONDS.to_be_bytes());
    bytes[8..12].copy_from_slice(&RECOMMENDED_TIMEOUT_SECONDS.to_be_bytes());
    bytes
}

fn all_commands_descriptor(command: &CommandSpec, with_timeouts: bool) -> Vec<u8> {
    let mut bytes = vec![0u8; 8];
    bytes[0] = command.opcode;
    bytes[2..4].copy_from_slice(&u16::from(command.service_action.unwrap_or(0)).to_be_bytes());
    if command.service_action.is_some() {
        bytes[5] |= 0x01; // SERVACTV
    }
    if with_timeouts {
        bytes[5] |= 0x02; // CTDP
    }
    bytes[6..8].copy_from_slice(&(command.usage.len() as u16).to_be_bytes());
    if with_timeouts {
        bytes.extend_from_slice(&timeouts_descriptor());
    }
    bytes
}

fn one_command_data(command: Option<&CommandSpec>, with_timeouts: bool) -> Vec<u8> {
    let Some(command) = command else {
        return vec![0, 0x01, 0, 0]; // SUPPORT 001b: not supported
    };
    let mut bytes = vec![0u8; 4];
    bytes[1] = 0x03; // SUPPORT 011b: supported as the standard says
    if with_timeouts {
        bytes[1] |= 0x80; // CTDP
    }
    bytes[2..4].copy_from_slice(&(command.usage.len() as u16).to_be_bytes());
    bytes.extend_from_slice(command.usage);
    if with_timeouts {
        bytes.extend_from_slice(&timeouts_descriptor());
    }
    bytes
}

/// Whether `command` is offered on `unit`: UNMAP and SANITIZE BLOCK ERASE need a thin
/// unit (a fully provisioned one answers them INVALID COMMAND OPERATION CODE / FIELD).
fn offered(command: &CommandSpec, unit: &dyn LogicalUnit) -> bool {
    let needs_thin = command.opcode == opcode::UNMAP
        || (command.opcode == opcode::SANITIZE
            && command.service_action == Some(crate::sanitize::SERVICE_ACTION_BLOCK_ERASE));
    !needs_thin || unit.provisioning().is_thin()
}

/// REPORT SUPPORTED OPERATION CODES.
pub(crate) fn report_supported_operation_codes(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let with_timeouts = cdb[2] & 0x80 != 0;
    let reporting_options = cdb[2] & 0x07;
    let requested_opcode = cdb[3];
    let requested_service_action = be16(cdb, 4);
    let allocation_len = be32(cdb, 6) as usize;
    let has_service_action = commands::has_service_action(requested_opcode);
    let unit = request.unit.as_ref();
    let find = |service_action: Option<u16>| {
        COMMANDS.iter().filter(|c| offered(c, unit)).find(|c| {
            c.opcode == requested_opcode
                && match service_action {
                    None => true,
                    Some(sa) => c.service_action.map(u16::from) == Some(sa),
                }
        })
    };
    let data = match reporting_options {
        0 => {
            let mut descriptors = Vec::new();
            for command in COMMANDS.iter().filter(|c| offered(c, unit)) {
                descriptors.extend(all_commands_descriptor(command, with_timeouts));
            }
            let mut data = (descriptors.len() as u32).to_be_bytes().to_vec();
            data.extend_from_slice(&descriptors);
            data
        }
        1 => {
            if has_service_action {
                return Err(Sense::invalid_cdb_field(2, Some(2)).into());
            }
            one_command_data(find(None), with_timeouts)
        }
        2 => {
            if !has_service_action {
                return Err(Sense::invalid_cdb_field(2, Some(2)).into());
            }
            one_command_data(find(Some(requested_service_action)), with_timeouts)
        }
        3 => {
            let service_action = has_service_action.then_some(requested_service_action);
            one_command_data(find(service_action), with_timeouts)
        }
        _ => return Err(Sense::invalid_cdb_field(2, Some(2)).into()),
    };
    Ok(truncate(data, allocation_len))
}

/// REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS: ABORT TASK, ABORT TASK SET, CLEAR TASK
/// SET, LOGICAL UNIT RESET and TARGET RESET.
pub(crate) fn report_supported_task_management_functions(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let extended = cdb[2] & 0x80 != 0;
    let allocation_len = be32(cdb, 6) as usize;
    let mut data = vec![0x80 | 0x40 | 0x10 | 0x08 | 0x02, 0, 0, 0];
    if extended {
        data.resize(16, 0);
        data[3] = 0x0c; // ADDITIONAL DATA LENGTH
    }
    Ok(truncate(data, allocation_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_command_unsupported_and_supported() {
        assert_eq!(one_command_data(None, false), vec![0, 1, 0, 0]);
        let read10 = commands::find(0x28, 0).unwrap();
        let data = one_command_data(Some(read10), true);
        assert_eq!(data[1], 0x83);
        assert_eq!(usize::from(be16(&data, 2)), 10);
        assert_eq!(data[4], 0x28);
        assert_eq!(data.len(), 4 + 10 + 12);
    }
}
