//! A model-based test of vVol operations on the daemon: random sequences of
//! create, write, metadata, resize, bind, unbind, two-phase batch snapshots,
//! fast clones, reverts and deletes (and bad requests), against a model of
//! what each should leave; at random points the daemon is SIGKILLed or
//! restarted, and every vVol is checked afterwards — its record, metadata,
//! snapshot lineage and bindings through the API, and its data (a stamp at
//! offset 0, flushed before it was acknowledged) over NBD.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use support::{api, temp_dir, tool_ok, Daemon};

const HOSTS: [&str; 2] = ["esx1", "esx2"];
const MAX_VVOLS: usize = 20;
const STEPS: usize = 140;

/// xorshift64*: reproducible sequences from a seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Expected {
    vvol_type: String,
    size_mib: u64,
    metadata: BTreeMap<String, String>,
    /// The base, for a snapshot vVol.
    snapshot_of: Option<String>,
    bound: BTreeSet<String>,
    /// The byte the first 4 KiB hold (0: never written, or emptied).
    stamp: u8,
    /// A swap vVol emptied at unbind (not flushed for it): until something
    /// makes that durable, a crash may bring back this stamp.
    emptied_from: Option<u8>,
}

struct World {
    dir: tempfile::TempDir,
    daemon: Daemon,
    model: BTreeMap<String, Expected>,
    next_stamp: u8,
}

impl World {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        api(&self.daemon, method, path, body.as_ref())
    }

    fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.call(method, path, body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {answer}"
        );
        answer
    }

    fn ids(&self, filter: impl Fn(&Expected) -> bool) -> Vec<String> {
        self.model
            .iter()
            .filter(|(_, e)| filter(e))
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn engine_name(&self, id: &str) -> String {
        let uuid = |id: &str| id.strip_prefix("rfc4122.").unwrap().to_string();
        match &self.model[id].snapshot_of {
            Some(base) => format!("vvol-{}@{}", uuid(base), uuid(id)),
            None => format!("vvol-{}", uuid(id)),
        }
    }

    fn restart(&mut self, crash: bool) {
        if crash {
            self.daemon.kill();
        } else {
            self.daemon.stop();
            // A clean stop makes everything durable.
            self.model.values_mut().for_each(|e| e.emptied_from = None);
        }
        self.daemon = Daemon::start(self.dir.path());
    }
}

/// Writes `stamp` over the first 4 KiB of each engine volume and flushes.
fn write_stamp(daemon: &Daemon, volume: &str, stamp: u8) {
    let script = format!(
        r#"
import nbd
h = nbd.NBD()
h.set_export_name("{volume}")
h.connect_tcp("127.0.0.1", "{}")
h.pwrite(bytes([{stamp}]) * 4096, 0)
h.flush()
"#,
        daemon.nbd_port
    );
    tool_ok("/usr/bin/python3", &["-c", &script]);
}

/// The first byte of each export, and whether its first 4 KiB are all that byte.
fn read_stamps(daemon: &Daemon, exports: &[String]) -> Vec<(u8, bool)> {
    let script = format!(
        r#"
import nbd
for name in {exports:?}:
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_tcp("127.0.0.1", "{}")
    block = h.pread(4096, 0)
    print(block[0], block == bytes([block[0]]) * 4096)
    h.shutdown()
"#,
        daemon.nbd_port
    );
    tool_ok("/usr/bin/python3", &["-c", &script])
        .lines()
        .map(|line| {
            let (byte, uniform) = line.split_once(' ').unwrap();
            (byte.parse().unwrap(), uniform == "True")
        })
        .collect()
}

