//! Sessions: `setContext` makes one (the caller's identity: host GUID,
//! initiators, the Lacuna host they belong to), the `VASASESSIONID` cookie
//! names it on every later call, and it ends after its timeout without a
//! call, at a certificate rotation, or at a provider restart.
//!
//! Admission control lives here: a session has at most
//! [`MAX_REQUESTS_PER_SESSION`] calls in flight and the provider
//! [`MAX_REQUESTS`]; the next one is answered VasaProviderBusy at once —
//! never queued, never a dropped connection. The table is bounded
//! ([`MAX_SESSIONS`]); a new session past it replaces the longest idle one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::fault::Fault;

/// Calls in flight per session (VASA's maxConcurrentRequestsPerSession).
pub const MAX_REQUESTS_PER_SESSION: u32 = 16;
/// Calls in flight over all sessions.
pub const MAX_REQUESTS: u32 = 512;
/// Sessions kept.
pub const MAX_SESSIONS: usize = 4096;
/// Session timeout when the context asks for none.
pub const DEFAULT_TIMEOUT_S: u64 = 1800;
/// Longest timeout a context may ask for.
pub const MAX_TIMEOUT_S: u64 = 24 * 3600;

/// Who a session speaks for, from its `setContext`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostContext {
    pub host_guid: Option<String>,
    pub vcenter_guid: Option<String>,
    /// iSCSI initiator names.
    pub initiators: Vec<String>,
    /// The Lacuna host of those initiators, if the array knows one.
    pub host: Option<String>,
}

#[derive(Debug)]
struct SessionEntry {
    context: Arc<HostContext>,
    timeout: Duration,
    last_used: Instant,
    in_flight: Arc<AtomicU32>,
    /// The provider certificate the session was made under.
    certificate_generation: u64,
}

#[derive(Debug, Default)]
pub struct Sessions {
    table: Mutex<HashMap<String, SessionEntry>>,
    in_flight: Arc<AtomicU32>,
}

/// A call admitted: the session's context, released when dropped.
#[derive(Debug)]
pub struct Admitted {
    pub session_id: Option<String>,
    pub context: Option<Arc<HostContext>>,
    session_slot: Option<Arc<AtomicU32>>,
    provider_slot: Arc<AtomicU32>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(slot) = &self.session_slot {
            slot.fetch_sub(1, Ordering::AcqRel);
        }
        self.provider_slot.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes a slot of `counter` if fewer than `max` are taken.
fn take_slot(counter: &AtomicU32, max: u32) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the system has randomness");
    hex::encode(bytes)
}

impl Sessions {
    pub fn new() -> Sessions {
        Sessions::default()
    }

    pub fn len(&self) -> usize {
        self.table.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls in flight now, over all sessions.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// A new session for `context`; `replacing` (the caller's current
    /// session, if any) ends.
    pub fn create(
        &self,
        context: HostContext,
        timeout_s: Option<i64>,
        certificate_generation: u64,
        replacing: Option<&str>,
    ) -> Result<(String, u64), Fault> {
        let timeout_s = match timeout_s {
            None | Some(0) => DEFAULT_TIMEOUT_S,
            Some(s) if s < 0 => {
                return Err(Fault::invalid_argument(format!(
                    "sessionTimeoutInSeconds {s} is negative"
                )))
            }
            Some(s) => (s as u64).min(MAX_TIMEOUT_S),
        };
        let id = new_session_id();
        let mut table = self.table.lock();
        if let Some(old) = replacing {
            table.remove(old);
        }
        let now = Instant::now();
        table.retain(|_, s| now.duration_since(s.last_used) < s.timeout);
        if table.len() >= MAX_SESSIONS {
            let idle = table
                .iter()
                .filter(|(_, s)| s.in_flight.load(Ordering::Acquire) == 0)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone());
            match idle {
                Some(k) => {
                    table.remove(&k);
                }
                None => return Err(Fault::busy(format!("{MAX_SESSIONS} sessions, all busy"))),
            }
        }
        table.insert(
            id.clone(),
            SessionEntry {
                context: Arc::new(context),
                timeout: Duration::from_secs(timeout_s),
                last_used: now,
                in_flight: Arc::new(AtomicU32::new(0)),
                certificate_generation,
            },
        );
        Ok((id, timeout_s))
    }

