//! Ownership of a shard on a one-node cluster: a second gateway cannot take
//! a shard whose lease runs; when the owner stalls (stops renewing), the
//! other takes it over after the lease, fencing the old owner at the cluster
//! first; the old owner's renewal and late writes are refused by the cluster,
//! and nothing it writes after that reaches the shard the new owner serves; a
//! clean release hands over at once, without fencing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lacuna_engine::{Engine, EngineConfig};
use lacuna_rados::test_cluster::{TestCluster, POOL};
use lacuna_rados::Cluster;
use lacuna_rados_store::ownership::{lost_ownership, Ownership};

const MIB: u64 = 1 << 20;
const LEASE: Duration = Duration::from_secs(3);

struct Gateway {
    cluster: Arc<Cluster>,
    io: Arc<lacuna_rados::IoCtx>,
}

fn gateway(test: &TestCluster) -> Gateway {
    let cluster = test.client();
    let io = Arc::new(cluster.io(POOL, "shard-0").unwrap());
    Gateway { cluster, io }
}

fn engine(gw: &Gateway, dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(EngineConfig {
        background: false,
        external_store: Some(lacuna_rados_store::shard_store(gw.io.clone(), "shard-0")),
        ..EngineConfig::new(dir, 1024 * MIB)
    })
    .unwrap()
}

fn take(gw: &Gateway, name: &str) -> lacuna_rados::Result<Ownership> {
    Ownership::try_take(gw.cluster.clone(), gw.io.clone(), name, LEASE)
}

#[test]
fn a_stalled_owner_is_fenced_and_its_shard_taken_over() {
    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    let a = gateway(&cluster);
    let b = gateway(&cluster);

    let owner_a = take(&a, "gw-a").unwrap();
    assert_eq!(owner_a.fenced, None, "a fresh shard has no one to fence");
    let busy = take(&b, "gw-b").err().expect("the lease runs");
    assert!(busy.is_busy(), "{busy}");
    let engine_a = engine(&a, &local.path().join("a"));
    engine_a.create_volume("v", 16 * MIB).unwrap();
    let v = engine_a.open_volume("v").unwrap();
    v.write(0, &vec![1u8; MIB as usize]).unwrap();
    engine_a.flush().unwrap();
    owner_a.renew().unwrap();

    // Gateway a stalls: no renewal. Gateway b takes over once the lease ends.
    let stalled = Instant::now();
    let owner_b = loop {
        match take(&b, "gw-b") {
            Ok(owner) => break owner,
            Err(e) if e.is_busy() && stalled.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("the stalled owner's shard was never taken: {e}"),
        }
    };
    assert!(stalled.elapsed() >= LEASE - Duration::from_millis(500));
    let fenced = owner_b.fenced.clone().expect("gateway a was fenced");
    assert_eq!(fenced.gateway, "gw-a");
    assert_eq!(fenced.address, a.cluster.address().unwrap());
    let engine_b = engine(&b, &local.path().join("b"));
    engine_b.check_consistency().unwrap();
    let mut back = vec![0u8; MIB as usize];
    engine_b
        .open_volume("v")
        .unwrap()
        .read(0, &mut back)
        .unwrap();
    assert!(back.iter().all(|&x| x == 1), "the flushed write is there");

    // Gateway a wakes up: the cluster refuses it.
    let renewal = owner_a.renew().unwrap_err();
    assert!(lost_ownership(&renewal), "{renewal}");
    assert!(renewal.is_blocklisted(), "{renewal}");
    v.write(0, &vec![2u8; MIB as usize]).ok();
    let late = engine_a.flush();
    assert!(late.is_err(), "a fenced gateway's flush fails");
    std::mem::forget((v, engine_a));
    let engine_b2 = engine(&b, &local.path().join("b2"));
    engine_b2
        .open_volume("v")
        .unwrap()
        .read(0, &mut back)
        .unwrap();
    assert!(
        back.iter().all(|&x| x == 1),
        "nothing of the late write landed"
    );
    engine_b2.check_consistency().unwrap();
    drop(engine_b2);
    drop(engine_b);

    // A clean release hands the shard over at once, with no one fenced.
    owner_b.release().unwrap();
    let c = gateway(&cluster);
    let owner_c = take(&c, "gw-c").unwrap();
    assert_eq!(owner_c.fenced, None);
    owner_c.renew().unwrap();
}
