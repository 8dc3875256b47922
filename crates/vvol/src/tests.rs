//! The service against a real engine in a temporary directory; hosts are a
//! fixed directory (the daemon's registry is tested where it lives).

use std::collections::BTreeMap;
use std::sync::Arc;

use lacuna_engine::{ContainerPolicy, Engine, EngineConfig, Provisioning};

use super::*;

struct TwoHosts;

impl HostDirectory for TwoHosts {
    fn protocol_endpoint(&self, host: &str) -> Result<ProtocolEndpoint> {
        match host {
            "esx1" | "esx2" => Ok(ProtocolEndpoint {
                in_band_id: "naa.6000000000000000000000000000000a".into(),
                lun: 7,
            }),
            "bare" => Err(VvolFault::InvalidArgument("no protocol endpoint".into())),
            _ => Err(VvolFault::NotFound(format!("host '{host}'"))),
        }
    }

    fn protocol_endpoints(&self) -> Vec<HostEndpoint> {
        ["esx1", "esx2"]
            .iter()
            .map(|host| HostEndpoint {
                host: host.to_string(),
                protocol: "SCSI".into(),
                protocol_endpoint: self.protocol_endpoint(host).unwrap(),
                bound_vvols: 0,
            })
            .collect()
    }
}

const MIB: u64 = 1 << 20;

fn seg(offset_bytes: u64, length_bytes: u64, chunk_bytes: u64) -> Segment {
    Segment {
        offset_bytes,
        length_bytes,
        chunk_bytes,
    }
}

fn open_engine(dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(EngineConfig::new(dir, 4 << 30)).unwrap()
}

fn open(dir: &tempfile::TempDir) -> (Arc<Engine>, Arc<VvolService>) {
    let engine = open_engine(dir.path());
    let service = VvolService::open(engine.clone(), dir.path(), Arc::new(TwoHosts)).unwrap();
    (engine, service)
}

fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn new_vvol(vvol_type: VvolType, vm: &str, size_mib: u64) -> NewVvol {
    NewVvol {
        container: "default".into(),
        vvol_type,
        size_mib,
        provisioning: Provisioning::Thin,
        metadata: meta(&[("VMW_VmID", vm), ("VMW_VVolType", vvol_type.as_str())]),
    }
}

fn ids(infos: &[&VvolInfo]) -> Vec<String> {
    infos.iter().map(|i| i.rec.id.to_string()).collect()
}

/// Prepares and commits one read-only snapshot of `id`: its snapshot vVol's id.
fn snapshot_of(service: &VvolService, id: &VvolId, metadata: Metadata) -> VvolId {
    let prepared = service
        .prepare_snapshot(id, SnapshotKind::ReadOnly)
        .unwrap();
    let request = SnapshotRequest {
        snapshot_id: prepared.snapshot_id.to_string(),
        metadata,
    };
    service.commit_snapshots(&[request], 10_000).unwrap();
    prepared.snapshot_id
}

