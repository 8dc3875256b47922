//! The event log: what an administrator must know, with a severity, kept in
//! order with increasing ids, acknowledged one by one, persisted in a file of
//! JSON lines (`events.jsonl` in the data directory) and bounded.
//!
//! The file is a journal: a line per event and a line per acknowledgement,
//! appended and synced as a batch. At open it is replayed; a torn last line (a
//! crash mid-append) is skipped, and only the newest [`MAX_EVENTS`] events are
//! kept. When the file holds twice that many lines it is rewritten (to a
//! temporary file, synced, renamed over), so it never grows without bound.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Events kept, in memory and in the file.
pub const MAX_EVENTS: usize = 10_000;
/// Longest message kept (longer ones are cut at a character boundary).
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Longest subject (a volume, container or host name, an initiator) kept.
pub const MAX_SUBJECT_BYTES: usize = 256;
/// The file's name in the data directory.
pub const FILE_NAME: &str = "events.jsonl";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventKind {
    SoftThresholdCrossed,
    SoftThresholdCleared,
    OutOfSpace,
    SpaceAvailable,
    ContainerQuotaReached,
    ReadError,
    ChecksumError,
    ScrubFinished,
    Fenced,
    HostRefused,
    CertificateExpiring,
}

/// An event as it is raised.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub severity: Severity,
    pub kind: EventKind,
    /// What it is about (a volume, a container, a host), if anything
    pub subject: Option<String>,
    pub message: String,
}

/// An event as it is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: u64,
    /// When it was raised, seconds since the Unix epoch
    pub unix_s: u64,
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub severity: Severity,
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub kind: EventKind,
    pub subject: Option<String>,
    pub message: String,
    /// When an administrator acknowledged it; absent while it is open
    pub acknowledged_unix_s: Option<u64>,
}

