//! Reservations: SPC-2 RESERVE/RELEASE and SPC-5 persistent reservations (PERSISTENT
//! RESERVE IN/OUT), and the access check every command goes through.
//!
//! Why both: clustered hosts (VMware before ATS, Windows failover clusters, pacemaker)
//! use one or the other. Registrations are per I_T nexus (initiator port and relative
//! target port) and survive the loss of the nexus; an SPC-2 reservation does not. Only
//! LU scope is supported, registrations are not persistent across power loss (APTPL is
//! refused cleanly: PTPL_C is 0), and SPEC_I_P / ALL_TG_PT are refused (SIP_C, ATP_C 0).

use crate::block::{be16, be32, be64, truncate};
use crate::commands::{opcode as op, Access, CommandSpec};
use crate::dispatch::{CommandResult, Failure, Request};
use crate::sense::{AdditionalSense, Sense};
use crate::target::ItNexus;

/// PERSISTENT RESERVE OUT basic parameter list length.
const BASIC_PARAMETER_LIST_LEN_BYTES: usize = 24;
/// Largest REGISTER AND MOVE parameter list (24 + an iSCSI TransportID of at most 228
/// name bytes plus header, rounded up generously).
const MAX_REGISTER_AND_MOVE_LEN_BYTES: usize = 24 + 512;
/// Most registrations per unit; beyond it REGISTER fails with INSUFFICIENT REGISTRATION
/// RESOURCES. Bounds READ KEYS / READ FULL STATUS data.
const MAX_REGISTRATIONS: usize = 256;

const INSUFFICIENT_REGISTRATION_RESOURCES: AdditionalSense = AdditionalSense::new(0x55, 0x04);
const INVALID_RELEASE_OF_PERSISTENT_RESERVATION: AdditionalSense = AdditionalSense::new(0x26, 0x04);

/// Persistent reservation types (SPC-5 table 169).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PrType {
    WriteExclusive = 1,
    ExclusiveAccess = 3,
    WriteExclusiveRegistrantsOnly = 5,
    ExclusiveAccessRegistrantsOnly = 6,
    WriteExclusiveAllRegistrants = 7,
    ExclusiveAccessAllRegistrants = 8,
}

impl PrType {
    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => PrType::WriteExclusive,
            3 => PrType::ExclusiveAccess,
            5 => PrType::WriteExclusiveRegistrantsOnly,
            6 => PrType::ExclusiveAccessRegistrantsOnly,
            7 => PrType::WriteExclusiveAllRegistrants,
            8 => PrType::ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }

    fn all_registrants(self) -> bool {
        matches!(
            self,
            PrType::WriteExclusiveAllRegistrants | PrType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registrants (not only the holder) may access the unit.
    fn registrants_have_access(self) -> bool {
        !matches!(self, PrType::WriteExclusive | PrType::ExclusiveAccess)
    }

    fn exclusive_access(self) -> bool {
        matches!(
            self,
            PrType::ExclusiveAccess
                | PrType::ExclusiveAccessRegistrantsOnly
                | PrType::ExclusiveAccessAllRegistrants
        )
    }
}

/// An I_T nexus as a registrant: survives the nexus itself.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Registrant {
    initiator_port: String,
    relative_target_port: u16,
}

impl Registrant {
    fn of(nexus: &ItNexus) -> Self {
        Self {
            initiator_port: nexus.initiator_port.clone(),
            relative_target_port: nexus.relative_target_port,
        }
    }

    fn is(&self, nexus: &ItNexus) -> bool {
        self.initiator_port == nexus.initiator_port
            && self.relative_target_port == nexus.relative_target_port
    }
}

#[derive(Clone, Debug)]
struct Registration {
    registrant: Registrant,
    key: u64,
}

#[derive(Clone, Debug)]
struct Reservation {
    kind: PrType,
    /// For all-registrants types every registrant holds it; this is who reserved.
    holder: Registrant,
}

#[derive(Debug, Default)]
pub(crate) struct Reservations {
    spc2_holder: Option<ItNexus>,
    generation: u32,
    registrations: Vec<Registration>,
    reservation: Option<Reservation>,
}

impl Reservations {
    pub(crate) fn forget_nexus(&mut self, nexus: &ItNexus) {
        if self.spc2_holder.as_ref() == Some(nexus) {
            self.spc2_holder = None;
        }
    }

    pub(crate) fn reset(&mut self) {
        self.spc2_holder = None;
    }

