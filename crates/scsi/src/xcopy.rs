//! EXTENDED COPY (LID1) and RECEIVE COPY RESULTS (SPC-4 6.3, 6.18): VMware's Clone
//! primitive ("full copy").
//!
//! Copy targets are named by identification descriptors (E4h) holding the NAA designator
//! of VPD page 83h; they resolve only among the units the sending initiator may access, so
//! a copy can never reach a volume hidden from that host. Each block→block segment (02h)
//! becomes one `copy_from` call on the destination unit, which the engine makes
//! metadata-only; segments run in order, and the results of a held list identifier are
//! kept for RECEIVE COPY RESULTS until the nexus goes away.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::LogicalUnit;
use crate::block::{be16, be32, be64, storage_failure, truncate, Geometry};
use crate::dispatch::{CommandResult, Failure, Request, ScsiCore};
use crate::inquiry::naa_designator;
use crate::reservation::check_copy_access;
use crate::sense::{AdditionalSense, Sense, SenseKey};
use crate::target::ItNexus;

/// MAXIMUM CSCD DESCRIPTOR COUNT.
pub(crate) const MAX_TARGET_DESCRIPTORS: u16 = 32;
/// MAXIMUM SEGMENT DESCRIPTOR COUNT.
pub(crate) const MAX_SEGMENT_DESCRIPTORS: u16 = 64;
/// MAXIMUM DESCRIPTOR LIST LENGTH (target plus segment descriptors), bounding the list.
pub(crate) const MAX_DESCRIPTOR_LIST_LEN_BYTES: u32 = 4096;
/// MAXIMUM SEGMENT LENGTH: 65535 blocks of up to 4 KiB (a LID1 segment counts 16 bits).
pub(crate) const MAX_SEGMENT_LEN_BYTES: u32 = u16::MAX as u32 * 4096;

const HEADER_LEN_BYTES: usize = 16;
const TARGET_DESCRIPTOR_LEN_BYTES: usize = 32;
const IDENTIFICATION_TARGET_DESCRIPTOR: u8 = 0xe4;
const BLOCK_TO_BLOCK_SEGMENT: u8 = 0x02;
const BLOCK_TO_BLOCK_SEGMENT_LEN_BYTES: usize = 28;

/// Outcome of one copy, kept for RECEIVE COPY RESULTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CopyResult {
    ended: CopyEnd,
    segments_processed: u16,
    transferred_bytes: u64,
}

/// How a copy ended, as RECEIVE COPY RESULTS reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyEnd {
    Completed,
    Check(Sense),
    ReservationConflict,
}

/// Held copy results of one unit, keyed by the nexus and list identifier.
#[derive(Debug, Default)]
pub(crate) struct CopyResults {
    held: HashMap<(String, u16, u8), CopyResult>,
}

impl CopyResults {
    fn key(nexus: &ItNexus, list_id: u8) -> (String, u16, u8) {
        (
            nexus.initiator_port.clone(),
            nexus.relative_target_port,
            list_id,
        )
    }

    pub(crate) fn forget_nexus(&mut self, nexus: &ItNexus) {
        self.held.retain(|(port, rtp, _), _| {
            !(port == &nexus.initiator_port && *rtp == nexus.relative_target_port)
        });
    }
}

fn copy_aborted(code: AdditionalSense) -> Failure {
    Failure::Check(Sense::new(SenseKey::CopyAborted, code))
}

/// One parsed block→block segment.
#[derive(Clone, Copy, Debug)]
struct Segment {
    source_index: usize,
    destination_index: usize,
    block_count: u64,
    source_lba: u64,
    destination_lba: u64,
}

