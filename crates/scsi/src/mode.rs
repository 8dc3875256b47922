//! MODE SENSE and MODE SELECT (SPC-5 6.14, 6.15, 7.5) with the caching (08h), control
//! (0Ah) and informational exceptions control (1Ch) pages.
//!
//! Why a field model rather than stored page bytes: the pages are generated from the few
//! settings we honour (WCE, D_SENSE, SWP), so current, changeable and default values cannot
//! drift apart, and MODE SELECT validation is a byte-wise comparison against the current
//! page under the changeable mask: any bit an initiator may not change must come back as
//! we reported it. Saving is not supported (no saved page control, SP refused).

use crate::block::{be16, truncate};
use crate::commands::opcode as op;
use crate::dispatch::{CommandResult, Failure, Request};
use crate::sense::{AdditionalSense, Sense};

const PAGE_CACHING: u8 = 0x08;
const PAGE_CONTROL: u8 = 0x0a;
const PAGE_INFORMATIONAL_EXCEPTIONS: u8 = 0x1c;
const PAGE_ALL: u8 = 0x3f;

/// The page codes we implement, in the order MODE SENSE returns them.
const PAGES: [u8; 3] = [PAGE_CACHING, PAGE_CONTROL, PAGE_INFORMATIONAL_EXCEPTIONS];

/// Largest mode parameter list accepted by MODE SELECT(10) (our pages total far less).
const MAX_MODE_SELECT_LEN_BYTES: usize = 4096;

/// Mode settings of one logical unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ModeState {
    /// Write cache enabled: writes may complete before they are durable (flush/FUA).
    write_cache: bool,
    /// D_SENSE: descriptor-format sense data.
    descriptor_sense: bool,
    /// SWP: software write protect.
    software_write_protect: bool,
}

