//! Logical unit conglomerates (vVols) through the transport boundary, over the reference
//! backend: a protocol endpoint (an administrative LU) in a host's LUN list, vVols bound
//! beneath it and addressed by two-level LUNs in both second-level forms, what REPORT LUNS
//! lists for every SELECT REPORT, every kind of command on a subsidiary, task management
//! by two-level LUN, and binds and unbinds as the host sees them.

use std::sync::Arc;
use std::time::Duration;

use lacuna_scsi::backend::{LogicalUnit, SecondLevelId};
use lacuna_scsi::lun::Lun;
use lacuna_scsi::memory::{MemoryBackend, MemoryUnit, MemoryUnitConfig};
use lacuna_scsi::target::{
    Command, CommandOutcome, ItNexus, ScsiStatus, ScsiTarget, TaskAttribute,
    TaskManagementFunction, TaskManagementResponse,
};
use lacuna_scsi::ScsiCore;

const MIB: u64 = 1 << 20;
const ESX: &str = "iqn.1998-01.com.vmware:esx";
const OTHER: &str = "iqn.other";
/// The protocol endpoint's LUN, and one in flat space.
const PE_LUN: u64 = 1;
const FAR_PE_LUN: u64 = 300;
/// Fits extended flat space (24 bits) as well as long extended flat space.
const A_ID: u64 = 0xa6;
/// Only long extended flat space (40 bits) holds it.
const B_ID: u64 = 0x12_3456_789a;
const C_ID: u64 = 7;

struct Array {
    backend: Arc<MemoryBackend>,
    core: ScsiCore,
    plain: Arc<MemoryUnit>,
    a: Arc<MemoryUnit>,
    b: Arc<MemoryUnit>,
    c: Arc<MemoryUnit>,
}

fn id(value: u64) -> SecondLevelId {
    SecondLevelId::new(value).unwrap()
}

/// LUN 0: an ordinary unit for everyone. ESX: a PE at LUN 1 with vVols a (A_ID) and b
/// (B_ID) bound, and a PE at LUN 300 with c (C_ID). OTHER: a PE of its own at LUN 1,
/// with nothing bound.
fn array(vvol_size_bytes: u64) -> Array {
    let backend = Arc::new(MemoryBackend::new());
    let plain = backend.create_unit(MemoryUnitConfig::thin("plain", 16 * MIB));
    let a = backend.create_unit(MemoryUnitConfig::thin("vvol-a", vvol_size_bytes));
    let b = backend.create_unit(MemoryUnitConfig::thin("vvol-b", vvol_size_bytes));
    let c = backend.create_unit(MemoryUnitConfig::thin("vvol-c", vvol_size_bytes));
    backend.map(None, 0, &plain);
    backend.map_administrative(Some(ESX), PE_LUN, "pe");
    backend.bind(Some(ESX), PE_LUN, id(A_ID), &a);
    backend.bind(Some(ESX), PE_LUN, id(B_ID), &b);
    backend.map_administrative(Some(ESX), FAR_PE_LUN, "far-pe");
    backend.bind(Some(ESX), FAR_PE_LUN, id(C_ID), &c);
    backend.map_administrative(Some(OTHER), PE_LUN, "other-pe");
    let core = ScsiCore::new(Arc::clone(&backend) as Arc<dyn lacuna_scsi::backend::Backend>);
    Array {
        backend,
        core,
        plain,
        a,
        b,
        c,
    }
}

fn nexus(name: &str, isid: u64) -> ItNexus {
    ItNexus {
        initiator_name: name.to_string(),
        initiator_port: format!("{name},i,0x{isid:012x}"),
        relative_target_port: 1,
    }
}

fn lun(raw: u64) -> Lun {
    Lun(raw.to_be_bytes())
}

fn single(number: u64) -> Lun {
    Lun::single_level(number)
}

/// The long extended flat space form (what REPORT LUNS reports).
fn long_form(id_value: u64) -> Lun {
    Lun::subsidiary(PE_LUN, id(id_value))
}

/// The extended flat space form: `D2h`, 24 bits, bytes 6–7 zero.
fn short_form(id_value: u64) -> Lun {
    assert!(id_value < 1 << 24);
    let mut bytes = single(PE_LUN).0;
    bytes[2] = 0xd2;
    bytes[3..6].copy_from_slice(&id_value.to_be_bytes()[5..8]);
    Lun(bytes)
}

