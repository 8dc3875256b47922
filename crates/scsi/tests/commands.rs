//! The SCSI layer through its transport boundary: real CDBs into `ScsiTarget::execute`,
//! over the in-memory reference backend. These cover what the conformance suite does not
//! look at (unit attentions from the backend, LUN masking, out-of-space, atomicity of
//! COMPARE AND WRITE under concurrency, EXTENDED COPY across units, reservation side
//! effects) and fuzz CDBs and parameter lists.

use std::sync::Arc;

use lacuna_scsi::lun::Lun;
use lacuna_scsi::memory::{MemoryBackend, MemoryUnit, MemoryUnitConfig};
use lacuna_scsi::target::{
    Command, CommandOutcome, ItNexus, ScsiStatus, ScsiTarget, TaskAttribute,
    TaskManagementFunction, TaskManagementResponse,
};
use lacuna_scsi::ScsiCore;

const MIB: u64 = 1 << 20;

struct Array {
    backend: Arc<MemoryBackend>,
    core: Arc<ScsiCore>,
    units: Vec<Arc<MemoryUnit>>,
}

fn nexus(name: &str, isid: u64) -> ItNexus {
    ItNexus {
        initiator_name: name.to_string(),
        initiator_port: format!("{name},i,0x{isid:012x}"),
        relative_target_port: 1,
    }
}

/// Two thin units: LUN 0 for everyone, LUN 1 only for "iqn.a".
fn array() -> Array {
    let backend = Arc::new(MemoryBackend::new());
    let zero = backend.create_unit(MemoryUnitConfig::thin("zero", 16 * MIB));
    let one = backend.create_unit(MemoryUnitConfig::thin("one", 16 * MIB));
    backend.map(None, 0, &zero);
    backend.map(Some("iqn.a"), 1, &one);
    let core = Arc::new(ScsiCore::new(
        Arc::clone(&backend) as Arc<dyn lacuna_scsi::backend::Backend>
    ));
    Array {
        backend,
        core,
        units: vec![zero, one],
    }
}

fn exec(core: &ScsiCore, nexus: &ItNexus, lun: u64, cdb: &[u8], data_out: &[u8]) -> CommandOutcome {
    core.execute(
        nexus,
        Command {
            lun: Lun::single_level(lun),
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
    assert!(outcome.sense.is_empty());
    outcome.data_in
}

/// Sends TEST UNIT READY until it is GOOD, returning the unit attentions seen.
fn drain_attentions(core: &ScsiCore, nexus: &ItNexus, lun: u64) -> Vec<(u8, u8)> {
    let mut seen = Vec::new();
    for _ in 0..32 {
        let outcome = exec(core, nexus, lun, &[0; 6], &[]);
        if outcome.status == ScsiStatus::Good {
            return seen;
        }
        let (key, asc, ascq) = sense(&outcome);
        assert_eq!(key, 0x6, "only unit attentions expected");
        seen.push((asc, ascq));
    }
    panic!("unit attentions never cleared: {seen:?}");
}

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

fn compare_and_write(lba: u64, blocks: u8) -> Vec<u8> {
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x89;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[13] = blocks;
    cdb
}

fn read_capacity_16() -> Vec<u8> {
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x9e;
    cdb[1] = 0x10;
    cdb[13] = 32;
    cdb
}

#[test]
fn new_nexus_sees_power_on_once() {
    let array = array();
    let a = nexus("iqn.a", 1);
    array.core.nexus_created(&a);
    assert_eq!(drain_attentions(&array.core, &a, 0), vec![(0x29, 0x00)]);
    assert!(drain_attentions(&array.core, &a, 0).is_empty());
    // INQUIRY neither reports nor clears a unit attention.
    let b = nexus("iqn.b", 2);
    good(exec(&array.core, &b, 0, &[0x12, 0, 0, 0, 96, 0], &[]));
    assert_eq!(drain_attentions(&array.core, &b, 0), vec![(0x29, 0x00)]);
}

#[test]
fn lun_masking_and_map_changes() {
    let array = array();
    let a = nexus("iqn.a", 1);
    let b = nexus("iqn.b", 2);
    let report_luns = [0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
    let luns_a = good(exec(&array.core, &a, 0, &report_luns, &[]));
    assert_eq!(u32::from_be_bytes(luns_a[0..4].try_into().unwrap()), 16);
    let luns_b = good(exec(&array.core, &b, 0, &report_luns, &[]));
    assert_eq!(u32::from_be_bytes(luns_b[0..4].try_into().unwrap()), 8);
    // LUN 1 does not exist for b: commands fail, INQUIRY reports qualifier 011b.
    let outcome = exec(&array.core, &b, 1, &read10(0, 1), &[]);
    assert_eq!(sense(&outcome), (0x5, 0x25, 0x00));
    let inquiry = good(exec(&array.core, &b, 1, &[0x12, 0, 0, 0, 36, 0], &[]));
    assert_eq!(inquiry[0], 0x7f);

    drain_attentions(&array.core, &b, 0);
    array.backend.map(Some("iqn.b"), 1, &array.units[1]);
    assert_eq!(drain_attentions(&array.core, &b, 0), vec![(0x3f, 0x0e)]);
    // The newly visible unit greets b like any unit met for the first time.
    assert_eq!(drain_attentions(&array.core, &b, 1), vec![(0x29, 0x00)]);
    good(exec(&array.core, &b, 1, &read10(0, 1), &[]));
}

#[test]
fn resize_raises_capacity_changed_and_read_capacity_follows() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    array.units[0].resize(32 * MIB);
    assert_eq!(drain_attentions(&array.core, &a, 0), vec![(0x2a, 0x09)]);
    let capacity = good(exec(&array.core, &a, 0, &read_capacity_16(), &[]));
    assert_eq!(
        u64::from_be_bytes(capacity[0..8].try_into().unwrap()),
        32 * MIB / 512 - 1
    );
    assert_eq!(capacity[13] & 0x0f, 3, "4096-byte physical blocks");
    assert_eq!(capacity[14] & 0xc0, 0xc0, "LBPME and LBPRZ");
}

#[test]
fn soft_threshold_is_reported_once_per_crossing_per_nexus() {
    let array = array();
    let a = nexus("iqn.a", 1);
    let b = nexus("iqn.b", 2);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &b, 0);
    array.backend.cross_soft_threshold();
    assert_eq!(drain_attentions(&array.core, &a, 0), vec![(0x38, 0x07)]);
    assert_eq!(drain_attentions(&array.core, &b, 0), vec![(0x38, 0x07)]);
    assert!(drain_attentions(&array.core, &a, 0).is_empty());
}

#[test]
fn out_of_space_write_is_data_protect_and_changes_nothing() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    array.backend.set_no_space(true);
    let outcome = exec(&array.core, &a, 0, &write10(100, 8), &[7u8; 4096]);
    assert_eq!(sense(&outcome), (0x7, 0x27, 0x07));
    let data = good(exec(&array.core, &a, 0, &read10(100, 8), &[]));
    assert!(data.iter().all(|&b| b == 0));
}

