//! Dashboard sessions: the sign-in page takes the API token and answers a
//! session cookie (`HttpOnly`, `SameSite=Strict`, random 256-bit id); each
//! session has its own anti-forgery token, which every form carries and every
//! POST must present.
//!
//! Kept in memory, bounded ([`MAX_SESSIONS`]; the oldest goes first) and
//! expiring after [`SESSION_LIFETIME_S`]: a daemon restart signs everyone out,
//! which costs a sign-in, never access.

use std::collections::HashMap;

use parking_lot::Mutex;
use subtle::ConstantTimeEq;

/// The cookie's name.
pub const COOKIE: &str = "lacuna_session";
/// Sessions kept at once.
pub const MAX_SESSIONS: usize = 256;
/// A session ends this long after sign-in.
pub const SESSION_LIFETIME_S: u64 = 12 * 3600;

struct Session {
    csrf: String,
    created_unix_s: u64,
}

#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the system's random source");
    hex::encode(bytes)
}

impl Sessions {
    /// A new session: (cookie value, anti-forgery token).
    pub fn create(&self, now_unix_s: u64) -> (String, String) {
        let mut by_id = self.by_id.lock();
        by_id.retain(|_, s| now_unix_s < s.created_unix_s + SESSION_LIFETIME_S);
        if by_id.len() >= MAX_SESSIONS {
            let oldest = by_id
                .iter()
                .min_by_key(|(_, s)| s.created_unix_s)
                .map(|(id, _)| id.clone())
                .expect("the map is full");
            by_id.remove(&oldest);
        }
        let (id, csrf) = (random_hex(), random_hex());
        by_id.insert(
            id.clone(),
            Session {
                csrf: csrf.clone(),
                created_unix_s: now_unix_s,
            },
        );
        assert!(by_id.len() <= MAX_SESSIONS);
        (id, csrf)
    }

    /// The anti-forgery token of the live session `id`.
    pub fn csrf_of(&self, id: &str, now_unix_s: u64) -> Option<String> {
        let by_id = self.by_id.lock();
        let session = by_id.get(id)?;
        (now_unix_s < session.created_unix_s + SESSION_LIFETIME_S).then(|| session.csrf.clone())
    }

    pub fn end(&self, id: &str) {
        self.by_id.lock().remove(id);
    }
}

/// Whether a presented anti-forgery token is the session's (constant time).
pub fn csrf_matches(presented: &str, expected: &str) -> bool {
    presented.len() == expected.len() && bool::from(presented.as_bytes().ct_eq(expected.as_bytes()))
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_bounded_and_have_their_own_csrf_token() {
        let sessions = Sessions::default();
        let (id, csrf) = sessions.create(100);
        assert_eq!(id.len(), 64);
        assert_ne!(id, csrf);
        assert_eq!(sessions.csrf_of(&id, 100).as_deref(), Some(csrf.as_str()));
        assert_eq!(sessions.csrf_of(&id, 100 + SESSION_LIFETIME_S), None);
        assert_eq!(sessions.csrf_of("nope", 100), None);
        let first = sessions.create(200).0;
        for i in 0..MAX_SESSIONS {
            sessions.create(300 + i as u64);
        }
        assert!(sessions.csrf_of(&first, 400).is_none(), "the oldest went");
        let (last, _) = sessions.create(1000);
        sessions.end(&last);
        assert!(sessions.csrf_of(&last, 1000).is_none());
        assert!(csrf_matches(&csrf, &csrf.clone()));
        assert!(!csrf_matches(&csrf[1..], &csrf));
        assert_eq!(cookie_value("a=1; lacuna_session=xyz", COOKIE), Some("xyz"));
        assert_eq!(cookie_value("lacuna_session_x=1", COOKIE), None);
    }
}
