//! redb on RADOS objects (`StripedBackend`) against a one-node cluster: what
//! a durable commit wrote is there for another client, a commit never synced
//! is gone after a crash, and a commit torn part way (some stripes written,
//! the rest failed) leaves the previous durable commit whole — the property
//! docs/SCALE-OUT.md rests the metadata's crash safety on.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use lacuna_rados::test_cluster::{TestCluster, POOL};
use lacuna_rados_store::StripedBackend;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");

fn open(cluster: &TestCluster, namespace: &str) -> (Database, Arc<std::sync::atomic::AtomicUsize>) {
    let io = Arc::new(cluster.client().io(POOL, namespace).unwrap());
    let backend = StripedBackend::open(io, "meta").unwrap();
    let hook = backend.fault_hook();
    let db = redb::Builder::new().create_with_backend(backend).unwrap();
    (db, hook)
}

fn row(key: u64, version: u8, len: usize) -> Vec<u8> {
    let mut bytes = vec![version; len];
    bytes[..8].copy_from_slice(&key.to_le_bytes());
    bytes
}

fn commit(
    db: &Database,
    keys: std::ops::Range<u64>,
    version: u8,
    len: usize,
    durable: bool,
) -> Result<(), redb::CommitError> {
    let mut txn = db.begin_write().unwrap();
    if !durable {
        txn.set_durability(Durability::None).unwrap();
    }
    {
        let mut table = txn.open_table(ROWS).unwrap();
        for key in keys {
            table
                .insert(key, row(key, version, len).as_slice())
                .unwrap();
        }
    }
    #[allow(clippy::disallowed_methods)] // a plain redb database, not the engine's Kv
    txn.commit()
}

/// Every row of the table: key → version (checked whole).
fn contents(db: &Database) -> Vec<(u64, u8)> {
    let txn = db.begin_read().unwrap();
    let table = match txn.open_table(ROWS) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Vec::new(),
        Err(e) => panic!("{e}"),
    };
    table
        .iter()
        .unwrap()
        .map(|item| {
            let (key, value) = item.unwrap();
            let (key, value) = (key.value(), value.value());
            assert_eq!(
                &value[..8],
                &key.to_le_bytes(),
                "row {key} holds another row's bytes"
            );
            let version = value[8];
            assert!(
                value[8..].iter().all(|&b| b == version),
                "row {key} is torn"
            );
            (key, version)
        })
        .collect()
}

#[test]
fn redb_on_rados_objects_keeps_exactly_its_durable_commits() {
    let cluster = TestCluster::start();

    // Durable commits are there for a new client; the file is in 4 MiB stripes.
    let (db, _) = open(&cluster, "durable");
    for part in 0..4 {
        commit(&db, part * 500..(part + 1) * 500, 1, 1024, true).unwrap();
    }
    drop(db);
    let (db, _) = open(&cluster, "durable");
    let rows = contents(&db);
    assert_eq!(rows.len(), 2000);
    assert!(rows.iter().all(|&(_, v)| v == 1));
    drop(db);
    let objects = cluster
        .client()
        .io(POOL, "durable")
        .unwrap()
        .list(1024)
        .unwrap();
    assert!(objects.contains(&"meta.length".to_string()), "{objects:?}");
    assert!(
        objects.contains(&"meta.00000000".to_string()),
        "{objects:?}"
    );

    // A commit never made durable is gone after a crash (the process's
    // buffer is lost: the database is leaked, never closed).
    let (db, _) = open(&cluster, "crash");
    commit(&db, 0..100, 1, 512, true).unwrap();
    commit(&db, 100..200, 2, 512, false).unwrap();
    assert_eq!(contents(&db).len(), 200, "visible before the crash");
    std::mem::forget(db);
    let (db, _) = open(&cluster, "crash");
    let rows = contents(&db);
    assert_eq!(rows.len(), 100, "only the durable commit");
    assert!(rows.iter().all(|&(k, v)| k < 100 && v == 1));
    drop(db);

    // A commit torn part way (the first stripe written, the others refused)
    // leaves the previous durable commit whole.
    let (db, hook) = open(&cluster, "torn");
    commit(&db, 0..300, 1, 4096, true).unwrap();
    hook.store(1, Ordering::SeqCst);
    let torn = commit(&db, 0..3000, 2, 4096, true);
    assert!(torn.is_err(), "the injected failure fails the commit");
    std::mem::forget(db);
    let (db, hook) = open(&cluster, "torn");
    assert_eq!(hook.load(Ordering::SeqCst), usize::MAX);
    let rows = contents(&db);
    assert_eq!(rows.len(), 300, "the torn commit's rows are not there");
    assert!(rows.iter().all(|&(_, v)| v == 1), "nor any of its versions");
    // And the database takes writes again.
    commit(&db, 300..400, 3, 4096, true).unwrap();
    assert_eq!(contents(&db).len(), 400);
}

/// Pages being sent are read as their new bytes, never the objects' old
/// ones: redb's readers see commits not yet durable, so a reader asks for
/// pages while a sync sends them (this read garbage pages under host reads
/// during background commits). Each round buffers new bytes over 8 MiB (two
/// stripes), syncs on one thread and reads them back on another all the
/// while.
#[test]
fn pages_being_sent_read_back_as_sent() {
    use redb::StorageBackend;
    const SPAN_BYTES: usize = 8 << 20;
    const PAGE_BYTES: usize = 4096;
    let cluster = TestCluster::start();
    let io = Arc::new(cluster.client().io(POOL, "sending").unwrap());
    let backend = Arc::new(StripedBackend::open(io, "meta").unwrap());
    backend.set_len(SPAN_BYTES as u64).unwrap();
    let mut reads_during_sync = 0usize;
    for round in 1..=12u8 {
        let bytes = vec![round; SPAN_BYTES];
        backend.write(0, &bytes).unwrap();
        let syncing = {
            let backend = backend.clone();
            std::thread::spawn(move || backend.sync_data())
        };
        let mut page = vec![0u8; PAGE_BYTES];
        let mut at = 0usize;
        while !syncing.is_finished() {
            backend.read(at as u64, &mut page).unwrap();
            assert!(
                page.iter().all(|b| *b == round),
                "round {round}: the page at {at} read {} while being sent",
                page[0]
            );
            reads_during_sync += 1;
            at = (at + 7 * PAGE_BYTES + PAGE_BYTES) % SPAN_BYTES;
        }
        syncing.join().unwrap().unwrap();
    }
    assert!(reads_during_sync > 0, "some reads overlapped a sync");
}