/// A READ's buffer, given back by the transport, is filled again by a later
/// READ: what that READ returns is its own data, never the earlier one's, even
/// from another unit and where the later range holds nothing (a hole).
#[test]
fn a_recycled_read_buffer_never_shows_an_earlier_read() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &a, 1);
    let blocks: u16 = 1024; // 512 KiB: large enough to be recycled
    let len_bytes = usize::from(blocks) * 512;
    good(exec(
        &array.core,
        &a,
        1,
        &write10(0, blocks),
        &vec![0x5a; len_bytes],
    ));
    good(exec(&array.core, &a, 0, &write10(8, 1), &[7u8; 512]));
    for round in 0..3 {
        let secret = good(exec(&array.core, &a, 1, &read10(0, blocks), &[]));
        assert!(secret.iter().all(|&b| b == 0x5a), "round {round}");
        let secret_at = secret.as_ptr();
        array.core.recycle_data_in(secret);
        let data = good(exec(&array.core, &a, 0, &read10(0, blocks), &[]));
        assert_eq!(data.as_ptr(), secret_at, "the buffer was reused");
        assert_eq!(data.len(), len_bytes);
        assert!(data[..8 * 512].iter().all(|&b| b == 0), "hole before");
        assert!(data[8 * 512..9 * 512].iter().all(|&b| b == 7));
        assert!(data[9 * 512..].iter().all(|&b| b == 0), "hole after");
        array.core.recycle_data_in(data);
    }
}

fn exec_from_memory(
    core: &ScsiCore,
    nexus: &ItNexus,
    lun: u64,
    cdb: &[u8],
) -> Option<CommandOutcome> {
    core.execute_from_memory(
        nexus,
        Command {
            lun: Lun::single_level(lun),
            cdb,
            data_out: &bytes::Bytes::new(),
            expected_data_in_bytes: 1 << 20,
            task_tag: 1,
            attribute: TaskAttribute::Simple,
        },
    )
}

#[test]
fn a_read_from_memory_gives_up_without_side_effects_when_its_data_is_on_disk() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    good(exec(&array.core, &a, 0, &write10(16, 2), &[0x3c; 1024]));
    // In memory: answered, with the data `execute` gives.
    let from_memory = exec_from_memory(&array.core, &a, 0, &read10(16, 2)).expect("in memory");
    assert_eq!(good(from_memory), vec![0x3c; 1024]);
    // On "disk": nothing happens, and the same command then runs with `execute`.
    array.units[0].set_cached(false);
    assert!(exec_from_memory(&array.core, &a, 0, &read10(16, 2)).is_none());
    assert_eq!(
        good(exec(&array.core, &a, 0, &read10(16, 2), &[])),
        vec![0x3c; 1024]
    );
    // A pending unit attention is still reported by a read from memory (it
    // needs no data), and reported once.
    array.units[0].resize(32 * MIB);
    let outcome = exec_from_memory(&array.core, &a, 0, &read10(16, 2)).expect("answered");
    assert_eq!(sense(&outcome), (0x6, 0x2a, 0x09));
    assert!(exec_from_memory(&array.core, &a, 0, &read10(16, 2)).is_none());
    // Errors found before any data is touched are answered too.
    let beyond = exec_from_memory(&array.core, &a, 0, &read10(u32::MAX, 1)).expect("answered");
    assert_eq!(sense(&beyond), (0x5, 0x21, 0x00));
    // Commands other than READ run as with `execute`.
    let capacity = exec_from_memory(&array.core, &a, 0, &read_capacity_16()).expect("answered");
    assert_eq!(good(capacity)[..8], (32 * MIB / 512 - 1).to_be_bytes());
}

#[test]
fn short_data_out_writes_only_whole_blocks_that_arrived() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    good(exec(&array.core, &a, 0, &write10(0, 2), &[b'a'; 1024]));
    good(exec(&array.core, &a, 0, &write10(0, 2), &[b'b'; 700]));
    let data = good(exec(&array.core, &a, 0, &read10(0, 2), &[]));
    assert!(data[..512].iter().all(|&b| b == b'b'));
    assert!(data[512..].iter().all(|&b| b == b'a'));
}

#[test]
fn compare_and_write_reports_miscompare_offset_and_keeps_data() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    good(exec(&array.core, &a, 0, &write10(10, 2), &[1u8; 1024]));
    let mut data = vec![1u8; 1024];
    data[700] = 9;
    data.extend_from_slice(&[2u8; 1024]);
    let outcome = exec(&array.core, &a, 0, &compare_and_write(10, 2), &data);
    assert_eq!(sense(&outcome), (0xe, 0x1d, 0x00));
    assert_eq!(outcome.sense[0] & 0x80, 0x80, "INFORMATION valid");
    assert_eq!(
        u32::from_be_bytes(outcome.sense[3..7].try_into().unwrap()),
        700
    );
    assert!(good(exec(&array.core, &a, 0, &read10(10, 2), &[]))
        .iter()
        .all(|&b| b == 1));
    // Wrong Data-Out size is refused.
    let outcome = exec(&array.core, &a, 0, &compare_and_write(10, 2), &[1u8; 1024]);
    assert_eq!(sense(&outcome), (0x5, 0x24, 0x00));
}

