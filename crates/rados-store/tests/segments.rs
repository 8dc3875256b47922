//! The segment store's appends in flight, on a one-node cluster: small
//! and large appends go out gathered, a few ops for many; a read of bytes not yet
//! sent or still in flight returns them; what is in flight stays under its
//! bound; `sync` returns only once another client can read every byte; and
//! once the cluster fences this client, the refused append fails `sync` and
//! every later call, and none of its bytes reach the object.

use std::sync::Arc;
use std::time::Duration;

use lacuna_engine::segment::log::{SegmentId, SegmentStore};
use lacuna_rados::test_cluster::{TestCluster, POOL};
use lacuna_rados::RadosError;
use lacuna_rados_store::segments::MAX_IN_FLIGHT_BYTES;
use lacuna_rados_store::RadosSegmentStore;

const NAMESPACE: &str = "segments-test";
const MIB: usize = 1 << 20;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

#[test]
fn appends_in_flight_read_back_stay_bounded_and_a_fenced_one_fails_sync() {
    let cluster = TestCluster::start();
    let client_a = cluster.client();
    let client_b = cluster.client();
    let store_a = RadosSegmentStore::new(Arc::new(client_a.io(POOL, NAMESPACE).unwrap()));
    let store_b = RadosSegmentStore::new(Arc::new(client_b.io(POOL, NAMESPACE).unwrap()));

    // Small appends, each read back at once, most of them still in flight.
    let small = SegmentId::new(1);
    let mut at = 0u64;
    for i in 0..500u64 {
        let bytes = pattern(i, 4096 + (i as usize % 3) * 512);
        let (head, tail) = bytes.split_at(100);
        store_a.write_vectored_at(small, at, &[head, tail]).unwrap();
        let mut back = vec![0u8; bytes.len()];
        store_a.read_at(small, at, &mut back).unwrap();
        assert!(back == bytes, "append {i} read back while in flight");
        at += bytes.len() as u64;
    }
    assert!(
        store_a.appends_sent() <= 500 / 20,
        "small appends are gathered: {} ops for 500",
        store_a.appends_sent()
    );

    // Large appends: gathered too, and what is in flight never passes the
    // bound.
    let sent_before = store_a.appends_sent();
    let large = SegmentId::new(2);
    let mut peak_bytes = 0;
    for i in 0..96u64 {
        store_a
            .write_at(large, i * MIB as u64, &pattern(1000 + i, MIB))
            .unwrap();
        peak_bytes = peak_bytes.max(store_a.in_flight_bytes());
    }
    assert!(peak_bytes <= MAX_IN_FLIGHT_BYTES, "{peak_bytes} in flight");
    assert!(peak_bytes > 0, "appends are sent without waiting");
    let large_ops = store_a.appends_sent() - sent_before;
    assert!(
        large_ops <= 96 / 4 + 1,
        "1 MiB appends go out gathered into a few large ops: {large_ops} for 96"
    );

    // Once synced, another client reads every byte.
    store_a.sync(small).unwrap();
    store_a.sync(large).unwrap();
    assert_eq!(store_a.in_flight_bytes(), 0);
    let mut back = vec![0u8; MIB];
    for i in 0..96u64 {
        store_b.read_at(large, i * MIB as u64, &mut back).unwrap();
        assert!(back == pattern(1000 + i, MIB), "MiB {i} after sync");
    }
    let listed = store_b.list().unwrap();
    assert_eq!(listed, vec![(small, at), (large, 96 * MIB as u64)]);

    // Fenced: the cluster refuses A's next append; sync reports it, and so
    // does every later call.
    client_b
        .blocklist(&client_a.address().unwrap(), Duration::from_secs(3600))
        .unwrap();
    let late = SegmentId::new(3);
    let sent = store_a.write_at(late, 0, &pattern(7, 64 << 10));
    let synced = store_a.sync(late);
    let error = sent
        .and(synced)
        .expect_err("a fenced client's append fails");
    let refusal = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<RadosError>())
        .unwrap_or_else(|| panic!("a cluster refusal: {error}"));
    assert!(refusal.is_blocklisted(), "refused as blocklisted: {error}");
    store_a
        .write_at(late, 1 << 20, b"later")
        .and_then(|()| store_a.sync(late))
        .expect_err("every call after a refusal fails");
    assert_eq!(
        store_b.list().unwrap().len(),
        2,
        "no fenced byte reached the cluster"
    );
}
