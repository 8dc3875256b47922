//! The daemon's file descriptors, as a budget: the engine keeps a constant
//! number open (segment files, bounded by the engine's
//! `MAX_OPEN_SEGMENT_FILES`, the metadata file, a few transient ones), and the
//! listeners share what is left, each with a connection bound of its own. So
//! a flood of connections on any listener waits in its backlog (or times out)
//! and never takes a descriptor the engine needs: out of descriptors, the
//! array once failed a segment write and fenced itself until a restart.

use anyhow::bail;
use lacuna_engine::segment::log::MAX_OPEN_SEGMENT_FILES;

/// Descriptors kept for the engine and the daemon beyond those open at start:
/// the segment files, plus room for the metadata file, the runtime, logs and
/// accepts in flight.
pub const ENGINE_RESERVE_FDS: u64 = MAX_OPEN_SEGMENT_FILES as u64 + 64;
/// Fewest connections worth serving per listener.
const MIN_CONNECTIONS: u64 = 4;

/// Connections each listener may serve at once (one descriptor each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionBudget {
    pub nbd: usize,
    pub iscsi: usize,
    pub api: usize,
    pub vasa: usize,
}

/// Raises the soft descriptor limit to the hard one; answers the limit.
pub fn raise_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit out-pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

/// Descriptors open now.
pub fn open_now() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64)
}

/// Shares of what the engine leaves: NBD, iSCSI, the API, the VASA provider.
const SHARES: [u64; 4] = [2, 2, 1, 1];

/// Splits what `limit` leaves after the descriptors open now and the engine's
/// reserve: two sixths each to NBD and iSCSI, one each to the API and the
/// VASA provider, each capped at the listener's own default bound.
pub fn budget(
    limit: u64,
    open_now: u64,
    defaults: ConnectionBudget,
) -> anyhow::Result<ConnectionBudget> {
    let reserved = open_now + ENGINE_RESERVE_FDS;
    let total_shares: u64 = SHARES.iter().sum();
    let needed = reserved + total_shares * MIN_CONNECTIONS;
    if limit < needed {
        bail!(
            "the descriptor limit ({limit}) is too low: the engine and the daemon keep \
             {reserved}, and the listeners need some too; raise it (ulimit -n) to at least {needed}"
        );
    }
    let available = limit - reserved;
    let share = |shares: u64, cap: usize| -> usize {
        let connections = (available * shares / total_shares).max(MIN_CONNECTIONS);
        usize::try_from(connections).unwrap_or(usize::MAX).min(cap)
    };
    let budget = ConnectionBudget {
        nbd: share(SHARES[0], defaults.nbd),
        iscsi: share(SHARES[1], defaults.iscsi),
        api: share(SHARES[2], defaults.api),
        vasa: share(SHARES[3], defaults.vasa),
    };
    let used = (budget.nbd + budget.iscsi + budget.api + budget.vasa) as u64;
    assert!(
        used <= available,
        "{budget:?} exceeds {available} descriptors"
    );
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: ConnectionBudget = ConnectionBudget {
        nbd: 1024,
        iscsi: 512,
        api: 256,
        vasa: 256,
    };

    #[test]
    fn the_listeners_share_what_the_engine_leaves() {
        let small = budget(256, 20, DEFAULTS).unwrap();
        let left = 256 - 20 - ENGINE_RESERVE_FDS as usize;
        assert!(
            small.nbd + small.iscsi + small.api + small.vasa <= left,
            "{small:?}"
        );
        assert!(small.api >= 4 && small.vasa >= 4 && small.nbd >= small.api);
        assert_eq!(budget(1 << 20, 20, DEFAULTS).unwrap(), DEFAULTS);
        let refused = budget(64, 20, DEFAULTS).unwrap_err().to_string();
        assert!(refused.contains("ulimit -n"), "{refused}");
    }
}
