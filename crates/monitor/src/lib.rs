//! What an administrator looks at over time: the I/O counters the transports
//! feed ([`io`]), a bounded history of the array's figures sampled from them and
//! from the engine's reports ([`history`]), and a persisted, bounded log of the
//! events an administrator must know about ([`events`]), with each volume's
//! reads and writes ([`volumes`]) and the connections open now
//! ([`connections`]).
//!
//! Why a crate of its own: it knows nothing of the engine, the protocols or
//! HTTP. The daemon samples the engine and hands this crate plain figures
//! ([`history::Observation`]); the API and the dashboard read what it keeps.
//! Every structure here has a fixed bound (docs/LIMITS.md), whatever the run
//! length or the number of volumes.

pub mod connections;
pub mod events;
pub mod history;
pub mod io;
pub mod volumes;
pub mod watch;

pub use connections::{ConnectionGuard, Connections, LiveSession};
pub use events::{Event, EventKind, EventLog, EventLogError, NewEvent, Severity};
pub use history::{
    ContainerFigures, ContainerTotals, History, IoFigures, Observation, Sample, SpaceFigures,
    VolumeFigures, Window,
};
pub use io::{Direction, IoCounters, IoTotals, Protocol};
pub use volumes::{VolumeIo, VolumeLane, VolumeTotals};
pub use watch::{Condition, Refusals, ScrubResult, Watch};

/// What the daemon keeps for the API and the dashboard: the counters the
/// transports feed, the history and the event log, and the refusals waiting
/// for the next sample.
pub struct Monitor {
    pub io: IoCounters,
    pub volumes: VolumeIo,
    pub connections: Connections,
    pub history: History,
    pub events: EventLog,
    pub refusals: Refusals,
}

impl Monitor {
    /// A monitor whose event log lives in `dir`.
    pub fn open(dir: &std::path::Path) -> Result<Monitor, EventLogError> {
        Ok(Monitor {
            io: IoCounters::default(),
            volumes: VolumeIo::default(),
            connections: Connections::default(),
            history: History::default(),
            events: EventLog::open(dir)?,
            refusals: Refusals::default(),
        })
    }
}

/// Where one export or logical unit counts its requests: the array's lane of
/// its protocol and, for a volume, the volume's own lane.
#[derive(Clone)]
pub struct Meter {
    monitor: std::sync::Arc<Monitor>,
    protocol: Protocol,
    volume: Option<std::sync::Arc<VolumeLane>>,
}

impl Meter {
    /// Counts in the array's lanes only (a snapshot, a protocol endpoint).
    pub fn new(monitor: std::sync::Arc<Monitor>, protocol: Protocol) -> Meter {
        Meter {
            monitor,
            protocol,
            volume: None,
        }
    }

    /// Counts in the array's lanes and in volume `volume_id`'s.
    pub fn for_volume(
        monitor: std::sync::Arc<Monitor>,
        protocol: Protocol,
        volume_id: u64,
        name: &str,
    ) -> Meter {
        let volume = monitor.volumes.lane(volume_id, name);
        Meter {
            monitor,
            protocol,
            volume,
        }
    }

    pub fn monitor(&self) -> &Monitor {
        &self.monitor
    }

    /// Counts one completed request of `bytes` that took `latency`.
    pub fn record(&self, direction: Direction, bytes: u64, latency: std::time::Duration) {
        self.monitor
            .io
            .record(self.protocol, direction, bytes, latency);
        if let Some(lane) = &self.volume {
            lane.record(direction, bytes);
        }
    }

    /// Runs `request` and counts it if it succeeded (a failure is not a
    /// latency).
    pub fn time<T, E>(
        &self,
        direction: Direction,
        bytes: u64,
        request: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let started = std::time::Instant::now();
        let result = request();
        if result.is_ok() {
            self.record(direction, bytes, started.elapsed());
        }
        result
    }
}