#[test]
fn compare_and_write_is_atomic_under_contention() {
    // Threads increment a counter held in one block with read + CAW; every successful
    // CAW must be one increment, so the final value equals the number of successes.
    let array = array();
    let threads = 4;
    let attempts = 300;
    let successes: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let core = Arc::clone(&array.core);
                scope.spawn(move || {
                    let me = nexus("iqn.a", 10 + t);
                    drain_attentions(&core, &me, 0);
                    let mut won = 0u64;
                    for _ in 0..attempts {
                        let current = good(exec(&core, &me, 0, &read10(5, 1), &[]));
                        let value = u64::from_be_bytes(current[0..8].try_into().unwrap());
                        let mut data = current.clone();
                        let mut next = current.clone();
                        next[0..8].copy_from_slice(&(value + 1).to_be_bytes());
                        data.extend_from_slice(&next);
                        let outcome = exec(&core, &me, 0, &compare_and_write(5, 1), &data);
                        match outcome.status {
                            ScsiStatus::Good => won += 1,
                            _ => assert_eq!(sense(&outcome).0, 0xe),
                        }
                    }
                    won
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    let block = good(exec(&array.core, &a, 0, &read10(5, 1), &[]));
    assert!(successes > 0);
    assert_eq!(
        u64::from_be_bytes(block[0..8].try_into().unwrap()),
        successes
    );
}

fn unmap_cdb(list_len: u16) -> Vec<u8> {
    let mut cdb = vec![0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    cdb[7..9].copy_from_slice(&list_len.to_be_bytes());
    cdb
}

fn unmap_list(descriptors: &[(u64, u32)]) -> Vec<u8> {
    let mut list = vec![0u8; 8];
    list[0..2].copy_from_slice(&((6 + 16 * descriptors.len()) as u16).to_be_bytes());
    list[2..4].copy_from_slice(&((16 * descriptors.len()) as u16).to_be_bytes());
    for &(lba, count) in descriptors {
        list.extend_from_slice(&lba.to_be_bytes());
        list.extend_from_slice(&count.to_be_bytes());
        list.extend_from_slice(&[0; 4]);
    }
    list
}

fn get_lba_status(lba: u64) -> Vec<u8> {
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x9e;
    cdb[1] = 0x12;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[10..14].copy_from_slice(&4096u32.to_be_bytes());
    cdb
}

#[test]
fn unmap_with_many_descriptors_and_lba_status() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    good(exec(
        &array.core,
        &a,
        0,
        &write10(0, 8192),
        &vec![3u8; 8192 * 512],
    ));
    // 1000 descriptors: every other 4 KiB grain of the first 2000 grains.
    let descriptors: Vec<(u64, u32)> = (0..1000).map(|i| (i * 16, 8)).collect();
    let list = unmap_list(&descriptors);
    good(exec(
        &array.core,
        &a,
        0,
        &unmap_cdb(list.len() as u16),
        &list,
    ));
    let data = good(exec(&array.core, &a, 0, &read10(0, 16), &[]));
    assert!(data[..4096].iter().all(|&b| b == 0));
    assert!(data[4096..].iter().all(|&b| b == 3));
    let status = good(exec(&array.core, &a, 0, &get_lba_status(0), &[]));
    // First descriptor: LBA 0, 8 blocks, deallocated; second: LBA 8, 8 blocks, mapped.
    assert_eq!(u64::from_be_bytes(status[8..16].try_into().unwrap()), 0);
    assert_eq!(u32::from_be_bytes(status[16..20].try_into().unwrap()), 8);
    assert_eq!(status[20], 1);
    assert_eq!(u64::from_be_bytes(status[24..32].try_into().unwrap()), 8);
    assert_eq!(status[36], 0);
    // A descriptor beyond the end fails the whole command before anything changes.
    let list = unmap_list(&[(7000, 8), (u64::MAX - 1, 8)]);
    let outcome = exec(&array.core, &a, 0, &unmap_cdb(list.len() as u16), &list);
    assert_eq!(sense(&outcome), (0x5, 0x21, 0x00));
    assert!(good(exec(&array.core, &a, 0, &read10(7000, 8), &[]))
        .iter()
        .all(|&b| b == 3));
}

#[test]
fn write_same_pattern_zero_and_unmap() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x93;
    cdb[2..10].copy_from_slice(&100u64.to_be_bytes());
    cdb[10..14].copy_from_slice(&5000u32.to_be_bytes());
    let pattern: Vec<u8> = (0..512u32).map(|i| i as u8).collect();
    good(exec(&array.core, &a, 0, &cdb, &pattern));
    let data = good(exec(&array.core, &a, 0, &read10(100, 5000), &[]));
    assert!(data.chunks(512).all(|block| block == pattern.as_slice()));
    assert!(array.units[0].mapped_bytes() > 0);
    // NDOB + UNMAP: deallocated, reads zeros, no Data-Out.
    cdb[1] = 0x08 | 0x01;
    good(exec(&array.core, &a, 0, &cdb, &[]));
    assert!(good(exec(&array.core, &a, 0, &read10(100, 5000), &[]))
        .iter()
        .all(|&b| b == 0));
    // A Data-Out that is not exactly one block is refused.
    cdb[1] = 0;
    assert_eq!(sense(&exec(&array.core, &a, 0, &cdb, &[0u8; 1024])).0, 0x5);
}

fn naa_of(core: &ScsiCore, nexus: &ItNexus, lun: u64) -> Vec<u8> {
    let page = good(exec(core, nexus, lun, &[0x12, 1, 0x83, 1, 0, 0], &[]));
    assert_eq!(&page[4..8], &[0x01, 0x03, 0x00, 16]);
    page[4..24].to_vec()
}

fn xcopy(designators: &[Vec<u8>], segments: &[(u16, u16, u16, u64, u64)]) -> (Vec<u8>, Vec<u8>) {
    let mut targets = Vec::new();
    for designator in designators {
        let mut descriptor = vec![0u8; 32];
        descriptor[0] = 0xe4;
        descriptor[4..24].copy_from_slice(designator);
        descriptor[29..32].copy_from_slice(&[0, 2, 0]); // 512-byte blocks
        targets.extend(descriptor);
    }
    let mut segment_list = Vec::new();
    for &(source, destination, blocks, source_lba, destination_lba) in segments {
        let mut descriptor = vec![0u8; 28];
        descriptor[0] = 0x02;
        descriptor[3] = 24;
        descriptor[4..6].copy_from_slice(&source.to_be_bytes());
        descriptor[6..8].copy_from_slice(&destination.to_be_bytes());
        descriptor[10..12].copy_from_slice(&blocks.to_be_bytes());
        descriptor[12..20].copy_from_slice(&source_lba.to_be_bytes());
        descriptor[20..28].copy_from_slice(&destination_lba.to_be_bytes());
        segment_list.extend(descriptor);
    }
    let mut list = vec![0u8; 16];
    list[0] = 7; // list id, held
    list[2..4].copy_from_slice(&(targets.len() as u16).to_be_bytes());
    list[8..12].copy_from_slice(&(segment_list.len() as u32).to_be_bytes());
    list.extend(targets);
    list.extend(segment_list);
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x83;
    cdb[10..14].copy_from_slice(&(list.len() as u32).to_be_bytes());
    (cdb, list)
}

#[test]
fn extended_copy_across_units_with_several_segments() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &a, 1);
    good(exec(
        &array.core,
        &a,
        0,
        &write10(0, 64),
        &vec![0x5a; 64 * 512],
    ));
    let zero = naa_of(&array.core, &a, 0);
    let one = naa_of(&array.core, &a, 1);
    let (cdb, list) = xcopy(
        &[zero.clone(), one.clone()],
        &[
            (0, 1, 32, 0, 1000),
            (0, 1, 32, 32, 2000),
            (0, 0, 16, 0, 500),
        ],
    );
    good(exec(&array.core, &a, 0, &cdb, &list));
    assert!(good(exec(&array.core, &a, 1, &read10(1000, 32), &[]))
        .iter()
        .all(|&b| b == 0x5a));
    assert!(good(exec(&array.core, &a, 1, &read10(2000, 32), &[]))
        .iter()
        .all(|&b| b == 0x5a));
    assert!(good(exec(&array.core, &a, 0, &read10(500, 16), &[]))
        .iter()
        .all(|&b| b == 0x5a));
    // RECEIVE COPY RESULTS, copy status of list 7: completed, 3 segments.
    let mut results = vec![0u8; 16];
    results[0] = 0x84;
    results[2] = 7;
    results[13] = 255;
    let status = good(exec(&array.core, &a, 0, &results, &[]));
    assert_eq!(status[4], 0x01);
    assert_eq!(u16::from_be_bytes([status[5], status[6]]), 3);

    // Initiator b cannot see unit 1: naming it aborts the copy, nothing is written.
    let b = nexus("iqn.b", 2);
    drain_attentions(&array.core, &b, 0);
    let (cdb, list) = xcopy(&[zero, one], &[(0, 1, 8, 0, 3000)]);
    let outcome = exec(&array.core, &b, 0, &cdb, &list);
    assert_eq!(sense(&outcome), (0xa, 0x08, 0x04));
    assert!(good(exec(&array.core, &a, 1, &read10(3000, 8), &[]))
        .iter()
        .all(|&b| b == 0));
}

