//! The boundary a transport calls: one I_T nexus per initiator port, commands with their
//! data already gathered, task management, and the outcome to send back.
//!
//! Why commands arrive with all Data-Out gathered: the transport knows the expected transfer
//! length from its own PDU header (iSCSI's ExpectedDataTransferLength), so it can solicit the
//! data (R2T) before calling in. The SCSI layer then works on whole buffers and never waits
//! on the network, and the transport never parses a CDB. Nor does it decode LUNs: it passes
//! the 8-byte LUN field through as a [`Lun`], and the SCSI layer resolves it (two-level
//! LUNs of conglomerates included) against the nexus's LUN map.

use crate::lun::Lun;

/// An I_T nexus: one initiator port talking to one target port (SAM-5). Unit attentions and
/// persistent-reservation registrations are kept per nexus.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ItNexus {
    /// The initiator's name without port suffix (iSCSI: its IQN). LUN masking is by this name.
    pub initiator_name: String,
    /// The initiator port identifier (iSCSI: `"<iqn>,i,0x<ISID as 12 hex digits>"`). Used as
    /// the TransportID in persistent reservations.
    pub initiator_port: String,
    /// Relative target port identifier (1-based), reported in VPD 83h.
    pub relative_target_port: u16,
}

/// SAM task attribute of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskAttribute {
    Simple,
    Ordered,
    HeadOfQueue,
    Aca,
}

/// One SCSI command as delivered by a transport.
#[derive(Debug)]
pub struct Command<'a> {
    /// The 8-byte LUN field as it arrived.
    pub lun: Lun,
    pub cdb: &'a [u8],
    /// All Data-Out bytes the initiator sent (may be shorter or longer than the CDB implies;
    /// the SCSI layer checks and answers with the right sense). Shared, so that a write
    /// hands the logical unit slices of it rather than copies.
    pub data_out: &'a bytes::Bytes,
    /// Expected Data-In length from the transport header: allocation-length truncation is
    /// the SCSI layer's job, residual accounting is the transport's.
    pub expected_data_in_bytes: u32,
    pub task_tag: u32,
    pub attribute: TaskAttribute,
}

/// SAM status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ScsiStatus {
    Good = 0x00,
    CheckCondition = 0x02,
    ConditionMet = 0x04,
    Busy = 0x08,
    ReservationConflict = 0x18,
    TaskSetFull = 0x28,
    AcaActive = 0x30,
    TaskAborted = 0x40,
}

/// What goes back to the initiator for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    pub status: ScsiStatus,
    /// Data-In bytes, already truncated to the CDB's allocation length.
    pub data_in: Vec<u8>,
    /// Sense data (fixed or descriptor format as the unit is configured); empty unless
    /// status is CHECK CONDITION.
    pub sense: Vec<u8>,
}

/// SAM task management functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskManagementFunction {
    AbortTask { referenced_task_tag: u32 },
    AbortTaskSet,
    ClearTaskSet,
    ClearAca,
    LogicalUnitReset,
    TargetWarmReset,
    TargetColdReset,
}

/// SAM task management service responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskManagementResponse {
    FunctionComplete,
    TaskDoesNotExist,
    LunDoesNotExist,
    FunctionNotSupported,
    FunctionRejected,
}

/// What a transport calls. `execute` blocks (storage I/O): transports call it from a
/// blocking context (e.g. `tokio::task::spawn_blocking`) and may call it concurrently for
/// commands that SAM allows to run concurrently.
pub trait ScsiTarget: Send + Sync {
    /// A new nexus exists (iSCSI: a session completed login). Power-on unit attentions start
    /// here.
    fn nexus_created(&self, nexus: &ItNexus);
    /// The transport is ending the nexus: every command of it still running is
    /// aborted. The transport waits for those commands before `nexus_dropped`,
    /// so one blocked inside the SCSI layer (a SANITIZE without IMMED) must end
    /// on this. Must not block.
    fn nexus_closing(&self, _nexus: &ItNexus) {}
    /// The nexus is gone (logout or connection loss without reinstatement).
    fn nexus_dropped(&self, nexus: &ItNexus);
    fn execute(&self, nexus: &ItNexus, command: Command<'_>) -> CommandOutcome;
    /// `execute` for a transport that runs the command on its own task, where
    /// waiting for a disk would hold up every other command of the connection:
    /// a READ whose data is not all in memory does nothing and gives `None`,
    /// and the transport then runs it with `execute` where it may wait.
    /// Other commands run as with `execute`. `None` is always safe.
    fn execute_from_memory(
        &self,
        _nexus: &ItNexus,
        _command: Command<'_>,
    ) -> Option<CommandOutcome> {
        None
    }
    /// Bytes of Data-Out the CDB asks for (transfer length × block size) when the
    /// command transfers data to the target, so the transport can report write
    /// residuals against its own expected length without parsing CDBs. `None` when
    /// the command sends no data or the LUN is unknown.
    fn data_out_bytes(&self, _nexus: &ItNexus, _lun: Lun, _cdb: &[u8]) -> Option<u64> {
        None
    }
    /// Whether `execute` of this command will take microseconds, not wait on
    /// disks or background work: a transport may then run it on its own task
    /// instead of handing it to a blocking pool (whose round trip would cost
    /// more than the command).
    fn runs_quickly(&self, _nexus: &ItNexus, _lun: Lun, _cdb: &[u8], _data_out: &[u8]) -> bool {
        false
    }
    /// The transport has sent a command's Data-In and gives the buffer back
    /// for a later READ to fill (which overwrites every byte before it is
    /// sent). Optional: dropping the buffer is always correct.
    fn recycle_data_in(&self, _buf: Vec<u8>) {}
    /// Side effects of task management on the SCSI state (unit attentions, reservations).
    /// Aborting commands still queued in the transport is the transport's own job.
    fn task_management(
        &self,
        nexus: &ItNexus,
        lun: Lun,
        function: TaskManagementFunction,
    ) -> TaskManagementResponse;
}
