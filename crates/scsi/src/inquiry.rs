//! INQUIRY: standard data and the vital product data pages (SPC-5 6.7, 7.7; SBC-4 6.6).
//!
//! These pages are how an initiator decides what it may ask of us: ESXi enables its VAAI
//! primitives from the 3PC bit, the third-party copy page (8Fh), Block Limits (B0h) and
//! Logical Block Provisioning (B2h); multipath software groups paths by the NAA
//! designator of page 83h. Every value here is therefore a promise the command modules
//! keep (the limits are the same constants they enforce).
//!
//! Logical unit conglomerates (vVols): ESXi takes an LU for a protocol endpoint from
//! LU_COLL_TYPE 001b (conglomerate) in the Extended INQUIRY Data page (86h), and the
//! standard data's LU_CONG bit says an LU is a member of a conglomerate (SPC-5). Both
//! the administrative LU and its subsidiaries are members (SAM-5 defines the conglomerate
//! as the administrative LU with its subsidiaries), so both set LU_CONG; sg3_utils too
//! decodes a LUN the conglomerate way only when the LU it came from has LU_CONG set.
//! LU_COLL_TYPE is set on the administrative LU only: it is what makes ESXi treat an LU as
//! a protocol endpoint, and a vVol must never be taken for one. Whether SPC-5 wants it on
//! subsidiaries as well could not be confirmed here.

use crate::backend::LogicalUnit;
use crate::block::{be16, truncate, Geometry};
use crate::caw::MAX_COMPARE_AND_WRITE_BLOCKS;
use crate::dispatch::{Identity, Request};
use crate::lun_map::Membership;
use crate::provisioning::{unmap_granularity_blocks, MAX_UNMAP_DESCRIPTORS, MAX_WRITE_SAME_BLOCKS};
use crate::sense::Sense;
use crate::xcopy;

const PAGE_SUPPORTED: u8 = 0x00;
const PAGE_UNIT_SERIAL_NUMBER: u8 = 0x80;
const PAGE_DEVICE_IDENTIFICATION: u8 = 0x83;
const PAGE_EXTENDED_INQUIRY: u8 = 0x86;
const PAGE_THIRD_PARTY_COPY: u8 = 0x8f;
const PAGE_BLOCK_LIMITS: u8 = 0xb0;
const PAGE_BLOCK_DEVICE_CHARACTERISTICS: u8 = 0xb1;
const PAGE_LOGICAL_BLOCK_PROVISIONING: u8 = 0xb2;

/// In ascending order, as page 00h must list them.
const PAGES: [u8; 8] = [
    PAGE_SUPPORTED,
    PAGE_UNIT_SERIAL_NUMBER,
    PAGE_DEVICE_IDENTIFICATION,
    PAGE_EXTENDED_INQUIRY,
    PAGE_THIRD_PARTY_COPY,
    PAGE_BLOCK_LIMITS,
    PAGE_BLOCK_DEVICE_CHARACTERISTICS,
    PAGE_LOGICAL_BLOCK_PROVISIONING,
];

/// Version descriptors claimed in standard data: SAM-5, iSCSI, SPC-4, SBC-3.
const VERSION_DESCRIPTORS: [u16; 4] = [0x00a0, 0x0960, 0x0460, 0x04c0];

/// Largest Block Limits value for MAXIMUM ATOMIC TRANSFER LENGTH (blocks): writes of up to
/// this size are applied under one range lock, so no other write interleaves.
pub(crate) const MAX_ATOMIC_TRANSFER_BLOCKS: u32 = 8192;