/// Which EXTENDED COPY commands a transport may run on its own task: only a
/// sound LID1 list of a few segments between units the initiator may access,
/// each of which the destination calls quick (here: a small copy).
#[test]
fn only_a_sound_short_extended_copy_runs_quickly() {
    let array = array();
    let a = nexus("iqn.a", 1);
    let b = nexus("iqn.b", 2);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &a, 1);
    let zero = naa_of(&array.core, &a, 0);
    let one = naa_of(&array.core, &a, 1);
    let quick = |nexus: &ItNexus, cdb: &[u8], list: &[u8]| {
        array
            .core
            .runs_quickly(nexus, Lun::single_level(0), cdb, list)
    };
    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &[(0, 1, 64, 0, 1000)]);
    assert!(quick(&a, &cdb, &list));
    // Unit 1 is hidden from b: the copy fails, on the usual path.
    assert!(!quick(&b, &cdb, &list));
    // A copy the backend does not call quick (128 blocks: 64 KiB and more).
    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &[(0, 1, 129, 0, 1000)]);
    assert!(!quick(&a, &cdb, &list));
    // Past the end of the destination.
    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &[(0, 1, 8, 0, 32767)]);
    assert!(!quick(&a, &cdb, &list));
    // Too many segments to run on the transport's task (each one is quick).
    let many: Vec<_> = (0..17u64).map(|i| (0, 1, 8, i * 8, 1000 + i * 8)).collect();
    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &many);
    assert!(!quick(&a, &cdb, &list));
    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &many[..16]);
    assert!(quick(&a, &cdb, &list));
    // A list shorter than the CDB says, and another service action.
    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &[(0, 1, 8, 0, 1000)]);
    assert!(!quick(&a, &cdb, &list[..list.len() - 1]));
    let mut lid4 = cdb.clone();
    lid4[1] = 0x01;
    assert!(!quick(&a, &lid4, &list));
    // An unknown segment type.
    let mut odd = list.clone();
    odd[16 + 64] = 0x0a;
    assert!(!quick(&a, &cdb, &odd));
    // The quick one does what the usual path does.
    good(exec(
        &array.core,
        &a,
        0,
        &write10(0, 8),
        &vec![0x3c; 8 * 512],
    ));
    assert!(quick(&a, &cdb, &list));
    good(exec(&array.core, &a, 0, &cdb, &list));
    assert!(good(exec(&array.core, &a, 1, &read10(1000, 8), &[]))
        .iter()
        .all(|&byte| byte == 0x3c));
}

/// Segments that continue one another are copied as one run; within one unit a
/// run never swallows a segment that reads what an earlier one wrote.
#[test]
fn extended_copy_runs_keep_segment_by_segment_results() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &a, 1);
    let pattern: Vec<u8> = (0..64 * 512).map(|i| (i / 512) as u8).collect();
    good(exec(&array.core, &a, 0, &write10(0, 64), &pattern));
    let zero = naa_of(&array.core, &a, 0);
    let one = naa_of(&array.core, &a, 1);
    // Four contiguous segments to the other unit: one run, four segments counted.
    let (cdb, list) = xcopy(
        &[zero.clone(), one],
        &[
            (0, 1, 16, 0, 100),
            (0, 1, 16, 16, 116),
            (0, 1, 16, 32, 132),
            (0, 1, 16, 48, 148),
        ],
    );
    good(exec(&array.core, &a, 0, &cdb, &list));
    assert_eq!(
        good(exec(&array.core, &a, 1, &read10(100, 64), &[])),
        pattern
    );
    let mut results = vec![0u8; 16];
    results[0] = 0x84;
    results[2] = 7;
    results[13] = 255;
    let status = good(exec(&array.core, &a, 0, &results, &[]));
    assert_eq!(u16::from_be_bytes([status[5], status[6]]), 4);
    // Within unit 0, blocks 0..8 shifted up by 8 twice: the second segment reads
    // what the first wrote, so blocks 16..24 hold blocks 0..8's content.
    let (cdb, list) = xcopy(&[zero], &[(0, 0, 8, 0, 8), (0, 0, 8, 8, 16)]);
    good(exec(&array.core, &a, 0, &cdb, &list));
    let got = good(exec(&array.core, &a, 0, &read10(0, 24), &[]));
    for block in 0..24 {
        let expected = (block % 8) as u8;
        assert!(
            got[block * 512..(block + 1) * 512]
                .iter()
                .all(|&b| b == expected),
            "block {block}"
        );
    }
}

fn mode_select_control(d_sense: bool) -> (Vec<u8>, Vec<u8>) {
    let mut list = vec![0u8; 4];
    let mut page = vec![0x0a, 10, 0, 0x10, 0, 0, 0, 0, 0xff, 0xff, 0, 0];
    if d_sense {
        page[2] = 0x04;
    }
    list.extend(page);
    (vec![0x15, 0x10, 0, 0, list.len() as u8, 0], list)
}

#[test]
fn d_sense_switches_format_and_tells_other_nexuses() {
    let array = array();
    let a = nexus("iqn.a", 1);
    let b = nexus("iqn.b", 2);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &b, 0);
    let (cdb, list) = mode_select_control(true);
    good(exec(&array.core, &a, 0, &cdb, &list));
    let outcome = exec(&array.core, &a, 0, &read10(u32::MAX, 1), &[]);
    assert_eq!(outcome.sense[0], 0x72);
    assert_eq!((outcome.sense[1], outcome.sense[2]), (0x5, 0x21));
    let outcome = exec(&array.core, &b, 0, &[0; 6], &[]);
    assert_eq!(
        (outcome.sense[1], outcome.sense[2], outcome.sense[3]),
        (0x6, 0x2a, 0x01)
    );
    // A change to a bit that is not changeable is refused with a field pointer.
    let (cdb, mut list) = mode_select_control(false);
    list[4 + 3] = 0x00; // QUEUE ALGORITHM MODIFIER
    let outcome = exec(&array.core, &a, 0, &cdb, &list);
    assert_eq!(outcome.sense[0], 0x72);
    assert_eq!((outcome.sense[2], outcome.sense[3]), (0x26, 0x00));
    let (cdb, list) = mode_select_control(false);
    good(exec(&array.core, &a, 0, &cdb, &list));
}

