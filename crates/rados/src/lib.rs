//! A thin safe binding of librados, the C client of Ceph RADOS: what Lacuna's
//! store on a Ceph cluster needs (docs/SCALE-OUT.md) and nothing more —
//! objects in a pool's namespace, exclusive locks with a lease, the client's
//! own address, and fencing another client (blocklisting) through the monitor.
//!
//! Why by hand: the Rust crates that wrap librados cover an older API
//! (blocklisting by IP address only, which on one host fences every gateway,
//! no client address, no lockers) and pull dependencies rustc already warns
//! will stop building. The C API is stable; this layer only turns its
//! pointers and negative errnos into owned values and typed errors.
//!
//! Thread safety: librados handles (`rados_t`, `rados_ioctx_t`) may be used
//! from several threads at once; only changing an I/O context's namespace is
//! not safe to race, so an [`IoCtx`] is bound to one namespace when made and
//! never changed.

mod ffi;
pub mod test_cluster;

use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::Duration;

/// `EBLOCKLISTED` in Ceph: the cluster refuses a blocklisted client's ops.
pub const EBLOCKLISTED: i32 = libc::ESHUTDOWN;

/// A librados call that failed: which, on what, and the errno it returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} {target}: {} (errno {errno})", std::io::Error::from_raw_os_error(*errno))]
pub struct RadosError {
    pub op: &'static str,
    pub target: String,
    pub errno: i32,
}

impl RadosError {
    fn new(op: &'static str, target: &str, rc: i64) -> RadosError {
        RadosError {
            op,
            target: target.to_string(),
            errno: i32::try_from(-rc).unwrap_or(libc::EIO),
        }
    }

    /// The cluster fenced this client ([`Cluster::blocklist`] by another).
    pub fn is_blocklisted(&self) -> bool {
        self.errno == EBLOCKLISTED
    }

    pub fn is_not_found(&self) -> bool {
        self.errno == libc::ENOENT
    }

    /// A lock another client holds.
    pub fn is_busy(&self) -> bool {
        self.errno == libc::EBUSY || self.errno == libc::EEXIST
    }
}

impl From<RadosError> for std::io::Error {
    fn from(error: RadosError) -> std::io::Error {
        let kind = std::io::Error::from_raw_os_error(error.errno).kind();
        std::io::Error::new(kind, error)
    }
}

pub type Result<T> = std::result::Result<T, RadosError>;

fn check(op: &'static str, target: &str, rc: libc::c_int) -> Result<libc::c_int> {
    if rc < 0 {
        Err(RadosError::new(op, target, i64::from(rc)))
    } else {
        Ok(rc)
    }
}

fn c_string(op: &'static str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| RadosError {
        op,
        target: text.replace('\0', "\\0"),
        errno: libc::EINVAL,
    })
}

/// Seconds any one librados call may take before it fails (`ETIMEDOUT`):
/// an unreachable cluster is an error, never a hang.
const OP_TIMEOUT_S: &str = "30";

/// A connection to a cluster (`rados_t`), shut down when dropped.
pub struct Cluster {
    handle: ffi::RadosT,
}

// SAFETY: librados documents `rados_t` as safe to share between threads.
unsafe impl Send for Cluster {}
// SAFETY: as above; every call takes the handle by value and locks inside.
unsafe impl Sync for Cluster {}

