//! What an administrator looks at over time: the I/O counters the transports
//! feed ([`io`]), a bounded history of the array's figures sampled from them and
//! from the engine's reports ([`history`]), and a persisted, bounded log of the
//! events an administrator must know about ([`events`]).
//!
//! Why a crate of its own: it knows nothing of the engine, the protocols or
//! HTTP. The daemon samples the engine and hands this crate plain figures
//! ([`history::Observation`]); the API and the dashboard read what it keeps.
//! Every structure here has a fixed bound (docs/LIMITS.md), whatever the run
//! length or the number of volumes.

pub mod events;
pub mod history;
pub mod io;
pub mod watch;

pub use events::{Event, EventKind, EventLog, EventLogError, NewEvent, Severity};
pub use history::{
    ContainerFigures, ContainerTotals, History, IoFigures, Observation, Sample, SpaceFigures,
    Window,
};
pub use io::{Direction, IoCounters, IoTotals, Protocol};
pub use watch::{Condition, Refusals, ScrubResult, Watch};

/// What the daemon keeps for the API and the dashboard: the counters the
/// transports feed, the history and the event log, and the refusals waiting
/// for the next sample.
pub struct Monitor {
    pub io: IoCounters,
    pub history: History,
    pub events: EventLog,
    pub refusals: Refusals,
}

impl Monitor {
    /// A monitor whose event log lives in `dir`.
    pub fn open(dir: &std::path::Path) -> Result<Monitor, EventLogError> {
        Ok(Monitor {
            io: IoCounters::default(),
            history: History::default(),
            events: EventLog::open(dir)?,
            refusals: Refusals::default(),
        })
    }
}
