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

pub use events::{Event, EventKind, EventLog, EventLogError, NewEvent, Severity};
pub use history::{
    ContainerFigures, ContainerTotals, History, IoFigures, Observation, Sample, SpaceFigures,
    Window,
};
pub use io::{Direction, IoCounters, IoTotals, Protocol};