impl Default for ModeState {
    fn default() -> Self {
        Self {
            write_cache: true,
            descriptor_sense: false,
            software_write_protect: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageControl {
    Current,
    Changeable,
    Default,
}

impl ModeState {
    pub(crate) fn descriptor_sense(&self) -> bool {
        self.descriptor_sense
    }

    pub(crate) fn software_write_protect(&self) -> bool {
        self.software_write_protect
    }

    pub(crate) fn write_cache_enabled(&self) -> bool {
        self.write_cache
    }

    fn page(&self, page_code: u8, control: PageControl) -> Vec<u8> {
        let values = match control {
            PageControl::Current => *self,
            PageControl::Default => ModeState::default(),
            PageControl::Changeable => ModeState {
                write_cache: true,
                descriptor_sense: true,
                software_write_protect: true,
            },
        };
        let changeable = control == PageControl::Changeable;
        match page_code {
            PAGE_CACHING => {
                let mut page = vec![0u8; 20];
                page[0] = PAGE_CACHING;
                page[1] = 18;
                if values.write_cache {
                    page[2] |= 0x04; // WCE
                }
                page
            }
            PAGE_CONTROL => {
                let mut page = vec![0u8; 12];
                page[0] = PAGE_CONTROL;
                page[1] = 10;
                if values.descriptor_sense {
                    page[2] |= 0x04; // D_SENSE
                }
                if !changeable {
                    page[3] = 0x10; // QUEUE ALGORITHM MODIFIER 1: unrestricted reordering
                    page[8..10].copy_from_slice(&0xffffu16.to_be_bytes()); // BUSY TIMEOUT: unlimited
                }
                if values.software_write_protect {
                    page[4] |= 0x08; // SWP
                }
                page
            }
            PAGE_INFORMATIONAL_EXCEPTIONS => {
                let mut page = vec![0u8; 12];
                page[0] = PAGE_INFORMATIONAL_EXCEPTIONS;
                page[1] = 10;
                if !changeable {
                    page[2] = 0x08; // DEXCPT: no informational exception reporting
                }
                page
            }
            _ => unreachable!("page {page_code:#x} is not implemented"),
        }
    }
}

/// MODE SENSE(6) and MODE SENSE(10).
pub(crate) fn mode_sense(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let ten = cdb[0] == op::MODE_SENSE_10;
    let disable_block_descriptors = cdb[1] & 0x08 != 0;
    let long_lba = ten && cdb[1] & 0x10 != 0;
    let page_control = match cdb[2] >> 6 {
        0 => PageControl::Current,
        1 => PageControl::Changeable,
        2 => PageControl::Default,
        _ => {
            let mut sense =
                Sense::illegal_request(AdditionalSense::SAVING_PARAMETERS_NOT_SUPPORTED);
            sense.field_pointer = Sense::invalid_cdb_field(2, Some(7)).field_pointer;
            return Err(sense.into());
        }
    };
    let page_code = cdb[2] & 0x3f;
    let subpage_code = cdb[3];
    let pages: Vec<u8> = match (page_code, subpage_code) {
        (PAGE_ALL, 0x00 | 0xff) => PAGES.to_vec(),
        (PAGE_ALL, _) => return Err(Sense::invalid_cdb_field(3, Some(7)).into()),
        (code, 0x00) if PAGES.contains(&code) => vec![code],
        (code, _) if PAGES.contains(&code) => {
            return Err(Sense::invalid_cdb_field(3, Some(7)).into())
        }
        _ => return Err(Sense::invalid_cdb_field(2, Some(5)).into()),
    };
    let mode = request.state.lock().mode;
    let mut body = Vec::new();
    for code in pages {
        body.extend_from_slice(&mode.page(code, page_control));
    }

    let mut device_specific = 0x10; // DPOFUA
    if request.unit.read_only() || mode.software_write_protect {
        device_specific |= 0x80; // WP
    }
    let block_descriptor = if disable_block_descriptors {
        Vec::new()
    } else {
        block_descriptor(request, long_lba)
    };
    let data = if ten {
        let mut header = vec![0u8; 8];
        let mode_data_len = 6 + block_descriptor.len() + body.len();
        header[0..2].copy_from_slice(&(mode_data_len as u16).to_be_bytes());
        header[3] = device_specific;
        if long_lba && !block_descriptor.is_empty() {
            header[4] = 0x01; // LONGLBA
        }
        header[6..8].copy_from_slice(&(block_descriptor.len() as u16).to_be_bytes());
        [header, block_descriptor, body].concat()
    } else {
        let mode_data_len = 3 + block_descriptor.len() + body.len();
        assert!(mode_data_len <= 255);
        let header = vec![
            mode_data_len as u8,
            0,
            device_specific,
            block_descriptor.len() as u8,
        ];
        [header, block_descriptor, body].concat()
    };
    let allocation_len = if ten {
        usize::from(be16(cdb, 7))
    } else {
        usize::from(cdb[4])
    };
    Ok(truncate(data, allocation_len))
}

fn block_descriptor(request: &Request<'_>, long_lba: bool) -> Vec<u8> {
    let geometry = request.geometry;
    if long_lba {
        let mut descriptor = vec![0u8; 16];
        descriptor[0..8].copy_from_slice(&geometry.block_count.to_be_bytes());
        descriptor[12..16].copy_from_slice(&geometry.block_size_bytes.to_be_bytes());
        descriptor
    } else {
        let mut descriptor = vec![0u8; 8];
        let blocks = u32::try_from(geometry.block_count).unwrap_or(u32::MAX);
        descriptor[0..4].copy_from_slice(&blocks.to_be_bytes());
        descriptor[5..8].copy_from_slice(&geometry.block_size_bytes.to_be_bytes()[1..4]);
        descriptor
    }
}

/// MODE SELECT(6) and MODE SELECT(10).
pub(crate) fn mode_select(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let ten = cdb[0] == op::MODE_SELECT_10;
    if cdb[1] & 0x01 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(0)).into()); // SP: saving not supported
    }
    let parameter_list_len = if ten {
        usize::from(be16(cdb, 7))
    } else {
        usize::from(cdb[4])
    };
    if parameter_list_len == 0 {
        return Ok(Vec::new());
    }
    if parameter_list_len > MAX_MODE_SELECT_LEN_BYTES {
        return Err(Sense::invalid_cdb_field(7, None).into());
    }
    if request.data_out.len() < parameter_list_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    let list = &request.data_out[..parameter_list_len];
    let mut shared = request.state.lock();
    let current = shared.mode;
    let updated = parse_mode_parameters(list, ten, current, request)?;
    if updated != current {
        shared.mode = updated;
        drop(shared);
        let unit_id = request.unit.unit_id();
        let issuer = request.nexus;
        request.core.for_each_nexus(|nexus, state| {
            if nexus != issuer {
                state.raise(&unit_id, AdditionalSense::MODE_PARAMETERS_CHANGED);
            }
        });
    }
    Ok(Vec::new())
}