fn exec(core: &ScsiCore, nexus: &ItNexus, lun: Lun, cdb: &[u8], data_out: &[u8]) -> CommandOutcome {
    core.execute(
        nexus,
        Command {
            lun,
            cdb,
            data_out: &bytes::Bytes::copy_from_slice(data_out),
            expected_data_in_bytes: 1 << 20,
            task_tag: 1,
            attribute: TaskAttribute::Simple,
        },
    )
}

/// (sense key, ASC, ASCQ) of fixed-format sense data.
fn sense(outcome: &CommandOutcome) -> (u8, u8, u8) {
    assert_eq!(outcome.status, ScsiStatus::CheckCondition, "{outcome:?}");
    assert_eq!(outcome.sense[0] & 0x7f, 0x70, "fixed format expected");
    (
        outcome.sense[2] & 0x0f,
        outcome.sense[12],
        outcome.sense[13],
    )
}

fn good(outcome: CommandOutcome) -> Vec<u8> {
    assert_eq!(outcome.status, ScsiStatus::Good, "{outcome:?}");
    outcome.data_in
}

/// Sends TEST UNIT READY until it is GOOD, returning the unit attentions seen.
fn drain_attentions(core: &ScsiCore, nexus: &ItNexus, lun: Lun) -> Vec<(u8, u8)> {
    let mut seen = Vec::new();
    for _ in 0..32 {
        let outcome = exec(core, nexus, lun, &[0; 6], &[]);
        if outcome.status == ScsiStatus::Good {
            return seen;
        }
        let (key, asc, ascq) = sense(&outcome);
        assert_eq!(key, 0x6, "only unit attentions expected on {lun}");
        seen.push((asc, ascq));
    }
    panic!("unit attentions never cleared: {seen:?}");
}

const NOT_SUPPORTED: (u8, u8, u8) = (0x5, 0x25, 0x00);
const LBA_OUT_OF_RANGE: (u8, u8, u8) = (0x5, 0x21, 0x00);
const REPORTED_LUNS_CHANGED: (u8, u8) = (0x3f, 0x0e);
const POWER_ON: (u8, u8) = (0x29, 0x00);

