//! kv-choice: measure redb 4.x and fjall 3.x on Lacuna's metadata write path.
//!
//! One host write (4 KiB) = one transaction / batch:
//!   get mapping[(vol,grain)] -> 24 B;  get dedup[fp16] -> 8 B (70 % miss / 30 % hit)
//!   miss: put block[id] = 40 B, put dedup[fp] = id;  hit: get+put block[id] (refcount+1)
//!   put mapping[(vol,grain)];  old mapping: get block[old], put (refcount-1) or delete it
//!   (and its dedup entry) at 0.  Plus meta["seq"] = (seq, next_block_id).
//! Commits are non-durable; every `--flush N` host writes a durable commit (the host FLUSH).
//!
//! Usage:  kv-choice [--runs 3] [--flush 256] [--engines redb,redb-qr,fjall] [--read-secs 10]
//!         kv-choice child <engine> <dir> <flush>     (internal: crash-test writer)

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GRAINS: u64 = 1 << 20; // 1M grains x 4 KiB = 4 GiB volume
const PREFILL: u64 = 500_000;
const RANDOM_WRITES: u64 = 500_000;
const CRASH_WRITES: u64 = 100_000; // random writes the crash child does before it is killed
const CACHE_BYTES: usize = 64 << 20; // same cache budget for both engines
const VOL: u64 = 7;

/// Set by redb's repair callback: the open had to repair the file.
static REPAIRED: AtomicBool = AtomicBool::new(false);

// ---------------------------------------------------------------- rng / workload

#[derive(Clone)]
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum T {
    Map,
    Dedup,
    Block,
    Meta,
}

/// Table operations inside one open transaction. Values are fixed size per table,
/// `get` copies into `out` (no allocation on the benchmark's side).
trait Ops {
    fn get(&mut self, t: T, k: &[u8], out: &mut [u8]) -> bool;
    fn put(&mut self, t: T, k: &[u8], v: &[u8]);
    fn del(&mut self, t: T, k: &[u8]);
}

struct WriterState {
    rng: Rng,
    seq: u64,
    next_block: u64,
    ring: Vec<[u8; 16]>, // recently written fingerprints, source of dedup hits
    ring_pos: usize,
    hits: u64,
    misses: u64,
    frees: u64,
}

impl WriterState {
    fn new(seed: u64) -> Self {
        WriterState {
            rng: Rng(seed),
            seq: 0,
            next_block: 1,
            ring: Vec::with_capacity(4096),
            ring_pos: 0,
            hits: 0,
            misses: 0,
            frees: 0,
        }
    }
}

fn map_key(vol: u64, grain: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&vol.to_be_bytes());
    k[8..].copy_from_slice(&grain.to_be_bytes());
    k
}

/// The write path of one 4 KiB host write.
fn host_write<O: Ops>(o: &mut O, st: &mut WriterState, grain: u64) {
    let mk = map_key(VOL, grain);
    let mut mv = [0u8; 24];
    let old = if o.get(T::Map, &mk, &mut mv) {
        Some(u64::from_be_bytes(mv[..8].try_into().unwrap()))
    } else {
        None
    };

    // 30 % of writes carry content already stored (a recent fingerprint).
    let fp: [u8; 16] = if !st.ring.is_empty() && st.rng.below(100) < 30 {
        st.ring[st.rng.below(st.ring.len() as u64) as usize]
    } else {
        let mut f = [0u8; 16];
        f[..8].copy_from_slice(&st.rng.next().to_le_bytes());
        f[8..].copy_from_slice(&st.rng.next().to_le_bytes());
        if st.ring.len() < 4096 {
            st.ring.push(f);
        } else {
            st.ring[st.ring_pos] = f;
            st.ring_pos = (st.ring_pos + 1) % 4096;
        }
        f
    };

    let mut dv = [0u8; 8];
    let mut bv = [0u8; 40];
    let id = if o.get(T::Dedup, &fp, &mut dv) {
        st.hits += 1;
        let id = u64::from_be_bytes(dv);
        let bk = id.to_be_bytes();
        assert!(o.get(T::Block, &bk, &mut bv), "dedup points at missing block");
        let rc = u64::from_be_bytes(bv[..8].try_into().unwrap()) + 1;
        bv[..8].copy_from_slice(&rc.to_be_bytes());
        o.put(T::Block, &bk, &bv);
        id
    } else {
        st.misses += 1;
        let id = st.next_block;
        st.next_block += 1;
        // block value: refcount u64 | fingerprint 16 | physical address u64 | crc/flags u64
        bv[..8].copy_from_slice(&1u64.to_be_bytes());
        bv[8..24].copy_from_slice(&fp);
        bv[24..32].copy_from_slice(&(id * 4096).to_be_bytes());
        o.put(T::Block, &id.to_be_bytes(), &bv);
        o.put(T::Dedup, &fp, &id.to_be_bytes());
        id
    };

    // mapping value: block id u64 | seq u64 | flags/crc u64
    mv[..8].copy_from_slice(&id.to_be_bytes());
    mv[8..16].copy_from_slice(&st.seq.to_be_bytes());
    mv[16..24].copy_from_slice(&0u64.to_be_bytes());
    o.put(T::Map, &mk, &mv);

    if let Some(old) = old {
        let bk = old.to_be_bytes();
        assert!(o.get(T::Block, &bk, &mut bv), "mapping points at missing block");
        let rc = u64::from_be_bytes(bv[..8].try_into().unwrap()) - 1;
        if rc == 0 {
            st.frees += 1;
            o.del(T::Block, &bk);
            let ofp: [u8; 16] = bv[8..24].try_into().unwrap();
            o.del(T::Dedup, &ofp);
        } else {
            bv[..8].copy_from_slice(&rc.to_be_bytes());
            o.put(T::Block, &bk, &bv);
        }
    }

    st.seq += 1;
    let mut meta = [0u8; 16];
    meta[..8].copy_from_slice(&st.seq.to_be_bytes());
    meta[8..].copy_from_slice(&st.next_block.to_be_bytes());
    o.put(T::Meta, b"seq", &meta);
}