    /// Admits a call of `session_id` (`None`: a call that needs no session).
    pub fn admit(
        &self,
        session_id: Option<&str>,
        certificate_generation: u64,
    ) -> Result<Admitted, Fault> {
        if !take_slot(&self.in_flight, MAX_REQUESTS) {
            return Err(Fault::busy(format!(
                "{MAX_REQUESTS} calls in flight: retry"
            )));
        }
        let provider_slot = self.in_flight.clone();
        let Some(id) = session_id else {
            return Ok(Admitted {
                session_id: None,
                context: None,
                session_slot: None,
                provider_slot,
            });
        };
        let release = |fault: Fault| {
            provider_slot.fetch_sub(1, Ordering::AcqRel);
            Err(fault)
        };
        let mut table = self.table.lock();
        let now = Instant::now();
        let Some(entry) = table.get_mut(id) else {
            drop(table);
            return release(Fault::invalid_session("no such session: call setContext"));
        };
        if now.duration_since(entry.last_used) >= entry.timeout {
            table.remove(id);
            drop(table);
            return release(Fault::invalid_session(
                "the session expired: call setContext",
            ));
        }
        if entry.certificate_generation != certificate_generation {
            table.remove(id);
            drop(table);
            return release(Fault::invalid_session(
                "the provider certificate changed: call setContext again",
            ));
        }
        if !take_slot(&entry.in_flight, MAX_REQUESTS_PER_SESSION) {
            drop(table);
            return release(Fault::busy(format!(
                "{MAX_REQUESTS_PER_SESSION} calls of this session in flight: retry"
            )));
        }
        entry.last_used = now;
        Ok(Admitted {
            session_id: Some(id.to_string()),
            context: Some(entry.context.clone()),
            session_slot: Some(entry.in_flight.clone()),
            provider_slot,
        })
    }

    /// The sessions whose context names `host_guid`.
    pub fn host_of_guid(&self, host_guid: &str) -> Option<String> {
        self.table
            .lock()
            .values()
            .find(|s| s.context.host_guid.as_deref() == Some(host_guid))
            .and_then(|s| s.context.host.clone())
    }

    /// Ends every session (a restart, a certificate rotation).
    pub fn clear(&self) {
        self.table.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> HostContext {
        HostContext {
            host_guid: Some("host-1".into()),
            host: Some("esx1".into()),
            ..HostContext::default()
        }
    }

    #[test]
    fn a_session_admits_its_calls_up_to_the_limit_then_answers_busy() {
        let sessions = Sessions::new();
        let (id, timeout) = sessions.create(context(), None, 1, None).unwrap();
        assert_eq!(timeout, DEFAULT_TIMEOUT_S);
        let held: Vec<_> = (0..MAX_REQUESTS_PER_SESSION)
            .map(|_| sessions.admit(Some(&id), 1).unwrap())
            .collect();
        assert_eq!(
            held[0].context.as_ref().unwrap().host.as_deref(),
            Some("esx1")
        );
        let busy = sessions.admit(Some(&id), 1).unwrap_err();
        assert_eq!(busy.kind, "VasaProviderBusy");
        assert_eq!(sessions.in_flight(), MAX_REQUESTS_PER_SESSION);
        drop(held);
        assert_eq!(sessions.in_flight(), 0);
        assert!(sessions.admit(Some(&id), 1).is_ok());
    }

    #[test]
    fn unknown_expired_and_pre_rotation_sessions_are_invalid() {
        let sessions = Sessions::new();
        assert_eq!(
            sessions.admit(Some("nope"), 1).unwrap_err().kind,
            "InvalidSession"
        );
        let (id, _) = sessions.create(context(), Some(1), 1, None).unwrap();
        assert_eq!(
            sessions.admit(Some(&id), 2).unwrap_err().kind,
            "InvalidSession"
        );
        assert_eq!(
            sessions.admit(Some(&id), 2).unwrap_err().kind,
            "InvalidSession",
            "removed"
        );
        let (id, _) = sessions.create(context(), Some(1), 1, None).unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(
            sessions.admit(Some(&id), 1).unwrap_err().kind,
            "InvalidSession"
        );
        assert_eq!(sessions.in_flight(), 0, "refused calls hold no slot");
        assert_eq!(
            sessions
                .create(context(), Some(-5), 1, None)
                .unwrap_err()
                .kind,
            "InvalidArgument"
        );
    }

    #[test]
    fn set_context_again_replaces_the_callers_session() {
        let sessions = Sessions::new();
        let (first, _) = sessions.create(context(), None, 1, None).unwrap();
        let (second, _) = sessions.create(context(), None, 1, Some(&first)).unwrap();
        assert_ne!(first, second);
        assert_eq!(sessions.len(), 1);
        assert!(sessions.admit(Some(&first), 1).is_err());
        assert!(sessions.admit(Some(&second), 1).is_ok());
        assert_eq!(sessions.host_of_guid("host-1").as_deref(), Some("esx1"));
    }
}