#[test]
fn queries_find_what_the_metadata_says_and_info_answers_each_id() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, service) = open(&dir);
    let config = service
        .create(new_vvol(VvolType::Config, "vm1", 4096))
        .unwrap();
    let data = service
        .create(new_vvol(VvolType::Data, "vm1", 10240))
        .unwrap();
    let other = service
        .create(new_vvol(VvolType::Config, "vm2", 4096))
        .unwrap();
    let configs = service
        .query(&VvolQuery {
            container: Some("default".into()),
            metadata: meta(&[("VMW_VVolType", "Config")]),
            ..VvolQuery::default()
        })
        .unwrap();
    let mut expected = vec![config.rec.id.clone(), other.rec.id.clone()];
    expected.sort();
    assert_eq!(configs, expected);
    let configs_json: serde_json::Value = serde_json::from_str(
        &service
            .query_json(&VvolQuery {
                container: Some("default".into()),
                metadata: meta(&[("VMW_VVolType", "Config")]),
                ..VvolQuery::default()
            })
            .unwrap(),
    )
    .unwrap();
    assert_eq!(configs_json, serde_json::json!({ "ids": expected }));
    let vm1 = service
        .query(&VvolQuery {
            metadata: meta(&[("VMW_VmID", "vm1")]),
            ..VvolQuery::default()
        })
        .unwrap();
    assert_eq!(vm1.len(), 2);
    assert!(vm1.contains(&data.rec.id));
    let none = service
        .query(&VvolQuery {
            container: Some("elsewhere".into()),
            ..VvolQuery::default()
        })
        .unwrap();
    assert!(none.is_empty());

    let asked = vec![
        config.rec.id.to_string(),
        "rfc4122.00000000-0000-4000-8000-000000000000".into(),
        "junk".into(),
    ];
    let answers = service.info(&asked).unwrap();
    assert_eq!(
        answers[0].result.as_ref().unwrap().rec.metadata["VMW_VmID"],
        "vm1"
    );
    assert_eq!(answers[1].fault.as_ref().unwrap().kind, "NotFound");
    assert_eq!(answers[2].fault.as_ref().unwrap().kind, "InvalidArgument");

    let updated = service
        .update_metadata(
            &config.rec.id,
            &meta(&[("VMW_VVolName", "vm1.vmx"), ("VMW_VmID", "")]),
        )
        .unwrap();
    assert_eq!(
        updated.rec.metadata.get("VMW_VmID"),
        None,
        "an empty value removes the key"
    );
    assert_eq!(updated.rec.metadata["VMW_VVolName"], "vm1.vmx");
    let vm1_now = service
        .query(&VvolQuery {
            metadata: meta(&[("VMW_VmID", "vm1")]),
            ..VvolQuery::default()
        })
        .unwrap();
    assert_eq!(
        vm1_now,
        vec![data.rec.id.clone()],
        "the index follows updates"
    );
}

#[test]
fn bad_input_is_refused_with_its_fault_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, service) = open(&dir);
    let volumes_before = engine.list_volume_names().len();
    let mut too_big = new_vvol(VvolType::Data, "vm", model::MAX_SIZE_MIB + 1);
    assert!(matches!(
        service.create(too_big.clone()),
        Err(VvolFault::InvalidArgument(_))
    ));
    too_big.size_mib = 0;
    assert!(matches!(
        service.create(too_big),
        Err(VvolFault::InvalidArgument(_))
    ));
    let mut no_container = new_vvol(VvolType::Data, "vm", 16);
    no_container.container = "nowhere".into();
    assert!(matches!(
        service.create(no_container),
        Err(VvolFault::NotFound(_))
    ));
    let mut bad_key = new_vvol(VvolType::Data, "vm", 16);
    bad_key.metadata.insert("two words".into(), "x".into());
    assert!(matches!(
        service.create(bad_key),
        Err(VvolFault::InvalidArgument(_))
    ));
    assert_eq!(engine.list_volume_names().len(), volumes_before);
    assert_eq!(service.count(), 0);

    let vvol = service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap();
    let id = vvol.rec.id.clone();
    assert!(matches!(
        service.resize(&id, 32),
        Err(VvolFault::InvalidArgument(_))
    ));
    assert!(matches!(
        service.bind("esx1", &[]),
        Err(VvolFault::InvalidArgument(_))
    ));
    let too_many: Vec<String> = (0..=MAX_BATCH).map(|_| id.to_string()).collect();
    assert!(matches!(
        service.bind("esx1", &too_many),
        Err(VvolFault::OutOfResource(_))
    ));
    assert!(matches!(
        service.bind("nohost", &[id.to_string()]),
        Err(VvolFault::NotFound(_))
    ));
    assert!(matches!(
        service.bind("bare", &[id.to_string()]),
        Err(VvolFault::InvalidArgument(_))
    ));
    for (offset, length, chunk) in [
        (0, 0, 4096),
        (0, 4096, 1000),
        (512, 4096, 4096),
        (0, 65 * MIB, 4096),
    ] {
        assert!(
            matches!(
                service.allocated_bitmap(&id, seg(offset, length, chunk)),
                Err(VvolFault::InvalidArgument(_))
            ),
            "{offset}+{length}/{chunk}"
        );
    }
    assert_eq!(service.get(&id).unwrap().rec, vvol.rec);
    assert!(service.bound("esx1").is_empty());
}