/// INQUIRY on an existing logical unit.
pub(crate) fn inquiry(request: &Request<'_>) -> Result<Vec<u8>, crate::dispatch::Failure> {
    let cdb = request.cdb;
    let allocation_len = usize::from(be16(cdb, 3));
    if cdb[1] & 0x02 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(1)).into()); // CMDDT (obsolete)
    }
    let vital_product_data = cdb[1] & 0x01 != 0;
    let page_code = cdb[2];
    if !vital_product_data {
        if page_code != 0 {
            return Err(Sense::invalid_cdb_field(2, None).into());
        }
        let data = standard_data(
            request.core.identity(),
            request.unit.removable(),
            request.membership,
        );
        return Ok(truncate(data, allocation_len));
    }
    let unit = request.unit.as_ref();
    let body = match page_code {
        PAGE_SUPPORTED => PAGES.to_vec(),
        PAGE_UNIT_SERIAL_NUMBER => serial_number(unit).into_bytes(),
        PAGE_DEVICE_IDENTIFICATION => device_identification(
            request.core.identity(),
            unit,
            request.nexus.relative_target_port,
            request.core.port_groups().own_group(),
        ),
        PAGE_EXTENDED_INQUIRY => extended_inquiry(request.membership),
        PAGE_THIRD_PARTY_COPY => third_party_copy(),
        PAGE_BLOCK_LIMITS => block_limits(unit, &request.geometry),
        PAGE_BLOCK_DEVICE_CHARACTERISTICS => block_device_characteristics(),
        PAGE_LOGICAL_BLOCK_PROVISIONING => logical_block_provisioning(unit),
        _ => return Err(Sense::invalid_cdb_field(2, None).into()),
    };
    Ok(truncate(vpd_page(page_code, body), allocation_len))
}

/// INQUIRY addressed to a LUN this initiator cannot see: peripheral qualifier 011b.
pub(crate) fn no_unit(cdb: &[u8]) -> Result<Vec<u8>, Sense> {
    if cdb.len() < 6 {
        return Err(Sense::invalid_cdb_field(0, Some(7)));
    }
    let allocation_len = usize::from(be16(cdb, 3));
    let data = if cdb[1] & 0x01 != 0 {
        vec![0x7f, cdb[2], 0, 0]
    } else {
        let mut data = standard_data(&Identity::default(), false, Membership::Standalone);
        data[0] = 0x7f;
        data
    };
    Ok(truncate(data, allocation_len))
}

fn vpd_page(page_code: u8, body: Vec<u8>) -> Vec<u8> {
    let len = u16::try_from(body.len()).expect("VPD pages are small");
    let mut page = vec![0x00, page_code];
    page.extend_from_slice(&len.to_be_bytes());
    page.extend_from_slice(&body);
    page
}

fn ascii_field(text: &str, len: usize) -> Vec<u8> {
    let mut field: Vec<u8> = text
        .bytes()
        .map(|b| if (0x20..0x7f).contains(&b) { b } else { b'_' })
        .take(len)
        .collect();
    field.resize(len, b' ');
    field
}

fn standard_data(identity: &Identity, removable: bool, membership: Membership) -> Vec<u8> {
    let mut data = vec![0u8; 96];
    data[0] = 0x00; // connected, direct access block device
    if removable {
        data[1] |= 0x80; // RMB
    }
    if membership != Membership::Standalone {
        data[1] |= 0x40; // LU_CONG
    }
    data[2] = 0x06; // SPC-4
    data[3] = 0x12; // HISUP, RESPONSE DATA FORMAT 2
    data[4] = (data.len() - 5) as u8;
    data[5] = 0x08 | 0x10; // 3PC: EXTENDED COPY; TPGS 01b: implicit ALUA
    data[6] = 0x10; // MULTIP
    data[7] = 0x02; // CMDQUE
    data[8..16].copy_from_slice(&ascii_field(&identity.vendor, 8));
    data[16..32].copy_from_slice(&ascii_field(&identity.product, 16));
    data[32..36].copy_from_slice(&ascii_field(&identity.revision, 4));
    for (i, descriptor) in VERSION_DESCRIPTORS.iter().enumerate() {
        data[58 + 2 * i..60 + 2 * i].copy_from_slice(&descriptor.to_be_bytes());
    }
    data
}

/// The unit serial number: the unit id in hex (32 ASCII characters).
pub(crate) fn serial_number(unit: &dyn LogicalUnit) -> String {
    unit.unit_id().iter().map(|b| format!("{b:02x}")).collect()
}

/// The NAA designator (type 3) of `unit`: the unit id with NAA 6 in its top nibble.
pub(crate) fn naa_designator(unit: &dyn LogicalUnit) -> [u8; 16] {
    let mut naa = unit.unit_id();
    naa[0] = 0x60 | (naa[0] & 0x0f);
    naa
}

fn designator(code_set: u8, association_and_type: u8, value: &[u8]) -> Vec<u8> {
    let len = u8::try_from(value.len()).expect("designators are short");
    let mut bytes = vec![code_set, association_and_type, 0, len];
    bytes.extend_from_slice(value);
    bytes
}

