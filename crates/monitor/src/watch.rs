//! Events from conditions: the daemon describes the array's state at each
//! sample ([`Condition`]) and [`Watch`] raises an event when a condition
//! starts or ends (the soft threshold crossed and cleared, out of space and
//! back, fenced, a container's quota reached, a scrub pass finished, the
//! provider certificate near its expiry), never again while it lasts.
//!
//! Refusals of hosts come from the transports, any time; [`Refusals`] keeps
//! one event per who and [`REFUSAL_QUIET_S`], so a host retrying a login every
//! second raises one event a minute at most.

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;

use crate::events::{EventKind, NewEvent, Severity};

/// A refused host (same who) raises no second event within this many seconds.
pub const REFUSAL_QUIET_S: u64 = 60;
/// Refusals waiting for the next sample, and whos remembered for the quiet
/// period.
pub const MAX_PENDING_REFUSALS: usize = 64;
pub const MAX_REMEMBERED_REFUSALS: usize = 1024;
/// The certificate warning is raised this many days before expiry.
pub const CERTIFICATE_WARNING_DAYS: i64 = 30;

/// A finished scrub pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubResult {
    pub pass: u64,
    pub bad_records: u64,
    pub bytes_checked: u64,
    pub cancelled: bool,
}

/// The array's state at one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    pub used_percent: f64,
    pub soft_threshold_percent: u8,
    pub soft_threshold_exceeded: bool,
    /// No space for new data
    pub read_only: bool,
    /// A write could not be kept; the reason
    pub fenced: Option<String>,
    /// Containers whose quota is used up
    pub quota_full: BTreeSet<String>,
    pub last_scrub: Option<ScrubResult>,
    /// Days until the VASA provider's certificate expires
    pub certificate_days_left: Option<i64>,
}

/// What the previous sample saw.
#[derive(Default)]
pub struct Watch {
    previous: Option<Condition>,
    certificate_warned: bool,
}

fn event(severity: Severity, kind: EventKind, subject: &str, message: String) -> NewEvent {
    NewEvent {
        severity,
        kind,
        subject: Some(subject.to_string()),
        message,
    }
}

impl Watch {
    /// The events `now` raises against the previous sample. The first sample
    /// raises what is wrong already (a daemon started on a full array says
    /// so), and no scrub event for a pass that ended before it.
    pub fn events(&mut self, now: &Condition) -> Vec<NewEvent> {
        let first = self.previous.is_none();
        let before = self.previous.take().unwrap_or_default();
        let mut out = Vec::new();
        if now.soft_threshold_exceeded && !before.soft_threshold_exceeded {
            out.push(event(
                Severity::Warning,
                EventKind::SoftThresholdCrossed,
                "array",
                format!(
                    "physical use {:.1}% passed the soft threshold of {}%",
                    now.used_percent, now.soft_threshold_percent
                ),
            ));
        }
        if !now.soft_threshold_exceeded && before.soft_threshold_exceeded {
            out.push(event(
                Severity::Info,
                EventKind::SoftThresholdCleared,
                "array",
                format!(
                    "physical use {:.1}% is back under the soft threshold of {}%",
                    now.used_percent, now.soft_threshold_percent
                ),
            ));
        }
        if now.read_only && !before.read_only {
            out.push(event(
                Severity::Critical,
                EventKind::OutOfSpace,
                "array",
                "out of space: writes of new data fail until space is freed".into(),
            ));
        }
        if !now.read_only && before.read_only {
            out.push(event(
                Severity::Info,
                EventKind::SpaceAvailable,
                "array",
                "space for new data again".into(),
            ));
        }
        if let (Some(reason), None) = (&now.fenced, &before.fenced) {
            out.push(event(
                Severity::Critical,
                EventKind::Fenced,
                "array",
                format!("fenced, no I/O until a restart: {reason}"),
            ));
        }
        for container in now.quota_full.difference(&before.quota_full) {
            out.push(event(
                Severity::Warning,
                EventKind::ContainerQuotaReached,
                container,
                format!("container {container} reached its quota: its volumes' new writes fail"),
            ));
        }
        if let Some(scrub) = &now.last_scrub {
            let new_pass = before
                .last_scrub
                .as_ref()
                .is_none_or(|b| b.pass != scrub.pass);
            if new_pass && !first {
                out.push(scrub_event(scrub));
            }
        }
        match now.certificate_days_left {
            Some(days) if days <= CERTIFICATE_WARNING_DAYS && !self.certificate_warned => {
                self.certificate_warned = true;
                out.push(event(
                    Severity::Warning,
                    EventKind::CertificateExpiring,
                    "vasa",
                    format!("the VASA provider certificate expires in {days} days: replace it (lacuna vasa rotate-certificate, or a CA-signed one from vCenter)"),
                ));
            }
            Some(days) if days > CERTIFICATE_WARNING_DAYS => self.certificate_warned = false,
            _ => {}
        }
        self.previous = Some(now.clone());
        out
    }
}

fn scrub_event(scrub: &ScrubResult) -> NewEvent {
    let (severity, outcome) = match (scrub.bad_records, scrub.cancelled) {
        (0, false) => (Severity::Info, "no errors".to_string()),
        (0, true) => (Severity::Info, "cancelled, no errors so far".to_string()),
        (n, _) => (
            Severity::Critical,
            format!("{n} records failed verification"),
        ),
    };
    event(
        severity,
        EventKind::ScrubFinished,
        "array",
        format!(
            "scrub pass {} checked {} bytes: {outcome}",
            scrub.pass, scrub.bytes_checked
        ),
    )
}

