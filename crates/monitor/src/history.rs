//! The history of the array's figures: the last hour at 5 s and the last day at
//! 1 min, in two rings of fixed length.
//!
//! The daemon calls [`History::observe`] every [`FINE_INTERVAL_S`] with the
//! cumulative counters of that instant ([`Observation`]); the history keeps the
//! difference from the previous one as a [`Sample`] of rates, and folds twelve
//! of them into each minute's sample (the minute's p99 from the merged
//! latency histograms, not an average of p99s).
//!
//! Bounds: [`FINE_SAMPLES`] + [`COARSE_SAMPLES`] samples, each with at most
//! [`MAX_CONTAINERS`] containers (the first by name; an array with more shows
//! those in the history and all of them in the API's container routes) and
//! the [`MAX_VOLUMES_PER_SAMPLE`] volumes with the most requests in its
//! interval (a volume absent from a sample did less than those, or nothing).

use std::collections::VecDeque;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::io::{Direction, IoTotals, LaneTotals, Protocol};
use crate::volumes::VolumeTotals;

/// Seconds between fine samples.
pub const FINE_INTERVAL_S: u64 = 5;
/// Fine samples kept: one hour.
pub const FINE_SAMPLES: usize = 720;
/// Seconds a coarse sample covers.
pub const COARSE_INTERVAL_S: u64 = 60;
/// Coarse samples kept: one day.
pub const COARSE_SAMPLES: usize = 1440;
/// Containers recorded per sample.
pub const MAX_CONTAINERS: usize = 64;
/// Volumes recorded per sample: the busiest of the interval.
pub const MAX_VOLUMES_PER_SAMPLE: usize = 32;
const _: () = assert!(COARSE_INTERVAL_S.is_multiple_of(FINE_INTERVAL_S));

/// The space figures of one instant (gauges, not rates).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpaceFigures {
    pub capacity_bytes: u64,
    pub physical_used_bytes: u64,
    pub volume_unique_bytes: u64,
    pub snapshot_bytes: u64,
    pub shared_bytes: u64,
    pub reserved_bytes: u64,
    pub free_bytes: u64,
    pub provisioned_bytes: u64,
    pub logical_data_bytes: u64,
    pub data_reduction_ratio: f64,
    /// Provisioned space never written, as a percentage of the provisioned
    pub thin_savings_percent: f64,
    /// Bytes written raw, their compression deferred to the background
    pub reduction_backlog_bytes: u64,
}

/// A container's cumulative counters at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerTotals {
    pub name: String,
    pub unmapped_bytes: u64,
    pub reclaimed_bytes: u64,
    pub backlog_bytes: u64,
}

/// What the daemon read at one instant: cumulative counters and gauges.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub unix_s: u64,
    pub io: IoTotals,
    pub space: SpaceFigures,
    /// Every container (the history keeps the first [`MAX_CONTAINERS`] by name).
    pub containers: Vec<ContainerTotals>,
    /// Every volume in use ([`crate::VolumeIo::totals`]).
    pub volumes: Vec<VolumeTotals>,
}

/// One protocol's and direction's figures over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IoFigures {
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub protocol: Protocol,
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub direction: Direction,
    /// Requests completed in the interval, and their bytes
    pub ops: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bytes_per_s: f64,
    pub latency_mean_us: u64,
    pub latency_p99_us: u64,
}

/// A container's reclaim over an interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContainerFigures {
    pub name: String,
    /// Bytes hosts unmapped in the interval
    pub unmapped_bytes: u64,
    /// Bytes the reclaimer returned in the interval
    pub reclaimed_bytes: u64,
    pub reclaim_bytes_per_s: f64,
    /// Unmapped bytes not yet reclaimed, at the interval's end
    pub backlog_bytes: u64,
}

/// A volume's reads and writes over an interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VolumeFigures {
    pub volume_id: u64,
    pub name: String,
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
}

/// The array over one interval, ending at `unix_s`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sample {
    /// When the interval ended, seconds since the Unix epoch
    pub unix_s: u64,
    pub interval_s: u64,
    /// One entry per protocol and direction (NBD read, NBD write, iSCSI read, iSCSI write)
    pub io: Vec<IoFigures>,
    /// As of the interval's end
    pub space: SpaceFigures,
    /// The first containers by name
    pub containers: Vec<ContainerFigures>,
    /// The busiest volumes of the interval, busiest first
    pub volumes: Vec<VolumeFigures>,
}

/// Which ring a reader wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Window {
    /// The last hour at 5 s
    Hour,
    /// The last day at 1 min
    Day,
}