// ---------------------------------------------------------------- engines

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Redb,
    /// redb with `set_quick_repair(true)` on the durable (FLUSH) commits only.
    RedbQr,
    Fjall,
}
impl Kind {
    fn parse(s: &str) -> Kind {
        match s {
            "redb" => Kind::Redb,
            "redb-qr" => Kind::RedbQr,
            "fjall" => Kind::Fjall,
            _ => panic!("unknown engine {s}"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Redb => "redb",
            Kind::RedbQr => "redb-qr",
            Kind::Fjall => "fjall",
        }
    }
}

trait Store: Send + Sync {
    /// One host write in one transaction; `durable` = this commit is the FLUSH point.
    fn write(&self, st: &mut WriterState, grain: u64, durable: bool);
    /// Host read: get mapping + get block, in one read snapshot. Returns whether mapped.
    fn read(&self, grain: u64) -> bool;
    /// (seq, next_block) of the recovered state.
    fn meta(&self) -> Option<(u64, u64)>;
    /// Full scan of mapping (range iteration); counts mappings whose block is missing.
    fn check(&self) -> (u64, u64);
}

fn open(kind: Kind, dir: &Path) -> Box<dyn Store> {
    match kind {
        Kind::Redb | Kind::RedbQr => Box::new(redb_engine::RedbStore::open(dir, kind == Kind::RedbQr)),
        Kind::Fjall => Box::new(fjall_engine::FjallStore::open(dir)),
    }
}

mod redb_engine {
    use super::*;
    use redb::{Database, Durability, ReadableDatabase, ReadableTable, Table, TableDefinition};

    const MAP: TableDefinition<&[u8], &[u8]> = TableDefinition::new("mapping");
    const DEDUP: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dedup");
    const BLOCK: TableDefinition<&[u8], &[u8]> = TableDefinition::new("block");
    const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta");

    pub struct RedbStore {
        db: Database,
        quick_repair: bool,
    }