/// EXTENDED COPY (LID1).
pub(crate) fn extended_copy(request: &Request<'_>) -> CommandResult {
    if be32(request.cdb, 10) == 0 {
        return Ok(Vec::new());
    }
    let list = parameter_list(request.cdb, request.data_out)?;
    let targets = parse_targets(list.targets, request.core, request.nexus)?;
    let segments = parse_segments(list.segments, list.segments_at)?;
    // The units the segments name are checked as they are copied (the LUN
    // the command was sent to may be neither).

    let mut result = CopyResult {
        ended: CopyEnd::Completed,
        segments_processed: 0,
        transferred_bytes: 0,
    };
    let outcome = run_segments(request, &targets, &segments, &mut result);
    result.ended = match outcome {
        Ok(()) => CopyEnd::Completed,
        Err(Failure::Check(sense)) => CopyEnd::Check(sense),
        Err(Failure::ReservationConflict) => CopyEnd::ReservationConflict,
        Err(Failure::WouldWait) => unreachable!("a copy runs where it may wait"),
    };
    if list.list_id_usage <= 1 {
        request
            .state
            .lock()
            .copies
            .held
            .insert(CopyResults::key(request.nexus, list.list_id), result);
    }
    outcome.map(|()| Vec::new())
}

/// Most segments a copy may hold and still run on the transport's own task.
const MAX_QUICK_SEGMENTS: usize = 16;

/// A LID1 parameter list, split by its header.
struct ParameterList<'l> {
    list_id: u8,
    list_id_usage: u8,
    targets: &'l [u8],
    segments: &'l [u8],
    /// Where the segment descriptors start in the list (for sense data).
    segments_at: usize,
}

/// Checks the list's header against the CDB and its own lengths.
fn parameter_list<'l>(cdb: &[u8], data_out: &'l [u8]) -> Result<ParameterList<'l>, Failure> {
    let parameter_list_len = be32(cdb, 10) as usize;
    if parameter_list_len < HEADER_LEN_BYTES || data_out.len() < parameter_list_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    let list = &data_out[..parameter_list_len];
    let targets_len = usize::from(be16(list, 2));
    let segments_len = be32(list, 8) as usize;
    let inline_len = be32(list, 12) as usize;
    if targets_len + segments_len > MAX_DESCRIPTOR_LIST_LEN_BYTES as usize {
        return Err(Sense::parameter_list_length_error().into());
    }
    if HEADER_LEN_BYTES + targets_len + segments_len + inline_len > parameter_list_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    if inline_len != 0 {
        return Err(Sense::invalid_parameter_field(12, None).into());
    }
    let segments_at = HEADER_LEN_BYTES + targets_len;
    Ok(ParameterList {
        list_id: list[0],
        list_id_usage: (list[1] >> 3) & 0x03,
        targets: &list[HEADER_LEN_BYTES..segments_at],
        segments: &list[segments_at..segments_at + segments_len],
        segments_at,
    })
}

/// Whether `segment` lies within both units, which have one block size.
fn segment_fits(
    source: &dyn LogicalUnit,
    destination: &dyn LogicalUnit,
    segment: &Segment,
) -> bool {
    let (from, to) = (Geometry::of(source), Geometry::of(destination));
    from.block_size_bytes == to.block_size_bytes
        && from
            .check_range(segment.source_lba, segment.block_count)
            .is_ok()
        && to
            .check_range(segment.destination_lba, segment.block_count)
            .is_ok()
}

/// Whether an EXTENDED COPY will take microseconds: a well-formed LID1 list of
/// a few segments, each of which its destination says it copies by metadata
/// alone (`LogicalUnit::copy_is_quick`). Then the transport runs it on its own
/// task: handing a 4 MiB copy (ESXi's default size) to a blocking pool and back
/// cost more than the copy. Anything else, errors included, takes the usual
/// path, so this decides where a copy runs, never what it does.
pub(crate) fn runs_quickly(core: &ScsiCore, nexus: &ItNexus, cdb: &[u8], data_out: &[u8]) -> bool {
    if cdb.len() < 16 || cdb[1] & 0x1f != crate::commands::service_action::EXTENDED_COPY_LID1 {
        return false;
    }
    let Ok(list) = parameter_list(cdb, data_out) else {
        return false;
    };
    let (Ok(targets), Ok(segments)) = (
        parse_targets(list.targets, core, nexus),
        parse_segments(list.segments, list.segments_at),
    ) else {
        return false;
    };
    if segments.is_empty() || segments.len() > MAX_QUICK_SEGMENTS {
        return false;
    }
    segments.iter().all(|segment| {
        let unit = |index: usize| targets.get(index).and_then(Option::as_ref);
        let (Some(source), Some(destination)) =
            (unit(segment.source_index), unit(segment.destination_index))
        else {
            return false;
        };
        let (from, to) = (
            Geometry::of(source.as_ref()),
            Geometry::of(destination.as_ref()),
        );
        segment_fits(source.as_ref(), destination.as_ref(), segment)
            && destination.copy_is_quick(
                source.as_ref(),
                from.offset_bytes(segment.source_lba),
                to.offset_bytes(segment.destination_lba),
                to.len_bytes(segment.block_count),
            )
    })
}