fn prout(action: u8, kind: u8, key: u64, service_action_key: u64) -> (Vec<u8>, Vec<u8>) {
    let mut cdb = vec![0x5f, action, kind, 0, 0, 0, 0, 0, 24, 0];
    cdb[2] = kind;
    let mut list = vec![0u8; 24];
    list[0..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&service_action_key.to_be_bytes());
    (cdb, list)
}

fn run_prout(
    core: &ScsiCore,
    nexus: &ItNexus,
    action: u8,
    kind: u8,
    key: u64,
    sa_key: u64,
) -> CommandOutcome {
    let (cdb, list) = prout(action, kind, key, sa_key);
    exec(core, nexus, 0, &cdb, &list)
}

#[test]
fn persistent_reservations_access_preempt_and_move() {
    let array = array();
    let a = nexus("iqn.a", 1);
    let b = nexus("iqn.b", 2);
    let c = nexus("iqn.c", 3);
    for n in [&a, &b, &c] {
        drain_attentions(&array.core, n, 0);
    }
    good(run_prout(&array.core, &a, 0x00, 0, 0, 0xaa));
    good(run_prout(&array.core, &b, 0x00, 0, 0, 0xbb));
    // APTPL is refused cleanly.
    let (cdb, mut list) = prout(0x06, 0, 0, 0xcc);
    list[20] = 0x01;
    assert_eq!(
        sense(&exec(&array.core, &c, 0, &cdb, &list)),
        (0x5, 0x26, 0x00)
    );
    // Write Exclusive, Registrants Only: registrants write, others only read.
    good(run_prout(&array.core, &a, 0x01, 0x05, 0xaa, 0));
    good(exec(&array.core, &b, 0, &write10(0, 1), &[1u8; 512]));
    assert_eq!(
        exec(&array.core, &c, 0, &write10(0, 1), &[1u8; 512]).status,
        ScsiStatus::ReservationConflict
    );
    good(exec(&array.core, &c, 0, &read10(0, 1), &[]));
    // b preempts a: a's registration goes, a hears REGISTRATIONS PREEMPTED.
    good(run_prout(&array.core, &b, 0x04, 0x03, 0xbb, 0xaa));
    assert_eq!(drain_attentions(&array.core, &a, 0), vec![(0x2a, 0x05)]);
    assert_eq!(
        exec(&array.core, &a, 0, &read10(0, 1), &[]).status,
        ScsiStatus::ReservationConflict
    );
    // READ FULL STATUS names b as holder with its TransportID.
    let full = good(exec(
        &array.core,
        &b,
        0,
        &[0x5e, 0x03, 0, 0, 0, 0, 0, 0x10, 0, 0],
        &[],
    ));
    assert_eq!(u64::from_be_bytes(full[8..16].try_into().unwrap()), 0xbb);
    assert_eq!(full[8 + 12], 0x01);
    assert_eq!(full[8 + 13], 0x03);
    assert!(full[8 + 28..].starts_with(b"iqn.b,i,0x000000000002"));
    // REGISTER AND MOVE the reservation to c.
    let mut cdb = vec![0x5f, 0x07, 0x03, 0, 0, 0, 0, 0, 0, 0];
    let port = b"iqn.c,i,0x000000000003\0\0";
    let mut list = vec![0u8; 24];
    list[0..8].copy_from_slice(&0xbbu64.to_be_bytes());
    list[8..16].copy_from_slice(&0xccu64.to_be_bytes());
    list[18..20].copy_from_slice(&1u16.to_be_bytes());
    let mut transport_id = vec![0x45, 0];
    transport_id.extend_from_slice(&(port.len() as u16).to_be_bytes());
    transport_id.extend_from_slice(port);
    list[20..24].copy_from_slice(&(transport_id.len() as u32).to_be_bytes());
    list.extend(transport_id);
    cdb[8] = list.len() as u8;
    good(exec(&array.core, &b, 0, &cdb, &list));
    let reservation = good(exec(
        &array.core,
        &c,
        0,
        &[0x5e, 0x01, 0, 0, 0, 0, 0, 0, 32, 0],
        &[],
    ));
    assert_eq!(
        u64::from_be_bytes(reservation[8..16].try_into().unwrap()),
        0xcc
    );
    good(exec(&array.core, &c, 0, &write10(0, 1), &[2u8; 512]));
    // CLEAR by c: b hears RESERVATIONS PREEMPTED; nothing is reserved any more.
    good(run_prout(&array.core, &c, 0x03, 0, 0xcc, 0));
    assert_eq!(drain_attentions(&array.core, &b, 0), vec![(0x2a, 0x03)]);
    good(exec(&array.core, &a, 0, &write10(0, 1), &[3u8; 512]));
}

#[test]
fn spc2_reservation_ends_with_nexus_and_lun_reset() {
    let array = array();
    let a = nexus("iqn.a", 1);
    let b = nexus("iqn.b", 2);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &b, 0);
    good(exec(&array.core, &a, 0, &[0x16, 0, 0, 0, 0, 0], &[]));
    assert_eq!(
        exec(&array.core, &b, 0, &read10(0, 1), &[]).status,
        ScsiStatus::ReservationConflict
    );
    good(exec(&array.core, &b, 0, &[0x12, 0, 0, 0, 36, 0], &[]));
    array.core.nexus_dropped(&a);
    good(exec(&array.core, &b, 0, &read10(0, 1), &[]));
    good(exec(&array.core, &b, 0, &[0x16, 0, 0, 0, 0, 0], &[]));
    assert_eq!(
        array.core.task_management(
            &a,
            Lun::single_level(0),
            TaskManagementFunction::LogicalUnitReset
        ),
        TaskManagementResponse::FunctionComplete
    );
    assert_eq!(drain_attentions(&array.core, &b, 0), vec![(0x29, 0x03)]);
    assert_eq!(drain_attentions(&array.core, &a, 0), vec![(0x29, 0x00)]);
    good(exec(&array.core, &a, 0, &read10(0, 1), &[]));
    assert_eq!(
        array.core.task_management(
            &a,
            Lun::single_level(9),
            TaskManagementFunction::LogicalUnitReset
        ),
        TaskManagementResponse::LunDoesNotExist
    );
}