    struct RedbOps<'t> {
        m: Table<'t, &'static [u8], &'static [u8]>,
        d: Table<'t, &'static [u8], &'static [u8]>,
        b: Table<'t, &'static [u8], &'static [u8]>,
        x: Table<'t, &'static [u8], &'static [u8]>,
    }
    impl<'t> RedbOps<'t> {
        fn t(&mut self, t: T) -> &mut Table<'t, &'static [u8], &'static [u8]> {
            match t {
                T::Map => &mut self.m,
                T::Dedup => &mut self.d,
                T::Block => &mut self.b,
                T::Meta => &mut self.x,
            }
        }
    }
    impl Ops for RedbOps<'_> {
        fn get(&mut self, t: T, k: &[u8], out: &mut [u8]) -> bool {
            match self.t(t).get(k).unwrap() {
                Some(v) => {
                    out.copy_from_slice(v.value());
                    true
                }
                None => false,
            }
        }
        fn put(&mut self, t: T, k: &[u8], v: &[u8]) {
            self.t(t).insert(k, v).unwrap();
        }
        fn del(&mut self, t: T, k: &[u8]) {
            self.t(t).remove(k).unwrap();
        }
    }

    impl RedbStore {
        pub fn open(dir: &Path, quick_repair: bool) -> Self {
            std::fs::create_dir_all(dir).unwrap();
            let db = Database::builder()
                .set_cache_size(CACHE_BYTES)
                .set_repair_callback(|_| REPAIRED.store(true, Ordering::SeqCst))
                .create(dir.join("meta.redb")) // opens (and repairs if needed) an existing file
                .unwrap();
            // make sure the tables exist so readers can open them
            let tx = db.begin_write().unwrap();
            {
                tx.open_table(MAP).unwrap();
                tx.open_table(DEDUP).unwrap();
                tx.open_table(BLOCK).unwrap();
                tx.open_table(META).unwrap();
            }
            tx.commit().unwrap();
            RedbStore { db, quick_repair }
        }
    }

    impl Store for RedbStore {
        fn write(&self, st: &mut WriterState, grain: u64, durable: bool) {
            let mut tx = self.db.begin_write().unwrap();
            if durable {
                tx.set_durability(Durability::Immediate).unwrap();
                if self.quick_repair {
                    tx.set_quick_repair(true);
                }
            } else {
                tx.set_durability(Durability::None).unwrap();
            }
            {
                let mut o = RedbOps {
                    m: tx.open_table(MAP).unwrap(),
                    d: tx.open_table(DEDUP).unwrap(),
                    b: tx.open_table(BLOCK).unwrap(),
                    x: tx.open_table(META).unwrap(),
                };
                host_write(&mut o, st, grain);
            }
            tx.commit().unwrap();
        }

        fn read(&self, grain: u64) -> bool {
            let rt = self.db.begin_read().unwrap();
            let m = rt.open_table(MAP).unwrap();
            let Some(v) = m.get(&map_key(VOL, grain)[..]).unwrap() else {
                return false;
            };
            let id: [u8; 8] = v.value()[..8].try_into().unwrap();
            let b = rt.open_table(BLOCK).unwrap();
            let blk = b.get(&id[..]).unwrap().expect("mapped block missing");
            std::hint::black_box(blk.value()[0]);
            true
        }

        fn meta(&self) -> Option<(u64, u64)> {
            let rt = self.db.begin_read().unwrap();
            let x = rt.open_table(META).unwrap();
            let v = x.get(&b"seq"[..]).unwrap()?;
            let v = v.value();
            Some((
                u64::from_be_bytes(v[..8].try_into().unwrap()),
                u64::from_be_bytes(v[8..].try_into().unwrap()),
            ))
        }

        fn check(&self) -> (u64, u64) {
            let rt = self.db.begin_read().unwrap();
            let m = rt.open_table(MAP).unwrap();
            let b = rt.open_table(BLOCK).unwrap();
            let (mut n, mut bad) = (0, 0);
            let lo = map_key(VOL, 0);
            let hi = map_key(VOL + 1, 0);
            for e in m.range::<&[u8]>(&lo[..]..&hi[..]).unwrap() {
                let (_k, v) = e.unwrap();
                n += 1;
                if b.get(&v.value()[..8]).unwrap().is_none() {
                    bad += 1;
                }
            }
            (n, bad)
        }
    }
}

mod fjall_engine {
    use super::*;
    use fjall::{
        KeyspaceCreateOptions, PersistMode, Readable, SingleWriterTxDatabase, SingleWriterTxKeyspace,
        SingleWriterWriteTx,
    };

    pub struct FjallStore {
        db: SingleWriterTxDatabase,
        m: SingleWriterTxKeyspace,
        d: SingleWriterTxKeyspace,
        b: SingleWriterTxKeyspace,
        x: SingleWriterTxKeyspace,
    }

