//! The table of supported commands: one row per operation code (and service action).
//!
//! Why a table: REPORT SUPPORTED OPERATION CODES must describe exactly what the device
//! server accepts, the dispatcher must know each command's CDB length before reading
//! fields, and the reservation and medium checks must classify every command the same way.
//! Keeping all of it in one row per command makes those three agree by construction.

use crate::sense::Sense;

/// How a command interacts with reservations (SPC-5 5.13.1, table 63 and SBC-4 4.17.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Never conflicts (INQUIRY, REPORT LUNS, PERSISTENT RESERVE IN, ...).
    Unrestricted,
    /// Reads the medium or its state: conflicts under exclusive-access reservations.
    Read,
    /// Changes the medium or the unit's state: conflicts under any reservation.
    Write,
    /// RESERVE/RELEASE and PERSISTENT RESERVE OUT decide for themselves.
    Reservation,
}

pub(crate) struct CommandSpec {
    pub opcode: u8,
    pub service_action: Option<u8>,
    pub name: &'static str,
    /// CDB USAGE DATA of REPORT SUPPORTED OPERATION CODES; its length is the CDB length.
    pub usage: &'static [u8],
    pub access: Access,
    /// Needs the medium: NOT READY when a removable unit's medium is ejected.
    pub needs_medium: bool,
    /// Allowed while an SPC-2 RESERVE is held by another nexus.
    pub allowed_under_spc2_reservation: bool,
}

pub(crate) mod opcode {
    pub const TEST_UNIT_READY: u8 = 0x00;
    pub const REQUEST_SENSE: u8 = 0x03;
    pub const READ_6: u8 = 0x08;
    pub const WRITE_6: u8 = 0x0a;
    pub const INQUIRY: u8 = 0x12;
    pub const MODE_SELECT_6: u8 = 0x15;
    pub const RESERVE_6: u8 = 0x16;
    pub const RELEASE_6: u8 = 0x17;
    pub const MODE_SENSE_6: u8 = 0x1a;
    pub const START_STOP_UNIT: u8 = 0x1b;
    pub const PREVENT_ALLOW_MEDIUM_REMOVAL: u8 = 0x1e;
    pub const READ_CAPACITY_10: u8 = 0x25;
    pub const READ_10: u8 = 0x28;
    pub const WRITE_10: u8 = 0x2a;
    pub const WRITE_AND_VERIFY_10: u8 = 0x2e;
    pub const VERIFY_10: u8 = 0x2f;
    pub const PRE_FETCH_10: u8 = 0x34;
    pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
    pub const READ_DEFECT_DATA_10: u8 = 0x37;
    pub const WRITE_SAME_10: u8 = 0x41;
    pub const UNMAP: u8 = 0x42;
    pub const SANITIZE: u8 = 0x48;
    pub const MODE_SELECT_10: u8 = 0x55;
    pub const RESERVE_10: u8 = 0x56;
    pub const RELEASE_10: u8 = 0x57;
    pub const MODE_SENSE_10: u8 = 0x5a;
    pub const PERSISTENT_RESERVE_IN: u8 = 0x5e;
    pub const PERSISTENT_RESERVE_OUT: u8 = 0x5f;
    pub const EXTENDED_COPY: u8 = 0x83;
    pub const RECEIVE_COPY_RESULTS: u8 = 0x84;
    pub const READ_16: u8 = 0x88;
    pub const COMPARE_AND_WRITE: u8 = 0x89;
    pub const WRITE_16: u8 = 0x8a;
    pub const ORWRITE_16: u8 = 0x8b;
    pub const WRITE_AND_VERIFY_16: u8 = 0x8e;
    pub const VERIFY_16: u8 = 0x8f;
    pub const PRE_FETCH_16: u8 = 0x90;
    pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
    pub const WRITE_SAME_16: u8 = 0x93;
    pub const WRITE_ATOMIC_16: u8 = 0x9c;
    pub const SERVICE_ACTION_IN_16: u8 = 0x9e;
    pub const REPORT_LUNS: u8 = 0xa0;
    pub const MAINTENANCE_IN: u8 = 0xa3;
    pub const READ_12: u8 = 0xa8;
    pub const WRITE_12: u8 = 0xaa;
    pub const WRITE_AND_VERIFY_12: u8 = 0xae;
    pub const VERIFY_12: u8 = 0xaf;
    pub const READ_DEFECT_DATA_12: u8 = 0xb7;
}