fn device_identification(
    identity: &Identity,
    unit: &dyn LogicalUnit,
    relative_target_port: u16,
    target_port_group: u16,
) -> Vec<u8> {
    const BINARY: u8 = 0x01;
    const ASCII: u8 = 0x02;
    const ISCSI_PROTOCOL: u8 = 0x50;
    let mut body = Vec::new();
    // NAA (type 3), associated with the logical unit.
    body.extend(designator(BINARY, 0x03, &naa_designator(unit)));
    // T10 vendor ID (type 1): vendor, then the serial number.
    let mut t10 = ascii_field(&identity.vendor, 8);
    t10.extend_from_slice(serial_number(unit).as_bytes());
    body.extend(designator(ASCII, 0x01, &t10));
    // Vendor specific (type 0): the volume name, for humans.
    let mut name = ascii_field(&unit.name(), unit.name().len().clamp(1, 64));
    while !name.len().is_multiple_of(4) {
        name.push(b' ');
    }
    body.extend(designator(ASCII, 0x00, &name));
    // Relative target port (type 4), associated with the target port; PIV with iSCSI.
    let mut port = vec![0u8, 0];
    port.extend_from_slice(&relative_target_port.to_be_bytes());
    body.extend(designator(
        ISCSI_PROTOCOL | BINARY,
        0x80 | 0x10 | 0x04,
        &port,
    ));
    // Target port group (type 5), associated with the target port (ALUA).
    let mut group = vec![0u8, 0];
    group.extend_from_slice(&target_port_group.to_be_bytes());
    body.extend(designator(BINARY, 0x10 | 0x05, &group));
    body
}

fn extended_inquiry(membership: Membership) -> Vec<u8> {
    let mut body = vec![0u8; 0x3c];
    body[1] = 0x07; // HEADSUP, ORDSUP, SIMPSUP (byte 5 of the page)
    if membership == Membership::Administrative {
        body[4] = 0x20; // LU_COLL_TYPE 001b: conglomerate (byte 8 of the page)
    }
    body
}

