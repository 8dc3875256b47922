//! The vVol operations: create, delete, bind, unbind, snapshots, clones,
//! reverts, resizes, bitmaps, queries, metadata and space.

use lacuna_vvol::{
    CloneSpec, ItemResult, Metadata, NewVvol, Segment, SnapshotKind, SnapshotRequest, Tasked,
    VvolId, VvolInfo, VvolQuery, VvolSpace, VvolType, MAX_BATCH,
};

use super::{Call, OpResult, Outcome, Provider};
use crate::codec::{Struct, Value};
use crate::fault::Fault;

/// SAM-5 long extended flat space: the addressing method of a second-level id.
const LONG_EXTENDED_FLAT_SPACE: u64 = 0xe2;

/// The second-level LUN id as a host writes it: the 6 bytes of the LUN's
/// second level, addressing method first (`0xe2…`).
pub(crate) fn secondary_id(object_id: u64) -> String {
    debug_assert!(object_id < 1 << 40);
    format!("0x{:012x}", LONG_EXTENDED_FLAT_SPACE << 40 | object_id)
}

fn parse_secondary_id(text: &str) -> Option<u64> {
    let hex = text
        .trim()
        .strip_prefix("0x")
        .or_else(|| text.trim().strip_prefix("0X"))?;
    let value = u64::from_str_radix(hex, 16).ok()?;
    (value >> 40 == LONG_EXTENDED_FLAT_SPACE).then_some(value & ((1 << 40) - 1))
}

fn vvol_id(text: &str) -> Result<VvolId, Fault> {
    Ok(VvolId::parse(text)?)
}

/// The `vvolId` elements of a batch call, at most a batch of them.
fn batch_ids(call: &Call) -> Result<Vec<String>, Fault> {
    let ids = call.params.strs("vvolId");
    check_batch(ids.len())?;
    Ok(ids.iter().map(|s| s.to_string()).collect())
}

fn check_batch(len: usize) -> Result<(), Fault> {
    if len > MAX_BATCH {
        Err(Fault::too_many(MAX_BATCH))
    } else {
        Ok(())
    }
}

/// Metadata from name/value pairs (a pair without a value has an empty one).
fn metadata_of(pairs: &[&Struct]) -> Result<Metadata, Fault> {
    let mut out = Metadata::new();
    for pair in pairs {
        let name = pair
            .opt_str("parameterName")
            .ok_or_else(|| Fault::invalid_argument("a metadata pair without a parameterName"))?;
        out.insert(
            name.to_string(),
            pair.opt_str("parameterValue").unwrap_or("").to_string(),
        );
    }
    Ok(out)
}

fn pairs(metadata: &Metadata) -> Vec<Struct> {
    metadata
        .iter()
        .map(|(k, v)| {
            Struct::new("NameValuePair")
                .with("parameterName", k.clone())
                .with("parameterValue", v.clone())
        })
        .collect()
}

fn long_as_u64(call: &Call, name: &str) -> Result<u64, Fault> {
    let n = call.params.long(name)?;
    u64::try_from(n).map_err(|_| Fault::invalid_argument(format!("{name} {n} is negative")))
}

fn item_fault<T>(item: &ItemResult<T>) -> Option<Value> {
    item.fault
        .as_ref()
        .map(|f| Value::Struct(Fault::from_body(f).to_struct()))
}

fn batch_status(id: &str, fault: Option<Value>) -> Struct {
    Struct::new("BatchReturnStatus")
        .with_opt(
            "errorResult",
            fault.map(|f| Struct::new("BatchErrorResult").with("error", f)),
        )
        .with("uniqueId", id)
}

impl Provider {
    pub(crate) fn vvol_info(info: &VvolInfo) -> Struct {
        Struct::new("VirtualVolumeInfo")
            .with("uniqueIdentifier", info.rec.id.to_string())
            .with_all("metadata", pairs(&info.rec.metadata))
            .with("vvolId", info.rec.id.to_string())
    }

    pub(crate) fn space_stats(space: &VvolSpace) -> Struct {
        let written = space.written_bytes.unwrap_or(0) as i64;
        Struct::new("SpaceStats")
            .with("committed", written)
            .with("logical", space.size_bytes as i64)
            .with("objectId", space.id.to_string())
            .with("unshared", space.unique_physical_bytes.unwrap_or(0) as i64)
            .with("unsharedValid", space.unique_physical_bytes.is_some())
    }

    /// A task's answer: the task (Success or Error). Faults of the request
    /// itself (bad arguments, a missing vVol) are answered as faults.
    fn task_answer<T>(&self, tasked: Tasked<T>) -> OpResult {
        if let Err(fault) = &tasked.result {
            let fault = Fault::from(fault.clone());
            if matches!(
                fault.kind,
                "InvalidArgument" | "NotFound" | "IncompatibleVolume" | "VasaProviderBusy"
            ) {
                return Err(fault);
            }
        }
        Ok(Outcome::one(self.task_info(&tasked.task)))
    }

