//! The 8-byte LUN of SAM-5 (4.7): what a transport carries, and what the device server
//! reads a logical unit's address from.
//!
//! Why here and only here: a transport passes the LUN field through untouched, and every
//! encoding (REPORT LUNS, the LUN of a test initiator) and decoding (addressing a unit,
//! matching a task to an ABORT TASK SET) goes through [`Lun`], so the accepted forms and
//! the reported ones cannot drift apart.
//!
//! Two shapes are served:
//! - single level: peripheral device addressing (bus 0) below 256, flat space addressing
//!   up to 16383, as every initiator addresses an ordinary LU;
//! - two levels, for the subsidiary LUs of a conglomerate (a vVol bound beneath its
//!   protocol endpoint): bytes 0–1 address the administrative LU as above, bytes 2–7 the
//!   subsidiary in extended flat space (`D2h`, 24 bits, bytes 6–7 zero) or long extended
//!   flat space (`E2h`, 40 bits). ESXi's `vmk_ScsiCmdSetSecondLevelLunId` carries exactly
//!   those six bytes (the SAM-5 address method, length and extended method, then 3 or 5
//!   bytes of id).
//!
//! A subsidiary is reported in the long extended flat form: it holds every id this layer
//! accepts ([`SecondLevelId`] is 40 bits) in one encoding, so one unit has one reported
//! LUN. Anything else (other address methods, a third level, well-known LUs) decodes to
//! nothing, and the device server answers LOGICAL UNIT NOT SUPPORTED.
//!
//! Not confirmed from the standard's text here: sg3_utils, decoding with LU_CONG set (as
//! SAM-5 has it for a conglomerate), reads bytes 0–1 of a conglomerate LUN in a 14-bit
//! "simple" form with address method 00b, and calls flat space (01b) there unexpected.
//! Below 256 the two agree; at 256 and above this layer reports flat space, as it does for
//! the administrative LU's own single-level LUN and as initiators address it, and accepts
//! both forms in front of a second level.

use std::fmt;

/// How many first-level LUN numbers can be addressed (14 bits of flat space).
pub const FIRST_LEVEL_LUNS: u64 = 1 << 14;

/// Second-level ids are below this (40 bits of long extended flat space).
const SECOND_LEVEL_IDS: u64 = 1 << 40;

/// Byte 2 of a two-level LUN: address method 11b, length 01b, extended method 2h.
const EXTENDED_FLAT_SPACE: u8 = 0xd2;
/// Byte 2 of a two-level LUN: address method 11b, length 10b, extended method 2h.
const LONG_EXTENDED_FLAT_SPACE: u8 = 0xe2;
/// Address method 01b (flat space) in the top bits of the first byte.
const FLAT_SPACE: u8 = 0x40;

/// A second-level LUN id: which subsidiary LU beneath an administrative LU (a vVol's
/// "secondary LUN id"). Below 2^40, the long extended flat space.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecondLevelId(u64);

/// A second-level id outside the long extended flat space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("second-level LUN id {0:#x} is not below 2^40")]
pub struct SecondLevelIdOutOfRange(pub u64);

impl SecondLevelId {
    pub fn new(id: u64) -> Result<Self, SecondLevelIdOutOfRange> {
        if id < SECOND_LEVEL_IDS {
            Ok(Self(id))
        } else {
            Err(SecondLevelIdOutOfRange(id))
        }
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for SecondLevelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecondLevelId({:#x})", self.0)
    }
}

impl fmt::Display for SecondLevelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// What a LUN addresses, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LunAddress {
    /// A first-level LUN number (below [`FIRST_LEVEL_LUNS`]).
    SingleLevel(u64),
    /// The subsidiary LU `id` of the conglomerate whose administrative LU is at the
    /// first-level LUN number `administrative`.
    Subsidiary {
        administrative: u64,
        id: SecondLevelId,
    },
}

/// The 8-byte LUN field as it travels (SAM-5 4.7), undecoded.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lun(pub [u8; 8]);

impl Lun {
    /// A single-level LUN: peripheral device addressing below 256, flat space above.
    pub fn single_level(lun: u64) -> Self {
        let mut bytes = [0u8; 8];
        bytes[..2].copy_from_slice(&first_level(lun));
        Self(bytes)
    }

    /// The LUN of subsidiary `id` beneath the administrative LU at `administrative`, with
    /// the second level in long extended flat space.
    pub fn subsidiary(administrative: u64, id: SecondLevelId) -> Self {
        let mut bytes = [0u8; 8];
        bytes[..2].copy_from_slice(&first_level(administrative));
        bytes[2] = LONG_EXTENDED_FLAT_SPACE;
        bytes[3..8].copy_from_slice(&id.0.to_be_bytes()[3..8]);
        Self(bytes)
    }

    /// What this LUN addresses; `None` for any form this layer does not serve.
    pub fn address(self) -> Option<LunAddress> {
        let bytes = self.0;
        if bytes[2..] == [0; 6] {
            return single_level_number(bytes[0], bytes[1]).map(LunAddress::SingleLevel);
        }
        let administrative = administrative_number(bytes[0], bytes[1])?;
        let id = match bytes[2] {
            EXTENDED_FLAT_SPACE if bytes[6..8] == [0, 0] => be(&bytes[3..6]),
            LONG_EXTENDED_FLAT_SPACE => be(&bytes[3..8]),
            _ => return None,
        };
        Some(LunAddress::Subsidiary {
            administrative,
            id: SecondLevelId::new(id).expect("at most 40 bits were read"),
        })
    }

