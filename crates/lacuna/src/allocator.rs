//! How the daemon's allocator (mimalloc) hands memory back to the kernel.
//!
//! mimalloc returns freed pages to the kernel a second after they fall free
//! (`purge_delay`), and a page handed back is faulted in and zeroed again the
//! next time it is used. The data path frees and allocates buffers of up to a
//! few MiB per command, and the write path's in-memory tables (the dedup
//! index, transaction scratch) grow in large steps, so under a steady 1 MiB
//! write load the purged pages came straight back: page faults and page
//! clearing were ~7% of the daemon's CPU, and keeping freed memory cut the
//! daemon's CPU per MiB written by 5-9% (1.47 -> 1.35 ms/MiB, bench notes in
//! bench/RESULTS.md). The cost: the daemon's resident memory stays at its high
//! point instead of shrinking a second after a burst. Everything the data path
//! holds is bounded (command windows, transfer limits, cache sizes), so that
//! high point is bounded too.
//!
//! Why transparent huge pages are off for the daemon: with THP, a fault in
//! mimalloc's arenas maps a whole 2 MiB page where the heap needed a few KiB,
//! so the resident size grew in steps of tens of MiB whenever new threads or
//! size classes first touched memory (a blocking-pool thread started, a switch
//! from writes to reads), 186-263 MiB under the 64-connection load test where
//! 4 KiB pages keep it at 84-91 MiB (`crates/lacuna/tests/load.rs`). Memory
//! that is never handed back should be memory that is used. The segment files'
//! page cache is not affected (THP applies to anonymous memory here).

use std::ffi::{c_int, c_long};

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (include/mimalloc.h
/// of the libmimalloc-sys version Cargo.lock pins): the 16th option, after
/// `mi_option_deprecated_eager_commit_delay` (14), before
/// `mi_option_use_numa_nodes` (16). libmimalloc-sys names the neighbours but
/// not this one.
const MI_OPTION_PURGE_DELAY: c_int = 15;
/// `purge_delay` value meaning "never purge".
const NEVER: c_long = -1;
/// mimalloc v3's default purge delay in milliseconds: seeing it before the
/// change tells that [`MI_OPTION_PURGE_DELAY`] names the right option.
const DEFAULT_PURGE_DELAY_MS: c_long = 1000;

extern "C" {
    // Both are exported by the mimalloc library the `mimalloc` crate links.
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// Keeps freed memory with the process instead of handing it back to the
/// kernel. Call first thing in `main`, before any other thread starts. Leaves
/// the option alone when it does not hold mimalloc's default: set through the
/// environment (`MIMALLOC_PURGE_DELAY`), which wins, or not the option this
/// module expects (another mimalloc), which must not be touched.
pub fn keep_freed_memory() {
    // SAFETY: plain C calls on an index within mimalloc's option table (it
    // has more than 16 options); called before any other thread exists, as
    // `mi_option_set` requires.
    unsafe {
        if mi_option_get(MI_OPTION_PURGE_DELAY) != DEFAULT_PURGE_DELAY_MS {
            return;
        }
        mi_option_set(MI_OPTION_PURGE_DELAY, NEVER);
        assert_eq!(mi_option_get(MI_OPTION_PURGE_DELAY), NEVER);
    }
}

/// Turns transparent huge pages off for this process (and what it runs):
/// faults from now on map 4 KiB pages, also in memory mapped before, so it
/// may be called once logging is up (from any thread). A kernel without the
/// setting leaves THP as it was, with a warning (nothing else depends on it).
pub fn no_transparent_huge_pages() {
    // SAFETY: prctl with integer arguments only; PR_SET_THP_DISABLE changes
    // how later page faults of this process are served, nothing in memory.
    let result = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if result != 0 {
        tracing::warn!(
            "transparent huge pages left as they were: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transparent_huge_pages_are_off_after_the_call() {
        no_transparent_huge_pages();
        // SAFETY: a read of this process's flag.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(disabled, 1);
    }

    #[test]
    fn the_purge_delay_option_is_where_this_module_expects_it() {
        // mimalloc's option table: the neighbours libmimalloc-sys names hold
        // their documented defaults, and the option between them holds
        // purge_delay's (or "never", if `main` ran first).
        const EAGER_COMMIT_DELAY: c_int = 14;
        const USE_NUMA_NODES: c_int = 16;
        // SAFETY: reads of options within the table.
        unsafe {
            assert_eq!(mi_option_get(EAGER_COMMIT_DELAY), 1);
            assert_eq!(mi_option_get(USE_NUMA_NODES), 0);
            let delay = mi_option_get(MI_OPTION_PURGE_DELAY);
            assert!(delay == DEFAULT_PURGE_DELAY_MS || delay == NEVER, "{delay}");
        }
    }
}
