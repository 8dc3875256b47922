//! The device server: one [`ScsiCore`] serves every logical unit of the array to every
//! I_T nexus, implementing [`ScsiTarget`].
//!
//! Why one dispatcher: SAM and SPC fix the order in which a command is judged — is the LUN
//! there, is a unit attention pending, is the CDB one we know, does a reservation forbid
//! it, is the medium ready — before any command-specific work. Doing that once, here, keeps
//! every command consistent; the command modules then only validate their own fields and
//! do their work.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{Backend, LogicalUnit, UnitId};
use crate::block::Geometry;
use crate::commands::{self, opcode as op, service_action as sa, CommandSpec};
use crate::data_in::DataInBuffers;
use crate::lun::Lun;
use crate::lun_map::{Addressed, LunMap, Membership};
use crate::sense::{AdditionalSense, Sense, SenseFormat, SenseKey};
use crate::target::{
    Command, CommandOutcome, ItNexus, ScsiStatus, ScsiTarget, TaskManagementFunction,
    TaskManagementResponse,
};
use crate::unit_attention::{self, NexusState};
use crate::unit_state::UnitState;
use crate::{
    capacity, caw, inquiry, medium, mode, provisioning, report, reservation, rw, sanitize, xcopy,
};

/// Why a command did not complete with GOOD status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    Check(Sense),
    ReservationConflict,
    /// A READ run by `execute_from_memory` found data that is not in memory
    /// and did nothing: the transport runs the command again where it may wait.
    WouldWait,
}

impl From<Sense> for Failure {
    fn from(sense: Sense) -> Self {
        Failure::Check(sense)
    }
}

/// Data-In on success.
pub(crate) type CommandResult = Result<Vec<u8>, Failure>;

/// Strings reported in standard INQUIRY data (ASCII, space padded by the SCSI layer).
#[derive(Clone, Debug)]
pub struct Identity {
    pub vendor: String,
    pub product: String,
    pub revision: String,
}