impl Cluster {
    /// Connects as `client.admin` with the configuration file `conf_path`.
    pub fn connect(conf_path: &std::path::Path) -> Result<Arc<Cluster>> {
        let target = conf_path.display().to_string();
        let conf = c_string("reading the configuration", &target)?;
        let name = c_string("connecting", "client.admin")?;
        let cluster_name = c_string("connecting", "ceph")?;
        let mut handle: ffi::RadosT = std::ptr::null_mut();
        // SAFETY: out-pointer to a handle; the strings live across the call.
        let rc =
            unsafe { ffi::rados_create2(&mut handle, cluster_name.as_ptr(), name.as_ptr(), 0) };
        check("creating a client", &target, rc)?;
        let cluster = Cluster { handle };
        // SAFETY: a created handle and a C string.
        let rc = unsafe { ffi::rados_conf_read_file(cluster.handle, conf.as_ptr()) };
        check("reading the configuration", &target, rc)?;
        // A gateway that cannot reach the cluster says so instead of hanging.
        for option in [
            "client_mount_timeout",
            "rados_osd_op_timeout",
            "rados_mon_op_timeout",
        ] {
            cluster.set_option(option, OP_TIMEOUT_S)?;
        }
        // SAFETY: a configured handle.
        let rc = unsafe { ffi::rados_connect(cluster.handle) };
        check("connecting", &target, rc)?;
        Ok(Arc::new(cluster))
    }

    fn set_option(&self, option: &str, value: &str) -> Result<()> {
        let (o, v) = (c_string("setting", option)?, c_string("setting", value)?);
        // SAFETY: a live handle and C strings.
        let rc = unsafe { ffi::rados_conf_set(self.handle, o.as_ptr(), v.as_ptr()) };
        check("setting", option, rc).map(drop)
    }

