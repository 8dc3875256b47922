//! Sense data: what a CHECK CONDITION tells the initiator (SPC-5 4.4).
//!
//! Every failure inside the SCSI layer is a [`Sense`] value built from a named
//! [`AdditionalSense`] code, never raw bytes, so the wire encoding lives in one place and
//! both formats (fixed, 70h; descriptor, 72h — chosen by D_SENSE in the control mode page)
//! encode the same facts: sense key, ASC/ASCQ, the INFORMATION field (the LBA or byte
//! offset a command failed at) and the sense-key-specific field pointer that tells an
//! initiator exactly which CDB or parameter-list byte it got wrong.

/// SPC sense keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SenseKey {
    NoSense = 0x0,
    RecoveredError = 0x1,
    NotReady = 0x2,
    MediumError = 0x3,
    HardwareError = 0x4,
    IllegalRequest = 0x5,
    UnitAttention = 0x6,
    DataProtect = 0x7,
    CopyAborted = 0xa,
    AbortedCommand = 0xb,
    Miscompare = 0xe,
}

/// An additional sense code and qualifier (ASC, ASCQ), named after SPC-5 table F.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AdditionalSense {
    pub asc: u8,
    pub ascq: u8,
}

impl AdditionalSense {
    pub const NO_ADDITIONAL_SENSE: Self = Self::new(0x00, 0x00);
    pub const NOT_READY_CAUSE_NOT_REPORTABLE: Self = Self::new(0x04, 0x00);
    pub const NOT_READY_SANITIZE_IN_PROGRESS: Self = Self::new(0x04, 0x1b);
    pub const WRITE_ERROR: Self = Self::new(0x0c, 0x00);
    pub const UNRECOVERED_READ_ERROR: Self = Self::new(0x11, 0x00);
    pub const MISCOMPARE_DURING_VERIFY: Self = Self::new(0x1d, 0x00);
    pub const PARAMETER_LIST_LENGTH_ERROR: Self = Self::new(0x1a, 0x00);
    pub const INVALID_COMMAND_OPERATION_CODE: Self = Self::new(0x20, 0x00);
    pub const LBA_OUT_OF_RANGE: Self = Self::new(0x21, 0x00);
    pub const INVALID_FIELD_IN_CDB: Self = Self::new(0x24, 0x00);
    pub const LOGICAL_UNIT_NOT_SUPPORTED: Self = Self::new(0x25, 0x00);
    pub const INVALID_FIELD_IN_PARAMETER_LIST: Self = Self::new(0x26, 0x00);
    pub const TOO_MANY_TARGET_DESCRIPTORS: Self = Self::new(0x26, 0x06);
    pub const UNSUPPORTED_TARGET_DESCRIPTOR_TYPE_CODE: Self = Self::new(0x26, 0x07);
    pub const TOO_MANY_SEGMENT_DESCRIPTORS: Self = Self::new(0x26, 0x08);
    pub const UNSUPPORTED_SEGMENT_DESCRIPTOR_TYPE_CODE: Self = Self::new(0x26, 0x09);
    pub const WRITE_PROTECTED: Self = Self::new(0x27, 0x00);
    pub const SOFTWARE_WRITE_PROTECTED: Self = Self::new(0x27, 0x02);
    pub const SPACE_ALLOCATION_FAILED_WRITE_PROTECT: Self = Self::new(0x27, 0x07);
    pub const POWER_ON_RESET_OR_BUS_DEVICE_RESET: Self = Self::new(0x29, 0x00);
    pub const POWER_ON_OCCURRED: Self = Self::new(0x29, 0x01);
    pub const BUS_DEVICE_RESET_FUNCTION_OCCURRED: Self = Self::new(0x29, 0x03);
    pub const I_T_NEXUS_LOSS_OCCURRED: Self = Self::new(0x29, 0x07);
    pub const MODE_PARAMETERS_CHANGED: Self = Self::new(0x2a, 0x01);
    pub const RESERVATIONS_PREEMPTED: Self = Self::new(0x2a, 0x03);
    pub const RESERVATIONS_RELEASED: Self = Self::new(0x2a, 0x04);
    pub const REGISTRATIONS_PREEMPTED: Self = Self::new(0x2a, 0x05);
    pub const CAPACITY_DATA_HAS_CHANGED: Self = Self::new(0x2a, 0x09);
    pub const SAVING_PARAMETERS_NOT_SUPPORTED: Self = Self::new(0x39, 0x00);
    pub const MEDIUM_NOT_PRESENT: Self = Self::new(0x3a, 0x00);
    pub const THIN_PROVISIONING_SOFT_THRESHOLD_REACHED: Self = Self::new(0x38, 0x07);
    pub const REPORTED_LUNS_DATA_HAS_CHANGED: Self = Self::new(0x3f, 0x0e);
    pub const INTERNAL_TARGET_FAILURE: Self = Self::new(0x44, 0x00);
    pub const MEDIUM_REMOVAL_PREVENTED: Self = Self::new(0x53, 0x02);
    pub const UNREACHABLE_COPY_TARGET: Self = Self::new(0x08, 0x04);
    pub const COPY_TARGET_DEVICE_DATA_UNDERRUN: Self = Self::new(0x0d, 0x04);