    pub(crate) fn create_virtual_volume(&self, call: &Call) -> OpResult {
        let p = call.params;
        let vvol_type = VvolType::parse(p.str("vvolType")?)?;
        let size_mib = long_as_u64(call, "sizeInMB")?;
        let container = p.str("containerId")?.to_string();
        let mut metadata = metadata_of(&p.children("metadata"))?;
        let provisioning =
            self.apply_profile(p.child("storageProfile"), &container, &mut metadata)?;
        let tasked = self.vvols.create_tasked(NewVvol {
            container,
            vvol_type,
            size_mib,
            provisioning: provisioning.unwrap_or_default(),
            metadata,
        });
        self.task_answer(tasked)
    }

    pub(crate) fn delete_virtual_volume(&self, call: &Call) -> OpResult {
        self.vvols.delete(&vvol_id(call.params.str("vvolId")?)?)?;
        Ok(Outcome::none())
    }

    pub(crate) fn bind_virtual_volume(&self, call: &Call) -> OpResult {
        let ids = batch_ids(call)?;
        let context = call.params.str("bindContext")?;
        if !matches!(context, "Normal" | "RebindStart") {
            return Err(Fault::invalid_argument(format!(
                "bindContext '{}' (Normal or RebindStart)",
                context.escape_debug()
            )));
        }
        let host = call.host()?;
        let items = self.vvols.bind(host, &ids)?;
        Ok(Outcome::many(items.iter().map(|item| {
            let mut result =
                Struct::new("BatchVirtualVolumeHandleResult").with_opt("fault", item_fault(item));
            if let Some(binding) = &item.result {
                result = result.with(
                    "vvolHandle",
                    Struct::new("VirtualVolumeHandle")
                        .with("uniqueIdentifier", binding.vvol.to_string())
                        .with(
                            "peInBandId",
                            Self::in_band_id(&binding.protocol_endpoint.in_band_id),
                        )
                        .with("vvolSecondaryId", secondary_id(binding.secondary_id)),
                );
            }
            result = result.with("vvolId", item.id.clone());
            if let Some(binding) = &item.result {
                if let Ok(info) = self.vvols.get(&binding.vvol) {
                    result = result.with("vvolInfo", Self::vvol_info(&info));
                }
                result = result.with("vvolLogicalSize", binding.size_bytes as i64);
            }
            result
        })))
    }

    /// The vVol a handle names: its unique identifier (the vVol id, as bind
    /// answers it), else its secondary id among the host's bound vVols.
    fn vvol_of_handle(&self, host: &str, handle: &Struct) -> Result<String, Fault> {
        if let Some(id) = handle.opt_str("uniqueIdentifier").filter(|s| !s.is_empty()) {
            return Ok(id.to_string());
        }
        let secondary = handle.str("vvolSecondaryId")?;
        let object = parse_secondary_id(secondary).ok_or_else(|| {
            Fault::invalid_argument(format!(
                "'{}' is not a secondary id",
                secondary.escape_debug()
            ))
        })?;
        self.vvols
            .bound(host)
            .into_iter()
            .find(|b| b.object_id == object)
            .map(|b| b.id.to_string())
            .ok_or_else(|| Fault::new("NotFound", format!("no vVol bound under {secondary}")))
    }

    pub(crate) fn unbind_virtual_volume(&self, call: &Call) -> OpResult {
        let handles = call.params.children("vvolHandle");
        check_batch(handles.len())?;
        let context = call.params.str("unbindContext")?;
        if !matches!(context, "Normal" | "RebindStart" | "RebindEnd") {
            return Err(Fault::invalid_argument(format!(
                "unbindContext '{}' (Normal, RebindStart or RebindEnd)",
                context.escape_debug()
            )));
        }
        let host = call.host()?;
        let mut answers: Vec<Option<Struct>> = vec![None; handles.len()];
        let mut ids = Vec::new();
        let mut at = Vec::new();
        for (i, handle) in handles.iter().enumerate() {
            match self.vvol_of_handle(host, handle) {
                Ok(id) => {
                    ids.push(id);
                    at.push(i);
                }
                Err(fault) => {
                    let id = handle.opt_str("vvolSecondaryId").unwrap_or("").to_string();
                    answers[i] = Some(batch_status(&id, Some(Value::Struct(fault.to_struct()))));
                }
            }
        }
        let items = self.vvols.unbind(host, &ids)?;
        for (item, i) in items.iter().zip(at) {
            answers[i] = Some(batch_status(&item.id, item_fault(item)));
        }
        Ok(Outcome::many(answers.into_iter().flatten()))
    }