    struct FjallOps<'a, 'tx> {
        s: &'a FjallStore,
        tx: &'a mut SingleWriterWriteTx<'tx>,
    }
    impl FjallOps<'_, '_> {
        fn ks(&self, t: T) -> &SingleWriterTxKeyspace {
            match t {
                T::Map => &self.s.m,
                T::Dedup => &self.s.d,
                T::Block => &self.s.b,
                T::Meta => &self.s.x,
            }
        }
    }
    impl Ops for FjallOps<'_, '_> {
        fn get(&mut self, t: T, k: &[u8], out: &mut [u8]) -> bool {
            // read-your-own-writes within the transaction
            match self.tx.get(self.ks(t), k).unwrap() {
                Some(v) => {
                    out.copy_from_slice(&v);
                    true
                }
                None => false,
            }
        }
        fn put(&mut self, t: T, k: &[u8], v: &[u8]) {
            let ks = self.ks(t).clone();
            self.tx.insert(&ks, k, v);
        }
        fn del(&mut self, t: T, k: &[u8]) {
            let ks = self.ks(t).clone();
            self.tx.remove(&ks, k);
        }
    }

    impl FjallStore {
        pub fn open(dir: &Path) -> Self {
            let db = SingleWriterTxDatabase::builder(dir)
                .cache_size(CACHE_BYTES as u64)
                .open()
                .unwrap();
            let m = db.keyspace("mapping", KeyspaceCreateOptions::default).unwrap();
            let d = db.keyspace("dedup", KeyspaceCreateOptions::default).unwrap();
            let b = db.keyspace("block", KeyspaceCreateOptions::default).unwrap();
            let x = db.keyspace("meta", KeyspaceCreateOptions::default).unwrap();
            FjallStore { db, m, d, b, x }
        }
    }

    impl Store for FjallStore {
        fn write(&self, st: &mut WriterState, grain: u64, durable: bool) {
            // default durability of a write tx: PersistMode::Buffer (journal written to the
            // OS page cache at commit, no fsync)
            let mut tx = self.db.write_tx();
            {
                let mut o = FjallOps { s: self, tx: &mut tx };
                host_write(&mut o, st, grain);
            }
            tx.commit().unwrap();
            if durable {
                self.db.persist(PersistMode::SyncAll).unwrap();
            }
        }

        fn read(&self, grain: u64) -> bool {
            let snap = self.db.read_tx();
            let Some(v) = snap.get(&self.m, map_key(VOL, grain)).unwrap() else {
                return false;
            };
            let blk = snap.get(&self.b, &v[..8]).unwrap().expect("mapped block missing");
            std::hint::black_box(blk[0]);
            true
        }

        fn meta(&self) -> Option<(u64, u64)> {
            let v = self.x.get(b"seq").unwrap()?;
            Some((
                u64::from_be_bytes(v[..8].try_into().unwrap()),
                u64::from_be_bytes(v[8..].try_into().unwrap()),
            ))
        }

        fn check(&self) -> (u64, u64) {
            let snap = self.db.read_tx();
            let (mut n, mut bad) = (0, 0);
            let lo = map_key(VOL, 0);
            let hi = map_key(VOL + 1, 0);
            for g in snap.range(&self.m, lo..hi) {
                let (_k, v) = g.into_inner().unwrap();
                n += 1;
                if snap.get(&self.b, &v[..8]).unwrap().is_none() {
                    bad += 1;
                }
            }
            (n, bad)
        }
    }
}

// ---------------------------------------------------------------- measurement

fn disk_usage(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut apparent, mut alloc) = (0, 0);
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let md = e.metadata().unwrap();
            if md.is_dir() {
                let (a, b) = disk_usage(&e.path());
                apparent += a;
                alloc += b;
            } else {
                apparent += md.len();
                alloc += md.blocks() * 512;
            }
        }
    }
    (apparent, alloc)
}

