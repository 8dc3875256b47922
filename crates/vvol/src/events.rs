//! Configuration events a host polls from an event id (VASA `getEvents`):
//! vVols made, changed, bound and unbound. Kept in memory, the newest
//! [`MAX_EVENTS`]; ids never go back, across restarts too (the next id is
//! kept with every change in the store). A host asking from an id older than
//! what is kept gets [`VvolFault::LostEvent`] and resynchronises.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::fault::VvolFault;

/// Most events kept.
pub const MAX_EVENTS: usize = 4096;
/// Most events one poll answers.
pub const MAX_EVENTS_PER_POLL: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventKind {
    /// A vVol was created, changed (metadata, size, revert) or deleted.
    Config,
    /// A vVol was bound or unbound: the host's subsidiary LUNs changed.
    Rebind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: u64,
    pub kind: EventKind,
    /// The vVol it concerns.
    pub object: String,
    /// The host, for a bind or unbind.
    pub host: Option<String>,
    pub what: String,
    pub unix_s: u64,
    /// The store change it belongs to: polled once that change is durable.
    #[serde(skip)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub(crate) change: u64,
}

#[derive(Debug)]
pub struct EventLog {
    events: VecDeque<Event>,
    next_id: u64,
}

impl EventLog {
    pub fn new(next_id: u64) -> EventLog {
        assert!(next_id >= 1);
        EventLog {
            events: VecDeque::new(),
            next_id,
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Logs an event of store change `change` (changes come in order).
    pub fn push(
        &mut self,
        change: u64,
        kind: EventKind,
        object: String,
        host: Option<String>,
        what: String,
    ) {
        debug_assert!(self.events.back().is_none_or(|e| e.change <= change));
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            id: self.next_id,
            kind,
            object,
            host,
            what,
            unix_s: crate::now_unix_s(),
            change,
        });
        self.next_id += 1;
    }

    /// The events after `last_seen` (0: from the oldest kept) of changes up
    /// to `durable` (a prefix, since changes come in order), at most
    /// [`MAX_EVENTS_PER_POLL`].
    pub fn since(&self, last_seen: u64, durable: u64) -> Result<Vec<Event>, VvolFault> {
        let oldest = self.events.front().map_or(self.next_id, |e| e.id);
        // Events before the oldest kept (evicted, or from before a restart)
        // cannot be answered; nor can ids not given yet.
        let kept = last_seen == 0 || (last_seen + 1 >= oldest && last_seen < self.next_id);
        if !kept {
            return Err(VvolFault::LostEvent(format!(
                "event {last_seen} is not kept (kept: {oldest} to {}); read the state again",
                self.next_id - 1
            )));
        }
        Ok(self
            .events
            .iter()
            .filter(|e| e.id > last_seen)
            .take_while(|e| e.change <= durable)
            .take(MAX_EVENTS_PER_POLL)
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_with(count: usize, next_id: u64) -> EventLog {
        let mut log = EventLog::new(next_id);
        for i in 0..count {
            log.push(
                i as u64 + 1,
                EventKind::Config,
                format!("v{i}"),
                None,
                "created".into(),
            );
        }
        log
    }

    #[test]
    fn a_poll_answers_what_came_after_and_refuses_what_is_gone() {
        let log = log_with(10, 1);
        assert_eq!(log.since(0, u64::MAX).unwrap().len(), 10);
        assert_eq!(
            log.since(7, u64::MAX)
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect::<Vec<_>>(),
            [8, 9, 10]
        );
        assert!(log.since(10, u64::MAX).unwrap().is_empty());
        assert!(matches!(
            log.since(11, u64::MAX),
            Err(VvolFault::LostEvent(_))
        ));
        let full = log_with(MAX_EVENTS + 5, 1);
        assert!(matches!(
            full.since(3, u64::MAX),
            Err(VvolFault::LostEvent(_))
        ));
        assert_eq!(full.since(5, u64::MAX).unwrap()[0].id, 6);
    }

    #[test]
    fn a_poll_answers_only_events_of_durable_changes() {
        let log = log_with(4, 1);
        assert_eq!(log.since(0, 0).unwrap().len(), 0);
        let ids: Vec<u64> = log.since(0, 2).unwrap().iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2]);
        assert_eq!(log.since(2, 4).unwrap().len(), 2);
    }

    #[test]
    fn ids_from_before_a_restart_are_lost_not_repeated() {
        let log = log_with(2, 100);
        assert_eq!(log.since(99, u64::MAX).unwrap().len(), 2);
        assert!(matches!(
            log.since(50, u64::MAX),
            Err(VvolFault::LostEvent(_))
        ));
    }
}