/// Hosts refused by the transports, waiting for the next sample.
#[derive(Default)]
pub struct Refusals {
    inner: Mutex<RefusalsInner>,
}

#[derive(Default)]
struct RefusalsInner {
    last_raised_unix_s: HashMap<String, u64>,
    pending: Vec<NewEvent>,
    not_kept: u64,
}

impl Refusals {
    /// A host (`who`: an initiator name, a PSK identity, an address) was
    /// refused for `why`.
    pub fn refused(&self, protocol: &str, who: &str, why: &str, now_unix_s: u64) {
        let mut inner = self.inner.lock();
        let key = format!("{protocol} {who}");
        if inner
            .last_raised_unix_s
            .get(&key)
            .is_some_and(|&at| now_unix_s < at + REFUSAL_QUIET_S)
        {
            return;
        }
        if inner.pending.len() >= MAX_PENDING_REFUSALS {
            inner.not_kept += 1;
            return;
        }
        if inner.last_raised_unix_s.len() >= MAX_REMEMBERED_REFUSALS {
            inner
                .last_raised_unix_s
                .retain(|_, at| now_unix_s < *at + REFUSAL_QUIET_S);
            if inner.last_raised_unix_s.len() >= MAX_REMEMBERED_REFUSALS {
                inner.not_kept += 1;
                return;
            }
        }
        inner.last_raised_unix_s.insert(key, now_unix_s);
        inner.pending.push(NewEvent {
            severity: Severity::Warning,
            kind: EventKind::HostRefused,
            subject: Some(who.to_string()),
            message: format!("{protocol}: {who} refused: {why}"),
        });
    }

    /// The refusals since the last take, with one more event if some were
    /// not kept.
    pub fn take(&self) -> Vec<NewEvent> {
        let mut inner = self.inner.lock();
        let mut out = std::mem::take(&mut inner.pending);
        let not_kept = std::mem::take(&mut inner.not_kept);
        if not_kept > 0 {
            out.push(NewEvent {
                severity: Severity::Warning,
                kind: EventKind::HostRefused,
                subject: None,
                message: format!("{not_kept} more refusals not listed"),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(events: &[NewEvent]) -> Vec<EventKind> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn a_condition_raises_an_event_when_it_starts_and_when_it_ends_only() {
        let mut watch = Watch::default();
        let mut now = Condition {
            soft_threshold_percent: 80,
            used_percent: 50.0,
            last_scrub: Some(ScrubResult {
                pass: 1,
                bad_records: 0,
                bytes_checked: 10,
                cancelled: false,
            }),
            ..Condition::default()
        };
        assert!(watch.events(&now).is_empty(), "an old pass raises nothing");
        now.soft_threshold_exceeded = true;
        now.used_percent = 85.0;
        let crossed = watch.events(&now);
        assert_eq!(kinds(&crossed), vec![EventKind::SoftThresholdCrossed]);
        assert!(crossed[0].message.contains("85.0%"), "{:?}", crossed[0]);
        assert!(watch.events(&now).is_empty(), "not again while it lasts");
        now.read_only = true;
        now.quota_full.insert("gold".into());
        now.last_scrub = Some(ScrubResult {
            pass: 2,
            bad_records: 3,
            bytes_checked: 100,
            cancelled: false,
        });
        let events = watch.events(&now);
        assert_eq!(
            kinds(&events),
            vec![
                EventKind::OutOfSpace,
                EventKind::ContainerQuotaReached,
                EventKind::ScrubFinished
            ]
        );
        assert_eq!(events[2].severity, Severity::Critical);
        assert_eq!(events[1].subject.as_deref(), Some("gold"));
        now.read_only = false;
        now.soft_threshold_exceeded = false;
        now.fenced = Some("a commit failed".into());
        assert_eq!(
            kinds(&watch.events(&now)),
            vec![
                EventKind::SoftThresholdCleared,
                EventKind::SpaceAvailable,
                EventKind::Fenced
            ]
        );
        assert!(watch.events(&now).is_empty());
    }

    #[test]
    fn a_daemon_started_on_a_full_array_says_so_and_the_certificate_warns_once() {
        let mut watch = Watch::default();
        let mut now = Condition {
            read_only: true,
            certificate_days_left: Some(20),
            ..Condition::default()
        };
        assert_eq!(
            kinds(&watch.events(&now)),
            vec![EventKind::OutOfSpace, EventKind::CertificateExpiring]
        );
        now.certificate_days_left = Some(19);
        assert!(watch.events(&now).is_empty());
        now.certificate_days_left = Some(365);
        assert!(watch.events(&now).is_empty());
        now.certificate_days_left = Some(3);
        assert_eq!(
            kinds(&watch.events(&now)),
            vec![EventKind::CertificateExpiring]
        );
    }

    #[test]
    fn refusals_are_one_per_host_per_quiet_period_and_bounded() {
        let refusals = Refusals::default();
        refusals.refused("iSCSI", "iqn.x", "unknown initiator", 100);
        refusals.refused("iSCSI", "iqn.x", "unknown initiator", 130);
        refusals.refused("NBD", "10.0.0.1", "anonymous", 130);
        assert_eq!(refusals.take().len(), 2);
        refusals.refused("iSCSI", "iqn.x", "unknown initiator", 161);
        assert_eq!(refusals.take().len(), 1, "after the quiet period");
        for i in 0..(MAX_PENDING_REFUSALS + 10) {
            refusals.refused("iSCSI", &format!("iqn.{i}"), "unknown", 500);
        }
        let taken = refusals.take();
        assert_eq!(taken.len(), MAX_PENDING_REFUSALS + 1);
        assert!(taken.last().unwrap().message.starts_with("10 more"));
    }
}