fn read10(lba: u32, blocks: u16) -> Vec<u8> {
    let mut cdb = vec![0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
    cdb
}

fn write10(lba: u32, blocks: u16) -> Vec<u8> {
    let mut cdb = read10(lba, blocks);
    cdb[0] = 0x2a;
    cdb
}

fn report_luns(select_report: u8) -> Vec<u8> {
    let mut cdb = vec![0xa0, 0, select_report, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    cdb[6..10].copy_from_slice(&4096u32.to_be_bytes());
    cdb
}

/// The LUN list of REPORT LUNS parameter data.
fn listed(data: &[u8]) -> Vec<Lun> {
    let len = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
    assert_eq!(data.len(), 8 + len);
    data[8..]
        .chunks(8)
        .map(|bytes| Lun(bytes.try_into().unwrap()))
        .collect()
}

fn unit_bytes(unit: &MemoryUnit, offset_bytes: u64, len_bytes: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len_bytes];
    unit.read(offset_bytes, &mut buf).unwrap();
    buf
}

#[test]
fn a_subsidiary_is_reached_by_either_second_level_form() {
    let array = array(16 * MIB);
    let esx = nexus(ESX, 1);
    assert_eq!(
        drain_attentions(&array.core, &esx, long_form(A_ID)),
        vec![POWER_ON]
    );
    // The same unit by the other form: it has already met this nexus.
    assert!(drain_attentions(&array.core, &esx, short_form(A_ID)).is_empty());
    let pattern: Vec<u8> = (0..8 * 512).map(|i| (i % 251) as u8).collect();
    good(exec(
        &array.core,
        &esx,
        long_form(A_ID),
        &write10(16, 8),
        &pattern,
    ));
    assert_eq!(
        good(exec(
            &array.core,
            &esx,
            short_form(A_ID),
            &read10(16, 8),
            &[]
        )),
        pattern
    );
    assert_eq!(unit_bytes(&array.a, 16 * 512, pattern.len()), pattern);
    assert_eq!(array.b.mapped_bytes(), 0);
    // A 40-bit id has only the long form.
    drain_attentions(&array.core, &esx, long_form(B_ID));
    good(exec(
        &array.core,
        &esx,
        long_form(B_ID),
        &write10(0, 1),
        &[9u8; 512],
    ));
    assert_eq!(unit_bytes(&array.b, 0, 512), vec![9u8; 512]);
    // A PE in flat space, its first level in flat space or in sg3_utils' 14-bit form.
    let far_flat = lun(0x412c_e200_0000_0007);
    let far_simple = lun(0x012c_e200_0000_0007);
    drain_attentions(&array.core, &esx, far_flat);
    good(exec(
        &array.core,
        &esx,
        far_flat,
        &write10(0, 1),
        &[5u8; 512],
    ));
    assert_eq!(
        good(exec(&array.core, &esx, far_simple, &read10(0, 1), &[])),
        vec![5u8; 512]
    );
    assert_eq!(unit_bytes(&array.c, 0, 512), vec![5u8; 512]);
}

#[test]
fn an_unbound_id_or_a_first_level_that_is_not_administrative_reaches_nothing() {
    let array = array(16 * MIB);
    let esx = nexus(ESX, 1);
    let other = nexus(OTHER, 2);
    let nowhere = [
        (&esx, long_form(0xa7)),                       // not bound beneath the PE
        (&esx, short_form(0xa7)),                      // likewise, the other form
        (&esx, Lun::subsidiary(0, id(A_ID))),          // LUN 0 is not administrative
        (&esx, Lun::subsidiary(2, id(A_ID))),          // nothing is at LUN 2
        (&esx, Lun::subsidiary(FAR_PE_LUN, id(A_ID))), // bound beneath the other PE
        (&other, long_form(A_ID)),                     // bound for ESX, not for OTHER
        (&esx, lun(0x0001_4000_0000_00a6)),            // flat space at the second level
        (&esx, lun(0x0001_00a6_0000_0000)),            // peripheral at the second level
        (&esx, lun(0x0001_d200_00a6_0001)),            // a third level
        (&esx, lun(0x0001_f200_0000_00a6)),            // length 11b
    ];
    for (nexus, lun) in nowhere {
        assert_eq!(
            sense(&exec(&array.core, nexus, lun, &[0; 6], &[])),
            NOT_SUPPORTED,
            "TEST UNIT READY to {lun}"
        );
        let write = exec(&array.core, nexus, lun, &write10(0, 1), &[1u8; 512]);
        assert_eq!(sense(&write), NOT_SUPPORTED, "WRITE to {lun}");
        assert_eq!(
            sense(&exec(&array.core, nexus, lun, &read10(0, 1), &[])),
            NOT_SUPPORTED,
            "READ from {lun}"
        );
        let inquiry = good(exec(&array.core, nexus, lun, &[0x12, 0, 0, 0, 36, 0], &[]));
        assert_eq!(inquiry[0], 0x7f, "peripheral qualifier 011b at {lun}");
        let task = array
            .core
            .task_management(nexus, lun, TaskManagementFunction::LogicalUnitReset);
        assert_eq!(task, TaskManagementResponse::LunDoesNotExist, "{lun}");
    }
    // Nothing was written, and no unit met either nexus: each still owes POWER ON.
    for unit in [&array.plain, &array.a, &array.b, &array.c] {
        assert_eq!(unit.mapped_bytes(), 0, "{}", unit.name());
    }
    for (nexus, lun) in [
        (&esx, long_form(A_ID)),
        (&esx, Lun::subsidiary(FAR_PE_LUN, id(C_ID))),
        (&esx, single(0)),
        (&other, single(0)),
    ] {
        assert_eq!(drain_attentions(&array.core, nexus, lun), vec![POWER_ON]);
    }
}

#[test]
fn report_luns_selects_by_conglomerate_membership() {
    let array = array(16 * MIB);
    let esx = nexus(ESX, 1);
    let top = vec![single(0), single(PE_LUN), single(FAR_PE_LUN)];
    for select_report in [0x00, 0x02, 0x11] {
        let data = good(exec(
            &array.core,
            &esx,
            single(0),
            &report_luns(select_report),
            &[],
        ));
        assert_eq!(listed(&data), top, "SELECT REPORT {select_report:02x}h");
    }
    let data = good(exec(&array.core, &esx, single(0), &report_luns(0x01), &[]));
    assert!(listed(&data).is_empty());
    let data = good(exec(&array.core, &esx, single(0), &report_luns(0x10), &[]));
    assert_eq!(listed(&data), vec![single(PE_LUN), single(FAR_PE_LUN)]);
    // 12h to a PE: the PE, then what is bound beneath it, by full two-level LUN.
    let data = good(exec(
        &array.core,
        &esx,
        single(PE_LUN),
        &report_luns(0x12),
        &[],
    ));
    assert_eq!(
        listed(&data),
        vec![single(PE_LUN), long_form(A_ID), long_form(B_ID)]
    );
    assert_eq!(listed(&data)[1], lun(0x0001_e200_0000_00a6));
    let data = good(exec(
        &array.core,
        &esx,
        single(FAR_PE_LUN),
        &report_luns(0x12),
        &[],
    ));
    assert_eq!(
        listed(&data),
        vec![lun(0x412c_0000_0000_0000), lun(0x412c_e200_0000_0007)]
    );
    // 12h to anything else: an empty list.
    for elsewhere in [single(0), long_form(A_ID), single(9)] {
        let data = good(exec(&array.core, &esx, elsewhere, &report_luns(0x12), &[]));
        assert!(listed(&data).is_empty(), "12h to {elsewhere}");
    }
    // Another host sees its own PE with nothing beneath it.
    let other = nexus(OTHER, 2);
    let data = good(exec(
        &array.core,
        &other,
        single(PE_LUN),
        &report_luns(0x12),
        &[],
    ));
    assert_eq!(listed(&data), vec![single(PE_LUN)]);
    let data = good(exec(
        &array.core,
        &other,
        single(0),
        &report_luns(0x00),
        &[],
    ));
    assert_eq!(listed(&data), vec![single(0), single(PE_LUN)]);
    assert_eq!(
        sense(&exec(&array.core, &esx, single(0), &report_luns(0x03), &[])),
        (0x5, 0x24, 0x00)
    );
}

#[test]
fn the_protocol_endpoint_has_no_blocks_but_answers_what_is_asked_of_it() {
    let array = array(16 * MIB);
    let esx = nexus(ESX, 1);
    let pe = single(PE_LUN);
    assert_eq!(drain_attentions(&array.core, &esx, pe), vec![POWER_ON]);
    let standard = good(exec(&array.core, &esx, pe, &[0x12, 0, 0, 0, 96, 0], &[]));
    assert_eq!(standard[0], 0x00);
    assert_eq!(standard[1] & 0x40, 0x40, "LU_CONG on the PE");
    let supported = good(exec(&array.core, &esx, pe, &[0x12, 1, 0x00, 0, 64, 0], &[]));
    assert!(supported[4..].contains(&0x86), "{supported:02x?}");
    let extended = good(exec(&array.core, &esx, pe, &[0x12, 1, 0x86, 0, 64, 0], &[]));
    assert_eq!(extended[8] >> 5, 0b001, "LU_COLL_TYPE conglomerate");
    // Its vVols are members (LU_CONG) but not endpoints; an ordinary LU is neither.
    let vvol = good(exec(
        &array.core,
        &esx,
        long_form(A_ID),
        &[0x12, 0, 0, 0, 96, 0],
        &[],
    ));
    assert_eq!(vvol[1] & 0x40, 0x40);
    let vvol = good(exec(
        &array.core,
        &esx,
        long_form(A_ID),
        &[0x12, 1, 0x86, 0, 64, 0],
        &[],
    ));
    assert_eq!(vvol[8] >> 5, 0);
    let plain = good(exec(
        &array.core,
        &esx,
        single(0),
        &[0x12, 0, 0, 0, 96, 0],
        &[],
    ));
    assert_eq!(plain[1] & 0x40, 0);
    let plain = good(exec(
        &array.core,
        &esx,
        single(0),
        &[0x12, 1, 0x86, 0, 64, 0],
        &[],
    ));
    assert_eq!(plain[8] >> 5, 0);
    // READ CAPACITY: the last LBA 0 of 512-byte blocks (SBC has no "no blocks").
    let capacity = good(exec(
        &array.core,
        &esx,
        pe,
        &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[],
    ));
    assert_eq!(capacity, vec![0, 0, 0, 0, 0, 0, 2, 0]);
    let mut read_capacity_16 = vec![0u8; 16];
    read_capacity_16[0] = 0x9e;
    read_capacity_16[1] = 0x10;
    read_capacity_16[13] = 32;
    let capacity = good(exec(&array.core, &esx, pe, &read_capacity_16, &[]));
    assert_eq!(&capacity[0..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0]);
    assert_eq!(capacity[14] & 0x80, 0, "not thin: no LBPME");
    // No block is readable or writable, LBA 0 included.
    assert_eq!(
        sense(&exec(&array.core, &esx, pe, &read10(0, 1), &[])),
        LBA_OUT_OF_RANGE
    );
    assert_eq!(
        sense(&exec(&array.core, &esx, pe, &write10(0, 1), &[0u8; 512])),
        LBA_OUT_OF_RANGE
    );
    good(exec(&array.core, &esx, pe, &[0; 6], &[]));
    good(exec(
        &array.core,
        &esx,
        pe,
        &[0x1a, 0, 0x3f, 0, 255, 0],
        &[],
    ));
    let opcodes = good(exec(
        &array.core,
        &esx,
        pe,
        &[0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0],
        &[],
    ));
    assert!(u32::from_be_bytes(opcodes[0..4].try_into().unwrap()) > 0);
}

fn compare_and_write(lba: u64) -> Vec<u8> {
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x89;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[13] = 1;
    cdb
}

#[test]
fn reads_writes_unmap_write_same_and_compare_and_write_on_a_subsidiary() {
    let array = array(16 * MIB);
    let esx = nexus(ESX, 1);
    let a = long_form(A_ID);
    drain_attentions(&array.core, &esx, a);
    good(exec(
        &array.core,
        &esx,
        a,
        &write10(0, 64),
        &vec![3u8; 64 * 512],
    ));
    // UNMAP of the first 4 KiB grain.
    let mut list = vec![0, 22, 0, 16, 0, 0, 0, 0];
    list.extend_from_slice(&0u64.to_be_bytes());
    list.extend_from_slice(&8u32.to_be_bytes());
    list.extend_from_slice(&[0; 4]);
    let unmap = [0x42, 0, 0, 0, 0, 0, 0, 0, list.len() as u8, 0];
    good(exec(&array.core, &esx, short_form(A_ID), &unmap, &list));
    let data = good(exec(&array.core, &esx, a, &read10(0, 16), &[]));
    assert!(data[..4096].iter().all(|&b| b == 0));
    assert!(data[4096..].iter().all(|&b| b == 3));
    assert_eq!(array.a.mapped_bytes(), 56 * 512);
    // WRITE SAME(16) of a pattern block.
    let mut write_same = vec![0u8; 16];
    write_same[0] = 0x93;
    write_same[2..10].copy_from_slice(&200u64.to_be_bytes());
    write_same[10..14].copy_from_slice(&16u32.to_be_bytes());
    let pattern: Vec<u8> = (0..512u32).map(|i| i as u8).collect();
    good(exec(&array.core, &esx, a, &write_same, &pattern));
    assert!(unit_bytes(&array.a, 200 * 512, 16 * 512)
        .chunks(512)
        .all(|block| block == pattern.as_slice()));
    // COMPARE AND WRITE: a match writes, a mismatch reports where and writes nothing.
    let mut exchange = vec![3u8; 512];
    exchange.extend_from_slice(&[4u8; 512]);
    good(exec(
        &array.core,
        &esx,
        a,
        &compare_and_write(10),
        &exchange,
    ));
    assert_eq!(unit_bytes(&array.a, 10 * 512, 512), vec![4u8; 512]);
    let outcome = exec(
        &array.core,
        &esx,
        short_form(A_ID),
        &compare_and_write(10),
        &exchange,
    );
    assert_eq!(sense(&outcome), (0xe, 0x1d, 0x00));
    assert_eq!(unit_bytes(&array.a, 10 * 512, 512), vec![4u8; 512]);
    // None of it reached the other vVol or the PE's LUN neighbour.
    assert_eq!(array.b.mapped_bytes(), 0);
    assert_eq!(array.plain.mapped_bytes(), 0);
}

fn naa_of(core: &ScsiCore, nexus: &ItNexus, lun: Lun) -> Vec<u8> {
    let page = good(exec(core, nexus, lun, &[0x12, 1, 0x83, 1, 0, 0], &[]));
    assert_eq!(&page[4..8], &[0x01, 0x03, 0x00, 16]);
    page[4..24].to_vec()
}

/// EXTENDED COPY (LID1, list id 7) of `blocks` from LBA 0 of the first designator's unit
/// to LBA `destination_lba` of the second's.
fn xcopy(
    source: &[u8],
    destination: &[u8],
    blocks: u16,
    destination_lba: u64,
) -> (Vec<u8>, Vec<u8>) {
    let mut list = vec![0u8; 16];
    list[0] = 7;
    list[2..4].copy_from_slice(&64u16.to_be_bytes());
    list[8..12].copy_from_slice(&28u32.to_be_bytes());
    for designator in [source, destination] {
        let mut descriptor = vec![0u8; 32];
        descriptor[0] = 0xe4;
        descriptor[4..24].copy_from_slice(designator);
        descriptor[29..32].copy_from_slice(&[0, 2, 0]); // 512-byte blocks
        list.extend(descriptor);
    }
    let mut segment = vec![0u8; 28];
    segment[0] = 0x02;
    segment[3] = 24;
    segment[6..8].copy_from_slice(&1u16.to_be_bytes());
    segment[10..12].copy_from_slice(&blocks.to_be_bytes());
    segment[20..28].copy_from_slice(&destination_lba.to_be_bytes());
    list.extend(segment);
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x83;
    cdb[10..14].copy_from_slice(&(list.len() as u32).to_be_bytes());
    (cdb, list)
}

#[test]
fn extended_copy_between_two_subsidiaries() {
    let array = array(16 * MIB);
    let esx = nexus(ESX, 1);
    let (a, b) = (long_form(A_ID), long_form(B_ID));
    drain_attentions(&array.core, &esx, a);
    drain_attentions(&array.core, &esx, b);
    let pattern: Vec<u8> = (0..32 * 512).map(|i| (i / 512) as u8 + 1).collect();
    good(exec(&array.core, &esx, a, &write10(0, 32), &pattern));
    let (from, to) = (naa_of(&array.core, &esx, a), naa_of(&array.core, &esx, b));
    assert_ne!(from, to);
    let (cdb, list) = xcopy(&from, &to, 32, 1000);
    good(exec(&array.core, &esx, a, &cdb, &list));
    assert_eq!(unit_bytes(&array.b, 1000 * 512, pattern.len()), pattern);
    assert_eq!(
        good(exec(&array.core, &esx, b, &read10(1000, 32), &[])),
        pattern
    );
    // OTHER has nothing bound: the vVols are no copy targets of its.
    let other = nexus(OTHER, 2);
    drain_attentions(&array.core, &other, single(0));
    let (cdb, list) = xcopy(&from, &to, 8, 3000);
    assert_eq!(
        sense(&exec(&array.core, &other, single(0), &cdb, &list)),
        (0xa, 0x08, 0x04)
    );
    assert_eq!(
        unit_bytes(&array.b, 3000 * 512, 8 * 512),
        vec![0u8; 8 * 512]
    );
}

fn prout(action: u8, kind: u8, key: u64, service_action_key: u64) -> (Vec<u8>, Vec<u8>) {
    let cdb = vec![0x5f, action, kind, 0, 0, 0, 0, 0, 24, 0];
    let mut list = vec![0u8; 24];
    list[0..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&service_action_key.to_be_bytes());
    (cdb, list)
}

#[test]
fn persistent_reservations_on_a_subsidiary_hold_for_that_vvol_only() {
    let array = array(16 * MIB);
    let (first, second) = (nexus(ESX, 1), nexus(ESX, 2));
    for n in [&first, &second] {
        for l in [long_form(A_ID), long_form(B_ID)] {
            drain_attentions(&array.core, n, l);
        }
    }
    // REGISTER, then RESERVE Write Exclusive, by the first path, in the long form.
    let (cdb, list) = prout(0x00, 0, 0, 0xaa);
    good(exec(&array.core, &first, long_form(A_ID), &cdb, &list));
    let (cdb, list) = prout(0x01, 0x01, 0xaa, 0);
    good(exec(&array.core, &first, long_form(A_ID), &cdb, &list));
    // The second path, in the short form: may read, may not write.
    assert_eq!(
        exec(
            &array.core,
            &second,
            short_form(A_ID),
            &write10(0, 1),
            &[1u8; 512]
        )
        .status,
        ScsiStatus::ReservationConflict
    );
    good(exec(
        &array.core,
        &second,
        short_form(A_ID),
        &read10(0, 1),
        &[],
    ));
    let reservation = good(exec(
        &array.core,
        &second,
        short_form(A_ID),
        &[0x5e, 0x01, 0, 0, 0, 0, 0, 0, 32, 0],
        &[],
    ));
    assert_eq!(
        u64::from_be_bytes(reservation[8..16].try_into().unwrap()),
        0xaa
    );
    good(exec(
        &array.core,
        &first,
        long_form(A_ID),
        &write10(0, 1),
        &[2u8; 512],
    ));
    // The other vVol beneath the same PE is not reserved.
    good(exec(
        &array.core,
        &second,
        long_form(B_ID),
        &write10(0, 1),
        &[3u8; 512],
    ));
    assert_eq!(unit_bytes(&array.a, 0, 512), vec![2u8; 512]);
}

#[test]
fn a_logical_unit_reset_by_two_level_lun_resets_that_vvol_alone() {
    let array = array(16 * MIB);
    let (first, second) = (nexus(ESX, 1), nexus(ESX, 2));
    for n in [&first, &second] {
        for l in [single(PE_LUN), long_form(A_ID), long_form(B_ID)] {
            drain_attentions(&array.core, n, l);
        }
    }
    // An SPC-2 reservation by the second path, which the reset clears.
    good(exec(
        &array.core,
        &second,
        long_form(A_ID),
        &[0x16, 0, 0, 0, 0, 0],
        &[],
    ));
    assert_eq!(
        exec(&array.core, &first, long_form(A_ID), &read10(0, 1), &[]).status,
        ScsiStatus::ReservationConflict
    );
    let reset = array.core.task_management(
        &first,
        short_form(A_ID),
        TaskManagementFunction::LogicalUnitReset,
    );
    assert_eq!(reset, TaskManagementResponse::FunctionComplete);
    for n in [&first, &second] {
        assert_eq!(
            drain_attentions(&array.core, n, long_form(A_ID)),
            vec![(0x29, 0x03)]
        );
    }
    good(exec(
        &array.core,
        &first,
        long_form(A_ID),
        &read10(0, 1),
        &[],
    ));
    assert!(drain_attentions(&array.core, &second, long_form(B_ID)).is_empty());
    assert!(drain_attentions(&array.core, &second, single(PE_LUN)).is_empty());
}

/// Runs SANITIZE (overwrite, one pass, without IMMED) on `lun` as task `tag`, on a
/// thread of `scope`: it waits for the overwrite to end.
fn sanitize_waiting<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    core: &'scope ScsiCore,
    nexus: &'scope ItNexus,
    lun: Lun,
    tag: u32,
) -> std::thread::ScopedJoinHandle<'scope, CommandOutcome> {
    const PARAMETERS: [u8; 5] = [0x01, 0, 0, 1, 0x77];
    const CDB: [u8; 10] = [0x48, 0x01, 0, 0, 0, 0, 0, 0, PARAMETERS.len() as u8, 0];
    scope.spawn(move || {
        core.execute(
            nexus,
            Command {
                lun,
                cdb: &CDB,
                data_out: &bytes::Bytes::from_static(&PARAMETERS),
                expected_data_in_bytes: 0,
                task_tag: tag,
                attribute: TaskAttribute::Simple,
            },
        )
    })
}