/// Resolves identification target descriptors to the units this nexus may access.
/// `None` marks a descriptor naming no accessible unit (reported when a segment uses it).
fn parse_targets(
    list: &[u8],
    core: &ScsiCore,
    nexus: &ItNexus,
) -> Result<Vec<Option<Arc<dyn LogicalUnit>>>, Failure> {
    if !list.len().is_multiple_of(TARGET_DESCRIPTOR_LEN_BYTES) {
        return Err(Sense::parameter_list_length_error().into());
    }
    let count = list.len() / TARGET_DESCRIPTOR_LEN_BYTES;
    if count > usize::from(MAX_TARGET_DESCRIPTORS) {
        return Err(Sense::invalid_parameter(
            AdditionalSense::TOO_MANY_TARGET_DESCRIPTORS,
            2,
            None,
        )
        .into());
    }
    let visible = core.units_visible_to(nexus);
    let mut targets = Vec::with_capacity(count);
    for (index, descriptor) in list.chunks(TARGET_DESCRIPTOR_LEN_BYTES).enumerate() {
        let at = (HEADER_LEN_BYTES + index * TARGET_DESCRIPTOR_LEN_BYTES) as u16;
        if descriptor[0] != IDENTIFICATION_TARGET_DESCRIPTOR {
            return Err(Sense::invalid_parameter(
                AdditionalSense::UNSUPPORTED_TARGET_DESCRIPTOR_TYPE_CODE,
                at,
                None,
            )
            .into());
        }
        // LU ID TYPE and NUL are ignored (SPC-4); only block devices can be copy targets.
        if descriptor[1] & 0x1f != 0 {
            return Err(Sense::invalid_parameter_field(at + 1, Some(4)).into());
        }
        let designator = &descriptor[4..24];
        let code_set = designator[0] & 0x0f;
        let association = (designator[1] >> 4) & 0x03;
        let designator_type = designator[1] & 0x0f;
        let designator_len = usize::from(designator[3]);
        let matched = if code_set == 0x01
            && association == 0
            && designator_type == 0x03
            && designator_len == 16
        {
            visible
                .iter()
                .find(|unit| naa_designator(unit.as_ref()) == designator[4..20])
                .cloned()
        } else {
            None
        };
        if let Some(unit) = &matched {
            let disk_block_len = be32(descriptor, 28) & 0x00ff_ffff;
            if disk_block_len != unit.block_size_bytes() {
                return Err(Sense::invalid_parameter_field(at + 29, None).into());
            }
        }
        targets.push(matched);
    }
    Ok(targets)
}

fn parse_segments(list: &[u8], list_offset: usize) -> Result<Vec<Segment>, Failure> {
    let mut segments = Vec::new();
    let mut at = 0usize;
    while at < list.len() {
        let offset = (list_offset + at) as u16;
        if list.len() - at < 4 {
            return Err(Sense::parameter_list_length_error().into());
        }
        if segments.len() == usize::from(MAX_SEGMENT_DESCRIPTORS) {
            return Err(Sense::invalid_parameter(
                AdditionalSense::TOO_MANY_SEGMENT_DESCRIPTORS,
                8,
                None,
            )
            .into());
        }
        let descriptor_len = usize::from(be16(list, at + 2)) + 4;
        if list[at] != BLOCK_TO_BLOCK_SEGMENT {
            return Err(Sense::invalid_parameter(
                AdditionalSense::UNSUPPORTED_SEGMENT_DESCRIPTOR_TYPE_CODE,
                offset,
                None,
            )
            .into());
        }
        if descriptor_len != BLOCK_TO_BLOCK_SEGMENT_LEN_BYTES {
            return Err(Sense::invalid_parameter_field(offset + 2, None).into());
        }
        if list.len() - at < descriptor_len {
            return Err(Sense::parameter_list_length_error().into());
        }
        let descriptor = &list[at..at + descriptor_len];
        segments.push(Segment {
            source_index: usize::from(be16(descriptor, 4)),
            destination_index: usize::from(be16(descriptor, 6)),
            block_count: u64::from(be16(descriptor, 10)),
            source_lba: be64(descriptor, 12),
            destination_lba: be64(descriptor, 20),
        });
        at += descriptor_len;
    }
    Ok(segments)
}