#[test]
fn binds_are_batched_idempotent_per_host_and_a_swap_unbound_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, service) = open(&dir);
    let config = service
        .create(new_vvol(VvolType::Config, "vm", 4096))
        .unwrap();
    let swap = service
        .create(new_vvol(VvolType::Swap, "vm", 1024))
        .unwrap();
    let batch = ids(&[&config, &swap]);
    let generation = service.generation();
    let first = service.bind("esx1", &batch).unwrap();
    assert!(service.generation() > generation);
    let again = service.bind("esx1", &batch).unwrap();
    assert_eq!(first, again, "binding a bound vVol answers its binding");
    let binding = first[1].result.as_ref().unwrap();
    assert_eq!(binding.secondary_id, swap.rec.object_id);
    assert_eq!(binding.protocol_endpoint.lun, 7);
    assert_eq!(service.bound("esx1").len(), 2);
    assert!(
        service.bound("esx2").is_empty(),
        "a host reaches only what is bound to it"
    );

    let volume = engine.open_volume(&swap.rec.engine_name()).unwrap();
    volume.write(0, &vec![0x5a; 8 * MIB as usize]).unwrap();
    volume.flush().unwrap();
    assert_eq!(
        engine
            .volume_info(&swap.rec.engine_name())
            .unwrap()
            .written_bytes,
        8 * MIB
    );
    let answers = service
        .unbind("esx1", &[swap.rec.id.to_string(), swap.rec.id.to_string()])
        .unwrap();
    assert!(answers[0].fault.is_none());
    assert_eq!(
        answers[1].fault.as_ref().unwrap().kind,
        "NotFound",
        "unbound once only"
    );
    assert_eq!(
        engine
            .volume_info(&swap.rec.engine_name())
            .unwrap()
            .written_bytes,
        0
    );
    assert!(service.get(&swap.rec.id).is_ok(), "the swap vVol is kept");
    assert_eq!(service.unbind_all("esx1").unwrap(), 1);
    assert!(service.bound("esx1").is_empty());
}

#[test]
fn a_batch_snapshot_is_one_instant_all_or_none_and_reverts_only_its_own_vvol() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, service) = open(&dir);
    let mut disks: Vec<VvolInfo> = (0..4)
        .map(|_| service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap())
        .collect();
    // Not in the engine's order: each snapshot must still be its own disk's.
    disks.reverse();
    for (i, disk) in disks.iter().enumerate() {
        engine
            .open_volume(&disk.rec.engine_name())
            .unwrap()
            .write(0, &[i as u8 + 1; 4096])
            .unwrap();
    }
    let prepared: Vec<PreparedSnapshot> = disks
        .iter()
        .map(|d| {
            service
                .prepare_snapshot(&d.rec.id, SnapshotKind::ReadOnly)
                .unwrap()
        })
        .collect();
    let mut requests: Vec<SnapshotRequest> = prepared
        .iter()
        .map(|p| SnapshotRequest {
            snapshot_id: p.snapshot_id.to_string(),
            metadata: meta(&[("VMW_VVolName", "snap")]),
        })
        .collect();
    requests.push(SnapshotRequest {
        snapshot_id: VvolId::random().to_string(),
        metadata: Metadata::new(),
    });
    let refused = service.commit_snapshots(&requests, 10_000).unwrap();
    assert!(
        refused.results.iter().all(|r| r.fault.is_some()),
        "all or none"
    );
    assert_eq!(refused.results[4].fault.as_ref().unwrap().kind, "NotFound");
    assert_eq!(service.count(), 4, "nothing was taken");
    requests.pop();
    let taken = service.commit_snapshots(&requests, 10_000).unwrap();
    assert!(
        taken.results.iter().all(|r| r.fault.is_none()),
        "{:?}",
        taken.results
    );
    assert_eq!(service.count(), 8);
    assert_eq!(engine.list_snapshots(None, false).unwrap().len(), 4);
    assert!(
        matches!(service.commit_snapshots(&requests, 10_000).unwrap().results[0].fault, Some(ref f) if f.kind == "NotFound"),
        "a prepared id commits once"
    );

    for (i, disk) in disks.iter().enumerate() {
        engine
            .open_volume(&disk.rec.engine_name())
            .unwrap()
            .write(0, &[0xee; 4096])
            .unwrap();
        let snapshot = taken.results[i].result.as_ref().unwrap();
        assert!(snapshot.rec.read_only());
        assert_eq!(
            engine.object_id(&snapshot.rec.engine_name()),
            Some(snapshot.rec.object_id),
            "the record names its own snapshot"
        );
        let mut buf = vec![0; 4096];
        engine
            .open_snapshot(&snapshot.rec.engine_name())
            .unwrap()
            .read(0, &mut buf)
            .unwrap();
        assert_eq!(buf, vec![i as u8 + 1; 4096]);
    }
    let first_snapshot = &taken.results[0].result.as_ref().unwrap().rec.id;
    assert!(matches!(
        service.revert(&disks[1].rec.id, first_snapshot),
        Err(VvolFault::IncompatibleVolume(_))
    ));
    service.revert(&disks[0].rec.id, first_snapshot).unwrap();
    let mut buf = vec![0; 4096];
    engine
        .open_volume(&disks[0].rec.engine_name())
        .unwrap()
        .read(0, &mut buf)
        .unwrap();
    assert_eq!(buf, vec![1; 4096]);

    service.delete(&disks[0].rec.id).unwrap();
    assert_eq!(service.count(), 6, "a vVol's snapshots go with it");
    assert!(service.get(first_snapshot).is_err());
}