    fn key_of(&self, nexus: &ItNexus) -> Option<u64> {
        self.registrations
            .iter()
            .find(|r| r.registrant.is(nexus))
            .map(|r| r.key)
    }

    fn is_holder(&self, nexus: &ItNexus) -> bool {
        match &self.reservation {
            Some(r) if r.kind.all_registrants() => self.key_of(nexus).is_some(),
            Some(r) => r.holder.is(nexus),
            None => false,
        }
    }

    /// May `nexus` run `command`?
    fn allows(&self, nexus: &ItNexus, command: &CommandSpec) -> bool {
        self.allows_access(
            nexus,
            command.access,
            command.allowed_under_spc2_reservation,
        )
    }

    /// May `nexus` access the unit in the way `access` describes?
    fn allows_access(&self, nexus: &ItNexus, access: Access, allowed_under_spc2: bool) -> bool {
        if let Some(holder) = &self.spc2_holder {
            if holder != nexus && !allowed_under_spc2 {
                return false;
            }
        }
        let Some(reservation) = &self.reservation else {
            return true;
        };
        if self.is_holder(nexus)
            || (reservation.kind.registrants_have_access() && self.key_of(nexus).is_some())
        {
            return true;
        }
        match access {
            Access::Unrestricted | Access::Reservation => true,
            Access::Read => !reservation.kind.exclusive_access(),
            Access::Write => false,
        }
    }
}

/// RESERVATION CONFLICT if a reservation forbids `command` on this nexus.
pub(crate) fn check_access(request: &Request<'_>, command: &CommandSpec) -> Result<(), Failure> {
    let shared = request.state.lock();
    if shared.reservations.allows(request.nexus, command) {
        Ok(())
    } else {
        Err(Failure::ReservationConflict)
    }
}

/// RESERVATION CONFLICT unless `nexus` may read (or write) the unit whose state is
/// `state`: EXTENDED COPY checks the units it copies from and to, not only the one it was
/// sent to.
pub(crate) fn check_copy_access(
    state: &crate::unit_state::UnitState,
    nexus: &ItNexus,
    write: bool,
) -> Result<(), Failure> {
    let access = if write { Access::Write } else { Access::Read };
    if state
        .lock()
        .reservations
        .allows_access(nexus, access, false)
    {
        Ok(())
    } else {
        Err(Failure::ReservationConflict)
    }
}

/// RESERVE(6) / RESERVE(10): SPC-2 logical unit reservation.
pub(crate) fn reserve(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    if cdb[0] == op::RESERVE_10 && cdb[1] & 0x12 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(4)).into()); // 3RDPTY, LONGID
    }
    let mut shared = request.state.lock();
    let reservations = &mut shared.reservations;
    if reservations.reservation.is_some() {
        return Err(Failure::ReservationConflict);
    }
    match &reservations.spc2_holder {
        Some(holder) if holder != request.nexus => Err(Failure::ReservationConflict),
        _ => {
            reservations.spc2_holder = Some(request.nexus.clone());
            Ok(Vec::new())
        }
    }
}

/// RELEASE(6) / RELEASE(10): releases our SPC-2 reservation; anyone else's stays.
pub(crate) fn release(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    if cdb[0] == op::RELEASE_10 && cdb[1] & 0x12 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(4)).into());
    }
    let mut shared = request.state.lock();
    let reservations = &mut shared.reservations;
    if reservations.reservation.is_some() {
        return Err(Failure::ReservationConflict);
    }
    if reservations.spc2_holder.as_ref() == Some(request.nexus) {
        reservations.spc2_holder = None;
    }
    Ok(Vec::new())
}

