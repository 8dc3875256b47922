//! I/O counters per protocol and direction: operations, bytes and a latency
//! histogram, counted by the transports' adapters as each request completes.
//!
//! Why a histogram and not a running mean: the dashboard plots the p99 of each
//! interval, and a percentile cannot be had from sums. The buckets are
//! log-linear (eight per power of two), so a percentile is known to within
//! 12.5%, and a sample is the difference of two snapshots ([`IoTotals`]), so
//! the counters only ever grow and the hot path is four relaxed atomic adds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Protocol {
    Nbd,
    Iscsi,
}

impl Protocol {
    pub const ALL: [Protocol; 2] = [Protocol::Nbd, Protocol::Iscsi];

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Direction {
    Read,
    Write,
}

impl Direction {
    pub const ALL: [Direction; 2] = [Direction::Read, Direction::Write];

    fn index(self) -> usize {
        self as usize
    }
}

/// Latencies below this many microseconds have a bucket each.
const LINEAR_US: u64 = 16;
/// Buckets per power of two above [`LINEAR_US`].
const SUB_BUCKETS: u64 = 8;
/// Powers of two covered above [`LINEAR_US`]: up to 2^35 µs (about 9.5 hours);
/// anything longer lands in the last bucket.
const OCTAVES: u64 = 31;
/// Buckets of one histogram.
pub const BUCKETS: usize = (LINEAR_US + OCTAVES * SUB_BUCKETS) as usize;

/// The bucket of a latency.
fn bucket_of(latency_us: u64) -> usize {
    if latency_us < LINEAR_US {
        return latency_us as usize;
    }
    let octave = u64::from(63 - latency_us.leading_zeros()) - LINEAR_US.trailing_zeros() as u64;
    if octave >= OCTAVES {
        return BUCKETS - 1;
    }
    let shift = octave + LINEAR_US.trailing_zeros() as u64 - SUB_BUCKETS.trailing_zeros() as u64;
    let sub = (latency_us >> shift) & (SUB_BUCKETS - 1);
    let bucket = LINEAR_US + octave * SUB_BUCKETS + sub;
    assert!(bucket < BUCKETS as u64);
    bucket as usize
}

/// The largest latency a bucket holds (what a percentile reports: never less
/// than the true value).
fn bucket_upper_us(bucket: usize) -> u64 {
    assert!(bucket < BUCKETS);
    let bucket = bucket as u64;
    if bucket < LINEAR_US {
        return bucket;
    }
    let octave = (bucket - LINEAR_US) / SUB_BUCKETS;
    let sub = (bucket - LINEAR_US) % SUB_BUCKETS;
    let base = LINEAR_US << octave;
    let step = base / SUB_BUCKETS;
    base + (sub + 1) * step - 1
}

/// One protocol and direction.
struct Lane {
    ops: AtomicU64,
    bytes: AtomicU64,
    latency_sum_us: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl Lane {
    fn new() -> Lane {
        Lane {
            ops: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            latency_sum_us: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// The daemon's I/O counters, shared by every connection.
pub struct IoCounters {
    lanes: [[Lane; 2]; 2],
}

impl Default for IoCounters {
    fn default() -> Self {
        IoCounters {
            lanes: [[Lane::new(), Lane::new()], [Lane::new(), Lane::new()]],
        }
    }
}

impl IoCounters {
    /// Counts one completed request of `bytes` that took `latency`.
    pub fn record(&self, protocol: Protocol, direction: Direction, bytes: u64, latency: Duration) {
        let lane = &self.lanes[protocol.index()][direction.index()];
        let latency_us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        lane.ops.fetch_add(1, Ordering::Relaxed);
        lane.bytes.fetch_add(bytes, Ordering::Relaxed);
        lane.latency_sum_us.fetch_add(latency_us, Ordering::Relaxed);
        lane.buckets[bucket_of(latency_us)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters as of now.
    pub fn totals(&self) -> IoTotals {
        let lane = |protocol: Protocol, direction: Direction| {
            let lane = &self.lanes[protocol.index()][direction.index()];
            LaneTotals {
                ops: lane.ops.load(Ordering::Relaxed),
                bytes: lane.bytes.load(Ordering::Relaxed),
                latency_sum_us: lane.latency_sum_us.load(Ordering::Relaxed),
                buckets: lane
                    .buckets
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect(),
            }
        };
        IoTotals {
            lanes: Protocol::ALL.map(|p| Direction::ALL.map(|d| lane(p, d))),
        }
    }
}

/// A snapshot of one lane's counters, or (from [`IoTotals::since`]) what
/// happened between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneTotals {
    pub ops: u64,
    pub bytes: u64,
    pub latency_sum_us: u64,
    buckets: Vec<u64>,
}

impl Default for LaneTotals {
    fn default() -> Self {
        LaneTotals {
            ops: 0,
            bytes: 0,
            latency_sum_us: 0,
            buckets: vec![0; BUCKETS],
        }
    }
}

impl LaneTotals {
    fn since(&self, earlier: &LaneTotals) -> LaneTotals {
        LaneTotals {
            ops: self.ops.saturating_sub(earlier.ops),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            latency_sum_us: self.latency_sum_us.saturating_sub(earlier.latency_sum_us),
            buckets: self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
        }
    }

    /// Adds `other`'s counts (a minute from its twelve 5 s intervals).
    pub fn add(&mut self, other: &LaneTotals) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.latency_sum_us += other.latency_sum_us;
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
    }

    /// Mean latency in microseconds; 0 without operations.
    pub fn mean_us(&self) -> u64 {
        self.latency_sum_us.checked_div(self.ops).unwrap_or(0)
    }

    /// The latency at or under which `per_mille` of the operations completed
    /// (a bucket's upper bound); 0 without operations.
    pub fn percentile_us(&self, per_mille: u64) -> u64 {
        assert!(per_mille <= 1000);
        let counted: u64 = self.buckets.iter().sum();
        if counted == 0 {
            return 0;
        }
        let wanted = (counted * per_mille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (bucket, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= wanted {
                return bucket_upper_us(bucket);
            }
        }
        unreachable!("the buckets hold `counted` operations")
    }
}

/// Every lane's counters at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoTotals {
    lanes: [[LaneTotals; 2]; 2],
}

impl IoTotals {
    pub fn lane(&self, protocol: Protocol, direction: Direction) -> &LaneTotals {
        &self.lanes[protocol.index()][direction.index()]
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &IoTotals) -> IoTotals {
        IoTotals {
            lanes: Protocol::ALL
                .map(|p| Direction::ALL.map(|d| self.lane(p, d).since(earlier.lane(p, d)))),
        }
    }

    /// Adds `other`'s counts lane by lane.
    pub fn add(&mut self, other: &IoTotals) {
        for p in Protocol::ALL {
            for d in Direction::ALL {
                self.lanes[p.index()][d.index()].add(other.lane(p, d));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_ordered_and_cover_every_latency() {
        let mut last = 0;
        for bucket in 0..BUCKETS {
            let upper = bucket_upper_us(bucket);
            assert!(bucket == 0 || upper > last, "bucket {bucket}");
            assert_eq!(bucket_of(upper), bucket, "upper bound of {bucket}");
            last = upper;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    proptest! {
        /// A latency's bucket holds it, and its upper bound is within 12.5%.
        #[test]
        fn a_latency_lands_in_a_bucket_that_bounds_it_closely(latency_us in 0u64..(1 << 35)) {
            let upper = bucket_upper_us(bucket_of(latency_us));
            prop_assert!(upper >= latency_us);
            prop_assert!(upper - latency_us <= latency_us / 8 + 1, "{latency_us} -> {upper}");
        }
    }

    #[test]
    fn an_interval_has_its_own_mean_and_p99() {
        let counters = IoCounters::default();
        for _ in 0..1000 {
            counters.record(
                Protocol::Nbd,
                Direction::Read,
                4096,
                Duration::from_micros(9999),
            );
        }
        let before = counters.totals();
        for i in 0..1000u64 {
            let latency = if i < 990 { 100 } else { 5000 };
            counters.record(
                Protocol::Nbd,
                Direction::Read,
                4096,
                Duration::from_micros(latency),
            );
        }
        counters.record(
            Protocol::Iscsi,
            Direction::Write,
            1 << 20,
            Duration::from_millis(2),
        );
        let interval = counters.totals().since(&before);
        let reads = interval.lane(Protocol::Nbd, Direction::Read);
        assert_eq!((reads.ops, reads.bytes), (1000, 4096 * 1000));
        assert_eq!(reads.mean_us(), (990 * 100 + 10 * 5000) / 1000);
        let p99 = reads.percentile_us(990);
        assert!(
            (100..=112).contains(&p99),
            "p99 {p99}: the 990th fastest is 100 µs"
        );
        let p999 = reads.percentile_us(999);
        assert!((5000..=5625).contains(&p999), "{p999}");
        let writes = interval.lane(Protocol::Iscsi, Direction::Write);
        assert_eq!((writes.ops, writes.bytes), (1, 1 << 20));
        assert_eq!(
            interval
                .lane(Protocol::Nbd, Direction::Write)
                .percentile_us(990),
            0
        );
    }
}