/// Third-party copy page: what EXTENDED COPY (LID1) accepts (SPC-5 7.7.18).
fn third_party_copy() -> Vec<u8> {
    fn descriptor(kind: u16, mut data: Vec<u8>) -> Vec<u8> {
        while !data.len().is_multiple_of(4) {
            data.push(0);
        }
        let mut bytes = kind.to_be_bytes().to_vec();
        bytes.extend_from_slice(&(data.len() as u16).to_be_bytes());
        bytes.extend_from_slice(&data);
        bytes
    }
    let mut body = Vec::new();
    // Supported commands: EXTENDED COPY(LID1); RECEIVE COPY RESULTS 00h, 03h, 04h.
    let commands = [0x83, 1, 0x00, 0x84, 3, 0x00, 0x03, 0x04];
    let mut supported = vec![commands.len() as u8];
    supported.extend_from_slice(&commands);
    body.extend(descriptor(0x0001, supported));
    // Parameter data: descriptor counts and list length.
    let mut parameters = vec![0u8; 28];
    parameters[4..6].copy_from_slice(&xcopy::MAX_TARGET_DESCRIPTORS.to_be_bytes());
    parameters[6..8].copy_from_slice(&xcopy::MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    parameters[8..12].copy_from_slice(&xcopy::MAX_DESCRIPTOR_LIST_LEN_BYTES.to_be_bytes());
    body.extend(descriptor(0x0008, parameters));
    // Supported descriptors: block→block segments and identification target descriptors.
    body.extend(descriptor(0x0004, vec![2, 0x02, 0xe4]));
    // General copy operations: one copy at a time per list id, segment length limit.
    let mut general = vec![0u8; 32];
    general[0..4].copy_from_slice(&1024u32.to_be_bytes());
    general[4..8].copy_from_slice(&255u32.to_be_bytes());
    general[8..12].copy_from_slice(&xcopy::MAX_SEGMENT_LEN_BYTES.to_be_bytes());
    body.extend(descriptor(0x8001, general));
    body
}

fn block_limits(unit: &dyn LogicalUnit, geometry: &Geometry) -> Vec<u8> {
    let thin = unit.provisioning().is_thin();
    let physical_blocks = 1u32 << geometry.physical_exponent;
    let max_transfer_blocks = u32::try_from(geometry.max_transfer_blocks()).unwrap_or(u32::MAX);
    let mut body = vec![0u8; 0x3c];
    // Offsets below are page offsets minus the 4-byte header.
    body[1] = MAX_COMPARE_AND_WRITE_BLOCKS;
    body[2..4].copy_from_slice(&(physical_blocks as u16).to_be_bytes());
    body[4..8].copy_from_slice(&max_transfer_blocks.to_be_bytes());
    body[8..12].copy_from_slice(&((1u32 << 20) / geometry.block_size_bytes).to_be_bytes());
    body[12..16].copy_from_slice(&max_transfer_blocks.to_be_bytes());
    if thin {
        body[16..20].copy_from_slice(&u32::MAX.to_be_bytes()); // MAXIMUM UNMAP LBA COUNT: no limit
        body[20..24].copy_from_slice(&MAX_UNMAP_DESCRIPTORS.to_be_bytes());
        let granularity_blocks =
            unmap_granularity_blocks(geometry.block_size_bytes).max(physical_blocks);
        body[24..28].copy_from_slice(&granularity_blocks.to_be_bytes());
        body[28..32].copy_from_slice(&0x8000_0000u32.to_be_bytes()); // UGAVALID, alignment 0
    }
    body[32..40].copy_from_slice(&MAX_WRITE_SAME_BLOCKS.to_be_bytes());
    let atomic_blocks = MAX_ATOMIC_TRANSFER_BLOCKS.min(max_transfer_blocks);
    body[40..44].copy_from_slice(&atomic_blocks.to_be_bytes());
    body
}

fn block_device_characteristics() -> Vec<u8> {
    let mut body = vec![0u8; 0x3c];
    body[0..2].copy_from_slice(&1u16.to_be_bytes()); // MEDIUM ROTATION RATE: non-rotating
    body[3] = 0x40; // WABEREQ 01b: reads after BLOCK ERASE return GOOD (zeros)
    body
}

fn logical_block_provisioning(unit: &dyn LogicalUnit) -> Vec<u8> {
    let mut body = vec![0u8; 4];
    if unit.provisioning().is_thin() {
        body[1] = 0x80 | 0x40 | 0x20 | 0x04; // LBPU, LBPWS, LBPWS10, LBPRZ 001b
        body[2] = 0x02; // PROVISIONING TYPE: thin
    } else {
        body[1] = 0x04; // LBPRZ: zeroed blocks read zeros; fully provisioned
        body[2] = 0x00;
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryBackend, MemoryUnitConfig};

    #[test]
    fn standard_data_is_ascii_padded_and_claims_spc4_and_3pc() {
        let data = standard_data(&Identity::default(), false, Membership::Standalone);
        assert_eq!(data[1], 0x00);
        assert_eq!(data[2], 0x06);
        assert_eq!(data[3] & 0x0f, 2);
        assert_eq!(data[5] & 0x08, 0x08);
        assert_eq!(usize::from(data[4]), data.len() - 5);
        assert!(data[8..36].iter().all(|&b| (0x20..0x7f).contains(&b)));
        assert_eq!(&data[8..16], b"LACUNA  ");
        assert_eq!(be16(&data, 64), 0x04c0);
    }

    #[test]
    fn naa_designator_has_naa_6_and_page_83_lists_it_first() {
        let backend = MemoryBackend::new();
        let unit = backend.create_unit(MemoryUnitConfig::thin("vol", 1 << 20));
        let body = device_identification(&Identity::default(), unit.as_ref(), 1, 1);
        assert_eq!(&body[0..4], &[0x01, 0x03, 0x00, 16]);
        assert_eq!(body[4] >> 4, 6);
        assert_eq!(&body[4..20], &naa_designator(unit.as_ref()));
    }

    #[test]
    fn conglomerate_members_set_lu_cong_and_only_the_administrative_lu_its_type() {
        for (membership, lu_cong, collection) in [
            (Membership::Standalone, 0x00, 0x00),
            (Membership::Administrative, 0x40, 0x20),
            (Membership::Subsidiary, 0x40, 0x00),
        ] {
            let data = standard_data(&Identity::default(), true, membership);
            assert_eq!(data[1], 0x80 | lu_cong, "{membership:?}");
            let page = vpd_page(PAGE_EXTENDED_INQUIRY, extended_inquiry(membership));
            assert_eq!(page[8] & 0xe0, collection, "{membership:?}");
            assert_eq!(page[5], 0x07);
        }
        assert!(PAGES.contains(&PAGE_EXTENDED_INQUIRY));
    }

    #[test]
    fn pages_are_listed_in_ascending_order() {
        assert!(PAGES.windows(2).all(|w| w[0] < w[1]));
    }
}