fn verify(world: &mut World) {
    let (_, found) = world.call("POST", "/v1/vvols/query", Some(json!({})));
    let mut ids: Vec<String> = serde_json::from_value(found["ids"].clone()).unwrap();
    ids.sort();
    let expected: Vec<String> = world.model.keys().cloned().collect();
    assert_eq!(
        ids,
        expected,
        "the vVols; model {:#?}\ndaemon log:\n{}",
        world.model,
        world.daemon.log()
    );
    if ids.is_empty() {
        return;
    }
    let infos = world.ok("POST", "/v1/vvols/info", Some(json!({ "ids": ids })));
    for info in infos.as_array().unwrap() {
        let id = info["id"].as_str().unwrap();
        let v = &info["result"];
        let e = &world.model[id];
        assert_eq!(v["vvol_type"], e.vvol_type, "{id}");
        assert_eq!(v["size_mib"], e.size_mib, "{id}");
        let metadata: BTreeMap<String, String> =
            serde_json::from_value(v["metadata"].clone()).unwrap();
        assert_eq!(metadata, e.metadata, "{id}");
        assert_eq!(
            v["snapshot"]["base"].as_str(),
            e.snapshot_of.as_deref(),
            "{id}"
        );
        let bound: BTreeSet<String> = serde_json::from_value(v["bound_hosts"].clone()).unwrap();
        assert_eq!(bound, e.bound, "{id} bindings");
    }
    let exports: Vec<String> = world.model.keys().map(|id| world.engine_name(id)).collect();
    let stamps = read_stamps(&world.daemon, &exports);
    for ((id, e), (byte, uniform)) in world.model.iter_mut().zip(stamps) {
        assert!(uniform, "{id}: its first 4 KiB are not one stamp");
        if e.emptied_from == Some(byte) {
            // The emptying of an unbound swap vVol was lost in a crash.
            e.stamp = byte;
        }
        assert_eq!(byte, e.stamp, "{id} data");
    }
}

