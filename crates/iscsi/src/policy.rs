//! Who may log in, and with which CHAP credentials.
//!
//! Why a trait: the daemon keeps hosts (IQN, CHAP user and secrets) in its own store and can
//! change them while the target runs; the transport asks at every login instead of holding a
//! copy that would go stale.

use std::fmt;

/// One CHAP identity: the name sent in CHAP_N and the shared secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ChapCredentials {
    pub user: String,
    pub secret: Vec<u8>,
}

impl fmt::Debug for ChapCredentials {
    // Secrets never reach logs, not even through `{:?}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChapCredentials")
            .field("user", &self.user)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Authentication an initiator must pass in the security stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChapRequirement {
    /// AuthMethod=None is accepted (CHAP is refused: there is no secret to check).
    None,
    /// The initiator proves it knows `initiator.secret`.
    OneWay { initiator: ChapCredentials },
    /// As one-way, and the target then proves it knows `target.secret`.
    Mutual {
        initiator: ChapCredentials,
        target: ChapCredentials,
    },
}

pub trait AccessPolicy: Send + Sync {
    /// CHAP requirement for an initiator (by its iSCSI name), asked at every login.
    fn chap_for(&self, initiator_name: &str) -> ChapRequirement;
    /// Whether the initiator is configured (belongs to a host). Unknown initiators are
    /// refused with login status 02/02 unless `TargetConfig::allow_unknown_initiators`.
    fn initiator_known(&self, initiator_name: &str) -> bool;
    /// Told when an initiator's CHAP authentication fails (a wrong secret or
    /// user, or no CHAP where it is required), once per refused login.
    fn authentication_failed(&self, _initiator_name: &str) {}
}

/// A policy that knows every initiator and asks for no authentication (tests, quick start).
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenAccess;

impl AccessPolicy for OpenAccess {
    fn chap_for(&self, _initiator_name: &str) -> ChapRequirement {
        ChapRequirement::None
    }

    fn initiator_known(&self, _initiator_name: &str) -> bool {
        true
    }
}