    pub(crate) fn unbind_all(&self, call: &Call) -> OpResult {
        let host = match call.params.opt_str("hostUuid") {
            None => call.host()?.to_string(),
            Some(guid) if call.context()?.host_guid.as_deref() == Some(guid) => {
                call.host()?.to_string()
            }
            Some(guid) => self
                .sessions
                .host_of_guid(guid)
                .or_else(|| self.hosts.host_exists(guid).then(|| guid.to_string()))
                .ok_or_else(|| Fault::new("NotFound", format!("host '{}'", guid.escape_debug())))?,
        };
        self.vvols.unbind_all(&host)?;
        Ok(Outcome::none())
    }

    pub(crate) fn prepare_snapshot(&self, call: &Call) -> OpResult {
        let id = vvol_id(call.params.str("vvolId")?)?;
        let kind = match call.params.str("snapType")? {
            "SnapshotReadOnly" => SnapshotKind::ReadOnly,
            "SnapshotReadWrite" => SnapshotKind::ReadWrite,
            other => {
                return Err(Fault::invalid_argument(format!(
                    "snapType '{}' (SnapshotReadOnly or SnapshotReadWrite)",
                    other.escape_debug()
                )))
            }
        };
        self.task_answer(self.vvols.prepare_snapshot_tasked(&id, kind))
    }

    pub(crate) fn snapshot_virtual_volume(&self, call: &Call) -> OpResult {
        let infos = call.params.children("snapshotInfo");
        check_batch(infos.len())?;
        let timeout_ms = long_as_u64(call, "timeoutMS")?;
        let requests = infos
            .iter()
            .map(|info| {
                Ok(SnapshotRequest {
                    snapshot_id: info.str("vvolId")?.to_string(),
                    metadata: metadata_of(&info.children("metadata"))?,
                })
            })
            .collect::<Result<Vec<_>, Fault>>()?;
        let commit = self.vvols.commit_snapshots(&requests, timeout_ms)?;
        Ok(Outcome::many(
            commit
                .results
                .iter()
                .map(|item| batch_status(&item.id, item_fault(item))),
        ))
    }

    pub(crate) fn clone_virtual_volume(&self, call: &Call, fast: bool) -> OpResult {
        let p = call.params;
        let id = vvol_id(p.str("vvolId")?)?;
        let source = self.vvols.get(&id)?;
        let container = p.opt_str("newContainerId").map(str::to_string);
        let mut metadata = metadata_of(&p.children("metadata"))?;
        let target = container.clone().unwrap_or(source.rec.container.clone());
        let provisioning = self.apply_profile(p.child("newProfile"), &target, &mut metadata)?;
        let spec = CloneSpec {
            container,
            provisioning,
            metadata,
            fast,
        };
        self.task_answer(self.vvols.clone_tasked(&id, spec))
    }

    pub(crate) fn revert_virtual_volume(&self, call: &Call) -> OpResult {
        let id = vvol_id(call.params.str("vvolId")?)?;
        let snapshot = vvol_id(call.params.str("snapshotVvolId")?)?;
        self.task_answer(self.vvols.revert_tasked(&id, &snapshot))
    }

    pub(crate) fn resize_virtual_volume(&self, call: &Call) -> OpResult {
        let id = vvol_id(call.params.str("vvolId")?)?;
        let size_mib = long_as_u64(call, "sizeInMB")?;
        self.task_answer(self.vvols.resize_tasked(&id, size_mib))
    }

    fn segment(call: &Call, chunk_bytes: u64) -> Result<Segment, Fault> {
        Ok(Segment {
            offset_bytes: long_as_u64(call, "segmentStartOffsetBytes")?,
            length_bytes: long_as_u64(call, "segmentLengthBytes")?,
            chunk_bytes,
        })
    }

    fn bitmap_answer(bitmap: Vec<u8>) -> Outcome {
        Outcome::one(
            Struct::new("VirtualVolumeBitmapResult").with("chunkBitmap", Value::Base64(bitmap)),
        )
    }

    pub(crate) fn allocated_bitmap(&self, call: &Call) -> OpResult {
        let id = vvol_id(call.params.str("vvolId")?)?;
        let segment = Self::segment(call, long_as_u64(call, "chunkSizeBytes")?)?;
        let answer = self.vvols.allocated_bitmap(&id, segment)?;
        Ok(Self::bitmap_answer(answer.bitmap))
    }

    pub(crate) fn unshared_bitmap(&self, call: &Call) -> OpResult {
        let id = vvol_id(call.params.str("vvolId")?)?;
        let base = vvol_id(call.params.str("baseVvolId")?)?;
        let segment = Self::segment(call, long_as_u64(call, "chunkSizeBytes")?)?;
        let answer = self.vvols.unshared_bitmap(&id, &base, segment)?;
        Ok(Self::bitmap_answer(answer.bitmap))
    }