#[test]
fn check_conditions_have_the_right_codes() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    assert_eq!(
        sense(&exec(&array.core, &a, 0, &[0xff, 0, 0, 0, 0, 0], &[])),
        (0x5, 0x20, 0x00)
    );
    assert_eq!(
        sense(&exec(&array.core, &a, 0, &read10(u32::MAX, 1), &[])),
        (0x5, 0x21, 0x00)
    );
    let mut rdprotect = read10(0, 1);
    rdprotect[1] = 0x20;
    let outcome = exec(&array.core, &a, 0, &rdprotect, &[]);
    assert_eq!(sense(&outcome), (0x5, 0x24, 0x00));
    assert_eq!(
        outcome.sense[15],
        0x80 | 0x40 | 0x08 | 7,
        "field pointer at CDB byte 1 bit 7"
    );
    // UNMAP with a parameter list shorter than its header.
    assert_eq!(
        sense(&exec(&array.core, &a, 0, &unmap_cdb(4), &[0; 4])),
        (0x5, 0x1a, 0x00)
    );
    // Read-only unit: writes are DATA PROTECT.
    array.units[0].set_read_only(true);
    assert_eq!(
        sense(&exec(&array.core, &a, 0, &write10(0, 1), &[0; 512])),
        (0x7, 0x27, 0x00)
    );
    let mode = good(exec(&array.core, &a, 0, &[0x1a, 0, 0x3f, 0, 255, 0], &[]));
    assert_eq!(mode[2] & 0x80, 0x80, "WP in MODE SENSE");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Operation codes the device server implements, so fuzzing reaches their parsers.
    const OPCODES: &[u8] = &[
        0x00, 0x03, 0x08, 0x0a, 0x12, 0x15, 0x16, 0x17, 0x1a, 0x1b, 0x1e, 0x25, 0x28, 0x2a, 0x2e,
        0x2f, 0x34, 0x35, 0x37, 0x41, 0x42, 0x55, 0x56, 0x57, 0x5a, 0x5e, 0x5f, 0x83, 0x84, 0x88,
        0x89, 0x8a, 0x8b, 0x8e, 0x8f, 0x90, 0x91, 0x93, 0x9c, 0x9e, 0xa0, 0xa3, 0xa8, 0xaa, 0xae,
        0xaf, 0xb7,
    ];

    fn cdb() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::sample::select(OPCODES),
            prop::collection::vec(any::<u8>(), 0..17),
            any::<bool>(),
        )
            .prop_map(|(opcode, mut rest, small_numbers)| {
                if small_numbers {
                    // Small LBAs and lengths reach the code past the range checks.
                    for byte in rest.iter_mut().skip(1) {
                        *byte &= 0x03;
                    }
                }
                rest.insert(0, opcode);
                rest
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn any_cdb_and_data_out_get_a_valid_outcome(
            cdb in cdb(),
            data_out in prop::collection::vec(any::<u8>(), 0..2048),
            lun in 0u64..3,
        ) {
            let array = array();
            let a = nexus("iqn.a", 1);
            drain_attentions(&array.core, &a, 0);
            let outcome = exec(&array.core, &a, lun, &cdb, &data_out);
            match outcome.status {
                ScsiStatus::Good => prop_assert!(outcome.sense.is_empty()),
                ScsiStatus::CheckCondition => {
                    prop_assert!(outcome.data_in.is_empty());
                    prop_assert!(outcome.sense[0] == 0x70 || outcome.sense[0] == 0xf0 || outcome.sense[0] == 0x72);
                    prop_assert_eq!(outcome.sense.len(), 8 + usize::from(outcome.sense[7]));
                }
                ScsiStatus::ReservationConflict => prop_assert!(outcome.sense.is_empty()),
                other => prop_assert!(false, "unexpected status {:?}", other),
            }
            prop_assert!(outcome.data_in.len() <= lacuna_scsi::MAX_TRANSFER_BYTES as usize);
            // The unit still works afterwards.
            let after = exec(&array.core, &a, 0, &[0x12, 0, 0, 0, 36, 0], &[]);
            prop_assert_eq!(after.status, ScsiStatus::Good);
        }
    }
}

#[test]
fn sanitize_overwrite_survives_resets_and_nexus_loss() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    good(exec(&array.core, &a, 0, &write10(0, 8), &[1u8; 4096]));
    let mut parameters = vec![0x01, 0, 0, 4];
    parameters.extend_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
    // IMMED: returns at once; 16 MiB at the overwrite pace takes about a second.
    let cdb = [
        0x48,
        0x80 | 0x01,
        0,
        0,
        0,
        0,
        0,
        0,
        parameters.len() as u8,
        0,
    ];
    good(exec(&array.core, &a, 0, &cdb, &parameters));
    let in_progress = |n: &ItNexus| {
        let outcome = exec(&array.core, n, 0, &[0; 6], &[]);
        outcome.status == ScsiStatus::CheckCondition && sense(&outcome) == (0x2, 0x04, 0x1b)
    };
    assert!(in_progress(&a));
    array.core.task_management(
        &a,
        Lun::single_level(0),
        TaskManagementFunction::TargetColdReset,
    );
    array.core.nexus_dropped(&a);
    let b = nexus("iqn.a", 5);
    array.core.nexus_created(&b);
    // The new nexus sees its unit attention first, then the sanitize still running.
    assert_eq!(sense(&exec(&array.core, &b, 0, &[0; 6], &[])).0, 0x6);
    assert!(in_progress(&b));
    good(exec(&array.core, &b, 0, &[0x12, 0, 0, 0, 36, 0], &[]));
    let started = std::time::Instant::now();
    while in_progress(&b) {
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let data = good(exec(&array.core, &b, 0, &read10(0, 2), &[]));
    assert!(data.chunks(4).all(|c| c == [0xaa, 0xbb, 0xcc, 0xdd]));
}

#[test]
fn sanitize_without_immed_ends_when_its_task_is_aborted() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    let parameters = vec![0x01, 0, 0, 1, 0x77];
    let cdb = [0x48, 0x01, 0, 0, 0, 0, 0, 0, parameters.len() as u8, 0];
    let started = std::time::Instant::now();
    let outcome = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            array.core.execute(
                &a,
                Command {
                    lun: Lun::single_level(0),
                    cdb: &cdb,
                    data_out: &bytes::Bytes::from(parameters.clone()),
                    expected_data_in_bytes: 0,
                    task_tag: 42,
                    attribute: TaskAttribute::Simple,
                },
            )
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        array.core.task_management(
            &a,
            Lun::single_level(0),
            TaskManagementFunction::AbortTask {
                referenced_task_tag: 42,
            },
        );
        waiting.join().unwrap()
    });
    assert!(
        started.elapsed() < std::time::Duration::from_millis(900),
        "ended by the abort"
    );
    assert_eq!(sense(&outcome).0, 0xb);
    // The sanitize itself goes on.
    assert_eq!(
        sense(&exec(&array.core, &a, 0, &[0; 6], &[])),
        (0x2, 0x04, 0x1b)
    );
}

/// Runs SANITIZE (overwrite, one pass, without IMMED) on `lun` of `nexus` as
/// task `tag`, on a thread of `scope`: it waits for the overwrite to end.
fn sanitize_waiting<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    core: &'scope ScsiCore,
    nexus: &'scope ItNexus,
    lun: u64,
    tag: u32,
) -> std::thread::ScopedJoinHandle<'scope, CommandOutcome> {
    const PARAMETERS: [u8; 5] = [0x01, 0, 0, 1, 0x77];
    const CDB: [u8; 10] = [0x48, 0x01, 0, 0, 0, 0, 0, 0, PARAMETERS.len() as u8, 0];
    scope.spawn(move || {
        core.execute(
            nexus,
            Command {
                lun: Lun::single_level(lun),
                cdb: &CDB,
                data_out: &bytes::Bytes::from_static(&PARAMETERS),
                expected_data_in_bytes: 0,
                task_tag: tag,
                attribute: TaskAttribute::Simple,
            },
        )
    })
}

