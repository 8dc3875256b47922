//! A small in-memory array behind the real SCSI device server, and the check every SCSI
//! outcome must pass.
//!
//! Units are small (at most 256 KiB) so that commands covering a whole unit (WRITE SAME,
//! SANITIZE OVERWRITE at its paced rate, EXTENDED COPY) stay fast under fuzzing.

use std::sync::Arc;

use lacuna_scsi::lun::Lun;
use lacuna_scsi::memory::{MemoryBackend, MemoryUnit, MemoryUnitConfig};
use lacuna_scsi::target::{
    Command, CommandOutcome, ItNexus, ScsiStatus, ScsiTarget, TaskAttribute,
};
use lacuna_scsi::ScsiCore;

/// Data-In the fuzzer's initiator is prepared to take, as a transport would announce it.
pub const EXPECTED_DATA_IN_BYTES: u32 = 1 << 20;

pub struct Array {
    pub backend: Arc<MemoryBackend>,
    pub core: ScsiCore,
    pub units: Vec<Arc<MemoryUnit>>,
    /// Two initiators: "iqn.a" sees LUNs 0, 1 and 2 and the protocol endpoint
    /// at 3; "iqn.b" sees LUN 0 only.
    pub nexuses: [ItNexus; 2],
}

fn nexus(name: &str, isid: u64) -> ItNexus {
    ItNexus {
        initiator_name: name.to_string(),
        initiator_port: format!("{name},i,0x{isid:012x}"),
        relative_target_port: 1,
    }
}

impl Array {
    /// LUN 0: thin, 512-byte blocks on 4 KiB grains; LUN 1: thick 4 KiB blocks; LUN 2:
    /// read-only and removable. Both nexuses exist, with their power-on unit attentions.
    pub fn new() -> Self {
        let backend = Arc::new(MemoryBackend::new());
        let thin = backend.create_unit(MemoryUnitConfig::thin("thin", 256 << 10));
        let thick = backend.create_unit(MemoryUnitConfig {
            block_size_bytes: 4096,
            provisioning: lacuna_scsi::backend::Provisioning::ZeroedThick,
            ..MemoryUnitConfig::thin("thick", 128 << 10)
        });
        let read_only = backend.create_unit(MemoryUnitConfig {
            read_only: true,
            removable: true,
            ..MemoryUnitConfig::thin("read-only", 64 << 10)
        });
        backend.map(None, 0, &thin);
        backend.map(Some("iqn.a"), 1, &thick);
        backend.map(Some("iqn.a"), 2, &read_only);
        // A protocol endpoint at LUN 3 with the thin unit beneath it at id 7
        // (a vVol bound to "iqn.a"), reached by two-level LUNs (`execute_at`).
        backend.map_administrative(Some("iqn.a"), 3, "pe");
        let id = lacuna_scsi::lun::SecondLevelId::new(7).expect("a small id");
        backend.bind(Some("iqn.a"), 3, id, &thin);
        let core = ScsiCore::new(Arc::clone(&backend) as Arc<dyn lacuna_scsi::backend::Backend>);
        let nexuses = [nexus("iqn.a", 1), nexus("iqn.b", 2)];
        for n in &nexuses {
            core.nexus_created(n);
        }
        Self {
            backend,
            core,
            units: vec![thin, thick, read_only],
            nexuses,
        }
    }

    /// Runs one command and checks its outcome.
    pub fn execute(&self, nexus: usize, lun: u64, cdb: &[u8], data_out: &[u8]) -> CommandOutcome {
        self.execute_at(nexus, Lun::single_level(lun), cdb, data_out)
    }

    /// [`Array::execute`] at any 8-byte LUN field.
    pub fn execute_at(
        &self,
        nexus: usize,
        lun: Lun,
        cdb: &[u8],
        data_out: &[u8],
    ) -> CommandOutcome {
        let nexus = &self.nexuses[nexus % self.nexuses.len()];
        // Must not panic whatever the CDB; the answer is not checked (it is a hint).
        let _ = self.core.data_out_bytes(nexus, lun, cdb);
        let outcome = self.core.execute(
            nexus,
            Command {
                lun,
                cdb,
                data_out: &bytes::Bytes::copy_from_slice(data_out),
                expected_data_in_bytes: EXPECTED_DATA_IN_BYTES,
                task_tag: 1,
                attribute: TaskAttribute::Simple,
            },
        );
        check_outcome(cdb, &outcome);
        outcome
    }