    /// Unshared chunks with a base, or without one the chunks holding data;
    /// the chunk is the smallest power of two from 64 KiB whose bitmap fits.
    pub(crate) fn unshared_chunks(&self, call: &Call) -> OpResult {
        let id = vvol_id(call.params.str("vvolId")?)?;
        let base = call.params.opt_str("baseVvolId").map(vvol_id).transpose()?;
        let length = long_as_u64(call, "segmentLengthBytes")?;
        let fewest = length.div_ceil(lacuna_vvol::MAX_BITMAP_BYTES * 8);
        let chunk_bytes = fewest.max(64 << 10).next_power_of_two();
        let segment = Self::segment(call, chunk_bytes)?;
        let (scanned, unshared) = match &base {
            Some(base) => {
                let answer = self.vvols.unshared_chunks(&id, base, segment)?;
                (answer.scanned_chunks, answer.unshared_chunks)
            }
            None => {
                let answer = self.vvols.allocated_bitmap(&id, segment)?;
                let set = answer
                    .bitmap
                    .iter()
                    .map(|b| u64::from(b.count_ones()))
                    .sum();
                (length.div_ceil(chunk_bytes), set)
            }
        };
        Ok(Outcome::one(
            Struct::new("VirtualVolumeUnsharedChunksResult")
                .with("chunkSizeBytes", chunk_bytes as i64)
                .with("scannedChunks", scanned as i64)
                .with("unsharedChunks", unshared as i64),
        ))
    }

    pub(crate) fn query_virtual_volume(&self, call: &Call) -> OpResult {
        let mut query = VvolQuery::default();
        for constraint in call.params.children("searchConstraint") {
            let key = constraint.str("key")?;
            let value = constraint.opt_str("value").unwrap_or("").to_string();
            match key {
                "VMW_ContainerId" if query.container.is_none() => query.container = Some(value),
                _ => {
                    query.metadata.insert(key.to_string(), value);
                }
            }
        }
        let ids = self.vvols.query(&query)?;
        Ok(Outcome::many(ids.into_iter().map(|id| id.to_string())))
    }

    pub(crate) fn query_virtual_volume_info(&self, call: &Call) -> OpResult {
        let ids = batch_ids(call)?;
        let items = self.vvols.info(&ids)?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match (item.result, item.fault) {
                (Some(info), _) => out.push(Self::vvol_info(&info)),
                (None, Some(f)) => {
                    return Err(Fault::storage(format!(
                        "{}: {} {}",
                        item.id, f.kind, f.message
                    )))
                }
                (None, None) => unreachable!("an item has a result or a fault"),
            }
        }
        Ok(Outcome::many(out))
    }

    pub(crate) fn update_metadata(&self, call: &Call) -> OpResult {
        let id = vvol_id(call.params.str("vvolId")?)?;
        let pairs = metadata_of(&call.params.children("keyValuePair"))?;
        self.vvols.update_metadata(&id, &pairs)?;
        Ok(Outcome::none())
    }

    pub(crate) fn space_stats_for_virtual_volume(&self, call: &Call) -> OpResult {
        let ids = call.params.strs("vvolId");
        check_batch(ids.len())?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(Self::space_stats(&self.vvols.space(&vvol_id(id)?)?));
        }
        Ok(Outcome::many(out))
    }

    pub(crate) fn space_stats_for_storage_container(&self, call: &Call) -> OpResult {
        let container = call.params.str("containerId")?;
        let space = self.vvols.container_space(container)?;
        let physical = self.vvols.engine().space();
        let physical_free = physical
            .capacity_bytes
            .saturating_sub(physical.physical_used_bytes);
        let limit = space.quota_bytes.unwrap_or(physical.capacity_bytes);
        Ok(Outcome::one(
            Struct::new("ContainerSpaceStats")
                .with("logicalFree", limit.saturating_sub(space.used_bytes) as i64)
                .with("logicalLimit", limit as i64)
                .with("logicalUsed", space.used_bytes as i64)
                .with("objectId", space.container)
                .with("physicalFree", physical_free as i64)
                .with("physicalTotal", physical.capacity_bytes as i64)
                .with("physicalUsed", physical.physical_used_bytes as i64),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secondary_ids_are_long_extended_flat_space_and_parse_back() {
        assert_eq!(secondary_id(0xa6), "0xe200000000a6");
        assert_eq!(parse_secondary_id("0xe200000000a6"), Some(0xa6));
        assert_eq!(parse_secondary_id("0xd200a6"), None);
        assert_eq!(parse_secondary_id("e200000000a6"), None);
        let max = (1u64 << 40) - 1;
        assert_eq!(parse_secondary_id(&secondary_id(max)), Some(max));
    }
}