/// Consecutive segments that continue one another (same units, each starting
/// where the previous one ended on both sides) are copied as one range: a client
/// that splits a clone into many segments still costs one metadata-only copy per
/// run, not per segment.
struct Run {
    source_index: usize,
    destination_index: usize,
    source_lba: u64,
    destination_lba: u64,
    block_count: u64,
    segments: u16,
}

impl Run {
    /// Whether `segment` extends the run. Within one unit, only while the
    /// extended source and destination ranges stay apart: segment by segment, a
    /// later segment may read what an earlier one wrote, and one copy would not.
    fn continued_by(&self, segment: &Segment, same_unit: bool) -> bool {
        let continues = segment.source_index == self.source_index
            && segment.destination_index == self.destination_index
            && segment.source_lba == self.source_lba + self.block_count
            && segment.destination_lba == self.destination_lba + self.block_count;
        let count = self.block_count + segment.block_count;
        let apart = self.source_lba + count <= self.destination_lba
            || self.destination_lba + count <= self.source_lba;
        continues && (!same_unit || apart)
    }
}

fn run_segments(
    request: &Request<'_>,
    targets: &[Option<Arc<dyn LogicalUnit>>],
    segments: &[Segment],
    result: &mut CopyResult,
) -> Result<(), Failure> {
    let resolve = |index: usize| -> Result<&Arc<dyn LogicalUnit>, Failure> {
        targets
            .get(index)
            .and_then(Option::as_ref)
            .ok_or_else(|| copy_aborted(AdditionalSense::UNREACHABLE_COPY_TARGET))
    };
    let mut pending: Option<Run> = None;
    for segment in segments {
        // A segment that cannot run ends the copy after the ones before it.
        let checked = resolve(segment.source_index).and_then(|source| {
            let destination = resolve(segment.destination_index)?;
            if !segment_fits(source.as_ref(), destination.as_ref(), segment) {
                return Err(copy_aborted(AdditionalSense::NO_ADDITIONAL_SENSE));
            }
            check_destination_writable(request, destination)?;
            Ok((source, destination))
        });
        let (source, destination) = match checked {
            Ok(units) => units,
            Err(failure) => {
                copy_run(request, targets, pending.take(), result)?;
                return Err(failure);
            }
        };
        let same_unit = Arc::ptr_eq(source, destination);
        match pending.as_mut() {
            Some(run) if run.continued_by(segment, same_unit) => {
                run.block_count += segment.block_count;
                run.segments += 1;
            }
            _ => {
                copy_run(request, targets, pending.take(), result)?;
                pending = Some(Run {
                    source_index: segment.source_index,
                    destination_index: segment.destination_index,
                    source_lba: segment.source_lba,
                    destination_lba: segment.destination_lba,
                    block_count: segment.block_count,
                    segments: 1,
                });
            }
        }
    }
    copy_run(request, targets, pending.take(), result)
}

/// DATA PROTECT when a copy's destination refuses writes: a read-only unit,
/// or one whose software write protect is on.
fn check_destination_writable(
    request: &Request<'_>,
    destination: &Arc<dyn LogicalUnit>,
) -> Result<(), Failure> {
    if destination.read_only() {
        return Err(Sense::new(SenseKey::DataProtect, AdditionalSense::WRITE_PROTECTED).into());
    }
    if request
        .core
        .unit_state(destination.as_ref())
        .software_write_protected()
    {
        return Err(Sense::new(
            SenseKey::DataProtect,
            AdditionalSense::SOFTWARE_WRITE_PROTECTED,
        )
        .into());
    }
    Ok(())
}

