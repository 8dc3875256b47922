//! The binding against a real one-node Ceph cluster (`scripts/ceph-cluster.sh`):
//! object I/O in namespaces, leased exclusive locks, and fencing — a client
//! another one blocklisted has its writes refused by the cluster itself
//! (`EBLOCKLISTED` from librados, not a check of ours), so that a gateway
//! that lost its shard cannot write into it late.

use std::path::Path;
use std::time::{Duration, Instant};

use lacuna_rados::test_cluster::{TestCluster, POOL};
use lacuna_rados::{Cluster, RadosError};

/// One cluster for every check (starting one takes seconds).
#[test]
fn the_binding_against_a_one_node_cluster() {
    let cluster = TestCluster::start();
    objects_in_namespaces(&cluster);
    a_lease_keeps_others_out_until_it_expires(&cluster);
    a_blocklisted_holder_is_refused_by_the_cluster(&cluster);
    bad_input_is_an_error(&cluster);
}

fn objects_in_namespaces(cluster: &TestCluster) {
    let client = cluster.client();
    let a = client.io(POOL, "shard-a").unwrap();
    let b = client.io(POOL, "shard-b").unwrap();
    a.write("seg.00000001", 0, b"hello ").unwrap();
    a.write("seg.00000001", 6, b"world").unwrap();
    let mut buf = [0u8; 32];
    let n = a.read("seg.00000001", 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello world");
    assert_eq!(a.size("seg.00000001").unwrap(), 11);
    // Namespaces do not see each other's objects.
    b.write_full("seg.00000001", b"other").unwrap();
    assert_eq!(a.read("seg.00000001", 0, &mut buf).unwrap(), 11);
    a.write("seg.00000002", 0, &[7u8; 12288]).unwrap();
    assert_eq!(a.list(16).unwrap(), ["seg.00000001", "seg.00000002"]);
    assert_eq!(b.list(16).unwrap(), ["seg.00000001"]);
    let too_many = a.list(1).unwrap_err();
    assert_eq!(too_many.errno, libc::E2BIG, "{too_many}");
    // Zeroing keeps the size; truncation cuts; removal is idempotent.
    a.zero("seg.00000002", 4096, 4096).unwrap();
    let mut page = vec![1u8; 4096];
    assert_eq!(a.read("seg.00000002", 4096, &mut page).unwrap(), 4096);
    assert!(page.iter().all(|&b| b == 0));
    assert_eq!(a.read("seg.00000002", 8192, &mut page).unwrap(), 4096);
    assert!(page.iter().all(|&b| b == 7), "zeroing stays in its range");
    assert_eq!(a.size("seg.00000002").unwrap(), 12288);
    a.truncate("seg.00000001", 5).unwrap();
    assert_eq!(a.read("seg.00000001", 0, &mut buf).unwrap(), 5);
    a.remove("seg.00000002").unwrap();
    a.remove("seg.00000002").unwrap();
    let gone = a.size("seg.00000002").unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
    assert_eq!(a.list(16).unwrap(), ["seg.00000001"]);
}

fn a_lease_keeps_others_out_until_it_expires(cluster: &TestCluster) {
    let (first, second) = (cluster.client(), cluster.client());
    let lease = Duration::from_secs(2);
    let io1 = first.io(POOL, "lease").unwrap();
    let io2 = second.io(POOL, "lease").unwrap();
    io1.lock_exclusive("owner", "lacuna-owner", "gw-1", "gateway 1", lease)
        .unwrap();
    let busy = io2
        .lock_exclusive("owner", "lacuna-owner", "gw-2", "gateway 2", lease)
        .unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let holders = io2.lockers("owner", "lacuna-owner").unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].cookie, "gw-1");
    assert_eq!(holders[0].address, first.address().unwrap());
    assert_ne!(first.address().unwrap(), second.address().unwrap());
    // The holder renews; then it stops renewing and the lease runs out.
    io1.lock_exclusive("owner", "lacuna-owner", "gw-1", "gateway 1", lease)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match io2.lock_exclusive("owner", "lacuna-owner", "gw-2", "gateway 2", lease) {
            Ok(()) => break,
            Err(e) if e.is_busy() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("the expired lease was never free: {e}"),
        }
    }
    assert_eq!(
        io2.lockers("owner", "lacuna-owner").unwrap()[0].cookie,
        "gw-2"
    );
    io2.unlock("owner", "lacuna-owner", "gw-2").unwrap();
    assert!(io2.lockers("owner", "lacuna-owner").unwrap().is_empty());
}

fn a_blocklisted_holder_is_refused_by_the_cluster(cluster: &TestCluster) {
    let (old, new) = (cluster.client(), cluster.client());
    let old_io = old.io(POOL, "fence").unwrap();
    let new_io = new.io(POOL, "fence").unwrap();
    let lease = Duration::from_secs(60);
    old_io
        .lock_exclusive("owner", "lacuna-owner", "gw-old", "old owner", lease)
        .unwrap();
    old_io
        .write("seg.00000001", 0, b"old owner's flushed data")
        .unwrap();
    // The new owner fences the old one, breaks its lock and takes it.
    let holder = new_io.lockers("owner", "lacuna-owner").unwrap().remove(0);
    assert_eq!(holder.address, old.address().unwrap());
    new.blocklist(&holder.address, Duration::from_secs(3600))
        .unwrap();
    new_io.break_lock("owner", "lacuna-owner", &holder).unwrap();
    new_io
        .lock_exclusive("owner", "lacuna-owner", "gw-new", "new owner", lease)
        .unwrap();
    new_io.write("seg.00000001", 0, b"new owner").unwrap();
    // The old owner's late write: refused by the OSD, whatever our code does.
    let refused: RadosError = old_io
        .write("seg.00000001", 0, b"LATE WRITE FROM THE OLD")
        .unwrap_err();
    assert!(refused.is_blocklisted(), "{refused}");
    let relock = old_io
        .lock_exclusive("owner", "lacuna-owner", "gw-old", "old owner", lease)
        .unwrap_err();
    assert!(relock.is_blocklisted(), "{relock}");
    let mut buf = [0u8; 64];
    let n = new_io.read("seg.00000001", 0, &mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"new owner's flushed data",
        "the late write never landed"
    );
    // A new client of the restarted gateway is not blocklisted.
    let restarted = cluster.client();
    let io = restarted.io(POOL, "fence").unwrap();
    assert_eq!(io.read("seg.00000001", 0, &mut buf).unwrap(), n);
    let busy = io
        .lock_exclusive("owner", "lacuna-owner", "gw-old", "old owner", lease)
        .unwrap_err();
    assert!(busy.is_busy(), "the new owner keeps the shard: {busy}");
}

fn bad_input_is_an_error(cluster: &TestCluster) {
    let client = cluster.client();
    let missing = client.io("no-such-pool", "").expect_err("no such pool");
    assert!(missing.is_not_found(), "{missing}");
    let io = client.io(POOL, "bad").unwrap();
    let nul = io.write("a\0b", 0, b"x").unwrap_err();
    assert_eq!(nul.errno, libc::EINVAL);
    let bad = client
        .mon_command(&serde_json::json!({"prefix": "no such command"}))
        .unwrap_err();
    assert!(bad.errno > 0, "{bad}");
    let status = client
        .mon_command(&serde_json::json!({"prefix": "status", "format": "json"}))
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["fsid"].is_string(), "{status}");
    let no_conf = Cluster::connect(Path::new("/nonexistent/ceph.conf"))
        .err()
        .expect("no configuration");
    assert!(no_conf.errno > 0, "{no_conf}");
}
