//! Lacuna's VASA provider: the SOAP web service (VASA 2.0) vCenter and ESXi
//! speak to reach virtual volumes. One layer over [`lacuna_vvol`], as the
//! REST API is another: sessions, certificates, alarms and the storage
//! policy view are its own; every vVol operation is the vVol service's.
//!
//! Folders by concern: [`schema`] (the message set, as data), [`xml`]
//! (bounded parsing and escaping writing), [`codec`] (values against the
//! schema), [`soap`] (envelopes and faults), [`wsdl`] (the published
//! documents), [`session`] (contexts and admission), [`certs`] (provider and
//! client certificates), [`alarms`], [`provider`] (the operations) and
//! [`server`] (HTTPS).

pub mod alarms;
pub mod certs;
pub mod codec;
pub mod fault;
pub mod provider;
pub mod schema;
pub mod server;
pub mod session;
pub mod soap;
pub mod wsdl;
pub mod xml;

pub use certs::{CertificateInfo, Certificates};
pub use fault::Fault;
pub use provider::{HostLookup, Provider, ProviderConfig, RequestContext};
pub use server::{ProviderServer, ServerLimits};

pub(crate) fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