pub(crate) mod service_action {
    pub const READ_CAPACITY_16: u8 = 0x10;
    pub const GET_LBA_STATUS: u8 = 0x12;
    pub const REPORT_TARGET_PORT_GROUPS: u8 = 0x0a;
    pub const REPORT_SUPPORTED_OPERATION_CODES: u8 = 0x0c;
    pub const REPORT_SUPPORTED_TASK_MANAGEMENT_FUNCTIONS: u8 = 0x0d;
    pub const EXTENDED_COPY_LID1: u8 = 0x00;
    pub const COPY_STATUS: u8 = 0x00;
    pub const OPERATING_PARAMETERS: u8 = 0x03;
    pub const FAILED_SEGMENT_DETAILS: u8 = 0x04;
}

use opcode as op;
use service_action as sa;
use Access::{Read, Reservation, Unrestricted, Write};

/// Control byte usage: NACA is examined (and refused), LINK is obsolete.
const CTL: u8 = 0x04;

const fn spec(
    opcode: u8,
    service_action: Option<u8>,
    name: &'static str,
    usage: &'static [u8],
    access: Access,
    needs_medium: bool,
) -> CommandSpec {
    CommandSpec {
        opcode,
        service_action,
        name,
        usage,
        access,
        needs_medium,
        allowed_under_spc2_reservation: false,
    }
}

const fn spc2_allowed(mut command: CommandSpec) -> CommandSpec {
    command.allowed_under_spc2_reservation = true;
    command
}