fn drop_caches() {
    // best effort (needs root); makes the recovery open read from disk, not page cache
    let _ = Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

#[derive(Default, Clone, Debug)]
struct RunResult {
    prefill_wps: f64,
    write_wps: f64,
    dedup_hit_pct: f64,
    size_mib: f64,
    size_apparent_mib: f64,
    read_ops: f64,
    read_p50_us: f64,
    read_p99_us: f64,
    conc_write_wps: f64,
    recovery_ms: f64,
    recovery_cold_ms: f64,
    ahead_of_flush: i64,
    repaired: bool,
    mappings: u64,
    dangling: u64,
}

fn run_writes(s: &dyn Store, st: &mut WriterState, n: u64, flush: u64, seq_grains: bool) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        let grain = if seq_grains { i } else { st.rng.below(GRAINS) };
        let durable = (st.seq + 1) % flush == 0 || i + 1 == n;
        s.write(st, grain, durable);
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn one_run(kind: Kind, run: usize, flush: u64, read_secs: u64, data_root: &Path) -> RunResult {
    let dir = data_root.join(format!("{}-{}-{}", kind.name(), flush, run));
    let _ = std::fs::remove_dir_all(&dir);
    let mut r = RunResult::default();
    let mut st = WriterState::new(0xC0FFEE + run as u64);
    {
        let s: Arc<dyn Store> = Arc::from(open(kind, &dir));
        r.prefill_wps = run_writes(&*s, &mut st, PREFILL, flush, true);
        let (h0, m0) = (st.hits, st.misses);
        r.write_wps = run_writes(&*s, &mut st, RANDOM_WRITES, flush, false);
        r.dedup_hit_pct = 100.0 * (st.hits - h0) as f64 / ((st.hits - h0) + (st.misses - m0)) as f64;
        eprintln!(
            "  [{} run {}] prefill {:.0} w/s, random {:.0} w/s (dedup hit {:.1}%, frees {})",
            kind.name(), run, r.prefill_wps, r.write_wps, r.dedup_hit_pct, st.frees
        );

        // point reads: 2 reader threads, 1 writer thread, read_secs
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let writer = {
            let (s, stop, writes) = (s.clone(), stop.clone(), writes.clone());
            let mut wst = std::mem::replace(&mut st, WriterState::new(0));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let g = wst.rng.below(GRAINS);
                    let durable = (wst.seq + 1) % flush == 0;
                    s.write(&mut wst, g, durable);
                    writes.fetch_add(1, Ordering::Relaxed);
                }
                let g = wst.rng.below(GRAINS);
                s.write(&mut wst, g, true);
                wst
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|i| {
                let (s, stop) = (s.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(0xBEEF + i);
                    let mut lat: Vec<u32> = Vec::with_capacity(1 << 22);
                    while !stop.load(Ordering::Relaxed) {
                        let g = rng.below(GRAINS);
                        let t = Instant::now();
                        std::hint::black_box(s.read(g));
                        lat.push(t.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                    }
                    lat
                })
            })
            .collect();
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs(read_secs));
        stop.store(true, Ordering::Relaxed);
        let mut lat: Vec<u32> = readers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let el = t0.elapsed().as_secs_f64();
        let wst = writer.join().unwrap();
        std::hint::black_box(wst.seq);
        lat.sort_unstable();
        r.read_ops = lat.len() as f64 / el;
        r.read_p50_us = lat[lat.len() / 2] as f64 / 1000.0;
        r.read_p99_us = lat[lat.len() * 99 / 100] as f64 / 1000.0;
        r.conc_write_wps = writes.load(Ordering::Relaxed) as f64 / el;
        eprintln!(
            "  [{} run {}] reads {:.0}/s p50 {:.1}us p99 {:.1}us, concurrent writer {:.0} w/s",
            kind.name(), run, r.read_ops, r.read_p50_us, r.read_p99_us, r.conc_write_wps
        );
    } // close
    let (app, alloc) = disk_usage(&dir);
    r.size_mib = alloc as f64 / (1 << 20) as f64;
    r.size_apparent_mib = app as f64 / (1 << 20) as f64;

    // crash test: child reopens this database, does CRASH_WRITES random host writes
    // (durable every `flush`), keeps writing, and is SIGKILLed a few ms later (mid-interval).
    let last_durable = crash_child(kind, &dir, flush, run as u64);
    // Warm open (files still in page cache) and cold open (page cache dropped) are both timed:
    // the first is what a process crash costs, the second approximates a node reboot.
    REPAIRED.store(false, Ordering::SeqCst);
    let t = Instant::now();
    let s = open(kind, &dir);
    let (seq, _) = s.meta().unwrap();
    r.recovery_ms = t.elapsed().as_secs_f64() * 1000.0;
    r.repaired = REPAIRED.load(Ordering::SeqCst);
    r.ahead_of_flush = seq as i64 - last_durable as i64;
    let (n, bad) = s.check();
    r.mappings = n;
    r.dangling = bad;
    drop(s);
    // second crash, then cold-cache reopen
    crash_child(kind, &dir, flush, run as u64 + 100);
    drop_caches();
    let t = Instant::now();
    let s = open(kind, &dir);
    s.meta().unwrap();
    r.recovery_cold_ms = t.elapsed().as_secs_f64() * 1000.0;
    drop(s);
    eprintln!(
        "  [{} run {}] size {:.1} MiB, recovery warm {:.0} ms (repair: {}) cold {:.0} ms, recovered seq - last flush = {}, mappings {} dangling {}",
        kind.name(), run, r.size_mib, r.recovery_ms, r.repaired, r.recovery_cold_ms, r.ahead_of_flush, n, bad
    );
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// Runs the crash-test child and SIGKILLs it; returns the last seq it reported as durable.
fn crash_child(kind: Kind, dir: &Path, flush: u64, seed: u64) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["child", kind.name(), dir.to_str().unwrap(), &flush.to_string(), &seed.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last_durable = 0u64;
    let mut base = None;
    for l in lines.by_ref() {
        let l = l.unwrap();
        let v: u64 = l[2..].parse().unwrap();
        if l.starts_with("B ") {
            base = Some(v);
        } else if l.starts_with("D ") {
            last_durable = v;
            if v >= base.unwrap() + CRASH_WRITES {
                break;
            }
        }
    }
    // land the kill somewhere inside the next flush interval
    std::thread::sleep(Duration::from_micros(1500 + 1000 * (seed % 7)));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for l in lines.map_while(Result::ok) {
        if let Some(v) = l.strip_prefix("D ") {
            last_durable = v.parse().unwrap();
        }
    }
    last_durable
}