/// Deltas folded into the minute under way.
#[derive(Default)]
struct Minute {
    io: IoTotals,
    containers: Vec<ContainerTotals>,
    volumes: Vec<VolumeTotals>,
    intervals: u64,
}

#[derive(Default)]
struct Inner {
    fine: VecDeque<Sample>,
    coarse: VecDeque<Sample>,
    previous: Option<Observation>,
    minute: Minute,
}

/// The two rings, behind one lock (taken every 5 s and by readers).
#[derive(Default)]
pub struct History {
    inner: Mutex<Inner>,
}

impl History {
    /// Records `now`: a fine sample of the interval since the previous
    /// observation (none for the first), and a coarse one each minute.
    pub fn observe(&self, mut now: Observation) {
        now.containers.sort_by(|a, b| a.name.cmp(&b.name));
        now.containers.truncate(MAX_CONTAINERS);
        let mut inner = self.inner.lock();
        let Some(previous) = inner.previous.replace(now.clone()) else {
            return;
        };
        if now.unix_s <= previous.unix_s {
            return; // the clock went back: start the interval again
        }
        let interval_s = now.unix_s - previous.unix_s;
        let io = now.io.since(&previous.io);
        let containers = container_deltas(&now.containers, &previous.containers);
        let volumes = volume_deltas(&now.volumes, &previous.volumes);
        let fine = sample(
            now.unix_s,
            interval_s,
            &io,
            &now.space,
            &containers,
            &volumes,
        );
        push_bounded(&mut inner.fine, fine, FINE_SAMPLES);
        let minute = &mut inner.minute;
        minute.io.add(&io);
        fold_containers(&mut minute.containers, &containers);
        fold_volumes(&mut minute.volumes, volumes);
        minute.intervals += interval_s;
        if inner.minute.intervals >= COARSE_INTERVAL_S {
            let minute = std::mem::take(&mut inner.minute);
            let coarse = sample(
                now.unix_s,
                minute.intervals,
                &minute.io,
                &now.space,
                &minute.containers,
                &minute.volumes,
            );
            push_bounded(&mut inner.coarse, coarse, COARSE_SAMPLES);
        }
    }

    /// The samples of `window`, oldest first, those ending after `since_unix_s`.
    pub fn samples(&self, window: Window, since_unix_s: u64) -> Vec<Sample> {
        let inner = self.inner.lock();
        let ring = match window {
            Window::Hour => &inner.fine,
            Window::Day => &inner.coarse,
        };
        ring.iter()
            .filter(|s| s.unix_s > since_unix_s)
            .cloned()
            .collect()
    }

    /// Bytes the samples hold (the bound test checks it).
    pub fn held_bytes(&self) -> usize {
        let inner = self.inner.lock();
        let of = |s: &Sample| {
            std::mem::size_of::<Sample>()
                + s.io.capacity() * std::mem::size_of::<IoFigures>()
                + s.containers.capacity() * std::mem::size_of::<ContainerFigures>()
                + s.containers
                    .iter()
                    .map(|c| c.name.capacity())
                    .sum::<usize>()
                + s.volumes.capacity() * std::mem::size_of::<VolumeFigures>()
                + s.volumes.iter().map(|v| v.name.capacity()).sum::<usize>()
        };
        inner.fine.iter().chain(inner.coarse.iter()).map(of).sum()
    }
}

fn push_bounded(ring: &mut VecDeque<Sample>, sample: Sample, bound: usize) {
    if ring.len() == bound {
        ring.pop_front();
    }
    ring.push_back(sample);
    assert!(ring.len() <= bound);
}

/// Each container's counts between two observations (a container new since
/// the previous one counts from zero; the backlog is the latest gauge).
fn container_deltas(now: &[ContainerTotals], previous: &[ContainerTotals]) -> Vec<ContainerTotals> {
    now.iter()
        .map(|c| {
            let before = previous.iter().find(|p| p.name == c.name);
            let before_unmapped = before.map_or(0, |p| p.unmapped_bytes);
            let before_reclaimed = before.map_or(0, |p| p.reclaimed_bytes);
            ContainerTotals {
                name: c.name.clone(),
                unmapped_bytes: c.unmapped_bytes.saturating_sub(before_unmapped),
                reclaimed_bytes: c.reclaimed_bytes.saturating_sub(before_reclaimed),
                backlog_bytes: c.backlog_bytes,
            }
        })
        .collect()
}