    pub const fn new(asc: u8, ascq: u8) -> Self {
        Self { asc, ascq }
    }
}

/// Where in the CDB or parameter list the error is (SPC-5 4.4.2.4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldPointer {
    /// True: the byte is in the CDB. False: in the parameter list (Data-Out).
    pub in_cdb: bool,
    pub byte: u16,
    /// The most significant bit of the field, when the error is in a bit field.
    pub bit: Option<u8>,
}

/// A complete sense condition, independent of its wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sense {
    pub key: SenseKey,
    pub code: AdditionalSense,
    /// INFORMATION field: the first failing LBA, or the miscompare offset.
    pub information: Option<u64>,
    pub field_pointer: Option<FieldPointer>,
    /// Progress of a long operation (NOT READY, e.g. SANITIZE IN PROGRESS), in 65536ths.
    pub progress: Option<u16>,
}

/// The two sense data formats (SPC-5 4.4.2, 4.4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SenseFormat {
    Fixed,
    Descriptor,
}

/// Length of fixed-format sense data as we send it (no vendor bytes).
pub const FIXED_SENSE_LEN_BYTES: usize = 18;

impl Sense {
    pub const fn new(key: SenseKey, code: AdditionalSense) -> Self {
        Self {
            key,
            code,
            information: None,
            field_pointer: None,
            progress: None,
        }
    }

    pub const fn illegal_request(code: AdditionalSense) -> Self {
        Self::new(SenseKey::IllegalRequest, code)
    }

    /// INVALID FIELD IN CDB pointing at `byte` (and `bit`, when a bit field is wrong).
    pub const fn invalid_cdb_field(byte: u16, bit: Option<u8>) -> Self {
        let mut sense = Self::illegal_request(AdditionalSense::INVALID_FIELD_IN_CDB);
        sense.field_pointer = Some(FieldPointer {
            in_cdb: true,
            byte,
            bit,
        });
        sense
    }

    /// INVALID FIELD IN PARAMETER LIST pointing at parameter list `byte`.
    pub const fn invalid_parameter_field(byte: u16, bit: Option<u8>) -> Self {
        Self::invalid_parameter(AdditionalSense::INVALID_FIELD_IN_PARAMETER_LIST, byte, bit)
    }

    /// An ILLEGAL REQUEST in the parameter list with a specific code (e.g. the copy-manager
    /// codes 26h/06h..09h) and its field pointer.
    pub const fn invalid_parameter(code: AdditionalSense, byte: u16, bit: Option<u8>) -> Self {
        let mut sense = Self::illegal_request(code);
        sense.field_pointer = Some(FieldPointer {
            in_cdb: false,
            byte,
            bit,
        });
        sense
    }

    pub const fn invalid_opcode() -> Self {
        let mut sense = Self::illegal_request(AdditionalSense::INVALID_COMMAND_OPERATION_CODE);
        sense.field_pointer = Some(FieldPointer {
            in_cdb: true,
            byte: 0,
            bit: Some(7),
        });
        sense
    }

    pub const fn lba_out_of_range() -> Self {
        Self::illegal_request(AdditionalSense::LBA_OUT_OF_RANGE)
    }

    pub const fn parameter_list_length_error() -> Self {
        Self::illegal_request(AdditionalSense::PARAMETER_LIST_LENGTH_ERROR)
    }

    pub const fn unit_attention(code: AdditionalSense) -> Self {
        Self::new(SenseKey::UnitAttention, code)
    }

    pub const fn with_information(mut self, information: u64) -> Self {
        self.information = Some(information);
        self
    }