    /// The LUN as this layer reports what it addresses (or itself, when it addresses
    /// nothing): two LUNs naming one unit compare equal once canonical, as a task and
    /// the ABORT TASK SET naming it in another form must.
    pub fn canonical(self) -> Self {
        self.address().map_or(self, Lun::from)
    }
}

impl From<LunAddress> for Lun {
    fn from(address: LunAddress) -> Self {
        match address {
            LunAddress::SingleLevel(lun) => Lun::single_level(lun),
            LunAddress::Subsidiary { administrative, id } => Lun::subsidiary(administrative, id),
        }
    }
}

impl fmt::Debug for Lun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lun({self})")
    }
}

/// Sixteen hex digits, as SAM-5 and sg3_utils write a LUN.
impl fmt::Display for Lun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// Bytes 0–1 of a single-level LUN (or of the first level of a two-level one).
fn first_level(lun: u64) -> [u8; 2] {
    assert!(
        lun < FIRST_LEVEL_LUNS,
        "LUN {lun} is beyond 14-bit flat space"
    );
    if lun < 256 {
        [0, lun as u8]
    } else {
        [FLAT_SPACE | (lun >> 8) as u8, lun as u8]
    }
}

/// Peripheral device addressing on bus 0, or flat space.
fn single_level_number(byte0: u8, byte1: u8) -> Option<u64> {
    match byte0 >> 6 {
        0b00 if byte0 == 0 => Some(u64::from(byte1)),
        0b01 => Some(fourteen_bits(byte0, byte1)),
        _ => None,
    }
}

/// The first level in front of a second one: as a single level, or in the 14-bit form
/// (address method 00b) sg3_utils reads there when LU_CONG is set (see the module docs).
fn administrative_number(byte0: u8, byte1: u8) -> Option<u64> {
    match byte0 >> 6 {
        0b00 | 0b01 => Some(fourteen_bits(byte0, byte1)),
        _ => None,
    }
}

fn fourteen_bits(byte0: u8, byte1: u8) -> u64 {
    (u64::from(byte0 & 0x3f) << 8) | u64::from(byte1)
}

fn be(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0, |value, &b| (value << 8) | u64::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lun(hex: u64) -> Lun {
        Lun(hex.to_be_bytes())
    }

    fn id(value: u64) -> SecondLevelId {
        SecondLevelId::new(value).unwrap()
    }

    #[test]
    fn single_level_uses_peripheral_then_flat_addressing_and_round_trips() {
        assert_eq!(Lun::single_level(5).0, [0, 5, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Lun::single_level(300).0, [0x41, 0x2c, 0, 0, 0, 0, 0, 0]);
        for number in [0, 1, 255, 256, 16383] {
            assert_eq!(
                Lun::single_level(number).address(),
                Some(LunAddress::SingleLevel(number))
            );
        }
        // Flat space below 256 is the same LU as peripheral addressing.
        assert_eq!(
            lun(0x4005_0000_0000_0000).address(),
            Some(LunAddress::SingleLevel(5))
        );
    }

    #[test]
    fn a_subsidiary_is_reported_in_long_extended_flat_space() {
        assert_eq!(Lun::subsidiary(1, id(0xa6)), lun(0x0001_e200_0000_00a6));
        assert_eq!(
            Lun::subsidiary(300, id((1 << 40) - 1)),
            lun(0x412c_e2ff_ffff_ffff)
        );
        assert_eq!(Lun::subsidiary(1, id(0xa6)).to_string(), "0001e200000000a6");
    }

    #[test]
    fn both_second_level_forms_decode_to_the_same_subsidiary() {
        let expected = Some(LunAddress::Subsidiary {
            administrative: 1,
            id: id(0xa6),
        });
        assert_eq!(lun(0x0001_e200_0000_00a6).address(), expected);
        assert_eq!(lun(0x0001_d200_00a6_0000).address(), expected);
        // The 14-bit first level sg3_utils reads with LU_CONG set, and flat space.
        let at_300 = Some(LunAddress::Subsidiary {
            administrative: 300,
            id: id(7),
        });
        assert_eq!(lun(0x012c_e200_0000_0007).address(), at_300);
        assert_eq!(lun(0x412c_d200_0007_0000).address(), at_300);
        assert_eq!(
            lun(0x0001_d200_00a6_0000).canonical(),
            lun(0x0001_e200_0000_00a6)
        );
    }

    #[test]
    fn other_forms_address_nothing() {
        for raw in [
            0x0001_d200_00a6_0001u64, // a third level after extended flat space
            0x0001_4005_0000_0000,    // flat space at the second level
            0x0001_0005_0000_0000,    // peripheral addressing at the second level
            0x0001_f200_0000_00a6,    // length 11b
            0x0001_e100_0000_00a6,    // extended method 1h (well known)
            0xc101_0000_0000_0000,    // the REPORT LUNS well-known LU
            0x8001_0000_0000_0000,    // logical unit addressing
            0x0101_0000_0000_0000,    // peripheral addressing on bus 1
        ] {
            assert_eq!(lun(raw).address(), None, "{raw:016x}");
            assert_eq!(lun(raw).canonical(), lun(raw));
        }
    }

    #[test]
    fn second_level_ids_are_40_bits() {
        assert_eq!(id((1 << 40) - 1).get(), (1 << 40) - 1);
        assert_eq!(
            SecondLevelId::new(1 << 40),
            Err(SecondLevelIdOutOfRange(1 << 40))
        );
        assert_eq!(id(0xa6).to_string(), "0xa6");
    }

    #[test]
    #[should_panic(expected = "beyond 14-bit flat space")]
    fn a_first_level_beyond_flat_space_is_refused() {
        Lun::single_level(FIRST_LEVEL_LUNS);
    }
}