#[test]
fn writable_snapshots_and_clones_are_independent_and_a_clone_may_change_container() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, service) = open(&dir);
    engine
        .create_container("gold", ContainerPolicy::default())
        .unwrap();
    let disk = service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap();
    let volume = engine.open_volume(&disk.rec.engine_name()).unwrap();
    volume.write(0, &[7; 4096]).unwrap();
    let prepared = service
        .prepare_snapshot(&disk.rec.id, SnapshotKind::ReadWrite)
        .unwrap();
    let taken = service
        .commit_snapshots(
            &[SnapshotRequest {
                snapshot_id: prepared.snapshot_id.to_string(),
                metadata: Metadata::new(),
            }],
            10_000,
        )
        .unwrap();
    let writable = taken.results[0].result.clone().unwrap();
    assert!(!writable.rec.read_only());
    let copy = engine.open_volume(&writable.rec.engine_name()).unwrap();
    copy.write(0, &[9; 4096]).unwrap();
    let mut buf = vec![0; 4096];
    volume.read(0, &mut buf).unwrap();
    assert_eq!(buf, vec![7; 4096]);

    let fast = service
        .clone_vvol(
            &disk.rec.id,
            CloneSpec {
                fast: true,
                ..CloneSpec::default()
            },
        )
        .unwrap();
    assert_eq!(fast.rec.parent.as_ref(), Some(&disk.rec.id));
    assert!(matches!(
        service.clone_vvol(
            &disk.rec.id,
            CloneSpec {
                fast: true,
                container: Some("gold".into()),
                ..CloneSpec::default()
            }
        ),
        Err(VvolFault::InvalidArgument(_))
    ));
    let full = service
        .clone_vvol(
            &disk.rec.id,
            CloneSpec {
                container: Some("gold".into()),
                ..CloneSpec::default()
            },
        )
        .unwrap();
    assert_eq!(full.rec.container, "gold");
    engine
        .open_volume(&full.rec.engine_name())
        .unwrap()
        .read(0, &mut buf)
        .unwrap();
    assert_eq!(buf, vec![7; 4096]);
    service.delete(&disk.rec.id).unwrap();
    engine
        .open_volume(&full.rec.engine_name())
        .unwrap()
        .read(0, &mut buf)
        .unwrap();
    assert_eq!(buf, vec![7; 4096], "a clone outlives its source");
}