/// One line of the file.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Event(Event),
    Ack { id: u64, unix_s: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("event log {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("no event {0}")]
    NoSuchEvent(u64),
}

struct Inner {
    events: VecDeque<Event>,
    next_id: u64,
    file: File,
    lines_in_file: usize,
}

pub struct EventLog {
    path: PathBuf,
    inner: Mutex<Inner>,
}

fn cut(mut text: String, max_bytes: usize) -> String {
    if text.len() > max_bytes {
        let mut at = max_bytes;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}

impl EventLog {
    /// Opens (or creates) the log in `dir`.
    pub fn open(dir: &Path) -> Result<EventLog, EventLogError> {
        let path = dir.join(FILE_NAME);
        let error = |source| EventLogError::Io {
            path: path.clone(),
            source,
        };
        let (events, lines) = match File::open(&path) {
            Ok(file) => replay(BufReader::new(file)).map_err(error)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => (VecDeque::new(), 0),
            Err(e) => return Err(error(e)),
        };
        let next_id = events.back().map_or(1, |e| e.id + 1);
        let file = open_append(&path).map_err(error)?;
        let log = EventLog {
            path: path.clone(),
            inner: Mutex::new(Inner {
                events,
                next_id,
                file,
                lines_in_file: lines,
            }),
        };
        // A torn line, or a file of many acknowledgements: start clean.
        log.compact_if_due(&mut log.inner.lock(), true)
            .map_err(error)?;
        Ok(log)
    }

    /// Raises `events` at `unix_s` (one append and one sync for all); returns
    /// them as kept.
    pub fn raise(&self, unix_s: u64, events: Vec<NewEvent>) -> Result<Vec<Event>, EventLogError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut inner = self.inner.lock();
        let mut kept = Vec::with_capacity(events.len());
        let mut text = String::new();
        for new in events {
            let event = Event {
                id: inner.next_id,
                unix_s,
                severity: new.severity,
                kind: new.kind,
                subject: new.subject.map(|s| cut(s, MAX_SUBJECT_BYTES)),
                message: cut(new.message, MAX_MESSAGE_BYTES),
                acknowledged_unix_s: None,
            };
            inner.next_id += 1;
            text.push_str(&serde_json::to_string(&Line::Event(event.clone())).expect("serialises"));
            text.push('\n');
            kept.push(event);
        }
        self.append(&mut inner, &text, kept.len())?;
        for event in &kept {
            tracing::info!(id = event.id, kind = ?event.kind, severity = ?event.severity, subject = ?event.subject, "event: {}", event.message);
            if inner.events.len() == MAX_EVENTS {
                inner.events.pop_front();
            }
            inner.events.push_back(event.clone());
        }
        assert!(inner.events.len() <= MAX_EVENTS);
        self.compact_if_due(&mut inner, false)
            .map_err(|source| self.io_error(source))?;
        Ok(kept)
    }

    /// Acknowledges event `id` (again is a no-op that keeps the first time).
    pub fn acknowledge(&self, id: u64, unix_s: u64) -> Result<Event, EventLogError> {
        let mut inner = self.inner.lock();
        let index = inner
            .events
            .iter()
            .position(|e| e.id == id)
            .ok_or(EventLogError::NoSuchEvent(id))?;
        if inner.events[index].acknowledged_unix_s.is_none() {
            let line = serde_json::to_string(&Line::Ack { id, unix_s }).expect("serialises");
            self.append(&mut inner, &format!("{line}\n"), 1)?;
            inner.events[index].acknowledged_unix_s = Some(unix_s);
            self.compact_if_due(&mut inner, false)
                .map_err(|source| self.io_error(source))?;
        }
        Ok(inner.events[index].clone())
    }

    /// Events with an id above `after_id`, oldest first, at most `limit`
    /// (the newest of them), optionally only those not acknowledged.
    pub fn list(&self, after_id: u64, open_only: bool, limit: usize) -> Vec<Event> {
        let inner = self.inner.lock();
        let matching: Vec<&Event> = inner
            .events
            .iter()
            .filter(|e| e.id > after_id && (!open_only || e.acknowledged_unix_s.is_none()))
            .collect();
        let skip = matching.len().saturating_sub(limit);
        matching.into_iter().skip(skip).cloned().collect()
    }

    /// Events not acknowledged, by severity: (warning, critical).
    pub fn open_counts(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        let open = |s| {
            inner
                .events
                .iter()
                .filter(|e| e.acknowledged_unix_s.is_none() && e.severity == s)
                .count() as u64
        };
        (open(Severity::Warning), open(Severity::Critical))
    }

    fn io_error(&self, source: io::Error) -> EventLogError {
        EventLogError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Appends `lines` lines of `text` and syncs them (the caller then
    /// updates memory, and compacts if due).
    fn append(&self, inner: &mut Inner, text: &str, lines: usize) -> Result<(), EventLogError> {
        inner
            .file
            .write_all(text.as_bytes())
            .and_then(|()| inner.file.sync_data())
            .map_err(|source| self.io_error(source))?;
        inner.lines_in_file += lines;
        Ok(())
    }

    /// Rewrites the file with the kept events alone once it holds twice as
    /// many lines (or, with `force`, whenever it holds more lines than events).
    fn compact_if_due(&self, inner: &mut Inner, force: bool) -> io::Result<()> {
        let due = if force {
            inner.lines_in_file != inner.events.len()
        } else {
            inner.lines_in_file >= 2 * MAX_EVENTS
        };
        if !due {
            return Ok(());
        }
        let temporary = self.path.with_extension("jsonl.new");
        {
            let mut out = io::BufWriter::new(File::create(&temporary)?);
            for event in &inner.events {
                serde_json::to_writer(&mut out, &Line::Event(event.clone()))?;
                out.write_all(b"\n")?;
            }
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        std::fs::rename(&temporary, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        inner.file = open_append(&self.path)?;
        inner.lines_in_file = inner.events.len();
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The events a file holds (the newest [`MAX_EVENTS`]) and its line count.
fn replay(reader: impl BufRead) -> io::Result<(VecDeque<Event>, usize)> {
    let mut events: VecDeque<Event> = VecDeque::new();
    let mut lines = 0;
    for line in reader.lines() {
        let line = line?;
        lines += 1;
        match serde_json::from_str::<Line>(&line) {
            Ok(Line::Event(event)) => {
                if events.back().is_some_and(|last| last.id >= event.id) {
                    continue; // out of order: not a line this log wrote
                }
                if events.len() == MAX_EVENTS {
                    events.pop_front();
                }
                events.push_back(event);
            }
            Ok(Line::Ack { id, unix_s }) => {
                if let Some(event) = events.iter_mut().find(|e| e.id == id) {
                    event.acknowledged_unix_s.get_or_insert(unix_s);
                }
            }
            Err(error) => tracing::warn!("event log: skipping a line that does not read: {error}"),
        }
    }
    Ok((events, lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(kind: EventKind, subject: &str) -> NewEvent {
        NewEvent {
            severity: Severity::Warning,
            kind,
            subject: Some(subject.to_string()),
            message: format!("{kind:?} on {subject}"),
        }
    }

    #[test]
    fn events_and_acknowledgements_survive_a_reopen_and_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open(dir.path()).unwrap();
        let raised = log
            .raise(
                100,
                vec![
                    new(EventKind::ReadError, "vol-a"),
                    new(EventKind::Fenced, "array"),
                ],
            )
            .unwrap();
        assert_eq!(raised.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1, 2]);
        log.acknowledge(1, 150).unwrap();
        assert_eq!(
            log.acknowledge(1, 999).unwrap().acknowledged_unix_s,
            Some(150)
        );
        assert!(matches!(
            log.acknowledge(7, 1),
            Err(EventLogError::NoSuchEvent(7))
        ));
        drop(log);
        // A crash mid-append leaves half a line.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE_NAME))
            .unwrap();
        file.write_all(b"{\"event\":{\"id\":3,\"un").unwrap();
        drop(file);
        let log = EventLog::open(dir.path()).unwrap();
        let all = log.list(0, false, 100);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].acknowledged_unix_s, Some(150));
        assert_eq!(all[1].kind, EventKind::Fenced);
        assert_eq!(log.list(0, true, 100).len(), 1, "only the open one");
        assert_eq!(log.open_counts(), (1, 0));
        let next = log
            .raise(200, vec![new(EventKind::OutOfSpace, "array")])
            .unwrap();
        assert_eq!(next[0].id, 3, "ids continue after the kept ones");
        assert_eq!(log.list(2, false, 100).len(), 1);
    }

    #[test]
    fn the_log_and_its_file_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open(dir.path()).unwrap();
        for batch in 0..(3 * MAX_EVENTS / 100) {
            let events = (0..100)
                .map(|i| new(EventKind::ChecksumError, &format!("v{batch}-{i}")))
                .collect();
            log.raise(batch as u64, events).unwrap();
        }
        let all = log.list(0, false, usize::MAX);
        assert_eq!(all.len(), MAX_EVENTS);
        assert_eq!(all.last().unwrap().id, 3 * MAX_EVENTS as u64);
        let lines = std::fs::read_to_string(dir.path().join(FILE_NAME))
            .unwrap()
            .lines()
            .count();
        assert!(lines < 2 * MAX_EVENTS, "{lines} lines");
        drop(log);
        let log = EventLog::open(dir.path()).unwrap();
        assert_eq!(log.list(0, false, usize::MAX), all);
        assert_eq!(log.list(0, false, 5).len(), 5);
        assert_eq!(log.list(0, false, 5)[4].id, 3 * MAX_EVENTS as u64);
    }

    #[test]
    fn long_messages_and_subjects_are_cut_at_a_character_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open(dir.path()).unwrap();
        let event = log
            .raise(
                1,
                vec![NewEvent {
                    severity: Severity::Info,
                    kind: EventKind::HostRefused,
                    subject: Some("é".repeat(400)),
                    message: "ü".repeat(2000),
                }],
            )
            .unwrap()
            .remove(0);
        assert!(event.message.len() <= MAX_MESSAGE_BYTES && event.message.len() > 1000);
        assert!(event.subject.unwrap().len() <= MAX_SUBJECT_BYTES);
    }
}
