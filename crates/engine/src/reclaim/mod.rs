//! Background work that turns dead data into free space: the reclaimer drops
//! the point mappings range records shadow and those of eradicated volumes,
//! releases their blocks and frees segments left empty (`reclaimer`); the
//! cleaner relocates the live records of mostly-dead segments (`cleaner`).
//! The reducer compresses what host writes stored raw when they were short of
//! CPU (`reducer`). The worker's own state, and the host activity it yields to, are in
//! `scheduler`.
//!
//! Runs under `space::rate` and yields to host I/O; changes only what
//! committed records already hide, so a crash at any step loses nothing.
//!
//! May use: `meta`, `segment`, `space`, `write`, `testing`.

pub(crate) mod cleaner;
pub(crate) mod reclaimer;
pub(crate) mod reducer;
pub(crate) mod scheduler;