#[test]
fn allocated_bitmaps_mark_the_chunks_with_data_and_hint_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, service) = open(&dir);
    let disk = service
        .create(new_vvol(VvolType::Data, "vm", 1 << 19))
        .unwrap(); // 512 GiB
    let volume = engine.open_volume(&disk.rec.engine_name()).unwrap();
    volume.write(0, &[1; 4096]).unwrap();
    volume.write(5 * MIB + 4096, &[1; 8192]).unwrap();
    volume.write(300 << 30, &[1; 4096]).unwrap();
    let first = service
        .allocated_bitmap(&disk.rec.id, seg(0, 16 * MIB, MIB))
        .unwrap();
    assert_eq!(first.bitmap, vec![0b1000_0100, 0]);
    assert_eq!(first.next_allocated_offset_bytes, Some(300 << 30));
    let second = service
        .allocated_bitmap(&disk.rec.id, seg(2 << 30, 2 << 30, MIB))
        .unwrap();
    assert!(second.bitmap.iter().all(|&b| b == 0));
    assert_eq!(second.next_allocated_offset_bytes, Some(300 << 30));
    let last = service
        .allocated_bitmap(&disk.rec.id, seg(300 << 30, (512u64 - 300) << 30, 1 << 30))
        .unwrap();
    assert_eq!(last.bitmap[0], 0x80);
    assert_eq!(last.next_allocated_offset_bytes, None);
    let whole = service
        .allocated_bitmap(&disk.rec.id, seg(0, 512 << 30, 128 << 10))
        .unwrap();
    let set: Vec<u64> = (0..whole.bitmap.len() as u64 * 8)
        .filter(|i| whole.bitmap[(i / 8) as usize] & (0x80 >> (i % 8)) != 0)
        .collect();
    assert_eq!(set, vec![0, 40, (300 << 30) / (128 << 10)]);
}

#[test]
fn vvols_and_bindings_survive_a_restart_and_the_stores_are_made_to_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, gone, orphan);
    {
        let (engine, service) = open(&dir);
        kept = service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap();
        gone = service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap();
        service
            .bind("esx2", &[kept.rec.id.to_string(), gone.rec.id.to_string()])
            .unwrap();
        // A crash between the engine's and the store's steps, both ways: a
        // volume no record names, and a record whose volume went.
        orphan = VvolId::random().volume_name();
        engine.create_volume(&orphan, MIB).unwrap();
        engine.delete_volume(&gone.rec.engine_name()).unwrap();
        engine.eradicate_volume(&gone.rec.engine_name()).unwrap();
        engine.flush().unwrap();
        drop(service);
        engine.close().unwrap();
    }
    let (engine, service) = open(&dir);
    assert_eq!(service.get(&kept.rec.id).unwrap().rec, kept.rec);
    assert!(service.get(&gone.rec.id).is_err());
    assert_eq!(
        service
            .bound("esx2")
            .iter()
            .map(|b| b.id.clone())
            .collect::<Vec<_>>(),
        vec![kept.rec.id.clone()]
    );
    assert!(
        engine.volume_info(&orphan).is_err(),
        "the orphan volume was eradicated"
    );
    let events = service.events_since(0).unwrap();
    assert!(events.is_empty(), "events are not kept across a restart");
    service
        .update_metadata(
            &kept.rec.id,
            &BTreeMap::from([("k".to_string(), "v".to_string())]),
        )
        .unwrap();
    let after = service.events_since(0).unwrap();
    assert!(after[0].id > 4, "event ids go on from before the restart");
}

#[test]
fn a_deleted_vvol_must_be_unbound_first() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, service) = open(&dir);
    let disk = service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap();
    service.bind("esx1", &[disk.rec.id.to_string()]).unwrap();
    assert!(matches!(
        service.delete(&disk.rec.id),
        Err(VvolFault::ResourceInUse(_))
    ));
    service.unbind("esx1", &[disk.rec.id.to_string()]).unwrap();
    service.delete(&disk.rec.id).unwrap();
    assert!(engine.volume_info(&disk.rec.engine_name()).is_err());
    assert!(matches!(
        service.delete(&disk.rec.id),
        Err(VvolFault::NotFound(_))
    ));
}

