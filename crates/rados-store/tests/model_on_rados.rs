//! The engine's model test (`crates/engine/tests/common/model.rs`) on the
//! RADOS store: the same random sequences of writes, unmaps, write-zeroes,
//! reads, flushes, restarts, reclaim and cleaning, checked byte for byte
//! against the in-memory model, with every segment and metadata page an
//! object of a one-node Ceph cluster. Each case is a shard of its own (a
//! namespace of the pool); a restart is another engine, on the same shard,
//! with a local directory that holds caches only.

#[path = "../../engine/tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::model::{op, run_on};
use lacuna_engine::{Engine, EngineConfig};
use lacuna_rados::test_cluster::{TestCluster, POOL};
use proptest::test_runner::{Config, TestRunner};

const CAPACITY_BYTES: u64 = 1 << 30;
/// Fewer cases than on the local store: every operation is round trips to
/// the cluster.
const CASES: u32 = 64;

#[test]
fn engine_on_rados_matches_model() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let shards = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        ..Config::default()
    });
    let ops = proptest::collection::vec(op(), 1..60);
    let outcome = runner.run(&ops, |ops| {
        let shard = format!("model-{}", shards.fetch_add(1, Ordering::Relaxed));
        let local = common::temp_dir("rados", "model");
        let open = || -> Arc<Engine> {
            let io = Arc::new(client.io(POOL, &shard).unwrap());
            Engine::open(EngineConfig {
                external_store: Some(lacuna_rados_store::shard_store(io, &shard)),
                ..EngineConfig::new(local.path(), CAPACITY_BYTES)
            })
            .expect("opening the engine on RADOS")
        };
        run_on(ops, &open);
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("the engine on RADOS differs from the model: {failure}");
    }
    // The shards were on the cluster, not in the local directories.
    let objects = client.io(POOL, "model-0").unwrap().list(1 << 16).unwrap();
    assert!(
        objects.iter().any(|o| o.starts_with("meta.")),
        "{objects:?}"
    );
}