    /// Encodes the sense data in `format`.
    pub fn encode(&self, format: SenseFormat) -> Vec<u8> {
        match format {
            SenseFormat::Fixed => self.encode_fixed(),
            SenseFormat::Descriptor => self.encode_descriptor(),
        }
    }

    fn sense_key_specific(&self) -> Option<[u8; 3]> {
        let Some(pointer) = self.field_pointer else {
            let progress = self.progress?.to_be_bytes();
            return Some([0x80, progress[0], progress[1]]);
        };
        let mut bytes = [0u8; 3];
        bytes[0] = 0x80; // SKSV
        if pointer.in_cdb {
            bytes[0] |= 0x40; // C/D
        }
        if let Some(bit) = pointer.bit {
            debug_assert!(bit < 8);
            bytes[0] |= 0x08 | (bit & 0x07); // BPV, BIT POINTER
        }
        bytes[1..3].copy_from_slice(&pointer.byte.to_be_bytes());
        Some(bytes)
    }

    fn encode_fixed(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; FIXED_SENSE_LEN_BYTES];
        bytes[0] = 0x70;
        bytes[2] = self.key as u8;
        if let Some(information) = self.information {
            // The fixed format holds 32 bits; a larger value is reported without VALID.
            if let Ok(information) = u32::try_from(information) {
                bytes[0] |= 0x80;
                bytes[3..7].copy_from_slice(&information.to_be_bytes());
            }
        }
        bytes[7] = (FIXED_SENSE_LEN_BYTES - 8) as u8;
        bytes[12] = self.code.asc;
        bytes[13] = self.code.ascq;
        if let Some(specific) = self.sense_key_specific() {
            bytes[15..18].copy_from_slice(&specific);
        }
        bytes
    }

    fn encode_descriptor(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; 8];
        bytes[0] = 0x72;
        bytes[1] = self.key as u8;
        bytes[2] = self.code.asc;
        bytes[3] = self.code.ascq;
        if let Some(information) = self.information {
            bytes.extend_from_slice(&[0x00, 0x0a, 0x80, 0x00]);
            bytes.extend_from_slice(&information.to_be_bytes());
        }
        if let Some(specific) = self.sense_key_specific() {
            bytes.extend_from_slice(&[0x02, 0x06, 0x00, 0x00]);
            bytes.extend_from_slice(&specific);
            bytes.push(0x00);
        }
        let additional_len_bytes = bytes.len() - 8;
        assert!(additional_len_bytes <= 244);
        bytes[7] = additional_len_bytes as u8;
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_format_carries_key_code_and_field_pointer() {
        let bytes = Sense::invalid_cdb_field(2, Some(5)).encode(SenseFormat::Fixed);
        assert_eq!(bytes.len(), 18);
        assert_eq!(bytes[0], 0x70);
        assert_eq!(bytes[2], 0x05);
        assert_eq!(bytes[7], 10);
        assert_eq!((bytes[12], bytes[13]), (0x24, 0x00));
        assert_eq!(bytes[15], 0x80 | 0x40 | 0x08 | 5);
        assert_eq!(u16::from_be_bytes([bytes[16], bytes[17]]), 2);
    }

    #[test]
    fn fixed_format_information_sets_valid() {
        let sense = Sense::new(
            SenseKey::Miscompare,
            AdditionalSense::MISCOMPARE_DURING_VERIFY,
        )
        .with_information(485);
        let bytes = sense.encode(SenseFormat::Fixed);
        assert_eq!(bytes[0], 0xf0);
        assert_eq!(u32::from_be_bytes(bytes[3..7].try_into().unwrap()), 485);
    }

    #[test]
    fn descriptor_format_has_information_and_specific_descriptors() {
        let sense = Sense::invalid_parameter_field(9, None).with_information(1 << 40);
        let bytes = sense.encode(SenseFormat::Descriptor);
        assert_eq!(bytes[0], 0x72);
        assert_eq!(bytes[1], 0x05);
        assert_eq!((bytes[2], bytes[3]), (0x26, 0x00));
        assert_eq!(bytes[7] as usize, bytes.len() - 8);
        assert_eq!(&bytes[8..12], &[0x00, 0x0a, 0x80, 0x00]);
        assert_eq!(
            u64::from_be_bytes(bytes[12..20].try_into().unwrap()),
            1 << 40
        );
        assert_eq!(&bytes[20..22], &[0x02, 0x06]);
        assert_eq!(bytes[24], 0x80);
        assert_eq!(u16::from_be_bytes([bytes[25], bytes[26]]), 9);
    }
}