fn fold_containers(minute: &mut Vec<ContainerTotals>, interval: &[ContainerTotals]) {
    for c in interval {
        if let Some(m) = minute.iter_mut().find(|m| m.name == c.name) {
            m.unmapped_bytes += c.unmapped_bytes;
            m.reclaimed_bytes += c.reclaimed_bytes;
            m.backlog_bytes = c.backlog_bytes;
        } else if minute.len() < MAX_CONTAINERS {
            minute.push(c.clone());
        }
    }
}

/// Each volume's counts between two observations, busiest first, at most
/// [`MAX_VOLUMES_PER_SAMPLE`] with any request.
fn volume_deltas(now: &[VolumeTotals], previous: &[VolumeTotals]) -> Vec<VolumeTotals> {
    let mut deltas: Vec<VolumeTotals> = now
        .iter()
        .map(|v| v.since(previous.iter().find(|p| p.volume_id == v.volume_id)))
        .filter(|d| d.ops() > 0)
        .collect();
    busiest_first(&mut deltas);
    deltas
}

fn busiest_first(volumes: &mut Vec<VolumeTotals>) {
    volumes.sort_by(|a, b| b.ops().cmp(&a.ops()).then(a.volume_id.cmp(&b.volume_id)));
    volumes.truncate(MAX_VOLUMES_PER_SAMPLE);
}

/// Adds an interval's volumes to the minute's (kept to the busiest).
fn fold_volumes(minute: &mut Vec<VolumeTotals>, interval: Vec<VolumeTotals>) {
    for v in interval {
        match minute.iter_mut().find(|m| m.volume_id == v.volume_id) {
            Some(m) => {
                m.read_ops += v.read_ops;
                m.read_bytes += v.read_bytes;
                m.write_ops += v.write_ops;
                m.write_bytes += v.write_bytes;
            }
            None => minute.push(v),
        }
    }
    // Bounded by twice the limit between truncations.
    if minute.len() > 2 * MAX_VOLUMES_PER_SAMPLE {
        busiest_first(minute);
    }
}