    /// Clears the unit attentions pending for `nexus` on `lun` (bounded: there are only a
    /// few kinds of attention).
    pub fn drain_attentions(&self, nexus: usize, lun: u64) {
        for _ in 0..16 {
            let outcome = self.execute(nexus, lun, &[0; 6], &[]);
            if outcome.status != ScsiStatus::CheckCondition || sense_key(&outcome.sense) != 0x6 {
                return;
            }
        }
        panic!("unit attentions never drained");
    }

    /// The device server still answers after whatever the fuzzer sent: INQUIRY is never
    /// refused for a unit attention or a reservation (SPC-5 5.14, 5.13).
    pub fn check_still_serving(&self) {
        for nexus in 0..self.nexuses.len() {
            let outcome = self.execute(nexus, 0, &[0x12, 0, 0, 0, 36, 0], &[]);
            assert_eq!(
                outcome.status,
                ScsiStatus::Good,
                "INQUIRY after the run: {outcome:?}"
            );
            assert_eq!(&outcome.data_in[8..14], b"LACUNA");
        }
    }
}

impl Default for Array {
    fn default() -> Self {
        Self::new()
    }
}

/// Sense key of fixed (70h/71h) or descriptor (72h/73h) sense data.
pub fn sense_key(sense: &[u8]) -> u8 {
    match sense.first().map(|b| b & 0x7f) {
        Some(0x70 | 0x71) => sense[2] & 0x0f,
        Some(0x72 | 0x73) => sense[1] & 0x0f,
        _ => panic!("not sense data: {sense:02x?}"),
    }
}

/// What SAM and SPC require of every outcome: a status the device server may return, sense
/// data exactly with CHECK CONDITION and well formed, no Data-In with a failure, and
/// Data-In within the transfer limit.
pub fn check_outcome(cdb: &[u8], outcome: &CommandOutcome) {
    let context = || format!("cdb {cdb:02x?} → {outcome:02x?}");
    match outcome.status {
        ScsiStatus::Good => assert!(outcome.sense.is_empty(), "{}", context()),
        ScsiStatus::CheckCondition => {
            assert!(outcome.data_in.is_empty(), "{}", context());
            check_sense(&outcome.sense, &context);
        }
        ScsiStatus::ReservationConflict | ScsiStatus::Busy | ScsiStatus::TaskAborted => {
            assert!(outcome.sense.is_empty(), "{}", context());
            assert!(outcome.data_in.is_empty(), "{}", context());
        }
        ScsiStatus::ConditionMet | ScsiStatus::TaskSetFull | ScsiStatus::AcaActive => {
            panic!("status the device server never returns: {}", context())
        }
    }
    assert!(
        outcome.data_in.len() <= EXPECTED_DATA_IN_BYTES as usize
            && outcome.data_in.len() <= lacuna_scsi::MAX_TRANSFER_BYTES as usize,
        "{}",
        context()
    );
}

fn check_sense(sense: &[u8], context: &dyn Fn() -> String) {
    assert!(sense.len() >= 8, "sense too short: {}", context());
    assert_eq!(
        sense.len(),
        8 + usize::from(sense[7]),
        "ADDITIONAL SENSE LENGTH: {}",
        context()
    );
    let key = match sense[0] & 0x7f {
        0x70 | 0x71 => {
            assert!(
                sense.len() >= 18,
                "fixed sense shorter than 18 bytes: {}",
                context()
            );
            sense[2] & 0x0f
        }
        0x72 | 0x73 => {
            // Descriptors must tile the rest exactly.
            let mut at = 8;
            while at < sense.len() {
                assert!(at + 2 <= sense.len(), "truncated descriptor: {}", context());
                at += 2 + usize::from(sense[at + 1]);
            }
            assert_eq!(at, sense.len(), "descriptor overruns sense: {}", context());
            sense[1] & 0x0f
        }
        _ => panic!("unknown sense response code: {}", context()),
    };
    // The keys the device server defines (lacuna_scsi::sense::SenseKey) other than NO
    // SENSE and RECOVERED ERROR, which never come with CHECK CONDITION.
    assert!(
        matches!(key, 0x2..=0x7 | 0xa | 0xb | 0xe),
        "sense key {key:#x}: {}",
        context()
    );
}
