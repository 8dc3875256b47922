//! The librados C functions the safe layer calls, declared as
//! `/usr/include/rados/librados.h` (Ceph 16.2) declares them. Only these: the
//! binding grows with what the store needs.

use libc::{c_char, c_int, c_void, size_t, ssize_t, time_t, timeval};

pub type RadosT = *mut c_void;
pub type IoCtxT = *mut c_void;
pub type ListCtxT = *mut c_void;
pub type WriteOpT = *mut c_void;
pub type CompletionT = *mut c_void;
pub type CallbackT = Option<unsafe extern "C" fn(CompletionT, *mut c_void)>;

/// `LIBRADOS_LOCK_FLAG_MAY_RENEW`: taking a lock the caller already holds
/// renews it.
pub const LOCK_FLAG_MAY_RENEW: u8 = 1;

extern "C" {
    pub fn rados_create2(
        cluster: *mut RadosT,
        cluster_name: *const c_char,
        name: *const c_char,
        flags: u64,
    ) -> c_int;
    pub fn rados_conf_read_file(cluster: RadosT, path: *const c_char) -> c_int;
    pub fn rados_conf_set(cluster: RadosT, option: *const c_char, value: *const c_char) -> c_int;
    pub fn rados_connect(cluster: RadosT) -> c_int;
    pub fn rados_shutdown(cluster: RadosT);
    pub fn rados_getaddrs(cluster: RadosT, addrs: *mut *mut c_char) -> c_int;
    pub fn rados_blocklist_add(
        cluster: RadosT,
        client_address: *mut c_char,
        expire_seconds: u32,
    ) -> c_int;
    pub fn rados_wait_for_latest_osdmap(cluster: RadosT) -> c_int;
    pub fn rados_mon_command(
        cluster: RadosT,
        cmd: *mut *const c_char,
        cmd_len: size_t,
        inbuf: *const c_char,
        inbuf_len: size_t,
        outbuf: *mut *mut c_char,
        outbuf_len: *mut size_t,
        outs: *mut *mut c_char,
        outs_len: *mut size_t,
    ) -> c_int;
    pub fn rados_buffer_free(buf: *mut c_char);

    pub fn rados_ioctx_create(cluster: RadosT, pool: *const c_char, io: *mut IoCtxT) -> c_int;
    pub fn rados_ioctx_destroy(io: IoCtxT);
    pub fn rados_ioctx_set_namespace(io: IoCtxT, namespace: *const c_char);

    pub fn rados_write(
        io: IoCtxT,
        oid: *const c_char,
        buf: *const c_char,
        len: size_t,
        offset: u64,
    ) -> c_int;
    pub fn rados_write_full(
        io: IoCtxT,
        oid: *const c_char,
        buf: *const c_char,
        len: size_t,
    ) -> c_int;
    pub fn rados_read(
        io: IoCtxT,
        oid: *const c_char,
        buf: *mut c_char,
        len: size_t,
        offset: u64,
    ) -> c_int;
    pub fn rados_remove(io: IoCtxT, oid: *const c_char) -> c_int;
    pub fn rados_trunc(io: IoCtxT, oid: *const c_char, size: u64) -> c_int;
    pub fn rados_stat(io: IoCtxT, oid: *const c_char, size: *mut u64, mtime: *mut time_t) -> c_int;

    pub fn rados_create_write_op() -> WriteOpT;
    pub fn rados_write_op_zero(op: WriteOpT, offset: u64, len: u64);
    pub fn rados_write_op_write(op: WriteOpT, buffer: *const c_char, len: size_t, offset: u64);
    pub fn rados_write_op_operate(
        op: WriteOpT,
        io: IoCtxT,
        oid: *const c_char,
        mtime: *mut time_t,
        flags: c_int,
    ) -> c_int;
    pub fn rados_release_write_op(op: WriteOpT);

    pub fn rados_aio_create_completion2(
        cb_arg: *mut c_void,
        cb_complete: CallbackT,
        completion: *mut CompletionT,
    ) -> c_int;
    pub fn rados_aio_write_op_operate(
        op: WriteOpT,
        io: IoCtxT,
        completion: CompletionT,
        oid: *const c_char,
        mtime: *mut time_t,
        flags: c_int,
    ) -> c_int;
    pub fn rados_aio_wait_for_complete(completion: CompletionT) -> c_int;
    pub fn rados_aio_is_complete(completion: CompletionT) -> c_int;
    pub fn rados_aio_get_return_value(completion: CompletionT) -> c_int;
    pub fn rados_aio_release(completion: CompletionT);

    pub fn rados_nobjects_list_open(io: IoCtxT, ctx: *mut ListCtxT) -> c_int;
    pub fn rados_nobjects_list_next(
        ctx: ListCtxT,
        entry: *mut *const c_char,
        key: *mut *const c_char,
        namespace: *mut *const c_char,
    ) -> c_int;
    pub fn rados_nobjects_list_close(ctx: ListCtxT);

    pub fn rados_lock_exclusive(
        io: IoCtxT,
        oid: *const c_char,
        name: *const c_char,
        cookie: *const c_char,
        description: *const c_char,
        duration: *mut timeval,
        flags: u8,
    ) -> c_int;
    pub fn rados_unlock(
        io: IoCtxT,
        oid: *const c_char,
        name: *const c_char,
        cookie: *const c_char,
    ) -> c_int;
    pub fn rados_break_lock(
        io: IoCtxT,
        oid: *const c_char,
        name: *const c_char,
        client: *const c_char,
        cookie: *const c_char,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn rados_list_lockers(
        io: IoCtxT,
        oid: *const c_char,
        name: *const c_char,
        exclusive: *mut c_int,
        tag: *mut c_char,
        tag_len: *mut size_t,
        clients: *mut c_char,
        clients_len: *mut size_t,
        cookies: *mut c_char,
        cookies_len: *mut size_t,
        addrs: *mut c_char,
        addrs_len: *mut size_t,
    ) -> ssize_t;
}