    /// This client's address as the cluster knows it (`127.0.0.1:0/NONCE`; the
    /// nonce makes it this client's, not its host's): what another client
    /// blocklists to fence it.
    pub fn address(&self) -> Result<String> {
        let mut addrs: *mut libc::c_char = std::ptr::null_mut();
        // SAFETY: out-pointer to a buffer librados allocates.
        let rc = unsafe { ffi::rados_getaddrs(self.handle, &mut addrs) };
        check("reading the client's address", "", rc)?;
        // SAFETY: librados returned a NUL-terminated string, freed below.
        let text = unsafe { CStr::from_ptr(addrs) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the buffer came from librados.
        unsafe { ffi::rados_buffer_free(addrs) };
        Ok(plain_address(&text))
    }

    /// Fences the client at `address` (as [`Cluster::address`] gives it): the
    /// OSDs refuse its ops from the OSD map that carries the entry on, for
    /// `expire` (at least a second). Returns once this client has that map.
    pub fn blocklist(&self, address: &str, expire: Duration) -> Result<()> {
        let mut addr = c_string("blocklisting", address)?.into_bytes_with_nul();
        let expire_s = u32::try_from(expire.as_secs().max(1)).unwrap_or(u32::MAX);
        // SAFETY: a NUL-terminated buffer librados only reads.
        let rc =
            unsafe { ffi::rados_blocklist_add(self.handle, addr.as_mut_ptr().cast(), expire_s) };
        check("blocklisting", address, rc)?;
        // SAFETY: a live handle.
        let rc = unsafe { ffi::rados_wait_for_latest_osdmap(self.handle) };
        check("waiting for the OSD map", address, rc).map(drop)
    }

    /// A monitor command (JSON, as `ceph` sends it); its JSON answer.
    pub fn mon_command(&self, command: &serde_json::Value) -> Result<String> {
        let text = command.to_string();
        let cmd = c_string("monitor command", &text)?;
        let mut cmds = [cmd.as_ptr()];
        let (mut out, mut out_len) = (std::ptr::null_mut(), 0usize);
        let (mut status, mut status_len) = (std::ptr::null_mut(), 0usize);
        // SAFETY: one command string, no input; librados allocates both
        // answers, freed below.
        let rc = unsafe {
            ffi::rados_mon_command(
                self.handle,
                cmds.as_mut_ptr(),
                1,
                std::ptr::null(),
                0,
                &mut out,
                &mut out_len,
                &mut status,
                &mut status_len,
            )
        };
        let answer = take_buffer(out, out_len);
        let status_text = take_buffer(status, status_len);
        check("monitor command", &format!("{text} ({status_text})"), rc)?;
        Ok(answer)
    }

    /// An I/O context on `pool`, in `namespace` ("" for the default one); it
    /// keeps the connection alive.
    pub fn io(self: &Arc<Self>, pool: &str, namespace: &str) -> Result<IoCtx> {
        let pool_c = c_string("opening the pool", pool)?;
        let namespace_c = c_string("opening the namespace", namespace)?;
        let mut handle: ffi::IoCtxT = std::ptr::null_mut();
        // SAFETY: a connected handle, a C string, an out-pointer.
        let rc = unsafe { ffi::rados_ioctx_create(self.handle, pool_c.as_ptr(), &mut handle) };
        check("opening the pool", pool, rc)?;
        // SAFETY: a fresh context no other thread has seen yet.
        unsafe { ffi::rados_ioctx_set_namespace(handle, namespace_c.as_ptr()) };
        Ok(IoCtx {
            handle,
            _cluster: self.clone(),
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle is ours; every IoCtx borrowed it and is gone.
        unsafe { ffi::rados_shutdown(self.handle) };
    }
}

/// `[v2:127.0.0.1:0/42,v1:...]` or `127.0.0.1:0/42` → `127.0.0.1:0/42`, the
/// form blocklisting takes.
fn plain_address(text: &str) -> String {
    let first = text
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .next()
        .unwrap_or_default();
    first
        .strip_prefix("v2:")
        .or_else(|| first.strip_prefix("v1:"))
        .or_else(|| first.strip_prefix("any:"))
        .unwrap_or(first)
        .to_string()
}

fn take_buffer(buf: *mut libc::c_char, len: usize) -> String {
    if buf.is_null() {
        return String::new();
    }
    // SAFETY: librados gave `len` bytes at `buf`; freed right after.
    let text = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    let text = String::from_utf8_lossy(text).into_owned();
    // SAFETY: the buffer came from librados.
    unsafe { ffi::rados_buffer_free(buf) };
    text
}

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locker {
    /// The client's entity name (`client.4123`).
    pub client: String,
    pub cookie: String,
    /// The client's address (`127.0.0.1:0/NONCE`).
    pub address: String,
}

/// A write sent with [`IoCtx::aio_write_pieces`], not yet answered. Dropping
/// it waits for the answer (the operation itself cannot be called back).
pub struct PendingWrite {
    completion: ffi::CompletionT,
    object: String,
    /// The context the operation runs in, kept until it has answered.
    _io: Arc<IoCtx>,
}

// SAFETY: a completion may be waited on and queried from any thread.
unsafe impl Send for PendingWrite {}
// SAFETY: as above; waiting and querying only read its state under its lock.
unsafe impl Sync for PendingWrite {}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingWrite({})", self.object)
    }
}

impl PendingWrite {
    /// Whether the cluster has answered (then [`PendingWrite::wait`] does not block).
    pub fn is_complete(&self) -> bool {
        // SAFETY: a live completion.
        unsafe { ffi::rados_aio_is_complete(self.completion) != 0 }
    }

    /// Blocks until the cluster has answered; the answer: done on every
    /// replica, or the error (a fenced client's write: `EBLOCKLISTED`).
    pub fn wait(&self) -> Result<()> {
        // SAFETY: a live completion; waiting from several threads is allowed.
        let rc = unsafe {
            ffi::rados_aio_wait_for_complete(self.completion);
            ffi::rados_aio_get_return_value(self.completion)
        };
        check("write", &self.object, rc).map(drop)
    }

    pub fn object(&self) -> &str {
        &self.object
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        // SAFETY: the completion is ours; it is released once, after its
        // operation has answered, so nothing in librados still refers to it.
        unsafe {
            ffi::rados_aio_wait_for_complete(self.completion);
            ffi::rados_aio_release(self.completion);
        }
    }
}

/// A pool and namespace to do object I/O in (`rados_ioctx_t`).
pub struct IoCtx {
    handle: ffi::IoCtxT,
    /// Dropped after the context (fields drop after `Drop::drop`).
    _cluster: Arc<Cluster>,
}

impl std::fmt::Debug for IoCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IoCtx")
    }
}