/// Polls for up to `limit` for `handle` to finish.
fn finishes_within<T>(handle: &std::thread::ScopedJoinHandle<'_, T>, limit_ms: u64) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(limit_ms) {
        if handle.is_finished() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    handle.is_finished()
}

/// The transport ends a nexus (its connection is gone) while a SANITIZE of
/// it waits: the command ends at once, so the transport's teardown, which
/// waits for every running command, does not wait for the overwrite.
#[test]
fn sanitize_without_immed_ends_when_its_nexus_is_closing() {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    std::thread::scope(|scope| {
        let waiting = sanitize_waiting(scope, &array.core, &a, 0, 42);
        assert!(
            !finishes_within(&waiting, 200),
            "the overwrite takes a second"
        );
        array.core.nexus_closing(&a);
        assert!(finishes_within(&waiting, 500), "ended by the closing nexus");
        assert_eq!(sense(&waiting.join().unwrap()).0, 0xb);
    });
}

/// A LOGICAL UNIT RESET ends the tasks on the unit it names from every
/// nexus, and none on another unit that some other nexus knows by the same
/// LUN number (aborts were once keyed by LUN number alone).
#[test]
fn a_lun_reset_ends_tasks_on_its_unit_whatever_lun_names_it_elsewhere() {
    let backend = Arc::new(MemoryBackend::new());
    let x = backend.create_unit(MemoryUnitConfig::thin("x", 64 * MIB));
    let y = backend.create_unit(MemoryUnitConfig::thin("y", 16 * MIB));
    backend.map(Some("iqn.a"), 0, &x);
    backend.map(Some("iqn.b"), 0, &y);
    backend.map(Some("iqn.b"), 3, &x);
    let core = ScsiCore::new(Arc::clone(&backend) as Arc<dyn lacuna_scsi::backend::Backend>);
    let (a, b) = (nexus("iqn.a", 1), nexus("iqn.b", 2));
    drain_attentions(&core, &a, 0);
    std::thread::scope(|scope| {
        let waiting = sanitize_waiting(scope, &core, &a, 0, 42);
        assert!(!finishes_within(&waiting, 100));
        // b's LUN 0 is another unit: a's SANITIZE goes on waiting.
        let reset = core.task_management(
            &b,
            Lun::single_level(0),
            TaskManagementFunction::LogicalUnitReset,
        );
        assert_eq!(reset, TaskManagementResponse::FunctionComplete);
        assert!(
            !finishes_within(&waiting, 300),
            "ended by a reset of another unit"
        );
        // b's LUN 3 is a's unit.
        let reset = core.task_management(
            &b,
            Lun::single_level(3),
            TaskManagementFunction::LogicalUnitReset,
        );
        assert_eq!(reset, TaskManagementResponse::FunctionComplete);
        assert!(
            finishes_within(&waiting, 500),
            "ended by the reset of its unit"
        );
        assert_eq!(sense(&waiting.join().unwrap()).0, 0xb);
    });
}

/// A TARGET RESET from one host resets the units it may address and no
/// others: every host logs in to the one target, and one must not clear
/// another's reservations on volumes it was never granted.
#[test]
fn a_target_reset_leaves_units_the_nexus_cannot_address_alone() {
    let array = array();
    let (a, a2, b) = (nexus("iqn.a", 1), nexus("iqn.a", 2), nexus("iqn.b", 3));
    for n in [&a, &a2] {
        drain_attentions(&array.core, n, 0);
        drain_attentions(&array.core, n, 1);
    }
    drain_attentions(&array.core, &b, 0);
    // a reserves LUN 1, which b does not see.
    good(exec(&array.core, &a, 1, &[0x16, 0, 0, 0, 0, 0], &[]));
    let reset = array.core.task_management(
        &b,
        Lun::single_level(0),
        TaskManagementFunction::TargetWarmReset,
    );
    assert_eq!(reset, TaskManagementResponse::FunctionComplete);
    // LUN 0 is shared: every nexus hears of its reset.
    assert_eq!(drain_attentions(&array.core, &a, 0), vec![(0x29, 0x03)]);
    // LUN 1 was not reset: no unit attention, and a's reservation holds.
    assert!(drain_attentions(&array.core, &a, 1).is_empty());
    assert_eq!(
        exec(&array.core, &a2, 1, &read10(0, 1), &[]).status,
        ScsiStatus::ReservationConflict
    );
    good(exec(&array.core, &a, 1, &read10(0, 1), &[]));
}

/// Initiator "iqn.a" on the two-unit array, its first unit attentions seen.
fn array_seen_by_a() -> (Array, ItNexus) {
    let array = array();
    let a = nexus("iqn.a", 1);
    drain_attentions(&array.core, &a, 0);
    drain_attentions(&array.core, &a, 1);
    (array, a)
}

/// Whether `read` (a READ CDB) on `lun` returns `byte` throughout.
fn reads_all(core: &ScsiCore, nexus: &ItNexus, lun: u64, read: Vec<u8>, byte: u8) -> bool {
    good(exec(core, nexus, lun, &read, &[]))
        .iter()
        .all(|&b| b == byte)
}

/// RECEIVE COPY RESULTS, copy status, of list 7 (what `xcopy` sends) on `lun`.
fn copy_status_of_list_7(core: &ScsiCore, nexus: &ItNexus, lun: u64) -> Vec<u8> {
    let mut results = vec![0u8; 16];
    results[0] = 0x84;
    results[2] = 7;
    results[13] = 255;
    good(exec(core, nexus, lun, &results, &[]))
}

/// EXTENDED COPY checks the units its segments write, not only the LUN it
/// was sent to: software write protect on the destination refuses the copy
/// (it once wrote through), and a protected LUN the copy only reads from
/// does not stop it.
#[test]
fn extended_copy_honours_software_write_protect_on_the_units_it_names() {
    let (array, a) = array_seen_by_a();
    good(exec(&array.core, &a, 0, &write10(0, 8), &[0x5a; 8 * 512]));
    good(exec(&array.core, &a, 1, &write10(50, 8), &[0x77; 8 * 512]));
    let (select, mut page) = mode_select_control(false);
    page[4 + 4] |= 0x08; // SWP
    good(exec(&array.core, &a, 1, &select, &page));
    drain_attentions(&array.core, &a, 0);
    let (zero, one) = (naa_of(&array.core, &a, 0), naa_of(&array.core, &a, 1));

    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &[(0, 1, 8, 0, 0)]);
    let outcome = exec(&array.core, &a, 0, &cdb, &list);

    assert_eq!(sense(&outcome), (0x7, 0x27, 0x02));
    assert!(reads_all(&array.core, &a, 1, read10(0, 8), 0));
    // Sent to the protected LUN, a copy out of it into LUN 0 runs.
    let (cdb, list) = xcopy(&[one, zero], &[(0, 1, 8, 50, 100)]);
    good(exec(&array.core, &a, 1, &cdb, &list));
    assert!(reads_all(&array.core, &a, 0, read10(100, 8), 0x77));
}