/// PERSISTENT RESERVE IN.
pub(crate) fn persistent_reserve_in(request: &Request<'_>, action: u8) -> CommandResult {
    let allocation_len = usize::from(be16(request.cdb, 7));
    let shared = request.state.lock();
    let reservations = &shared.reservations;
    let mut data = reservations.generation.to_be_bytes().to_vec();
    match action {
        0x00 => {
            let keys: Vec<u8> = reservations
                .registrations
                .iter()
                .flat_map(|r| r.key.to_be_bytes())
                .collect();
            data.extend_from_slice(&(keys.len() as u32).to_be_bytes());
            data.extend_from_slice(&keys);
        }
        0x01 => match &reservations.reservation {
            None => data.extend_from_slice(&0u32.to_be_bytes()),
            Some(reservation) => {
                data.extend_from_slice(&16u32.to_be_bytes());
                let key = if reservation.kind.all_registrants() {
                    0
                } else {
                    reservations
                        .registrations
                        .iter()
                        .find(|r| r.registrant == reservation.holder)
                        .map_or(0, |r| r.key)
                };
                data.extend_from_slice(&key.to_be_bytes());
                data.extend_from_slice(&[0, 0, 0, 0, 0, reservation.kind as u8, 0, 0]);
            }
        },
        0x02 => {
            data = vec![0u8; 8];
            data[0..2].copy_from_slice(&8u16.to_be_bytes());
            data[3] = 0x80; // TMV: the type mask is valid
            data[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02; // WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX
            data[5] = 0x01; // EX_AC_AR
        }
        0x03 => {
            let mut descriptors = Vec::new();
            for registration in &reservations.registrations {
                descriptors.extend_from_slice(&full_status_descriptor(reservations, registration));
            }
            data.extend_from_slice(&(descriptors.len() as u32).to_be_bytes());
            data.extend_from_slice(&descriptors);
        }
        _ => return Err(Sense::invalid_cdb_field(1, Some(4)).into()),
    }
    Ok(truncate(data, allocation_len))
}

fn full_status_descriptor(reservations: &Reservations, registration: &Registration) -> Vec<u8> {
    let mut descriptor = vec![0u8; 24];
    descriptor[0..8].copy_from_slice(&registration.key.to_be_bytes());
    if let Some(reservation) = &reservations.reservation {
        let holder =
            reservation.kind.all_registrants() || reservation.holder == registration.registrant;
        if holder {
            descriptor[12] = 0x01; // R_HOLDER
            descriptor[13] = reservation.kind as u8;
        }
    }
    descriptor[18..20].copy_from_slice(&registration.registrant.relative_target_port.to_be_bytes());
    let transport_id = iscsi_transport_id(&registration.registrant.initiator_port);
    descriptor[20..24].copy_from_slice(&(transport_id.len() as u32).to_be_bytes());
    descriptor.extend_from_slice(&transport_id);
    descriptor
}

/// An iSCSI TransportID (SPC-5 7.6.4.6): format 01b (initiator port) when the port name
/// carries ",i,0x", else format 00b (device name).
fn iscsi_transport_id(initiator_port: &str) -> Vec<u8> {
    let format = if initiator_port.contains(",i,0x") {
        0x40
    } else {
        0x00
    };
    let mut name = initiator_port.as_bytes().to_vec();
    name.push(0);
    while !name.len().is_multiple_of(4) || name.len() < 20 {
        name.push(0);
    }
    let mut id = vec![format | 0x05, 0];
    id.extend_from_slice(&(name.len() as u16).to_be_bytes());
    id.extend_from_slice(&name);
    id
}

/// The registrant named by a TransportID in REGISTER AND MOVE.
fn parse_transport_id(
    bytes: &[u8],
    at: usize,
    relative_target_port: u16,
    request: &Request<'_>,
) -> Result<Registrant, Failure> {
    if bytes.len() < 4 {
        return Err(Sense::parameter_list_length_error().into());
    }
    if bytes[0] & 0x0f != 0x05 {
        return Err(Sense::invalid_parameter_field(at as u16, Some(3)).into());
    }
    let name_len = usize::from(be16(bytes, 2));
    if bytes.len() < 4 + name_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    let raw = &bytes[4..4 + name_len];
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    let Ok(name) = std::str::from_utf8(&raw[..end]) else {
        return Err(Sense::invalid_parameter_field(at as u16 + 4, None).into());
    };
    match bytes[0] >> 6 {
        0b01 => Ok(Registrant {
            initiator_port: name.to_string(),
            relative_target_port,
        }),
        0b00 => {
            let mut found = None;
            request.core.for_each_nexus(|nexus, _| {
                if found.is_none()
                    && nexus.initiator_name == name
                    && nexus.relative_target_port == relative_target_port
                {
                    found = Some(Registrant::of(nexus));
                }
            });
            found.ok_or_else(|| Sense::invalid_parameter_field(at as u16 + 4, None).into())
        }
        _ => Err(Sense::invalid_parameter_field(at as u16, Some(7)).into()),
    }
}

/// Unit attentions to raise once the unit lock is released.
type Notices = Vec<(Registrant, AdditionalSense)>;

/// PERSISTENT RESERVE OUT.
pub(crate) fn persistent_reserve_out(request: &Request<'_>, action: u8) -> CommandResult {
    let cdb = request.cdb;
    let scope = cdb[2] >> 4;
    let type_code = cdb[2] & 0x0f;
    let parameter_list_len = be32(cdb, 5) as usize;
    let moving = action == 0x07;
    if moving {
        if !(BASIC_PARAMETER_LIST_LEN_BYTES..=MAX_REGISTER_AND_MOVE_LEN_BYTES)
            .contains(&parameter_list_len)
        {
            return Err(Sense::parameter_list_length_error().into());
        }
    } else if parameter_list_len != BASIC_PARAMETER_LIST_LEN_BYTES {
        return Err(Sense::parameter_list_length_error().into());
    }
    if request.data_out.len() < parameter_list_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    let list = &request.data_out[..parameter_list_len];
    let key = be64(list, 0);
    let service_action_key = be64(list, 8);
    if !moving {
        let flags = list[20];
        if flags & 0x08 != 0 {
            return Err(Sense::invalid_parameter_field(20, Some(3)).into()); // SPEC_I_P
        }
        if flags & 0x04 != 0 {
            return Err(Sense::invalid_parameter_field(20, Some(2)).into()); // ALL_TG_PT
        }
        if flags & 0x01 != 0 {
            return Err(Sense::invalid_parameter_field(20, Some(0)).into()); // APTPL
        }
    } else if list[17] & 0x01 != 0 {
        return Err(Sense::invalid_parameter_field(17, Some(0)).into()); // APTPL
    }
    let needs_type = matches!(action, 0x01 | 0x02 | 0x04 | 0x05);
    let kind = if needs_type {
        if scope != 0 {
            return Err(Sense::invalid_cdb_field(2, Some(7)).into());
        }
        match PrType::from_code(type_code) {
            Some(kind) => Some(kind),
            None => return Err(Sense::invalid_cdb_field(2, Some(3)).into()),
        }
    } else {
        None
    };

    let destination = if moving {
        let relative_target_port = be16(list, 18);
        let transport_id_len = be32(list, 20) as usize;
        if list.len() < 24 + transport_id_len {
            return Err(Sense::parameter_list_length_error().into());
        }
        Some(parse_transport_id(
            &list[24..24 + transport_id_len],
            24,
            relative_target_port,
            request,
        )?)
    } else {
        None
    };

    let mut notices = Notices::new();
    {
        let mut shared = request.state.lock();
        let reservations = &mut shared.reservations;
        if reservations
            .spc2_holder
            .as_ref()
            .is_some_and(|h| h != request.nexus)
        {
            return Err(Failure::ReservationConflict);
        }
        let nexus = request.nexus;
        match action {
            0x00 => register(
                reservations,
                nexus,
                key,
                service_action_key,
                false,
                &mut notices,
            )?,
            0x06 => register(
                reservations,
                nexus,
                key,
                service_action_key,
                true,
                &mut notices,
            )?,
            0x01 => reserve_persistent(reservations, nexus, key, kind.expect("type checked"))?,
            0x02 => release_persistent(
                reservations,
                nexus,
                key,
                kind.expect("type checked"),
                &mut notices,
            )?,
            0x03 => clear(reservations, nexus, key, &mut notices)?,
            0x04 | 0x05 => preempt(
                reservations,
                nexus,
                key,
                service_action_key,
                kind.expect("type checked"),
                &mut notices,
            )?,
            0x07 => register_and_move(
                reservations,
                nexus,
                key,
                service_action_key,
                list[17] & 0x02 != 0,
                destination.expect("parsed above"),
            )?,
            _ => return Err(Sense::invalid_cdb_field(1, Some(4)).into()),
        }
    }
    raise_notices(request, notices);
    Ok(Vec::new())
}

fn raise_notices(request: &Request<'_>, notices: Notices) {
    if notices.is_empty() {
        return;
    }
    let unit_id = request.unit.unit_id();
    request.core.for_each_nexus(|nexus, state| {
        for (registrant, code) in &notices {
            if registrant.is(nexus) {
                state.raise(&unit_id, *code);
            }
        }
    });
}

fn require_registered(
    reservations: &Reservations,
    nexus: &ItNexus,
    key: u64,
) -> Result<(), Failure> {
    match reservations.key_of(nexus) {
        Some(registered) if registered == key => Ok(()),
        _ => Err(Failure::ReservationConflict),
    }
}

/// Removes the registration at `index`, ending a reservation that depended on it.
fn unregister_at(reservations: &mut Reservations, index: usize, notices: &mut Notices) {
    let removed = reservations.registrations.remove(index);
    let Some(reservation) = &reservations.reservation else {
        return;
    };
    let ends = if reservation.kind.all_registrants() {
        reservations.registrations.is_empty()
    } else {
        reservation.holder == removed.registrant
    };
    if ends {
        let kind = reservation.kind;
        reservations.reservation = None;
        if kind.registrants_have_access() && !kind.all_registrants() {
            for other in &reservations.registrations {
                notices.push((
                    other.registrant.clone(),
                    AdditionalSense::RESERVATIONS_RELEASED,
                ));
            }
        }
    }
}

fn register(
    reservations: &mut Reservations,
    nexus: &ItNexus,
    key: u64,
    service_action_key: u64,
    ignore_existing: bool,
    notices: &mut Notices,
) -> Result<(), Failure> {
    let index = reservations
        .registrations
        .iter()
        .position(|r| r.registrant.is(nexus));
    match index {
        None => {
            if !ignore_existing && key != 0 {
                return Err(Failure::ReservationConflict);
            }
            if service_action_key == 0 {
                return Ok(());
            }
            if reservations.registrations.len() >= MAX_REGISTRATIONS {
                return Err(Sense::illegal_request(INSUFFICIENT_REGISTRATION_RESOURCES).into());
            }
            reservations.registrations.push(Registration {
                registrant: Registrant::of(nexus),
                key: service_action_key,
            });
        }
        Some(index) => {
            if !ignore_existing && reservations.registrations[index].key != key {
                return Err(Failure::ReservationConflict);
            }
            if service_action_key == 0 {
                unregister_at(reservations, index, notices);
            } else {
                reservations.registrations[index].key = service_action_key;
            }
        }
    }
    reservations.generation = reservations.generation.wrapping_add(1);
    Ok(())
}

fn reserve_persistent(
    reservations: &mut Reservations,
    nexus: &ItNexus,
    key: u64,
    kind: PrType,
) -> Result<(), Failure> {
    require_registered(reservations, nexus, key)?;
    match &reservations.reservation {
        None => {
            reservations.reservation = Some(Reservation {
                kind,
                holder: Registrant::of(nexus),
            });
            Ok(())
        }
        Some(existing) if reservations.is_holder(nexus) && existing.kind == kind => Ok(()),
        Some(_) => Err(Failure::ReservationConflict),
    }
}

fn release_persistent(
    reservations: &mut Reservations,
    nexus: &ItNexus,
    key: u64,
    kind: PrType,
    notices: &mut Notices,
) -> Result<(), Failure> {
    require_registered(reservations, nexus, key)?;
    let Some(existing) = reservations.reservation.clone() else {
        return Ok(());
    };
    if !reservations.is_holder(nexus) {
        return Ok(());
    }
    if existing.kind != kind {
        return Err(Sense::illegal_request(INVALID_RELEASE_OF_PERSISTENT_RESERVATION).into());
    }
    reservations.reservation = None;
    if existing.kind.registrants_have_access() {
        for other in reservations
            .registrations
            .iter()
            .filter(|r| !r.registrant.is(nexus))
        {
            notices.push((
                other.registrant.clone(),
                AdditionalSense::RESERVATIONS_RELEASED,
            ));
        }
    }
    Ok(())
}

fn clear(
    reservations: &mut Reservations,
    nexus: &ItNexus,
    key: u64,
    notices: &mut Notices,
) -> Result<(), Failure> {
    require_registered(reservations, nexus, key)?;
    for other in reservations
        .registrations
        .iter()
        .filter(|r| !r.registrant.is(nexus))
    {
        notices.push((
            other.registrant.clone(),
            AdditionalSense::RESERVATIONS_PREEMPTED,
        ));
    }
    reservations.registrations.clear();
    reservations.reservation = None;
    reservations.generation = reservations.generation.wrapping_add(1);
    Ok(())
}

/// Removes every registration with `victim_key` except the preempting nexus's own.
fn remove_registrations(
    reservations: &mut Reservations,
    nexus: &ItNexus,
    victim_key: u64,
    notices: &mut Notices,
) -> usize {
    let before = reservations.registrations.len();
    reservations.registrations.retain(|r| {
        let victim = r.key == victim_key && !r.registrant.is(nexus);
        if victim {
            notices.push((
                r.registrant.clone(),
                AdditionalSense::REGISTRATIONS_PREEMPTED,
            ));
        }
        !victim
    });
    before - reservations.registrations.len()
}

fn preempt(
    reservations: &mut Reservations,
    nexus: &ItNexus,
    key: u64,
    victim_key: u64,
    kind: PrType,
    notices: &mut Notices,
) -> Result<(), Failure> {
    require_registered(reservations, nexus, key)?;
    let new_reservation = Reservation {
        kind,
        holder: Registrant::of(nexus),
    };
    match reservations.reservation.clone() {
        None => {
            if victim_key == 0 {
                return Err(Sense::invalid_parameter_field(8, None).into());
            }
            if remove_registrations(reservations, nexus, victim_key, notices) == 0 {
                return Err(Failure::ReservationConflict);
            }
        }
        Some(existing) if existing.kind.all_registrants() => {
            if victim_key == 0 {
                let others: Vec<u64> = reservations
                    .registrations
                    .iter()
                    .filter(|r| !r.registrant.is(nexus))
                    .map(|r| r.key)
                    .collect();
                for other in others {
                    remove_registrations(reservations, nexus, other, notices);
                }
                reservations.reservation = Some(new_reservation);
            } else if remove_registrations(reservations, nexus, victim_key, notices) == 0 {
                return Err(Failure::ReservationConflict);
            }
        }
        Some(existing) => {
            let holder_key = reservations
                .registrations
                .iter()
                .find(|r| r.registrant == existing.holder)
                .map(|r| r.key);
            if holder_key == Some(victim_key) {
                remove_registrations(reservations, nexus, victim_key, notices);
                if existing.kind != kind && existing.kind.registrants_have_access() {
                    for other in reservations
                        .registrations
                        .iter()
                        .filter(|r| !r.registrant.is(nexus))
                    {
                        notices.push((
                            other.registrant.clone(),
                            AdditionalSense::RESERVATIONS_RELEASED,
                        ));
                    }
                }
                reservations.reservation = Some(new_reservation);
            } else {
                if victim_key == 0 {
                    return Err(Sense::invalid_parameter_field(8, None).into());
                }
                if remove_registrations(reservations, nexus, victim_key, notices) == 0 {
                    return Err(Failure::ReservationConflict);
                }
            }
        }
    }
    reservations.generation = reservations.generation.wrapping_add(1);
    Ok(())
}

fn register_and_move(
    reservations: &mut Reservations,
    nexus: &ItNexus,
    key: u64,
    service_action_key: u64,
    unregister_source: bool,
    destination: Registrant,
) -> Result<(), Failure> {
    require_registered(reservations, nexus, key)?;
    let Some(existing) = reservations.reservation.clone() else {
        return Err(Failure::ReservationConflict);
    };
    if existing.kind.all_registrants() || !reservations.is_holder(nexus) {
        return Err(Failure::ReservationConflict);
    }
    if service_action_key == 0 {
        return Err(Sense::invalid_parameter_field(8, None).into());
    }
    if destination.is(nexus) {
        return Err(Sense::invalid_parameter_field(24, None).into());
    }
    match reservations
        .registrations
        .iter_mut()
        .find(|r| r.registrant == destination)
    {
        Some(registration) => registration.key = service_action_key,
        None => {
            if reservations.registrations.len() >= MAX_REGISTRATIONS {
                return Err(Sense::illegal_request(INSUFFICIENT_REGISTRATION_RESOURCES).into());
            }
            reservations.registrations.push(Registration {
                registrant: destination.clone(),
                key: service_action_key,
            });
        }
    }
    reservations.reservation = Some(Reservation {
        kind: existing.kind,
        holder: destination,
    });
    if unregister_source {
        reservations
            .registrations
            .retain(|r| !r.registrant.is(nexus));
    }
    reservations.generation = reservations.generation.wrapping_add(1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_id_is_padded_to_four_and_marks_port_format() {
        let id = iscsi_transport_id("iqn.x,i,0x000000000001");
        assert_eq!(id[0], 0x45);
        assert_eq!(id.len() % 4, 0);
        assert_eq!(usize::from(be16(&id, 2)), id.len() - 4);
        assert!(id[4..].starts_with(b"iqn.x,i,0x000000000001\0"));
        assert_eq!(iscsi_transport_id("iqn.y")[0], 0x05);
    }

    #[test]
    fn type_properties() {
        assert!(PrType::ExclusiveAccessAllRegistrants.all_registrants());
        assert!(PrType::WriteExclusiveRegistrantsOnly.registrants_have_access());
        assert!(!PrType::WriteExclusive.registrants_have_access());
        assert!(!PrType::WriteExclusive.exclusive_access());
        assert_eq!(PrType::from_code(2), None);
    }
}