fn parse_mode_parameters(
    list: &[u8],
    ten: bool,
    current: ModeState,
    request: &Request<'_>,
) -> Result<ModeState, Failure> {
    let header_len = if ten { 8 } else { 4 };
    if list.len() < header_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    let block_descriptor_len = if ten {
        usize::from(be16(list, 6))
    } else {
        usize::from(list[3])
    };
    let long_lba = ten && list[4] & 0x01 != 0;
    let expected_descriptor_len = if long_lba { 16 } else { 8 };
    if block_descriptor_len != 0 && block_descriptor_len != expected_descriptor_len {
        let at = if ten { 6 } else { 3 };
        return Err(Sense::invalid_parameter_field(at, None).into());
    }
    if list.len() < header_len + block_descriptor_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    if block_descriptor_len != 0 {
        let descriptor = &list[header_len..header_len + block_descriptor_len];
        let (length_at, length) = if long_lba {
            (
                12,
                u32::from_be_bytes([
                    descriptor[12],
                    descriptor[13],
                    descriptor[14],
                    descriptor[15],
                ]),
            )
        } else {
            (
                5,
                u32::from_be_bytes([0, descriptor[5], descriptor[6], descriptor[7]]),
            )
        };
        if length != request.geometry.block_size_bytes {
            return Err(
                Sense::invalid_parameter_field((header_len + length_at) as u16, None).into(),
            );
        }
    }

    let mut updated = current;
    let mut at = header_len + block_descriptor_len;
    while at < list.len() {
        if list.len() - at < 2 {
            return Err(Sense::parameter_list_length_error().into());
        }
        let page_code = list[at] & 0x3f;
        if list[at] & 0x40 != 0 || !PAGES.contains(&page_code) {
            // Subpage format, or a page we do not implement.
            return Err(Sense::invalid_parameter_field(at as u16, Some(5)).into());
        }
        let page_len = usize::from(list[at + 1]) + 2;
        if list.len() - at < page_len {
            return Err(Sense::parameter_list_length_error().into());
        }
        let reference = current.page(page_code, PageControl::Current);
        if page_len != reference.len() {
            return Err(Sense::invalid_parameter_field(at as u16 + 1, None).into());
        }
        let changeable = current.page(page_code, PageControl::Changeable);
        let page = &list[at..at + page_len];
        // Byte 0 holds PS (reserved for MODE SELECT) and the page code; compare from byte 2.
        for i in 2..page_len {
            let differs = (page[i] ^ reference[i]) & !changeable[i];
            if differs != 0 {
                let bit = 7 - differs.leading_zeros() as u8;
                return Err(Sense::invalid_parameter_field((at + i) as u16, Some(bit)).into());
            }
        }
        match page_code {
            PAGE_CACHING => updated.write_cache = page[2] & 0x04 != 0,
            PAGE_CONTROL => {
                updated.descriptor_sense = page[2] & 0x04 != 0;
                updated.software_write_protect = page[4] & 0x08 != 0;
            }
            _ => {}
        }
        at += page_len;
    }
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changeable_mask_covers_exactly_the_honoured_bits() {
        let state = ModeState::default();
        assert_eq!(state.page(PAGE_CACHING, PageControl::Changeable)[2], 0x04);
        let control = state.page(PAGE_CONTROL, PageControl::Changeable);
        assert_eq!((control[2], control[4]), (0x04, 0x08));
        assert!(state
            .page(PAGE_INFORMATIONAL_EXCEPTIONS, PageControl::Changeable)
            .iter()
            .skip(2)
            .all(|&b| b == 0));
    }

    #[test]
    fn page_lengths_match_their_length_byte() {
        let state = ModeState::default();
        for code in PAGES {
            for control in [
                PageControl::Current,
                PageControl::Changeable,
                PageControl::Default,
            ] {
                let page = state.page(code, control);
                assert_eq!(page.len(), usize::from(page[1]) + 2);
                assert_eq!(page[0], code);
            }
        }
    }
}