pub(crate) static COMMANDS: &[CommandSpec] = &[
    spec(
        op::TEST_UNIT_READY,
        None,
        "TEST UNIT READY",
        &[op::TEST_UNIT_READY, 0, 0, 0, 0, CTL],
        Unrestricted,
        true,
    ),
    spc2_allowed(spec(
        op::REQUEST_SENSE,
        None,
        "REQUEST SENSE",
        &[op::REQUEST_SENSE, 0x01, 0, 0, 0xff, CTL],
        Unrestricted,
        false,
    )),
    spec(
        op::READ_6,
        None,
        "READ(6)",
        &[op::READ_6, 0x1f, 0xff, 0xff, 0xff, CTL],
        Read,
        true,
    ),
    spec(
        op::WRITE_6,
        None,
        "WRITE(6)",
        &[op::WRITE_6, 0x1f, 0xff, 0xff, 0xff, CTL],
        Write,
        true,
    ),
    spc2_allowed(spec(
        op::INQUIRY,
        None,
        "INQUIRY",
        &[op::INQUIRY, 0x01, 0xff, 0xff, 0xff, CTL],
        Unrestricted,
        false,
    )),
    spec(
        op::MODE_SELECT_6,
        None,
        "MODE SELECT(6)",
        &[op::MODE_SELECT_6, 0x11, 0, 0, 0xff, CTL],
        Write,
        false,
    ),
    spec(
        op::RESERVE_6,
        None,
        "RESERVE(6)",
        &[op::RESERVE_6, 0, 0, 0, 0, CTL],
        Reservation,
        false,
    ),
    spc2_allowed(spec(
        op::RELEASE_6,
        None,
        "RELEASE(6)",
        &[op::RELEASE_6, 0, 0, 0, 0, CTL],
        Reservation,
        false,
    )),
    spec(
        op::MODE_SENSE_6,
        None,
        "MODE SENSE(6)",
        &[op::MODE_SENSE_6, 0x08, 0xff, 0xff, 0xff, CTL],
        Read,
        false,
    ),
    spec(
        op::START_STOP_UNIT,
        None,
        "START STOP UNIT",
        &[op::START_STOP_UNIT, 0x01, 0, 0x0f, 0xf7, CTL],
        Write,
        false,
    ),
    spec(
        op::PREVENT_ALLOW_MEDIUM_REMOVAL,
        None,
        "PREVENT ALLOW MEDIUM REMOVAL",
        &[op::PREVENT_ALLOW_MEDIUM_REMOVAL, 0, 0, 0, 0x03, CTL],
        Write,
        false,
    ),
    spec(
        op::READ_CAPACITY_10,
        None,
        "READ CAPACITY(10)",
        &[op::READ_CAPACITY_10, 0, 0, 0, 0, 0, 0, 0, 0, CTL],
        Unrestricted,
        true,
    ),
    spec(
        op::READ_10,
        None,
        "READ(10)",
        &[
            op::READ_10,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::WRITE_10,
        None,
        "WRITE(10)",
        &[
            op::WRITE_10,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::WRITE_AND_VERIFY_10,
        None,
        "WRITE AND VERIFY(10)",
        &[
            op::WRITE_AND_VERIFY_10,
            0x12,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::VERIFY_10,
        None,
        "VERIFY(10)",
        &[
            op::VERIFY_10,
            0x16,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::PRE_FETCH_10,
        None,
        "PRE-FETCH(10)",
        &[
            op::PRE_FETCH_10,
            0x02,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::SYNCHRONIZE_CACHE_10,
        None,
        "SYNCHRONIZE CACHE(10)",
        &[
            op::SYNCHRONIZE_CACHE_10,
            0x02,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::READ_DEFECT_DATA_10,
        None,
        "READ DEFECT DATA(10)",
        &[
            op::READ_DEFECT_DATA_10,
            0,
            0x1f,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::WRITE_SAME_10,
        None,
        "WRITE SAME(10)",
        &[
            op::WRITE_SAME_10,
            0x08,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::UNMAP,
        None,
        "UNMAP",
        &[op::UNMAP, 0, 0, 0, 0, 0, 0, 0xff, 0xff, CTL],
        Write,
        true,
    ),
    spec(
        op::SANITIZE,
        Some(crate::sanitize::SERVICE_ACTION_OVERWRITE),
        "SANITIZE OVERWRITE",
        &[
            op::SANITIZE,
            0x80 | crate::sanitize::SERVICE_ACTION_OVERWRITE,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::SANITIZE,
        Some(crate::sanitize::SERVICE_ACTION_BLOCK_ERASE),
        "SANITIZE BLOCK ERASE",
        &[
            op::SANITIZE,
            0x80 | crate::sanitize::SERVICE_ACTION_BLOCK_ERASE,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::SANITIZE,
        Some(crate::sanitize::SERVICE_ACTION_EXIT_FAILURE_MODE),
        "SANITIZE EXIT FAILURE MODE",
        &[
            op::SANITIZE,
            0x80 | crate::sanitize::SERVICE_ACTION_EXIT_FAILURE_MODE,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::MODE_SELECT_10,
        None,
        "MODE SELECT(10)",
        &[op::MODE_SELECT_10, 0x11, 0, 0, 0, 0, 0, 0xff, 0xff, CTL],
        Write,
        false,
    ),
    spec(
        op::RESERVE_10,
        None,
        "RESERVE(10)",
        &[op::RESERVE_10, 0, 0, 0, 0, 0, 0, 0, 0, CTL],
        Reservation,
        false,
    ),
    spc2_allowed(spec(
        op::RELEASE_10,
        None,
        "RELEASE(10)",
        &[op::RELEASE_10, 0, 0, 0, 0, 0, 0, 0, 0, CTL],
        Reservation,
        false,
    )),
    spec(
        op::MODE_SENSE_10,
        None,
        "MODE SENSE(10)",
        &[
            op::MODE_SENSE_10,
            0x18,
            0xff,
            0xff,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Read,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_IN,
        Some(0x00),
        "PERSISTENT RESERVE IN / READ KEYS",
        &[
            op::PERSISTENT_RESERVE_IN,
            0x00,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Unrestricted,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_IN,
        Some(0x01),
        "PERSISTENT RESERVE IN / READ RESERVATION",
        &[
            op::PERSISTENT_RESERVE_IN,
            0x01,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Unrestricted,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_IN,
        Some(0x02),
        "PERSISTENT RESERVE IN / REPORT CAPABILITIES",
        &[
            op::PERSISTENT_RESERVE_IN,
            0x02,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Unrestricted,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_IN,
        Some(0x03),
        "PERSISTENT RESERVE IN / READ FULL STATUS",
        &[
            op::PERSISTENT_RESERVE_IN,
            0x03,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            CTL,
        ],
        Unrestricted,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x00),
        "PERSISTENT RESERVE OUT / REGISTER",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x00,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x01),
        "PERSISTENT RESERVE OUT / RESERVE",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x01,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x02),
        "PERSISTENT RESERVE OUT / RELEASE",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x02,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x03),
        "PERSISTENT RESERVE OUT / CLEAR",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x03,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x04),
        "PERSISTENT RESERVE OUT / PREEMPT",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x04,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x05),
        "PERSISTENT RESERVE OUT / PREEMPT AND ABORT",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x05,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x06),
        "PERSISTENT RESERVE OUT / REGISTER AND IGNORE EXISTING KEY",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x06,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::PERSISTENT_RESERVE_OUT,
        Some(0x07),
        "PERSISTENT RESERVE OUT / REGISTER AND MOVE",
        &[
            op::PERSISTENT_RESERVE_OUT,
            0x07,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            CTL,
        ],
        Reservation,
        false,
    ),
    spec(
        op::EXTENDED_COPY,
        Some(sa::EXTENDED_COPY_LID1),
        "EXTENDED COPY(LID1)",
        &[
            op::EXTENDED_COPY,
            sa::EXTENDED_COPY_LID1,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::RECEIVE_COPY_RESULTS,
        Some(sa::COPY_STATUS),
        "RECEIVE COPY STATUS(LID1)",
        &[
            op::RECEIVE_COPY_RESULTS,
            sa::COPY_STATUS,
            0xff,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        false,
    ),
    spec(
        op::RECEIVE_COPY_RESULTS,
        Some(sa::OPERATING_PARAMETERS),
        "RECEIVE COPY OPERATING PARAMETERS",
        &[
            op::RECEIVE_COPY_RESULTS,
            sa::OPERATING_PARAMETERS,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        false,
    ),
    spec(
        op::RECEIVE_COPY_RESULTS,
        Some(sa::FAILED_SEGMENT_DETAILS),
        "RECEIVE COPY FAILURE DETAILS(LID1)",
        &[
            op::RECEIVE_COPY_RESULTS,
            sa::FAILED_SEGMENT_DETAILS,
            0xff,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        false,
    ),
    spec(
        op::READ_16,
        None,
        "READ(16)",
        &[
            op::READ_16,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::COMPARE_AND_WRITE,
        None,
        "COMPARE AND WRITE",
        &[
            op::COMPARE_AND_WRITE,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0,
            0,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::WRITE_16,
        None,
        "WRITE(16)",
        &[
            op::WRITE_16,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::ORWRITE_16,
        None,
        "ORWRITE(16)",
        &[
            op::ORWRITE_16,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::WRITE_AND_VERIFY_16,
        None,
        "WRITE AND VERIFY(16)",
        &[
            op::WRITE_AND_VERIFY_16,
            0x12,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::VERIFY_16,
        None,
        "VERIFY(16)",
        &[
            op::VERIFY_16,
            0x16,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::PRE_FETCH_16,
        None,
        "PRE-FETCH(16)",
        &[
            op::PRE_FETCH_16,
            0x02,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::SYNCHRONIZE_CACHE_16,
        None,
        "SYNCHRONIZE CACHE(16)",
        &[
            op::SYNCHRONIZE_CACHE_16,
            0x02,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::WRITE_SAME_16,
        None,
        "WRITE SAME(16)",
        &[
            op::WRITE_SAME_16,
            0x09,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::WRITE_ATOMIC_16,
        None,
        "WRITE ATOMIC(16)",
        &[
            op::WRITE_ATOMIC_16,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            0,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::SERVICE_ACTION_IN_16,
        Some(sa::READ_CAPACITY_16),
        "READ CAPACITY(16)",
        &[
            op::SERVICE_ACTION_IN_16,
            sa::READ_CAPACITY_16,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        true,
    ),
    spec(
        op::SERVICE_ACTION_IN_16,
        Some(sa::GET_LBA_STATUS),
        "GET LBA STATUS",
        &[
            op::SERVICE_ACTION_IN_16,
            sa::GET_LBA_STATUS,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Read,
        true,
    ),
    spc2_allowed(spec(
        op::REPORT_LUNS,
        None,
        "REPORT LUNS",
        &[
            op::REPORT_LUNS,
            0,
            0xff,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        false,
    )),
    spc2_allowed(spec(
        op::MAINTENANCE_IN,
        Some(sa::REPORT_TARGET_PORT_GROUPS),
        "REPORT TARGET PORT GROUPS",
        &[
            op::MAINTENANCE_IN,
            0xe0 | sa::REPORT_TARGET_PORT_GROUPS,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        false,
    )),
    spc2_allowed(spec(
        op::MAINTENANCE_IN,
        Some(sa::REPORT_SUPPORTED_OPERATION_CODES),
        "REPORT SUPPORTED OPERATION CODES",
        &[
            op::MAINTENANCE_IN,
            sa::REPORT_SUPPORTED_OPERATION_CODES,
            0x87,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        false,
    )),
    spc2_allowed(spec(
        op::MAINTENANCE_IN,
        Some(sa::REPORT_SUPPORTED_TASK_MANAGEMENT_FUNCTIONS),
        "REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS",
        &[
            op::MAINTENANCE_IN,
            sa::REPORT_SUPPORTED_TASK_MANAGEMENT_FUNCTIONS,
            0x80,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Unrestricted,
        false,
    )),
    spec(
        op::READ_12,
        None,
        "READ(12)",
        &[
            op::READ_12,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::WRITE_12,
        None,
        "WRITE(12)",
        &[
            op::WRITE_12,
            0x18,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::WRITE_AND_VERIFY_12,
        None,
        "WRITE AND VERIFY(12)",
        &[
            op::WRITE_AND_VERIFY_12,
            0x12,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Write,
        true,
    ),
    spec(
        op::VERIFY_12,
        None,
        "VERIFY(12)",
        &[
            op::VERIFY_12,
            0x16,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Read,
        true,
    ),
    spec(
        op::READ_DEFECT_DATA_12,
        None,
        "READ DEFECT DATA(12)",
        &[
            op::READ_DEFECT_DATA_12,
            0x1f,
            0,
            0,
            0,
            0,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
            CTL,
        ],
        Read,
        true,
    ),
];

/// Operation codes whose byte 1 bits 4..0 hold a service action.
pub(crate) fn has_service_action(opcode: u8) -> bool {
    COMMANDS
        .iter()
        .any(|c| c.opcode == opcode && c.service_action.is_some())
}

/// The row for `opcode` / `service_action` (ignored for commands without one).
pub(crate) fn find(opcode: u8, service_action: u8) -> Option<&'static CommandSpec> {
    COMMANDS
        .iter()
        .find(|c| c.opcode == opcode && c.service_action.is_none_or(|sa| sa == service_action))
}

/// Finds the command for `cdb` and checks its length and control byte.
pub(crate) fn identify(cdb: &[u8]) -> Result<&'static CommandSpec, Sense> {
    let Some(&opcode) = cdb.first() else {
        return Err(Sense::invalid_opcode());
    };
    if !COMMANDS.iter().any(|c| c.opcode == opcode) {
        return Err(Sense::invalid_opcode());
    }
    let service_action = cdb.get(1).map_or(0, |b| b & 0x1f);
    let Some(command) = find(opcode, service_action) else {
        return Err(Sense::invalid_cdb_field(1, Some(4)));
    };
    let cdb_len_bytes = command.usage.len();
    if cdb.len() < cdb_len_bytes {
        return Err(Sense::invalid_cdb_field(0, Some(7)));
    }
    let control = cdb[cdb_len_bytes - 1];
    if control & 0x04 != 0 {
        // NACA: auto contingent allegiance is not supported.
        return Err(Sense::invalid_cdb_field(
            (cdb_len_bytes - 1) as u16,
            Some(2),
        ));
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_lengths_match_the_cdb_group() {
        for command in COMMANDS {
            let expected = match command.opcode >> 5 {
                0 => 6,
                1 | 2 => 10,
                4 => 16,
                5 => 12,
                group => panic!("unexpected group {group} for {}", command.name),
            };
            assert_eq!(command.usage.len(), expected, "{}", command.name);
            assert_eq!(command.usage[0], command.opcode, "{}", command.name);
            if let Some(service_action) = command.service_action {
                assert_eq!(command.usage[1] & 0x1f, service_action, "{}", command.name);
            }
        }
    }

    #[test]
    fn rows_are_unique() {
        for (i, a) in COMMANDS.iter().enumerate() {
            for b in &COMMANDS[i + 1..] {
                assert!(
                    !(a.opcode == b.opcode && a.service_action == b.service_action),
                    "{} duplicated",
                    a.name
                );
            }
        }
    }

    #[test]
    fn identify_refuses_unknown_opcode_short_cdb_and_naca() {
        assert_eq!(identify(&[0xff; 16]).err(), Some(Sense::invalid_opcode()));
        assert!(identify(&[op::READ_10, 0, 0]).is_err());
        let mut cdb = [0u8; 10];
        cdb[0] = op::READ_10;
        cdb[9] = 0x04;
        assert_eq!(
            identify(&cdb).err(),
            Some(Sense::invalid_cdb_field(9, Some(2)))
        );
        cdb[9] = 0;
        assert_eq!(identify(&cdb).map(|c| c.opcode), Ok(op::READ_10));
        let mut cdb = [0u8; 10];
        cdb[0] = op::PERSISTENT_RESERVE_IN;
        cdb[1] = 0x09;
        assert_eq!(
            identify(&cdb).err(),
            Some(Sense::invalid_cdb_field(1, Some(4)))
        );
    }
}
