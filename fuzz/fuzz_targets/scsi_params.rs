//! SCSI parameter lists: UNMAP, EXTENDED COPY, PERSISTENT RESERVE OUT and MODE SELECT(6/10)
//! with a well-formed CDB, so the fuzzer spends its time in the parameter-list parsers.
//!
//! Input: a kind byte (which command), an options byte (service action, scope/type, flags),
//! then the parameter list. Bit 7 of the options byte makes the CDB's parameter list length
//! differ from the bytes sent (the next byte says by how much). For EXTENDED COPY, a target
//! descriptor (E4h) whose designator starts with the placeholder `@LU<n>` gets the real NAA
//! designator of LUN n, so seeds can name units whose identifiers are made at run time.
//! Before the command, the first initiator registers a reservation key (so PERSISTENT
//! RESERVE OUT reaches past "not registered") and writes data to copy and unmap.
//!
//! Checked beyond "no panic": the outcome invariants of `scsi_array::check_outcome`, and
//! after the command the unit still answers MODE SENSE (all pages), PERSISTENT RESERVE IN
//! (READ KEYS and READ RESERVATION), GET LBA STATUS and RECEIVE COPY RESULTS (operating parameters) with GOOD, and
//! INQUIRY for both initiators.
#![no_main]

use lacuna_fuzz::scsi_array::Array;
use lacuna_fuzz::Input;
use lacuna_scsi::target::ScsiStatus;
use libfuzzer_sys::fuzz_target;

/// Reservation key the first initiator registers before the command.
const KEY: u64 = 0x1122_3344_5566_7788;

/// The NAA designator (VPD 83h, first descriptor) of a LUN as the first initiator sees it.
fn designator(array: &Array, lun: u64) -> Vec<u8> {
    let page = array
        .execute(0, lun, &[0x12, 1, 0x83, 0, 64, 0], &[])
        .data_in;
    page[4..24].to_vec()
}

/// Replaces `@LU<n>` placeholders in target descriptors with the real designators.
fn patch_designators(array: &Array, list: &mut [u8]) {
    if list.len() < 16 {
        return;
    }
    let targets_len = usize::from(u16::from_be_bytes([list[2], list[3]]));
    let end = (16 + targets_len).min(list.len());
    let mut at = 16;
    while at + 32 <= end {
        if list[at] == 0xe4 && &list[at + 4..at + 7] == b"@LU" {
            let lun = u64::from(list[at + 7] % 3);
            list[at + 4..at + 24].copy_from_slice(&designator(array, lun));
        }
        at += 32;
    }
}

fn cdb(kind: u8, options: u8, list_len: u32) -> Vec<u8> {
    let len = list_len.to_be_bytes();
    match kind % 6 {
        // UNMAP; ANCHOR from the options.
        0 => vec![0x42, options & 1, 0, 0, 0, 0, 0, len[2], len[3], 0],
        // EXTENDED COPY (LID1).
        1 => vec![
            0x83, 0, 0, 0, 0, 0, 0, 0, 0, 0, len[0], len[1], len[2], len[3], 0, 0,
        ],
        // PERSISTENT RESERVE OUT: service action, then scope and type from the options.
        2 => vec![
            0x5f,
            options & 0x1f,
            (options >> 5 & 0x3) * 0x10 | [1, 3, 5, 6, 7, 8][usize::from(options) % 6],
            0,
            0,
            len[0],
            len[1],
            len[2],
            len[3],
            0,
        ],
        // MODE SELECT(6), PF set, SP from the options.
        3 => vec![0x15, 0x10 | (options & 1), 0, 0, len[3], 0],
        // MODE SELECT(10).
        4 => vec![0x55, 0x10 | (options & 1), 0, 0, 0, 0, 0, len[2], len[3], 0],
        // EXTENDED COPY with the second initiator, which cannot see LUNs 1 and 2.
        _ => vec![
            0x83, 0, 0, 0, 0, 0, 0, 0, 0, 0, len[0], len[1], len[2], len[3], 0, 0,
        ],
    }
}

fn register(array: &Array) {
    let mut list = vec![0u8; 24];
    list[8..16].copy_from_slice(&KEY.to_be_bytes());
    let outcome = array.execute(0, 0, &[0x5f, 0x00, 0, 0, 0, 0, 0, 0, 24, 0], &list);
    assert_eq!(outcome.status, ScsiStatus::Good, "{outcome:?}");
}

fn setup(array: &Array) {
    for nexus in 0..2 {
        array.drain_attentions(nexus, 0);
    }
    array.drain_attentions(0, 1);
    array.drain_attentions(0, 2);
    // Eight blocks of data at LBA 0 of LUN 0 and one at LBA 0 of LUN 1.
    let outcome = array.execute(0, 0, &[0x2a, 0, 0, 0, 0, 0, 0, 0, 8, 0], &[0x5a; 4096]);
    assert_eq!(outcome.status, ScsiStatus::Good);
    let outcome = array.execute(0, 1, &[0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0], &[0xa5; 4096]);
    assert_eq!(outcome.status, ScsiStatus::Good);
    register(array);
}

/// Commands that read state: they must still work after any parameter list.
fn check_follow_up(array: &Array) {
    let reads: [&[u8]; 5] = [
        &[0x5a, 0, 0x3f, 0, 0, 0, 0, 0x10, 0, 0],
        &[0x5e, 0x00, 0, 0, 0, 0, 0, 0x10, 0, 0],
        &[0x5e, 0x01, 0, 0, 0, 0, 0, 0x10, 0, 0],
        &[0x9e, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0],
        &[0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0],
    ];
    for cdb in reads {
        let outcome = array.execute(0, 0, cdb, &[]);
        // A unit attention (e.g. reservations preempted, mode parameters changed) comes
        // first; after it the command must succeed.
        let outcome = if outcome.status == ScsiStatus::CheckCondition
            && lacuna_fuzz::scsi_array::sense_key(&outcome.sense) == 0x6
        {
            array.drain_attentions(0, 0);
            array.execute(0, 0, cdb, &[])
        } else {
            outcome
        };
        // REGISTER AND MOVE may hand the reservation to another nexus: then only
        // PERSISTENT RESERVE IN is sure to be allowed.
        assert!(
            outcome.status == ScsiStatus::Good
                || outcome.status == ScsiStatus::ReservationConflict && cdb[0] != 0x5e,
            "{cdb:02x?} after the parameter list: {outcome:?}"
        );
    }
    array.check_still_serving();
}

fuzz_target!(|bytes: &[u8]| {
    let array = Array::new();
    setup(&array);
    let mut input = Input::new(bytes);
    let kind = input.byte();
    let options = input.byte();
    let skew = if options & 0x80 != 0 { input.byte() } else { 0 };
    let mut list = input.rest().to_vec();
    if kind % 6 == 1 || kind % 6 == 5 {
        patch_designators(&array, &mut list);
    }
    // The CDB's length field, possibly not matching the list sent.
    let list_len = if skew & 1 == 0 {
        list.len() as u32 + u32::from(skew)
    } else {
        (list.len() as u32).saturating_sub(u32::from(skew))
    };
    let nexus = usize::from(kind % 6 == 5);
    array.execute(nexus, 0, &cdb(kind, options, list_len), &list);
    check_follow_up(&array);
});