fn step(world: &mut World, rng: &mut Rng) {
    let live = world.ids(|e| e.snapshot_of.is_none());
    match rng.below(12) {
        0 | 1 if world.model.len() < MAX_VVOLS => {
            let kind = *rng.pick(&["Config", "Data", "Swap", "Data"]).unwrap();
            let size_mib = 16 * (1 + rng.below(3) as u64);
            let metadata: BTreeMap<String, String> = [
                ("VMW_VVolType".to_string(), kind.to_string()),
                ("VMW_VmID".to_string(), format!("vm{}", rng.below(4))),
            ]
            .into();
            let v = world.ok("POST", "/v1/vvols", Some(json!({"container": "default", "vvol_type": kind, "size_mib": size_mib, "metadata": metadata})));
            let expected = Expected {
                vvol_type: kind.into(),
                size_mib,
                metadata,
                snapshot_of: None,
                bound: BTreeSet::new(),
                stamp: 0,
                emptied_from: None,
            };
            world
                .model
                .insert(v["id"].as_str().unwrap().to_string(), expected);
        }
        2 => {
            if let Some(id) = rng.pick(&live).cloned() {
                world.next_stamp = world.next_stamp % 250 + 1;
                let stamp = world.next_stamp;
                write_stamp(&world.daemon, &world.engine_name(&id), stamp);
                let e = world.model.get_mut(&id).unwrap();
                e.stamp = stamp;
                // Its flush made the emptying before it durable too.
                e.emptied_from = None;
            }
        }
        3 => {
            if let Some(id) = rng.pick(&world.ids(|_| true)).cloned() {
                let key = format!("k{}", rng.below(3));
                let value = if rng.below(3) == 0 {
                    String::new()
                } else {
                    format!("v{}", rng.below(100))
                };
                world.ok(
                    "PATCH",
                    &format!("/v1/vvols/{id}/metadata"),
                    Some(json!({"metadata": {&key: &value}})),
                );
                let metadata = &mut world.model.get_mut(&id).unwrap().metadata;
                if value.is_empty() {
                    metadata.remove(&key);
                } else {
                    metadata.insert(key, value);
                }
            }
        }
        4 => {
            if let Some(id) = rng.pick(&live).cloned() {
                let size_mib = world.model[&id].size_mib + 16;
                world.ok(
                    "POST",
                    &format!("/v1/vvols/{id}/resize"),
                    Some(json!({"size_mib": size_mib})),
                );
                world.model.get_mut(&id).unwrap().size_mib = size_mib;
            }
        }
        5 | 6 => {
            let host = *rng.pick(&HOSTS).unwrap();
            let all = world.ids(|_| true);
            let batch: BTreeSet<String> = (0..1 + rng.below(3))
                .filter_map(|_| rng.pick(&all).cloned())
                .collect();
            if !batch.is_empty() {
                let answers = world.ok(
                    "POST",
                    "/v1/vvols/bind",
                    Some(json!({"host": host, "ids": batch})),
                );
                assert!(
                    answers
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|a| a["fault"].is_null()),
                    "{answers}"
                );
                for id in &batch {
                    world
                        .model
                        .get_mut(id)
                        .unwrap()
                        .bound
                        .insert(host.to_string());
                }
            }
        }
        7 => {
            let host = *rng.pick(&HOSTS).unwrap();
            let bound = world.ids(|e| e.bound.contains(host));
            if let Some(id) = rng.pick(&bound).cloned() {
                world.ok(
                    "POST",
                    "/v1/vvols/unbind",
                    Some(json!({"host": host, "ids": [id]})),
                );
                let e = world.model.get_mut(&id).unwrap();
                e.bound.remove(host);
                if e.vvol_type == "Swap" && e.bound.is_empty() && e.snapshot_of.is_none() {
                    e.emptied_from = Some(e.stamp).filter(|&s| s != 0).or(e.emptied_from);
                    e.stamp = 0;
                }
            }
        }
        8 if world.model.len() + 3 <= MAX_VVOLS => {
            let bases: BTreeSet<String> = (0..1 + rng.below(3))
                .filter_map(|_| rng.pick(&live).cloned())
                .collect();
            if bases.is_empty() {
                return;
            }
            let mut prepared = Vec::new();
            for base in &bases {
                let p = world.ok(
                    "POST",
                    &format!("/v1/vvols/{base}/prepare-snapshot"),
                    Some(json!({})),
                );
                prepared.push(p["snapshot_id"].as_str().unwrap().to_string());
            }
            let requests: Vec<Value> = prepared
                .iter()
                .map(|id| json!({"snapshot_id": id, "metadata": {"snap": "yes"}}))
                .collect();
            let commit = world.ok(
                "POST",
                "/v1/vvols/snapshot",
                Some(json!({"snapshots": requests})),
            );
            assert!(
                commit["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|r| r["fault"].is_null()),
                "{commit}"
            );
            for (base, id) in bases.iter().zip(prepared) {
                let b = world.model[base].clone();
                let metadata = [("snap".to_string(), "yes".to_string())].into();
                world.model.insert(
                    id,
                    Expected {
                        metadata,
                        snapshot_of: Some(base.clone()),
                        bound: BTreeSet::new(),
                        emptied_from: None,
                        ..b
                    },
                );
            }
        }
        9 if world.model.len() < MAX_VVOLS => {
            if let Some(id) = rng.pick(&world.ids(|_| true)).cloned() {
                let v = world.ok(
                    "POST",
                    &format!("/v1/vvols/{id}/clone"),
                    Some(json!({"fast": true})),
                );
                let source = world.model[&id].clone();
                let expected = Expected {
                    metadata: BTreeMap::new(),
                    snapshot_of: None,
                    bound: BTreeSet::new(),
                    emptied_from: None,
                    ..source
                };
                world
                    .model
                    .insert(v["id"].as_str().unwrap().to_string(), expected);
            }
        }
        10 => {
            let snapshots = world.ids(|e| e.snapshot_of.is_some());
            if let Some(snapshot) = rng.pick(&snapshots).cloned() {
                let base = world.model[&snapshot].snapshot_of.clone().unwrap();
                let foreign = world
                    .ids(|e| e.snapshot_of.is_none())
                    .into_iter()
                    .find(|id| *id != base);
                if let Some(other) = foreign {
                    let (status, _) = world.call(
                        "POST",
                        &format!("/v1/vvols/{other}/revert"),
                        Some(json!({"snapshot": snapshot})),
                    );
                    assert_eq!(status, 409, "a revert to another vVol's snapshot");
                }
                world.ok(
                    "POST",
                    &format!("/v1/vvols/{base}/revert"),
                    Some(json!({"snapshot": snapshot})),
                );
                let (stamp, size_mib) = (
                    world.model[&snapshot].stamp,
                    world.model[&snapshot].size_mib,
                );
                let e = world.model.get_mut(&base).unwrap();
                e.stamp = stamp;
                e.size_mib = size_mib;
            }
        }
        11 => {
            if let Some(id) = rng.pick(&world.ids(|_| true)).cloned() {
                let family: Vec<String> = world
                    .ids(|e| e.snapshot_of.as_deref() == Some(id.as_str()))
                    .into_iter()
                    .chain([id.clone()])
                    .collect();
                let bound = family.iter().any(|f| !world.model[f].bound.is_empty());
                let (status, answer) = world.call("DELETE", &format!("/v1/vvols/{id}"), None);
                if bound {
                    assert_eq!(status, 409, "a bound vVol is not deleted: {answer}");
                } else {
                    assert_eq!(status, 204, "{answer}");
                    for f in family {
                        world.model.remove(&f);
                    }
                }
            }
        }
        _ => {
            // Bad requests change nothing.
            let (status, _) = world.call(
                "POST",
                "/v1/vvols/bind",
                Some(json!({"host": "nohost", "ids": world.ids(|_| true).first()})),
            );
            assert!(status == 404 || status == 400, "{status}");
            let (status, _) = world.call(
                "POST",
                "/v1/vvols",
                Some(json!({"container": "default", "vvol_type": "Data", "size_mib": 0})),
            );
            assert_eq!(status, 400);
        }
    }
}