/// NOT READY when a unit a copy reads or writes may not be used now: it is
/// being sanitized (its data is being destroyed, or must read as the
/// pattern after), or its medium is out. The dispatcher checks this only
/// for the LUN the command was sent to.
fn check_ready(state: &crate::unit_state::UnitState) -> Result<(), Failure> {
    if state.sanitize_in_progress() {
        return Err(crate::sanitize::in_progress_sense(state).into());
    }
    if !state.medium_present() {
        return Err(Sense::new(SenseKey::NotReady, AdditionalSense::MEDIUM_NOT_PRESENT).into());
    }
    Ok(())
}

/// Copies one run of segments (access checked as for each of them) and counts
/// its segments as processed.
fn copy_run(
    request: &Request<'_>,
    targets: &[Option<Arc<dyn LogicalUnit>>],
    run: Option<Run>,
    result: &mut CopyResult,
) -> Result<(), Failure> {
    let Some(run) = run else {
        return Ok(());
    };
    let unit = |index: usize| {
        targets[index]
            .as_ref()
            .expect("resolved before the run began")
    };
    let (source, destination) = (unit(run.source_index), unit(run.destination_index));
    let source_geometry = Geometry::of(source.as_ref());
    let destination_geometry = Geometry::of(destination.as_ref());
    let source_state = request.core.unit_state(source.as_ref());
    let destination_state = request.core.unit_state(destination.as_ref());
    check_copy_access(&source_state, request.nexus, false)?;
    check_copy_access(&destination_state, request.nexus, true)?;
    check_ready(&source_state)?;
    check_ready(&destination_state)?;
    let len_bytes = destination_geometry.len_bytes(run.block_count);
    if run.block_count > 0 {
        let offset_bytes = destination_geometry.offset_bytes(run.destination_lba);
        let _range = destination_state.range_lock.lock(offset_bytes, len_bytes);
        destination
            .copy_from(
                source.as_ref(),
                source_geometry.offset_bytes(run.source_lba),
                offset_bytes,
                len_bytes,
            )
            .map_err(|e| storage_failure(e, true))?;
    }
    result.segments_processed += run.segments;
    result.transferred_bytes += len_bytes;
    Ok(())
}

/// RECEIVE COPY RESULTS: copy status (00h), operating parameters (03h) and failed segment
/// details (04h).
pub(crate) fn receive_copy_results(request: &Request<'_>, action: u8) -> CommandResult {
    let cdb = request.cdb;
    let list_id = cdb[2];
    let allocation_len = be32(cdb, 10) as usize;
    let data = match action {
        0x03 => operating_parameters(),
        0x00 | 0x04 => {
            let held = request
                .state
                .lock()
                .copies
                .held
                .get(&CopyResults::key(request.nexus, list_id))
                .copied();
            let Some(result) = held else {
                return Err(Sense::invalid_cdb_field(2, None).into());
            };
            if action == 0x00 {
                copy_status(&result)
            } else {
                failure_details(&result, request.state.sense_format())
            }
        }
        _ => return Err(Sense::invalid_cdb_field(1, Some(4)).into()),
    };
    Ok(truncate(data, allocation_len))
}