// SAFETY: librados I/O contexts may be used from several threads at once; the
// namespace, the one setting that may not be raced, is never changed after
// `Cluster::io`.
unsafe impl Send for IoCtx {}
// SAFETY: as above.
unsafe impl Sync for IoCtx {}

impl Drop for IoCtx {
    fn drop(&mut self) {
        // SAFETY: the context is ours and no call on it is in flight (&mut).
        unsafe { ffi::rados_ioctx_destroy(self.handle) };
    }
}

/// Largest single read or write librados takes (its length is an int).
const MAX_IO_BYTES: usize = 1 << 30;

impl IoCtx {
    /// Writes `data` at `offset_bytes` of `object`, creating it if needed;
    /// atomic (all or nothing) and durable on every replica when it returns.
    pub fn write(&self, object: &str, offset_bytes: u64, data: &[u8]) -> Result<()> {
        let oid = c_string("write", object)?;
        assert!(data.len() <= MAX_IO_BYTES, "one write of at most 1 GiB");
        // SAFETY: the buffer and name live across the call.
        let rc = unsafe {
            ffi::rados_write(
                self.handle,
                oid.as_ptr(),
                data.as_ptr().cast(),
                data.len(),
                offset_bytes,
            )
        };
        check("write", object, rc).map(drop)
    }

    /// Replaces `object`'s whole content with `data`, atomically.
    pub fn write_full(&self, object: &str, data: &[u8]) -> Result<()> {
        let oid = c_string("write_full", object)?;
        assert!(data.len() <= MAX_IO_BYTES, "one write of at most 1 GiB");
        // SAFETY: as in `write`.
        let rc = unsafe {
            ffi::rados_write_full(self.handle, oid.as_ptr(), data.as_ptr().cast(), data.len())
        };
        check("write_full", object, rc).map(drop)
    }

    /// Reads up to `buf.len()` bytes at `offset_bytes`; returns how many were
    /// there (fewer past the object's end).
    pub fn read(&self, object: &str, offset_bytes: u64, buf: &mut [u8]) -> Result<usize> {
        let oid = c_string("read", object)?;
        assert!(buf.len() <= MAX_IO_BYTES, "one read of at most 1 GiB");
        // SAFETY: librados writes at most `buf.len()` bytes into `buf`.
        let rc = unsafe {
            ffi::rados_read(
                self.handle,
                oid.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                offset_bytes,
            )
        };
        let read = check("read", object, rc)?;
        Ok(usize::try_from(read).expect("a non-negative count"))
    }

    /// The object's size in bytes.
    pub fn size(&self, object: &str) -> Result<u64> {
        let oid = c_string("stat", object)?;
        let (mut size, mut mtime) = (0u64, 0 as libc::time_t);
        // SAFETY: out-pointers to locals.
        let rc = unsafe { ffi::rados_stat(self.handle, oid.as_ptr(), &mut size, &mut mtime) };
        check("stat", object, rc)?;
        Ok(size)
    }

    pub fn truncate(&self, object: &str, length_bytes: u64) -> Result<()> {
        let oid = c_string("truncate", object)?;
        // SAFETY: a live context and a C string.
        let rc = unsafe { ffi::rados_trunc(self.handle, oid.as_ptr(), length_bytes) };
        check("truncate", object, rc).map(drop)
    }

