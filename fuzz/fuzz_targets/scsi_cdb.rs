//! SCSI CDBs through the device server: the input is a sequence of commands run by two
//! initiators against a small in-memory array (`lacuna_fuzz::scsi_array`) through
//! `ScsiTarget::execute`, as a transport delivers them, with task management between.
//!
//! One command: a header byte (bits 0-1: LUN 0, 1, 2, or 3 = a LUN number from the next
//! byte; bit 2: second initiator; bit 3: a task management function, from the next byte,
//! instead of a command), then the CDB length (0-32) and CDB, then a 16-bit Data-Out length
//! and the Data-Out bytes.
//!
//! Checked beyond "no panic": every outcome is one the device server may give (valid
//! status; well-formed fixed or descriptor sense exactly with CHECK CONDITION; no Data-In
//! with a failure; Data-In within the transfer limit), and after the run both initiators
//! still get INQUIRY data.
#![no_main]

use lacuna_fuzz::scsi_array::Array;
use lacuna_fuzz::Input;
use lacuna_scsi::lun::Lun;
use lacuna_scsi::target::{ScsiTarget, TaskManagementFunction};
use libfuzzer_sys::fuzz_target;

/// Commands per input.
const MAX_COMMANDS: usize = 32;
/// Longest CDB taken from the input (variable-length CDBs go past 16 bytes).
const MAX_CDB_BYTES: u8 = 32;

fn function(selector: u8) -> TaskManagementFunction {
    match selector % 7 {
        0 => TaskManagementFunction::AbortTask {
            referenced_task_tag: 1,
        },
        1 => TaskManagementFunction::AbortTaskSet,
        2 => TaskManagementFunction::ClearTaskSet,
        3 => TaskManagementFunction::ClearAca,
        4 => TaskManagementFunction::LogicalUnitReset,
        5 => TaskManagementFunction::TargetWarmReset,
        _ => TaskManagementFunction::TargetColdReset,
    }
}

fuzz_target!(|bytes: &[u8]| {
    let array = Array::new();
    // Power-on unit attentions would answer the first command of each initiator on each
    // LUN; clear them so seeds reach the commands (the run raises new ones by resets and
    // mode changes).
    for (nexus, lun) in [(0, 0), (0, 1), (0, 2), (1, 0)] {
        array.drain_attentions(nexus, lun);
    }
    let mut input = Input::new(bytes);
    for _ in 0..MAX_COMMANDS {
        if input.is_empty() {
            break;
        }
        let header = input.byte();
        // LUNs 0 to 2, or any single-level LUN, or (header bit 4) any 8-byte
        // field: two-level ones beneath the protocol endpoint at 3 among them.
        let lun = match header & 0x03 {
            _ if header & 0x10 != 0 => {
                let mut field = [0u8; 8];
                field.iter_mut().for_each(|b| *b = input.byte());
                Lun(field)
            }
            3 => Lun::single_level(u64::from(input.byte())),
            lun => Lun::single_level(u64::from(lun)),
        };
        let nexus = usize::from(header >> 2 & 1);
        if header & 0x08 != 0 {
            let selector = input.byte();
            let _ = array
                .core
                .task_management(&array.nexuses[nexus], lun, function(selector));
            continue;
        }
        let cdb_len = input.byte() % (MAX_CDB_BYTES + 1);
        let cdb = input.take(usize::from(cdb_len));
        let data_out_len = input.u16();
        let data_out = input.take(usize::from(data_out_len));
        array.execute_at(nexus, lun, cdb, data_out);
    }
    array.check_still_serving();
});