/// A directory whose hosts can be deleted.
struct Hosts(parking_lot::Mutex<Vec<&'static str>>);

impl HostDirectory for Hosts {
    fn protocol_endpoint(&self, host: &str) -> Result<ProtocolEndpoint> {
        if self.0.lock().contains(&host) {
            TwoHosts.protocol_endpoint("esx1")
        } else {
            Err(VvolFault::NotFound(format!("host '{host}'")))
        }
    }

    fn protocol_endpoints(&self) -> Vec<HostEndpoint> {
        Vec::new()
    }
}

#[test]
fn a_host_deleted_while_the_array_was_down_loses_its_bindings_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = Arc::new(Hosts(parking_lot::Mutex::new(vec!["esx1", "esx2"])));
    let disk = {
        let engine = open_engine(dir.path());
        let service = VvolService::open(engine.clone(), dir.path(), hosts.clone()).unwrap();
        let disk = service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap();
        let id = disk.rec.id.to_string();
        service.bind("esx1", std::slice::from_ref(&id)).unwrap();
        service.bind("esx2", &[id]).unwrap();
        drop(service);
        engine.close().unwrap();
        disk
    };
    hosts.0.lock().retain(|h| *h != "esx2");
    let engine = open_engine(dir.path());
    let service = VvolService::open(engine, dir.path(), hosts.clone()).unwrap();
    assert_eq!(
        service.get(&disk.rec.id).unwrap().bound_hosts,
        vec!["esx1".to_string()]
    );
    hosts.0.lock().push("esx2");
    assert!(
        service.bound("esx2").is_empty(),
        "a namesake host does not inherit them"
    );
}

#[test]
fn unshared_bitmaps_show_what_changed_since_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, service) = open(&dir);
    let disk = service.create(new_vvol(VvolType::Data, "vm", 64)).unwrap();
    let volume = engine.open_volume(&disk.rec.engine_name()).unwrap();
    volume.write(0, &[1; 4096]).unwrap();
    let snapshot = snapshot_of(&service, &disk.rec.id, Metadata::new());
    volume.write(5 * MIB, &[2; 4096]).unwrap();
    volume.write(9 * MIB + 4096, &[3; 4096]).unwrap();
    let base = &snapshot;
    let bitmap = service
        .unshared_bitmap(&disk.rec.id, base, seg(0, 16 * MIB, MIB))
        .unwrap();
    assert_eq!(bitmap.bitmap, vec![0b0000_0100, 0b0100_0000]);
    let chunks = service
        .unshared_chunks(&disk.rec.id, base, seg(0, 16 * MIB, MIB))
        .unwrap();
    assert_eq!((chunks.scanned_chunks, chunks.unshared_chunks), (16, 2));
    let none = service
        .unshared_bitmap(base, base, seg(0, 64 * MIB, MIB))
        .unwrap();
    assert!(none.bitmap.iter().all(|&b| b == 0));
}

#[test]
fn operations_vasa_runs_as_tasks_are_recorded_with_their_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, service) = open(&dir);
    let made = service.create(new_vvol(VvolType::Data, "vm", 16)).unwrap();
    let mut bad = new_vvol(VvolType::Data, "vm", 16);
    bad.container = "nowhere".into();
    assert!(service.create(bad).is_err());
    service.resize(&made.rec.id, 32).unwrap();
    let tasks = service.tasks_since(0);
    let summary: Vec<(&str, TaskState)> = tasks
        .iter()
        .map(|t| (t.operation.as_str(), t.state))
        .collect();
    assert_eq!(
        summary,
        [
            ("createVirtualVolume", TaskState::Success),
            ("createVirtualVolume", TaskState::Error),
            ("resizeVirtualVolume", TaskState::Success)
        ]
    );
    assert_eq!(tasks[0].result.as_deref(), Some(made.rec.id.as_str()));
    assert_eq!(tasks[1].fault.as_ref().unwrap().kind, "NotFound");
    assert_eq!(service.task(tasks[0].id).unwrap(), tasks[0]);
    assert!(matches!(
        service.cancel_task(tasks[0].id),
        Err(VvolFault::InvalidArgument(_))
    ));
    assert!(matches!(service.task(999), Err(VvolFault::NotFound(_))));
    assert!(service.info(&[made.rec.id.to_string()]).is_ok());
    assert_eq!(
        service.tasks_since(0).len(),
        3,
        "only the operations VASA runs as tasks"
    );
}