    /// Writes every `(offset, bytes)` piece to `object` in one operation: all
    /// of them or none, in one round trip.
    pub fn write_pieces(&self, object: &str, pieces: &[(u64, &[u8])]) -> Result<()> {
        let oid = c_string("write", object)?;
        assert!(pieces.iter().all(|(_, data)| data.len() <= MAX_IO_BYTES));
        // SAFETY: an op made, filled, run and released here; the pieces'
        // buffers outlive it (librados copies them when the op is built).
        let rc = unsafe {
            let op = ffi::rados_create_write_op();
            assert!(!op.is_null(), "librados made no write op");
            for (offset, data) in pieces {
                ffi::rados_write_op_write(op, data.as_ptr().cast(), data.len(), *offset);
            }
            let rc =
                ffi::rados_write_op_operate(op, self.handle, oid.as_ptr(), std::ptr::null_mut(), 0);
            ffi::rados_release_write_op(op);
            rc
        };
        check("write", object, rc).map(drop)
    }

    /// Sends the `(offset, bytes)` pieces to `object` as one operation, as
    /// [`IoCtx::write_pieces`] does, without waiting for its answer: the
    /// returned [`PendingWrite`] says when every replica has it. The pieces
    /// are copied before this returns. Operations on one object are applied
    /// in the order they were sent.
    pub fn aio_write_pieces(
        self: &Arc<Self>,
        object: &str,
        pieces: &[(u64, &[u8])],
    ) -> Result<PendingWrite> {
        assert!(pieces.iter().all(|(_, data)| data.len() <= MAX_IO_BYTES));
        // SAFETY: librados copies the pieces' bytes as the op is built.
        self.aio_operate(object, |op| unsafe {
            for (offset, data) in pieces {
                ffi::rados_write_op_write(op, data.as_ptr().cast(), data.len(), *offset);
            }
        })
    }

    /// Zeroes the `(offset, length)` ranges of `object` in one operation, as
    /// [`IoCtx::zero`] does each, without waiting for its answer.
    pub fn aio_zero(self: &Arc<Self>, object: &str, ranges: &[(u64, u64)]) -> Result<PendingWrite> {
        // SAFETY: a live op; zero extents take no buffers.
        self.aio_operate(object, |op| unsafe {
            for (offset, length) in ranges {
                ffi::rados_write_op_zero(op, *offset, *length);
            }
        })
    }

    /// Sends one write op, filled by `fill`, without waiting for its answer.
    fn aio_operate(
        self: &Arc<Self>,
        object: &str,
        fill: impl FnOnce(ffi::WriteOpT),
    ) -> Result<PendingWrite> {
        let oid = c_string("write", object)?;
        let mut completion: ffi::CompletionT = std::ptr::null_mut();
        // SAFETY: an out-pointer to a completion, released by `PendingWrite`'s drop.
        let rc = unsafe {
            ffi::rados_aio_create_completion2(std::ptr::null_mut(), None, &mut completion)
        };
        check("making a completion for", object, rc)?;
        let pending = PendingWrite {
            completion,
            object: object.to_string(),
            _io: self.clone(),
        };
        // SAFETY: the op is made, filled, sent and released here; the
        // completion lives in `pending` until the op has answered.
        let rc = unsafe {
            let op = ffi::rados_create_write_op();
            assert!(!op.is_null(), "librados made no write op");
            fill(op);
            let rc = ffi::rados_aio_write_op_operate(
                op,
                self.handle,
                completion,
                oid.as_ptr(),
                std::ptr::null_mut(),
                0,
            );
            ffi::rados_release_write_op(op);
            rc
        };
        check("write", object, rc)?;
        Ok(pending)
    }

    /// Zeroes a range (the OSD frees what it can), leaving the size as it is.
    pub fn zero(&self, object: &str, offset_bytes: u64, length_bytes: u64) -> Result<()> {
        let oid = c_string("zero", object)?;
        // SAFETY: an op made, filled, run and released here; nothing else holds it.
        let rc = unsafe {
            let op = ffi::rados_create_write_op();
            assert!(!op.is_null(), "librados made no write op");
            ffi::rados_write_op_zero(op, offset_bytes, length_bytes);
            let rc =
                ffi::rados_write_op_operate(op, self.handle, oid.as_ptr(), std::ptr::null_mut(), 0);
            ffi::rados_release_write_op(op);
            rc
        };
        check("zero", object, rc).map(drop)
    }