fn child_main(args: &[String]) {
    let kind = Kind::parse(&args[0]);
    let dir = PathBuf::from(&args[1]);
    let flush: u64 = args[2].parse().unwrap();
    let seed: u64 = args[3].parse().unwrap();
    let s = open(kind, &dir);
    let (seq, next_block) = s.meta().unwrap();
    let mut st = WriterState::new(0xDEAD + seed);
    st.seq = seq;
    st.next_block = next_block;
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "B {seq}").unwrap();
    out.flush().unwrap();
    loop {
        let g = st.rng.below(GRAINS);
        let durable = (st.seq + 1) % flush == 0;
        s.write(&mut st, g, durable);
        if durable {
            // reported only after the durable commit returned
            let _ = writeln!(out, "D {}", st.seq);
            let _ = out.flush();
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        return child_main(&args[1..]);
    }
    let mut runs = 3usize;
    let mut flushes = vec![256u64];
    let mut engines = vec![Kind::Redb, Kind::RedbQr, Kind::Fjall];
    let mut read_secs = 10u64;
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--runs" => runs = v.parse().unwrap(),
            "--flush" => flushes = v.split(',').map(|x| x.parse().unwrap()).collect(),
            "--engines" => engines = v.split(',').map(Kind::parse).collect(),
            "--read-secs" => read_secs = v.parse().unwrap(),
            a => panic!("unknown arg {a}"),
        }
        i += 2;
    }
    let data_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&data_root).unwrap();

    let mut table = Vec::new();
    for &flush in &flushes {
        for &kind in &engines {
            let rs: Vec<RunResult> =
                (0..runs).map(|r| one_run(kind, r, flush, read_secs, &data_root)).collect();
            let m = |f: &dyn Fn(&RunResult) -> f64| median(rs.iter().map(f).collect());
            table.push(format!(
                "| {} | {} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0} | {:.1} ({:.1}) | {:.0} | {:.0} | {} | {} | {} |",
                kind.name(),
                flush,
                m(&|r| r.prefill_wps),
                m(&|r| r.write_wps),
                m(&|r| r.dedup_hit_pct),
                m(&|r| r.read_ops),
                m(&|r| r.read_p50_us),
                m(&|r| r.read_p99_us),
                m(&|r| r.conc_write_wps),
                m(&|r| r.size_mib),
                m(&|r| r.size_apparent_mib),
                m(&|r| r.recovery_ms),
                m(&|r| r.recovery_cold_ms),
                rs.iter().map(|r| r.ahead_of_flush.to_string()).collect::<Vec<_>>().join("/"),
                rs.iter().map(|r| if r.repaired { "yes" } else { "no" }).collect::<Vec<_>>().join("/"),
                rs.iter().map(|r| r.dangling.to_string()).collect::<Vec<_>>().join("/"),
            ));
        }
    }
    println!("\nmedian of {runs} runs (per-run values for the last two columns)\n");
    println!("| engine | flush every | prefill w/s | random w/s | dedup hit % | reads/s (2 thr + 1 writer) | read p50 µs | read p99 µs | writer w/s during reads | disk MiB alloc (apparent) | recovery after SIGKILL, warm ms | recovery, cold cache ms | writes recovered beyond last FLUSH | redb repair ran | dangling mappings |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for l in table {
        println!("{l}");
    }
}