/// What the REST API sends for an info request must be the typed answer,
/// serialised, after every kind of change to a vVol.
fn assert_info_json_is_the_typed_answer(service: &VvolService, ids: &[String]) {
    let typed = serde_json::to_value(service.info(ids).unwrap()).unwrap();
    let kept: serde_json::Value = serde_json::from_str(&service.info_json(ids).unwrap()).unwrap();
    assert_eq!(kept, typed);
}

#[test]
fn info_answers_kept_serialised_follow_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, service) = open(&dir);
    let a = service
        .create(new_vvol(VvolType::Config, "vm1", 4))
        .unwrap();
    let b = service.create(new_vvol(VvolType::Data, "vm1", 8)).unwrap();
    let mut ids = ids(&[&a, &b]);
    ids.push("rfc4122.not-a-uuid".into());
    ids.push(VvolId::random().to_string());
    assert_info_json_is_the_typed_answer(&service, &ids);
    let json = service.info_json(&ids[..1]).unwrap();
    assert!(json.contains("\"VMW_VmID\":\"vm1\""), "{json}");

    service
        .update_metadata(&a.rec.id, &meta(&[("VMW_VVolName", "vm1.vmx")]))
        .unwrap();
    service.resize(&b.rec.id, 16).unwrap();
    service.bind("esx1", &ids[..2]).unwrap();
    service.bind("esx2", &ids[..1]).unwrap();
    assert_info_json_is_the_typed_answer(&service, &ids);
    let bound: serde_json::Value =
        serde_json::from_str(&service.info_json(&ids[..1]).unwrap()).unwrap();
    assert_eq!(
        bound[0]["result"]["bound_hosts"],
        serde_json::json!(["esx1", "esx2"])
    );

    service.unbind("esx1", &ids[..2]).unwrap();
    let snapshot = snapshot_of(&service, &b.rec.id, meta(&[("VMW_VVolName", "snap")]));
    ids.push(snapshot.to_string());
    assert_info_json_is_the_typed_answer(&service, &ids);

    service.unbind("esx2", &ids[..1]).unwrap();
    service.delete(&a.rec.id).unwrap();
    assert_info_json_is_the_typed_answer(&service, &ids);
    let gone: serde_json::Value =
        serde_json::from_str(&service.info_json(&ids[..1]).unwrap()).unwrap();
    assert_eq!(gone[0]["fault"]["kind"], "NotFound");
    assert!(matches!(
        service.info_json(&vec![ids[1].clone(); MAX_BATCH + 1]),
        Err(VvolFault::OutOfResource(_))
    ));
}

#[test]
fn a_swap_being_emptied_cannot_be_bound_reverted_or_deleted_until_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, service) = open(&dir);
    let swap = service.create(new_vvol(VvolType::Swap, "vm", 8)).unwrap();
    let ids = vec![swap.rec.id.to_string()];
    let snapshot = snapshot_of(&service, &swap.rec.id, Metadata::new());
    service.writer.lock().emptying.insert(swap.rec.id.clone());
    let answer = service.bind("esx1", &ids).unwrap();
    assert_eq!(answer[0].fault.as_ref().unwrap().kind, "Busy", "{answer:?}");
    assert!(matches!(
        service.delete(&swap.rec.id),
        Err(VvolFault::Busy(_))
    ));
    assert!(matches!(
        service.revert(&swap.rec.id, &snapshot),
        Err(VvolFault::Busy(_))
    ));
    assert_eq!(service.count(), 2, "nothing deleted");
    service.writer.lock().emptying.clear();
    assert!(service.bind("esx1", &ids).unwrap()[0].fault.is_none());
    // An unbind empties the swap and leaves nothing marked.
    service.unbind("esx1", &ids).unwrap();
    assert!(service.writer.lock().emptying.is_empty());
    assert!(service.bind("esx1", &ids).unwrap()[0].fault.is_none());
}