fn finishes_within<T>(handle: &std::thread::ScopedJoinHandle<'_, T>, limit_ms: u64) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_millis(limit_ms);
    while std::time::Instant::now() < deadline {
        if handle.is_finished() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    handle.is_finished()
}

#[test]
fn abort_task_set_by_two_level_lun_ends_the_tasks_of_that_vvol() {
    // 64 MiB at the overwrite's pace takes four seconds.
    let array = array(64 * MIB);
    let esx = nexus(ESX, 1);
    drain_attentions(&array.core, &esx, long_form(A_ID));
    std::thread::scope(|scope| {
        let waiting = sanitize_waiting(scope, &array.core, &esx, long_form(A_ID), 42);
        assert!(!finishes_within(&waiting, 100));
        // The task set of the other vVol, and of the PE, is not this one's.
        for elsewhere in [long_form(B_ID), single(PE_LUN)] {
            let aborted =
                array
                    .core
                    .task_management(&esx, elsewhere, TaskManagementFunction::AbortTaskSet);
            assert_eq!(aborted, TaskManagementResponse::FunctionComplete);
        }
        assert!(
            !finishes_within(&waiting, 300),
            "ended by another LU's abort"
        );
        // The same vVol, named in the short form.
        let aborted = array.core.task_management(
            &esx,
            short_form(A_ID),
            TaskManagementFunction::AbortTaskSet,
        );
        assert_eq!(aborted, TaskManagementResponse::FunctionComplete);
        assert!(finishes_within(&waiting, 500), "ended by its abort");
        assert_eq!(sense(&waiting.join().unwrap()).0, 0xb);
    });
}

#[test]
fn a_bind_is_reported_on_the_pe_and_an_unbind_takes_effect_at_once() {
    let array = array(16 * MIB);
    let esx = nexus(ESX, 1);
    let pe = single(PE_LUN);
    for l in [single(0), pe, long_form(A_ID)] {
        drain_attentions(&array.core, &esx, l);
    }
    let d = array
        .backend
        .create_unit(MemoryUnitConfig::thin("vvol-d", 16 * MIB));
    let d_lun = long_form(0x77);
    assert_eq!(
        sense(&exec(&array.core, &esx, d_lun, &[0; 6], &[])),
        NOT_SUPPORTED
    );
    array.backend.bind(Some(ESX), PE_LUN, id(0x77), &d);
    // REPORT LUNS on the PE is answered despite the pending unit attention, and lists d.
    let data = good(exec(&array.core, &esx, pe, &report_luns(0x12), &[]));
    assert_eq!(
        listed(&data),
        vec![pe, long_form(A_ID), long_form(B_ID), d_lun]
    );
    // The host's next command went to another LU: that LU tells it, and so does the PE.
    assert_eq!(
        drain_attentions(&array.core, &esx, single(0)),
        vec![REPORTED_LUNS_CHANGED]
    );
    assert_eq!(
        drain_attentions(&array.core, &esx, pe),
        vec![REPORTED_LUNS_CHANGED]
    );
    assert!(drain_attentions(&array.core, &esx, long_form(A_ID)).is_empty());
    assert_eq!(drain_attentions(&array.core, &esx, d_lun), vec![POWER_ON]);
    good(exec(&array.core, &esx, d_lun, &write10(0, 1), &[6u8; 512]));
    assert_eq!(unit_bytes(&d, 0, 512), vec![6u8; 512]);

    // Told on the PE first, the host is not told again elsewhere for the same change.
    array.backend.unbind(Some(ESX), PE_LUN, id(0x77));
    assert_eq!(
        drain_attentions(&array.core, &esx, pe),
        vec![REPORTED_LUNS_CHANGED]
    );
    assert!(drain_attentions(&array.core, &esx, single(0)).is_empty());
    // Unbound: unreachable from the next command on, in either form.
    for gone in [d_lun, short_form(0x77)] {
        assert_eq!(
            sense(&exec(&array.core, &esx, gone, &read10(0, 1), &[])),
            NOT_SUPPORTED
        );
    }
    let data = good(exec(&array.core, &esx, pe, &report_luns(0x12), &[]));
    assert_eq!(listed(&data), vec![pe, long_form(A_ID), long_form(B_ID)]);

    // A change to ordinary LUs only is told once, on the PE as anywhere else.
    let e = array.backend.create_unit(MemoryUnitConfig::thin("e", MIB));
    array.backend.map(Some(ESX), 5, &e);
    assert_eq!(
        drain_attentions(&array.core, &esx, pe),
        vec![REPORTED_LUNS_CHANGED]
    );
    assert!(drain_attentions(&array.core, &esx, single(0)).is_empty());
}