impl Default for Identity {
    fn default() -> Self {
        Self {
            vendor: "LACUNA".to_string(),
            product: "Lacuna volume".to_string(),
            revision: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Everything a command handler may look at.
pub(crate) struct Request<'a> {
    pub core: &'a ScsiCore,
    pub nexus: &'a ItNexus,
    pub cdb: &'a [u8],
    pub data_out: &'a bytes::Bytes,
    /// Canonical (see [`Lun::canonical`]), so that task management matches it.
    pub lun: Lun,
    pub task_tag: u32,
    pub unit: &'a Arc<dyn LogicalUnit>,
    /// Whether the LUN addressed an LU of a conglomerate (INQUIRY reports it).
    pub membership: Membership,
    pub state: &'a UnitState,
    pub geometry: Geometry,
    pub nexus_state: &'a Mutex<NexusState>,
    /// Reads must not wait for the disk (see `ScsiTarget::execute_from_memory`).
    pub from_memory: bool,
}

impl Request<'_> {
    /// DATA PROTECT when the unit refuses writes (read-only unit, or SWP set).
    pub(crate) fn check_writable(&self) -> Result<(), Sense> {
        if self.unit.read_only() {
            return Err(Sense::new(
                SenseKey::DataProtect,
                AdditionalSense::WRITE_PROTECTED,
            ));
        }
        if self.state.software_write_protected() {
            return Err(Sense::new(
                SenseKey::DataProtect,
                AdditionalSense::SOFTWARE_WRITE_PROTECTED,
            ));
        }
        Ok(())
    }
}

/// Most task-ending task management functions remembered for commands still waiting.
const MAX_ABORTS_REMEMBERED: usize = 256;

/// A task management function that ends tasks; `None` fields match anything.
/// Why a unit as well as a LUN: a LUN names a unit only within one
/// nexus's LUN map, and a LOGICAL UNIT RESET ends the unit's tasks from every
/// nexus, which may know it by other LUNs (or another unit by the same).
#[derive(Clone, Debug)]
struct Abort {
    generation: u64,
    nexus: Option<ItNexus>,
    /// Canonical, as [`Request::lun`] is.
    lun: Option<Lun>,
    unit: Option<UnitId>,
    task_tag: Option<u32>,
}

/// What an [`Abort`] ends.
#[derive(Clone, Copy)]
enum Aborted<'a> {
    /// One task of a nexus.
    Task(&'a ItNexus, Lun, u32),
    /// Every task of a nexus on one LUN.
    TaskSet(&'a ItNexus, Lun),
    /// Every task of a nexus.
    Nexus(&'a ItNexus),
    /// Every task on a unit, from every nexus.
    Unit(UnitId),
}

/// The transport-independent SCSI device server for the whole array.
pub struct ScsiCore {
    backend: Arc<dyn Backend>,
    identity: Identity,
    nexuses: Mutex<HashMap<ItNexus, Arc<Mutex<NexusState>>>>,
    units: Mutex<HashMap<UnitId, Arc<UnitState>>>,
    /// Recent aborts, for commands that wait on long operations (SANITIZE without IMMED).
    aborts: Mutex<(u64, std::collections::VecDeque<Abort>)>,
    /// READ buffers the transport has sent and given back.
    pub(crate) data_in: DataInBuffers,
    /// ALUA: the target port groups and this port's (see [`crate::port_groups`]).
    port_groups: Arc<dyn crate::port_groups::PortGroups>,
}

impl ScsiCore {
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self::with_identity(backend, Identity::default())
    }

    pub fn with_identity(backend: Arc<dyn Backend>, identity: Identity) -> Self {
        Self {
            backend,
            identity,
            nexuses: Mutex::new(HashMap::new()),
            units: Mutex::new(HashMap::new()),
            aborts: Mutex::new((0, std::collections::VecDeque::new())),
            data_in: DataInBuffers::default(),
            port_groups: Arc::new(crate::port_groups::OnePortGroup),
        }
    }

    /// Reports `port_groups` (gateways of a pool) instead of the one group of a single array.
    pub fn with_port_groups(
        mut self,
        port_groups: Arc<dyn crate::port_groups::PortGroups>,
    ) -> Self {
        self.port_groups = port_groups;
        self
    }

    pub(crate) fn port_groups(&self) -> &dyn crate::port_groups::PortGroups {
        self.port_groups.as_ref()
    }

    /// The current abort generation: pass it to [`ScsiCore::aborted_since`] later.
    pub(crate) fn abort_generation(&self) -> u64 {
        self.aborts.lock().0
    }

    /// Whether a task management function since `generation` ended this task.
    pub(crate) fn aborted_since(&self, generation: u64, request: &Request<'_>) -> bool {
        let aborts = self.aborts.lock();
        let unit = request.unit.unit_id();
        aborts.1.iter().any(|abort| {
            abort.generation > generation
                && abort.nexus.as_ref().is_none_or(|n| n == request.nexus)
                && abort.lun.is_none_or(|lun| lun == request.lun)
                && abort.unit.is_none_or(|id| id == unit)
                && abort.task_tag.is_none_or(|tag| tag == request.task_tag)
        })
    }

    fn record_abort(&self, aborted: Aborted<'_>) {
        let (nexus, lun, unit, task_tag) = match aborted {
            Aborted::Task(nexus, lun, tag) => (Some(nexus), Some(lun), None, Some(tag)),
            Aborted::TaskSet(nexus, lun) => (Some(nexus), Some(lun), None, None),
            Aborted::Nexus(nexus) => (Some(nexus), None, None, None),
            Aborted::Unit(unit) => (None, None, Some(unit), None),
        };
        let mut aborts = self.aborts.lock();
        aborts.0 += 1;
        let generation = aborts.0;
        if aborts.1.len() == MAX_ABORTS_REMEMBERED {
            aborts.1.pop_front();
        }
        aborts.1.push_back(Abort {
            generation,
            nexus: nexus.cloned(),
            lun,
            unit,
            task_tag,
        });
    }

    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The I_T nexuses that exist now (one per logged-in iSCSI session), by
    /// initiator port.
    pub fn nexuses(&self) -> Vec<ItNexus> {
        let mut nexuses: Vec<ItNexus> = self.nexuses.lock().keys().cloned().collect();
        nexuses.sort_by(|a, b| a.initiator_port.cmp(&b.initiator_port));
        nexuses
    }

    /// The state of `nexus`, created on first use, with its LUN map brought up to date.
    fn nexus_state(&self, nexus: &ItNexus) -> Arc<Mutex<NexusState>> {
        let generation = self.backend.lun_map_generation();
        let state = {
            let mut nexuses = self.nexuses.lock();
            if let Some(state) = nexuses.get(nexus) {
                Arc::clone(state)
            } else {
                let lun_map = LunMap::new(self.backend.units_for(&nexus.initiator_name));
                let state = Arc::new(Mutex::new(NexusState::new(
                    lun_map,
                    generation,
                    self.backend.soft_threshold_events(),
                )));
                nexuses.insert(nexus.clone(), Arc::clone(&state));
                return state;
            }
        };
        let stale = state.lock().lun_map_generation < generation;
        if stale {
            let lun_map = LunMap::new(self.backend.units_for(&nexus.initiator_name));
            let mut locked = state.lock();
            if locked.lun_map_generation < generation {
                locked.replace_lun_map(lun_map, generation);
            }
        }
        state
    }

    /// The unit `nexus` reaches at `lun`, if any.
    fn mapped_unit(&self, nexus: &ItNexus, lun: Lun) -> Option<Arc<dyn LogicalUnit>> {
        let nexus_state = self.nexus_state(nexus);
        let unit = nexus_state
            .lock()
            .lun_map
            .resolve(lun)
            .map(|addressed| Arc::clone(&addressed.unit));
        unit
    }

    pub(crate) fn unit_state(&self, unit: &dyn LogicalUnit) -> Arc<UnitState> {
        let mut units = self.units.lock();
        Arc::clone(
            units
                .entry(unit.unit_id())
                .or_insert_with(|| Arc::new(UnitState::new())),
        )
    }

    /// Calls `visit` for every known nexus (for unit attentions raised by one nexus on
    /// others). The caller must not hold any nexus lock.
    pub(crate) fn for_each_nexus(&self, mut visit: impl FnMut(&ItNexus, &mut NexusState)) {
        let nexuses: Vec<(ItNexus, Arc<Mutex<NexusState>>)> = self
            .nexuses
            .lock()
            .iter()
            .map(|(n, s)| (n.clone(), Arc::clone(s)))
            .collect();
        for (nexus, state) in nexuses {
            visit(&nexus, &mut state.lock());
        }
    }

    /// The units `initiator_name` may address, subsidiaries of conglomerates included
    /// (EXTENDED COPY target descriptors, target reset).
    pub(crate) fn units_visible_to(&self, nexus: &ItNexus) -> Vec<Arc<dyn LogicalUnit>> {
        let state = self.nexus_state(nexus);
        let units = state.lock().lun_map.units().cloned().collect();
        units
    }

    /// `execute`, or with `from_memory` a READ that gives up (`None`, having
    /// changed nothing) rather than wait for the disk.
    fn execute_with(
        &self,
        nexus: &ItNexus,
        command: Command<'_>,
        from_memory: bool,
    ) -> Option<CommandOutcome> {
        let nexus_state = self.nexus_state(nexus);
        let lun = command.lun.canonical();
        let addressed = nexus_state.lock().lun_map.resolve(lun).cloned();
        let Some(Addressed { unit, membership }) = addressed else {
            if command.cdb.first() == Some(&op::REPORT_LUNS) {
                // REPORT LUNS is answered whichever LUN it is addressed to (SPC-5 6.33).
                let result = commands::identify(command.cdb)
                    .map_err(Failure::from)
                    .and_then(|_| report::report_luns(command.cdb, &nexus_state, lun));
                return Some(outcome(result, SenseFormat::Fixed));
            }
            return Some(self.execute_without_unit(&command));
        };
        let state = self.unit_state(unit.as_ref());
        let request = Request {
            core: self,
            nexus,
            cdb: command.cdb,
            data_out: command.data_out,
            lun,
            task_tag: command.task_tag,
            unit: &unit,
            membership,
            state: &state,
            geometry: Geometry::of(unit.as_ref()),
            nexus_state: &nexus_state,
            from_memory,
        };
        let result = self.execute_on_unit(&request);
        if matches!(result, Err(Failure::WouldWait)) {
            debug_assert!(from_memory);
            return None;
        }
        if let Err(Failure::Check(sense)) = &result {
            tracing::debug!(
                opcode = command.cdb.first().copied().unwrap_or(0),
                key = sense.key as u8,
                asc = sense.code.asc,
                ascq = sense.code.ascq,
                "check condition"
            );
        }
        Some(outcome(result, state.sense_format()))
    }

    fn execute_without_unit(&self, command: &Command<'_>) -> CommandOutcome {
        let not_supported = Sense::illegal_request(AdditionalSense::LOGICAL_UNIT_NOT_SUPPORTED);
        let result = match command.cdb.first().copied() {
            Some(op::INQUIRY) => inquiry::no_unit(command.cdb).map_err(Failure::from),
            Some(op::REQUEST_SENSE) => {
                medium::request_sense_without_unit(command.cdb, not_supported)
            }
            _ => Err(Failure::Check(not_supported)),
        };
        outcome(result, SenseFormat::Fixed)
    }

    fn execute_on_unit(&self, request: &Request<'_>) -> CommandResult {
        let opcode = request.cdb.first().copied().unwrap_or(0xff);
        if !unit_attention::is_exempt(opcode) {
            let mut nexus = request.nexus_state.lock();
            nexus.observe_soft_threshold(self.backend.soft_threshold_events());
            if let Some(code) = nexus.take(request.unit.as_ref()) {
                return Err(Failure::Check(Sense::unit_attention(code)));
            }
        }
        let command = commands::identify(request.cdb)?;
        reservation::check_access(request, command)?;
        if !unit_attention::is_exempt(opcode) && request.state.sanitize_in_progress() {
            return Err(Failure::Check(sanitize::in_progress_sense(request.state)));
        }
        if command.needs_medium && !request.state.medium_present() {
            return Err(Failure::Check(Sense::new(
                SenseKey::NotReady,
                AdditionalSense::MEDIUM_NOT_PRESENT,
            )));
        }
        run(request, command)
    }
}

/// Runs one identified command.
fn run(request: &Request<'_>, command: &CommandSpec) -> CommandResult {
    match (command.opcode, command.service_action) {
        (op::TEST_UNIT_READY, _) => Ok(Vec::new()),
        (op::REQUEST_SENSE, _) => medium::request_sense(request),
        (op::INQUIRY, _) => inquiry::inquiry(request),
        (op::MODE_SENSE_6 | op::MODE_SENSE_10, _) => mode::mode_sense(request),
        (op::MODE_SELECT_6 | op::MODE_SELECT_10, _) => mode::mode_select(request),
        (op::START_STOP_UNIT, _) => medium::start_stop_unit(request),
        (op::PREVENT_ALLOW_MEDIUM_REMOVAL, _) => medium::prevent_allow(request),
        (op::READ_CAPACITY_10, _) => capacity::read_capacity_10(request),
        (op::SERVICE_ACTION_IN_16, Some(sa::READ_CAPACITY_16)) => {
            capacity::read_capacity_16(request)
        }
        (op::SERVICE_ACTION_IN_16, Some(sa::GET_LBA_STATUS)) => {
            provisioning::get_lba_status(request)
        }
        (op::READ_6 | op::READ_10 | op::READ_12 | op::READ_16, _) => rw::read(request),
        (op::WRITE_6 | op::WRITE_10 | op::WRITE_12 | op::WRITE_16 | op::WRITE_ATOMIC_16, _) => {
            rw::write(request)
        }
        (op::WRITE_AND_VERIFY_10 | op::WRITE_AND_VERIFY_12 | op::WRITE_AND_VERIFY_16, _) => {
            rw::write_and_verify(request)
        }
        (op::VERIFY_10 | op::VERIFY_12 | op::VERIFY_16, _) => rw::verify(request),
        (op::ORWRITE_16, _) => rw::orwrite(request),
        (op::PRE_FETCH_10 | op::PRE_FETCH_16, _) => rw::pre_fetch(request),
        (op::SYNCHRONIZE_CACHE_10 | op::SYNCHRONIZE_CACHE_16, _) => rw::synchronize_cache(request),
        (op::READ_DEFECT_DATA_10 | op::READ_DEFECT_DATA_12, _) => {
            capacity::read_defect_data(request)
        }
        (op::COMPARE_AND_WRITE, _) => caw::compare_and_write(request),
        (op::WRITE_SAME_10 | op::WRITE_SAME_16, _) => provisioning::write_same(request),
        (op::UNMAP, _) => provisioning::unmap(request),
        (op::EXTENDED_COPY, _) => xcopy::extended_copy(request),
        (op::RECEIVE_COPY_RESULTS, Some(action)) => xcopy::receive_copy_results(request, action),
        (op::REPORT_LUNS, _) => report::report_luns(request.cdb, request.nexus_state, request.lun),
        (op::MAINTENANCE_IN, Some(sa::REPORT_SUPPORTED_OPERATION_CODES)) => {
            report::report_supported_operation_codes(request)
        }
        (op::MAINTENANCE_IN, Some(sa::REPORT_TARGET_PORT_GROUPS)) => {
            crate::port_groups::report_target_port_groups(request)
        }
        (op::MAINTENANCE_IN, Some(sa::REPORT_SUPPORTED_TASK_MANAGEMENT_FUNCTIONS)) => {
            report::report_supported_task_management_functions(request)
        }
        (op::RESERVE_6 | op::RESERVE_10, _) => reservation::reserve(request),
        (op::RELEASE_6 | op::RELEASE_10, _) => reservation::release(request),
        (op::PERSISTENT_RESERVE_IN, Some(action)) => {
            reservation::persistent_reserve_in(request, action)
        }
        (op::PERSISTENT_RESERVE_OUT, Some(action)) => {
            reservation::persistent_reserve_out(request, action)
        }
        (op::SANITIZE, Some(action)) => sanitize::sanitize(request, action),
        _ => {
            // The command table and this match disagree: a bug, answered cleanly.
            debug_assert!(false, "no handler for {}", command.name);
            Err(Failure::Check(Sense::invalid_opcode()))
        }
    }
}

fn outcome(result: CommandResult, format: SenseFormat) -> CommandOutcome {
    match result {
        Ok(data_in) => CommandOutcome {
            status: ScsiStatus::Good,
            data_in,
            sense: Vec::new(),
        },
        Err(Failure::Check(sense)) => CommandOutcome {
            status: ScsiStatus::CheckCondition,
            data_in: Vec::new(),
            sense: sense.encode(format),
        },
        Err(Failure::ReservationConflict) => CommandOutcome {
            status: ScsiStatus::ReservationConflict,
            data_in: Vec::new(),
            sense: Vec::new(),
        },
        // Given back as `None` by `execute_with`; reaching here is a bug,
        // answered cleanly.
        Err(Failure::WouldWait) => CommandOutcome {
            status: ScsiStatus::CheckCondition,
            data_in: Vec::new(),
            sense: Sense::new(
                SenseKey::HardwareError,
                AdditionalSense::INTERNAL_TARGET_FAILURE,
            )
            .encode(format),
        },
    }
}

/// Largest WRITE that may run on the transport's own task (see `runs_quickly`).
const MAX_QUICK_WRITE_BYTES: u64 = 64 * 1024;

impl ScsiTarget for ScsiCore {
    fn nexus_created(&self, nexus: &ItNexus) {
        // A reinstated nexus starts over: fresh unit attentions and LUN map.
        self.nexuses.lock().remove(nexus);
        let _ = self.nexus_state(nexus);
    }

    fn nexus_dropped(&self, nexus: &ItNexus) {
        self.nexuses.lock().remove(nexus);
        let units: Vec<Arc<UnitState>> = self.units.lock().values().cloned().collect();
        for unit in units {
            unit.forget_nexus(nexus);
        }
    }

    fn execute(&self, nexus: &ItNexus, command: Command<'_>) -> CommandOutcome {
        let answered = self.execute_with(nexus, command, false);
        // Only a read from memory gives up; this one was allowed to wait.
        debug_assert!(answered.is_some(), "a command that may wait gave up");
        answered.unwrap_or_else(|| outcome(Err(Failure::WouldWait), SenseFormat::Fixed))
    }

    fn execute_from_memory(&self, nexus: &ItNexus, command: Command<'_>) -> Option<CommandOutcome> {
        self.execute_with(nexus, command, true)
    }

    fn data_out_bytes(&self, nexus: &ItNexus, lun: Lun, cdb: &[u8]) -> Option<u64> {
        let unit = self.mapped_unit(nexus, lun)?;
        crate::data_out::data_out_bytes(cdb, unit.block_size_bytes())
    }

    /// Small WRITE (10/16) without FUA, with the write cache on, to a unit that
    /// says the write will not wait for background work (a durable commit
    /// still may hold it up for milliseconds); and an EXTENDED COPY whose every
    /// segment its destination says is metadata-only (see `xcopy::runs_quickly`).
    fn runs_quickly(&self, nexus: &ItNexus, lun: Lun, cdb: &[u8], data_out: &[u8]) -> bool {
        const FUA: u8 = 0x08;
        if cdb.first() == Some(&op::EXTENDED_COPY) {
            return self.mapped_unit(nexus, lun).is_some()
                && crate::xcopy::runs_quickly(self, nexus, cdb, data_out);
        }
        let write = matches!(cdb.first(), Some(&(op::WRITE_10 | op::WRITE_16)));
        if !write || cdb.get(1).is_none_or(|flags| flags & FUA != 0) {
            return false;
        }
        let Some(unit) = self.mapped_unit(nexus, lun) else {
            return false;
        };
        let Some(length_bytes) = crate::data_out::data_out_bytes(cdb, unit.block_size_bytes())
        else {
            return false;
        };
        length_bytes <= MAX_QUICK_WRITE_BYTES
            && self
                .unit_state(unit.as_ref())
                .lock()
                .mode
                .write_cache_enabled()
            && unit.write_is_quick(length_bytes)
    }

    fn recycle_data_in(&self, buf: Vec<u8>) {
        self.data_in.give_back(buf);
    }

    fn task_management(
        &self,
        nexus: &ItNexus,
        lun: Lun,
        function: TaskManagementFunction,
    ) -> TaskManagementResponse {
        let lun = lun.canonical();
        match function {
            TaskManagementFunction::AbortTask {
                referenced_task_tag,
            } => {
                self.record_abort(Aborted::Task(nexus, lun, referenced_task_tag));
                TaskManagementResponse::FunctionComplete
            }
            TaskManagementFunction::AbortTaskSet | TaskManagementFunction::ClearTaskSet => {
                self.record_abort(Aborted::TaskSet(nexus, lun));
                TaskManagementResponse::FunctionComplete
            }
            TaskManagementFunction::ClearAca => TaskManagementResponse::FunctionNotSupported,
            TaskManagementFunction::LogicalUnitReset => {
                let Some(unit) = self.mapped_unit(nexus, lun) else {
                    return TaskManagementResponse::LunDoesNotExist;
                };
                self.reset_unit(
                    unit.as_ref(),
                    AdditionalSense::BUS_DEVICE_RESET_FUNCTION_OCCURRED,
                );
                TaskManagementResponse::FunctionComplete
            }
            TaskManagementFunction::TargetWarmReset => {
                self.reset_target(nexus, AdditionalSense::BUS_DEVICE_RESET_FUNCTION_OCCURRED);
                TaskManagementResponse::FunctionComplete
            }
            TaskManagementFunction::TargetColdReset => {
                self.reset_target(nexus, AdditionalSense::POWER_ON_OCCURRED);
                TaskManagementResponse::FunctionComplete
            }
        }
    }

    fn nexus_closing(&self, nexus: &ItNexus) {
        self.record_abort(Aborted::Nexus(nexus));
    }
}

impl ScsiCore {
    /// A logical unit reset (SAM-5 6.6): SPC-2 reservations and medium-removal prevention
    /// are cleared, persistent reservations survive, and every nexus gets `code`.
    /// The unit's tasks end, from every nexus.
    fn reset_unit(&self, unit: &dyn LogicalUnit, code: AdditionalSense) {
        let unit_id = unit.unit_id();
        self.record_abort(Aborted::Unit(unit_id));
        self.unit_state(unit).reset();
        self.for_each_nexus(|_, state| state.reset(&unit_id, code));
    }

    /// A target reset resets the units `nexus` may address, and no others.
    /// Why not the whole array: every host logs in to the one target, and a
    /// host must not clear the reservations of (or end commands on) volumes it
    /// was never granted.
    fn reset_target(&self, nexus: &ItNexus, code: AdditionalSense) {
        let mut units = self.units_visible_to(nexus);
        // A unit mapped at two LUNs is reset once.
        units.sort_by_key(|unit| unit.unit_id());
        units.dedup_by_key(|unit| unit.unit_id());
        for unit in units {
            self.reset_unit(unit.as_ref(), code);
        }
    }
}