    /// Deletes `object`; deleting one that is not there is not an error.
    pub fn remove(&self, object: &str) -> Result<()> {
        let oid = c_string("remove", object)?;
        // SAFETY: a live context and a C string.
        let rc = unsafe { ffi::rados_remove(self.handle, oid.as_ptr()) };
        match check("remove", object, rc) {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(drop),
        }
    }

    /// The names of every object in this namespace, sorted. Bounded by
    /// `max_objects`: more is an error (`E2BIG`), never a silent cut.
    pub fn list(&self, max_objects: usize) -> Result<Vec<String>> {
        let mut ctx: ffi::ListCtxT = std::ptr::null_mut();
        // SAFETY: out-pointer to a listing context, closed below.
        let rc = unsafe { ffi::rados_nobjects_list_open(self.handle, &mut ctx) };
        check("listing objects", "", rc)?;
        let mut names = Vec::new();
        let outcome = loop {
            let mut entry: *const libc::c_char = std::ptr::null();
            // SAFETY: an open context; the strings stay valid until the next call.
            let rc = unsafe {
                ffi::rados_nobjects_list_next(
                    ctx,
                    &mut entry,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            if rc == -libc::ENOENT {
                break Ok(());
            }
            if let Err(e) = check("listing objects", "", rc) {
                break Err(e);
            }
            if names.len() == max_objects {
                break Err(RadosError {
                    op: "listing objects",
                    target: format!("more than {max_objects}"),
                    errno: libc::E2BIG,
                });
            }
            // SAFETY: librados gave a NUL-terminated name.
            names.push(
                unsafe { CStr::from_ptr(entry) }
                    .to_string_lossy()
                    .into_owned(),
            );
        };
        // SAFETY: the context opened above.
        unsafe { ffi::rados_nobjects_list_close(ctx) };
        outcome?;
        names.sort_unstable();
        Ok(names)
    }

    /// Takes (or, held already with the same cookie, renews) the exclusive
    /// lock `name` on `object` for `lease`: the OSD lets it expire unless
    /// renewed in time. Another holder's unexpired lock: an error that
    /// [`RadosError::is_busy`].
    pub fn lock_exclusive(
        &self,
        object: &str,
        name: &str,
        cookie: &str,
        description: &str,
        lease: Duration,
    ) -> Result<()> {
        let (oid, n) = (c_string("lock", object)?, c_string("lock", name)?);
        let (c, d) = (c_string("lock", cookie)?, c_string("lock", description)?);
        let mut duration = libc::timeval {
            tv_sec: libc::time_t::try_from(lease.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_usec: libc::suseconds_t::from(lease.subsec_micros() as i32),
        };
        // SAFETY: C strings and a timeval that live across the call.
        let rc = unsafe {
            ffi::rados_lock_exclusive(
                self.handle,
                oid.as_ptr(),
                n.as_ptr(),
                c.as_ptr(),
                d.as_ptr(),
                &mut duration,
                ffi::LOCK_FLAG_MAY_RENEW,
            )
        };
        check("lock", object, rc).map(drop)
    }

    pub fn unlock(&self, object: &str, name: &str, cookie: &str) -> Result<()> {
        let (oid, n, c) = (
            c_string("unlock", object)?,
            c_string("unlock", name)?,
            c_string("unlock", cookie)?,
        );
        // SAFETY: C strings that live across the call.
        let rc = unsafe { ffi::rados_unlock(self.handle, oid.as_ptr(), n.as_ptr(), c.as_ptr()) };
        check("unlock", object, rc).map(drop)
    }

    /// Removes `locker`'s hold of lock `name` (after fencing it: see
    /// [`Cluster::blocklist`]).
    pub fn break_lock(&self, object: &str, name: &str, locker: &Locker) -> Result<()> {
        let (oid, n) = (
            c_string("break lock", object)?,
            c_string("break lock", name)?,
        );
        let (client, cookie) = (
            c_string("break lock", &locker.client)?,
            c_string("break lock", &locker.cookie)?,
        );
        // SAFETY: C strings that live across the call.
        let rc = unsafe {
            ffi::rados_break_lock(
                self.handle,
                oid.as_ptr(),
                n.as_ptr(),
                client.as_ptr(),
                cookie.as_ptr(),
            )
        };
        check("break lock", object, rc).map(drop)
    }

    /// Who holds lock `name` on `object` now (an expired hold is not listed).
    pub fn lockers(&self, object: &str, name: &str) -> Result<Vec<Locker>> {
        let (oid, n) = (c_string("lockers", object)?, c_string("lockers", name)?);
        let mut capacity = 1024usize;
        // Each pass doubles the buffers; a lock's holders are few.
        for _ in 0..8 {
            let mut exclusive = 0;
            let mut bufs = [
                vec![0u8; capacity],
                vec![0u8; capacity],
                vec![0u8; capacity],
                vec![0u8; capacity],
            ];
            let mut lens = [capacity; 4];
            let [tag, clients, cookies, addrs] = &mut bufs;
            let [tag_len, clients_len, cookies_len, addrs_len] = &mut lens;
            // SAFETY: four buffers of the lengths given; librados writes within them.
            let rc = unsafe {
                ffi::rados_list_lockers(
                    self.handle,
                    oid.as_ptr(),
                    n.as_ptr(),
                    &mut exclusive,
                    tag.as_mut_ptr().cast(),
                    tag_len,
                    clients.as_mut_ptr().cast(),
                    clients_len,
                    cookies.as_mut_ptr().cast(),
                    cookies_len,
                    addrs.as_mut_ptr().cast(),
                    addrs_len,
                )
            };
            if rc == -(libc::ERANGE as isize) {
                capacity *= 2;
                continue;
            }
            if rc == -(libc::ENOENT as isize) {
                return Ok(Vec::new());
            }
            let count = check("lockers", object, i32::try_from(rc).unwrap_or(-libc::EIO))?;
            let split = |buf: &[u8], len: usize| -> Vec<String> {
                buf[..len.min(buf.len())]
                    .split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            };
            let clients = split(clients, *clients_len);
            let cookies = split(cookies, *cookies_len);
            let addrs = split(addrs, *addrs_len);
            let count = usize::try_from(count).unwrap_or_default();
            assert!(clients.len() >= count && cookies.len() >= count && addrs.len() >= count);
            return Ok((0..count)
                .map(|i| Locker {
                    client: clients[i].clone(),
                    cookie: cookies[i].clone(),
                    address: plain_address(&addrs[i]),
                })
                .collect());
        }
        Err(RadosError {
            op: "lockers",
            target: object.to_string(),
            errno: libc::ERANGE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_reduced_to_what_blocklisting_takes() {
        assert_eq!(
            plain_address("[v2:127.0.0.1:0/42,v1:127.0.0.1:0/42]"),
            "127.0.0.1:0/42"
        );
        assert_eq!(plain_address("127.0.0.1:0/42"), "127.0.0.1:0/42");
        assert_eq!(plain_address(" v1:10.0.0.1:6789/7 "), "10.0.0.1:6789/7");
    }

    #[test]
    fn errors_say_what_failed_and_classify_themselves() {
        let e = RadosError::new("write", "seg.00000001", -(EBLOCKLISTED as i64));
        assert!(e.is_blocklisted() && !e.is_not_found());
        assert!(e.to_string().starts_with("write seg.00000001: "), "{e}");
        let io: std::io::Error = RadosError::new("read", "x", -(libc::ENOENT as i64)).into();
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(c_string("write", "a\0b").unwrap_err().errno == libc::EINVAL);
    }
}