fn sample(
    unix_s: u64,
    interval_s: u64,
    io: &IoTotals,
    space: &SpaceFigures,
    containers: &[ContainerTotals],
    volumes: &[VolumeTotals],
) -> Sample {
    assert!(interval_s > 0);
    let per_s = |n: u64| n as f64 / interval_s as f64;
    let figures = |protocol, direction| {
        let lane: &LaneTotals = io.lane(protocol, direction);
        IoFigures {
            protocol,
            direction,
            ops: lane.ops,
            bytes: lane.bytes,
            iops: per_s(lane.ops),
            bytes_per_s: per_s(lane.bytes),
            latency_mean_us: lane.mean_us(),
            latency_p99_us: lane.percentile_us(990),
        }
    };
    Sample {
        unix_s,
        interval_s,
        io: Protocol::ALL
            .iter()
            .flat_map(|&p| Direction::ALL.map(|d| figures(p, d)))
            .collect(),
        space: space.clone(),
        containers: containers
            .iter()
            .map(|c| ContainerFigures {
                name: c.name.clone(),
                unmapped_bytes: c.unmapped_bytes,
                reclaimed_bytes: c.reclaimed_bytes,
                reclaim_bytes_per_s: per_s(c.reclaimed_bytes),
                backlog_bytes: c.backlog_bytes,
            })
            .collect(),
        volumes: {
            let mut busiest = volumes.to_vec();
            busiest_first(&mut busiest);
            busiest
                .iter()
                .map(|v| VolumeFigures {
                    volume_id: v.volume_id,
                    name: v.name.clone(),
                    read_iops: per_s(v.read_ops),
                    write_iops: per_s(v.write_ops),
                    read_bytes_per_s: per_s(v.read_bytes),
                    write_bytes_per_s: per_s(v.write_bytes),
                })
                .collect()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::IoCounters;
    use std::time::Duration;

    fn observation(unix_s: u64, io: &IoCounters, containers: usize) -> Observation {
        Observation {
            unix_s,
            io: io.totals(),
            space: SpaceFigures {
                free_bytes: 1000 + unix_s,
                ..SpaceFigures::default()
            },
            containers: (0..containers)
                .map(|i| ContainerTotals {
                    name: format!("container-with-a-long-name-{i:04}"),
                    unmapped_bytes: unix_s * 10,
                    reclaimed_bytes: unix_s * 4,
                    backlog_bytes: unix_s * 6,
                })
                .collect(),
            volumes: (0..containers as u64)
                .map(|i| VolumeTotals {
                    volume_id: i,
                    name: format!("volume-with-a-long-name-{i:04}"),
                    read_ops: unix_s * (i + 1),
                    read_bytes: unix_s * (i + 1) * 4096,
                    write_ops: unix_s,
                    write_bytes: unix_s * 512,
                })
                .collect(),
        }
    }

    #[test]
    fn fine_samples_are_rates_of_their_interval_and_minutes_merge_twelve() {
        let history = History::default();
        let io = IoCounters::default();
        history.observe(observation(1000, &io, 1));
        assert!(
            history.samples(Window::Hour, 0).is_empty(),
            "one instant is no interval"
        );
        for step in 1..=12u64 {
            let latency = if step == 12 { 10_000 } else { 100 };
            for _ in 0..500 {
                io.record(
                    Protocol::Iscsi,
                    Direction::Write,
                    8192,
                    Duration::from_micros(latency),
                );
            }
            history.observe(observation(1000 + step * FINE_INTERVAL_S, &io, 1));
        }
        let fine = history.samples(Window::Hour, 0);
        assert_eq!(fine.len(), 12);
        let write = |s: &Sample| {
            s.io.iter()
                .find(|f| f.protocol == Protocol::Iscsi && f.direction == Direction::Write)
                .cloned()
                .unwrap()
        };
        assert_eq!(write(&fine[0]).iops, 100.0);
        assert_eq!(write(&fine[0]).bytes_per_s, 100.0 * 8192.0);
        assert!(write(&fine[0]).latency_p99_us < 120);
        assert!(write(&fine[11]).latency_p99_us >= 10_000);
        assert_eq!(fine[3].containers[0].reclaimed_bytes, 20);
        assert_eq!(fine[3].containers[0].reclaim_bytes_per_s, 4.0);
        assert_eq!(fine[3].space.free_bytes, 1000 + 1020);
        let day = history.samples(Window::Day, 0);
        assert_eq!(day.len(), 1, "a minute after the first observation");
        assert_eq!(day[0].interval_s, 60);
        assert_eq!(write(&day[0]).iops, 100.0);
        // 1 in 12 operations took 10 ms: the minute's p99 sees them.
        assert!(write(&day[0]).latency_p99_us >= 10_000);
        assert_eq!(day[0].containers[0].reclaimed_bytes, 240);
        assert_eq!(history.samples(Window::Hour, 1000 + 55).len(), 1);
    }

    /// A long run with many containers stays within the rings' bounds.
    #[test]
    fn the_history_stays_within_its_bound_over_two_days() {
        let history = History::default();
        let io = IoCounters::default();
        let steps = 2 * 24 * 3600 / FINE_INTERVAL_S;
        for step in 0..steps {
            io.record(
                Protocol::Nbd,
                Direction::Read,
                4096,
                Duration::from_micros(50),
            );
            history.observe(observation(
                step * FINE_INTERVAL_S,
                &io,
                MAX_CONTAINERS + 10,
            ));
        }
        assert_eq!(history.samples(Window::Hour, 0).len(), FINE_SAMPLES);
        assert_eq!(history.samples(Window::Day, 0).len(), COARSE_SAMPLES);
        assert!(history
            .samples(Window::Day, 0)
            .iter()
            .all(|s| s.containers.len() == MAX_CONTAINERS
                && s.volumes.len() == MAX_VOLUMES_PER_SAMPLE));
        let busiest = &history.samples(Window::Hour, 0)[0].volumes;
        assert_eq!(
            busiest[0].name,
            format!("volume-with-a-long-name-{:04}", MAX_CONTAINERS + 9),
            "the busiest volume first"
        );
        let per_sample = std::mem::size_of::<Sample>()
            + 4 * std::mem::size_of::<IoFigures>()
            + MAX_CONTAINERS * (std::mem::size_of::<ContainerFigures>() + 64)
            + MAX_VOLUMES_PER_SAMPLE * (std::mem::size_of::<VolumeFigures>() + 64);
        let bound = (FINE_SAMPLES + COARSE_SAMPLES) * per_sample;
        let held = history.held_bytes();
        assert!(held <= bound, "{held} bytes held, bound {bound}");
        assert!(held > bound / 4, "{held}: the test measures something");
    }

    #[test]
    fn a_clock_that_goes_back_starts_the_interval_again() {
        let history = History::default();
        let io = IoCounters::default();
        history.observe(observation(1000, &io, 0));
        history.observe(observation(990, &io, 0));
        assert!(history.samples(Window::Hour, 0).is_empty());
        history.observe(observation(995, &io, 0));
        assert_eq!(history.samples(Window::Hour, 0).len(), 1);
    }
}