/// A copy into (or out of) a unit being sanitized is refused with the
/// sanitize's NOT READY, as a write or read sent to that unit would be.
#[test]
fn extended_copy_refuses_a_unit_being_sanitized() {
    let (array, a) = array_seen_by_a();
    let (zero, one) = (naa_of(&array.core, &a, 0), naa_of(&array.core, &a, 1));
    let parameters = [0x01, 0, 0, 1, 0x77];
    let immed = [0x48, 0x81, 0, 0, 0, 0, 0, 0, parameters.len() as u8, 0];
    good(exec(&array.core, &a, 1, &immed, &parameters));

    let (cdb, list) = xcopy(&[zero.clone(), one.clone()], &[(0, 1, 8, 0, 0)]);
    assert_eq!(
        sense(&exec(&array.core, &a, 0, &cdb, &list)),
        (0x2, 0x04, 0x1b)
    );
    let (cdb, list) = xcopy(&[zero, one], &[(1, 0, 8, 0, 0)]);
    assert_eq!(
        sense(&exec(&array.core, &a, 0, &cdb, &list)),
        (0x2, 0x04, 0x1b)
    );
}

/// A segment naming a target the initiator cannot reach ends the copy after
/// the segments before it, which run (they were dropped unrun when merged
/// into one pending copy).
#[test]
fn segments_before_an_unreachable_target_are_copied() {
    let (array, a) = array_seen_by_a();
    good(exec(&array.core, &a, 0, &write10(0, 8), &[0x5a; 8 * 512]));
    let (zero, one) = (naa_of(&array.core, &a, 0), naa_of(&array.core, &a, 1));
    let mut bogus = zero.clone();
    bogus[19] ^= 0xff;

    let (cdb, list) = xcopy(&[zero, one, bogus], &[(0, 1, 8, 0, 0), (0, 2, 8, 8, 8)]);
    let outcome = exec(&array.core, &a, 0, &cdb, &list);

    assert_eq!(sense(&outcome), (0xa, 0x08, 0x04));
    assert!(reads_all(&array.core, &a, 1, read10(0, 8), 0x5a));
    let status = copy_status_of_list_7(&array.core, &a, 0);
    assert_eq!(
        (status[4], u16::from_be_bytes([status[5], status[6]])),
        (0x02, 1)
    );
    // TRANSFER COUNT: 8 blocks of 512 bytes, in bytes.
    assert_eq!((status[7], &status[8..12]), (0, &4096u32.to_be_bytes()[..]));
}

/// OPTIMAL UNMAP GRANULARITY is one 4 KiB grain in the unit's own blocks.
#[test]
fn unmap_granularity_is_one_grain_in_the_units_blocks() {
    let backend = Arc::new(MemoryBackend::new());
    let small = backend.create_unit(MemoryUnitConfig::thin("small", 16 * MIB));
    let large = backend.create_unit(MemoryUnitConfig {
        block_size_bytes: 4096,
        ..MemoryUnitConfig::thin("large", 16 * MIB)
    });
    backend.map(None, 0, &small);
    backend.map(None, 1, &large);
    let core = ScsiCore::new(Arc::clone(&backend) as Arc<dyn lacuna_scsi::backend::Backend>);
    let a = nexus("iqn.a", 1);
    for (lun, blocks) in [(0u64, 8u32), (1, 1)] {
        drain_attentions(&core, &a, lun);
        let page = good(exec(&core, &a, lun, &[0x12, 1, 0xb0, 0, 64, 0], &[]));
        let granularity = u32::from_be_bytes(page[28..32].try_into().unwrap());
        assert_eq!(granularity, blocks, "LUN {lun}");
    }
}

#[test]
fn extended_copy_respects_reservations_on_the_units_it_names() {
    let array = array();
    let a = nexus("iqn.a", 1);
    let holder = nexus("iqn.a", 2);
    for n in [&a, &holder] {
        drain_attentions(&array.core, n, 0);
        drain_attentions(&array.core, n, 1);
    }
    good(exec(&array.core, &holder, 1, &[0x16, 0, 0, 0, 0, 0], &[]));
    let zero = naa_of(&array.core, &a, 0);
    let one = naa_of(&array.core, &holder, 1);
    let (cdb, list) = xcopy(&[zero, one], &[(0, 1, 8, 0, 0)]);
    assert_eq!(
        exec(&array.core, &a, 0, &cdb, &list).status,
        ScsiStatus::ReservationConflict
    );
    // Held as failed (it was held as completed), with that status in its
    // failed segment details.
    let status = copy_status_of_list_7(&array.core, &a, 0);
    assert_eq!((status[4], status[5], status[6]), (0x02, 0, 0));
    let details = [0x84, 0x04, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0];
    let details = good(exec(&array.core, &a, 0, &details, &[]));
    assert_eq!(
        details[56], 0x18,
        "COPY COMMAND STATUS: RESERVATION CONFLICT"
    );
    good(exec(&array.core, &holder, 1, &[0x17, 0, 0, 0, 0, 0], &[]));
    good(exec(&array.core, &a, 0, &cdb, &list));
}

#[test]
fn thick_units_are_fully_provisioned() {
    let backend = Arc::new(MemoryBackend::new());
    let thick = backend.create_unit(MemoryUnitConfig {
        provisioning: lacuna_scsi::backend::Provisioning::EagerZeroedThick,
        ..MemoryUnitConfig::thin("thick", 8 * MIB)
    });
    backend.map(None, 0, &thick);
    let core = ScsiCore::new(backend);
    let a = nexus("iqn.a", 1);
    drain_attentions(&core, &a, 0);
    let capacity = good(exec(&core, &a, 0, &read_capacity_16(), &[]));
    assert_eq!(capacity[14] & 0x80, 0, "LBPME clear");
    let page = good(exec(&core, &a, 0, &[0x12, 1, 0xb2, 0, 64, 0], &[]));
    assert_eq!(
        (page[5] & 0xe0, page[6] & 0x07),
        (0, 0),
        "no LBPU/LBPWS, fully provisioned"
    );
    let list = unmap_list(&[(0, 8)]);
    assert_eq!(
        sense(&exec(&core, &a, 0, &unmap_cdb(list.len() as u16), &list)),
        (0x5, 0x20, 0x00)
    );
    let rsoc = good(exec(
        &core,
        &a,
        0,
        &[0xa3, 0x0c, 0x01, 0x42, 0, 0, 0, 0, 1, 0, 0, 0],
        &[],
    ));
    assert_eq!(rsoc[1] & 0x07, 0x01, "UNMAP reported as not supported");
    let status = good(exec(&core, &a, 0, &get_lba_status(0), &[]));
    assert_eq!(status[20], 0, "mapped");
}