fn operating_parameters() -> Vec<u8> {
    let descriptor_types = [BLOCK_TO_BLOCK_SEGMENT, IDENTIFICATION_TARGET_DESCRIPTOR];
    let mut data = vec![0u8; 44];
    data[4] = 0x01; // SNLID: list identifiers may be unused
    data[8..10].copy_from_slice(&MAX_TARGET_DESCRIPTORS.to_be_bytes());
    data[10..12].copy_from_slice(&MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    data[12..16].copy_from_slice(&MAX_DESCRIPTOR_LIST_LEN_BYTES.to_be_bytes());
    data[16..20].copy_from_slice(&MAX_SEGMENT_LEN_BYTES.to_be_bytes());
    data[34..36].copy_from_slice(&1024u16.to_be_bytes()); // TOTAL CONCURRENT COPIES
    data[36] = 255; // MAXIMUM CONCURRENT COPIES
    data[37] = 9; // DATA SEGMENT GRANULARITY: 512 bytes
    data[43] = descriptor_types.len() as u8;
    data.extend_from_slice(&descriptor_types);
    let available = (data.len() - 4) as u32;
    data[0..4].copy_from_slice(&available.to_be_bytes());
    data
}

fn copy_status(result: &CopyResult) -> Vec<u8> {
    let mut data = vec![0u8; 12];
    data[0..4].copy_from_slice(&8u32.to_be_bytes());
    // COPY MANAGER STATUS: 01h completed without errors, 02h with errors.
    data[4] = match result.ended {
        CopyEnd::Completed => 0x01,
        CopyEnd::Check(_) | CopyEnd::ReservationConflict => 0x02,
    };
    data[5..7].copy_from_slice(&result.segments_processed.to_be_bytes());
    // TRANSFER COUNT UNITS: 0 = bytes, 1 = KiB (2^10), 2 = MiB (2^20), ...
    let bytes = result.transferred_bytes;
    let (units, count) = if let Ok(count) = u32::try_from(bytes) {
        (0u8, count)
    } else if let Ok(count) = u32::try_from(bytes >> 20) {
        (2, count)
    } else {
        (4, u32::try_from(bytes >> 40).unwrap_or(u32::MAX))
    };
    data[7] = units;
    data[8..12].copy_from_slice(&count.to_be_bytes());
    data
}

fn failure_details(result: &CopyResult, format: crate::sense::SenseFormat) -> Vec<u8> {
    // COPY COMMAND STATUS: the EXTENDED COPY's own status.
    let (status, sense_bytes) = match result.ended {
        CopyEnd::Completed => return vec![0u8; 4],
        CopyEnd::Check(sense) => (0x02, sense.encode(format)),
        CopyEnd::ReservationConflict => (0x18, Vec::new()),
    };
    let mut data = vec![0u8; 60];
    data[56] = status;
    data[58..60].copy_from_slice(&(sense_bytes.len() as u16).to_be_bytes());
    data.extend_from_slice(&sense_bytes);
    let available = (data.len() - 4) as u32;
    data[0..4].copy_from_slice(&available.to_be_bytes());
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_parse_and_count_limit() {
        let mut descriptor = vec![0u8; 28];
        descriptor[0] = 0x02;
        descriptor[3] = 24;
        descriptor[7] = 1;
        descriptor[11] = 16;
        descriptor[12..20].copy_from_slice(&5u64.to_be_bytes());
        descriptor[20..28].copy_from_slice(&9u64.to_be_bytes());
        let segments = parse_segments(&descriptor.repeat(2), 48).unwrap();
        assert_eq!(segments.len(), 2);
        assert_eq!(segments[0].destination_index, 1);
        assert_eq!(
            (
                segments[0].block_count,
                segments[0].source_lba,
                segments[0].destination_lba
            ),
            (16, 5, 9)
        );
        let too_many = descriptor.repeat(usize::from(MAX_SEGMENT_DESCRIPTORS) + 1);
        let Err(Failure::Check(sense)) = parse_segments(&too_many, 48) else {
            panic!()
        };
        assert_eq!(sense.code, AdditionalSense::TOO_MANY_SEGMENT_DESCRIPTORS);
        let mut stream = descriptor.clone();
        stream[0] = 0x03;
        let Err(Failure::Check(sense)) = parse_segments(&stream, 48) else {
            panic!()
        };
        assert_eq!(
            sense.code,
            AdditionalSense::UNSUPPORTED_SEGMENT_DESCRIPTOR_TYPE_CODE
        );
    }

    #[test]
    fn operating_parameters_layout() {
        let data = operating_parameters();
        assert_eq!(be32(&data, 0) as usize, data.len() - 4);
        assert_eq!(be16(&data, 8), MAX_TARGET_DESCRIPTORS);
        assert_eq!(be16(&data, 10), MAX_SEGMENT_DESCRIPTORS);
        assert_eq!(data[43], 2);
        assert_eq!(&data[44..46], &[0x02, 0xe4]);
    }

    #[test]
    fn copy_status_scales_large_transfers() {
        let result = CopyResult {
            ended: CopyEnd::Completed,
            segments_processed: 3,
            transferred_bytes: 100 << 30,
        };
        let data = copy_status(&result);
        assert_eq!(data[4], 0x01);
        assert_eq!(be16(&data, 5), 3);
        assert_eq!(data[7], 2);
        assert_eq!(be32(&data, 8), 100 << 10);
    }
}