#[test]
fn vvol_operations_match_the_model_across_crashes_and_restarts() {
    let seeds: Vec<u64> = match std::env::var("VVOL_MODEL_SEED") {
        Ok(seed) => vec![seed.parse().expect("VVOL_MODEL_SEED is a number")],
        Err(_) => vec![0x5eed_0001, 0x5eed_0002],
    };
    for seed in seeds {
        let dir = temp_dir("vvol-model");
        let daemon = Daemon::start(dir.path());
        for host in HOSTS {
            daemon.cli_ok(&[
                "host",
                "create",
                host,
                "--iqn",
                &format!("iqn.1998-01.com.vmware:{host}"),
            ]);
            daemon.cli_ok(&["host", "protocol-endpoint", host]);
        }
        let mut world = World {
            dir,
            daemon,
            model: BTreeMap::new(),
            next_stamp: 0,
        };
        let mut rng = Rng(seed);
        let (mut crashes, mut restarts) = (0, 0);
        for i in 0..STEPS {
            step(&mut world, &mut rng);
            match rng.below(25) {
                0 => {
                    world.restart(true);
                    crashes += 1;
                    verify(&mut world);
                }
                1 => {
                    world.restart(false);
                    restarts += 1;
                    verify(&mut world);
                }
                _ if i % 20 == 19 => verify(&mut world),
                _ => {}
            }
        }
        world.restart(true);
        verify(&mut world);
        eprintln!(
            "seed {seed:#x}: {} vVols at the end, {} crashes, {} restarts",
            world.model.len(),
            crashes + 1,
            restarts
        );
        assert!(
            world.model.values().any(|e| e.snapshot_of.is_some()),
            "the sequence took snapshots"
        );
        assert!(
            world.model.values().any(|e| !e.bound.is_empty()),
            "the sequence bound vVols"
        );
    }
}
