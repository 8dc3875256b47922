//! The provider: what each VASA operation does, on top of the vVol service.
//! A request arrives as bytes with its HTTP context (SOAPAction, session
//! cookie, whether the TLS client certificate is trusted) and leaves as an
//! answer or a SOAP Fault; nothing here knows HTTP or TLS beyond that.
//!
//! Every operation is a call of [`lacuna_vvol::VvolService`] (the REST API's
//! too), so the two bindings cannot disagree; the provider adds only what
//! VASA has and REST has not: sessions and their admission control, the
//! certificate registry, alarms, and the SPBM view of provisioning.

mod discovery;
mod policy;
mod registration;
mod volumes;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lacuna_vvol::VvolService;

use crate::alarms::Alarms;
use crate::certs::Certificates;
use crate::codec::{Struct, Value};
use crate::fault::Fault;
use crate::schema::Operation;
use crate::session::{Admitted, HostContext, Sessions};
use crate::soap::{self, EnvelopeFault};

/// Who the array's hosts are, for a session's context.
pub trait HostLookup: Send + Sync {
    /// The Lacuna host one of these iSCSI initiator names belongs to.
    fn host_of_initiators(&self, initiators: &[String]) -> Option<String>;
    /// Whether a Lacuna host of this name exists.
    fn host_exists(&self, name: &str) -> bool;
}

/// What the provider says about itself and its array.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The array's id (also the provider's uid).
    pub array_id: String,
    pub array_name: String,
    pub service_url: String,
    /// Registration credentials: user name and password.
    pub user_name: String,
    pub password: String,
    /// The iSCSI portals hosts reach protocol endpoints through.
    pub iscsi_portals: Vec<String>,
}

/// The provider's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct ProviderStats {
    pub calls: AtomicU64,
    pub faults: AtomicU64,
    pub busy: AtomicU64,
    pub sessions_created: AtomicU64,
}

pub struct Provider {
    pub(crate) vvols: Arc<VvolService>,
    pub(crate) hosts: Arc<dyn HostLookup>,
    pub sessions: Sessions,
    pub certs: Arc<Certificates>,
    pub alarms: Alarms,
    pub(crate) config: ProviderConfig,
    pub stats: ProviderStats,
}

/// How a request reached the provider.
#[derive(Debug, Clone, Default)]
pub struct RequestContext {
    pub soap_action: Option<String>,
    pub session_cookie: Option<String>,
    /// The TLS client certificate chain the connection presented (DER).
    pub client_chain: Vec<Vec<u8>>,
}

/// An answer: HTTP status, SOAP document, and a session cookie to set.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: String,
    pub set_session: Option<String>,
}

/// What an operation yields: its `return` values and a session it made.
pub(crate) struct Outcome {
    returns: Vec<Value>,
    new_session: Option<String>,
}

impl Outcome {
    pub(crate) fn none() -> Outcome {
        Outcome {
            returns: Vec::new(),
            new_session: None,
        }
    }
    pub(crate) fn one(value: impl Into<Value>) -> Outcome {
        Outcome {
            returns: vec![value.into()],
            new_session: None,
        }
    }
    pub(crate) fn many<V: Into<Value>>(values: impl IntoIterator<Item = V>) -> Outcome {
        Outcome {
            returns: values.into_iter().map(Into::into).collect(),
            new_session: None,
        }
    }
}

pub(crate) type OpResult = Result<Outcome, Fault>;

/// One call as an operation sees it.
pub(crate) struct Call<'a> {
    pub params: &'a Struct,
    pub request: &'a RequestContext,
    pub admitted: &'a Admitted,
}

impl Call<'_> {
    /// The session's context (every operation but registration has one).
    pub fn context(&self) -> Result<&HostContext, Fault> {
        self.admitted
            .context
            .as_deref()
            .ok_or_else(|| Fault::invalid_session("no session: call setContext"))
    }

    /// The Lacuna host the session speaks for.
    pub fn host(&self) -> Result<&str, Fault> {
        self.context()?.host.as_deref().ok_or_else(|| {
            Fault::new(
                "PermissionDenied",
                "this session's context names no host of the array: add the host with its iSCSI initiator",
            )
        })
    }
}

impl Provider {
    pub fn new(
        vvols: Arc<VvolService>,
        hosts: Arc<dyn HostLookup>,
        certs: Arc<Certificates>,
        config: ProviderConfig,
    ) -> Provider {
        Provider {
            vvols,
            hosts,
            sessions: Sessions::new(),
            certs,
            alarms: Alarms::default(),
            config,
            stats: ProviderStats::default(),
        }
    }

    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// Answers one SOAP request.
    pub fn handle(&self, body: &[u8], request: &RequestContext) -> Answer {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let call = match soap::read_request(body, request.soap_action.as_deref()) {
            Ok(call) => call,
            Err(fault) => return self.fault_answer(&fault),
        };
        let op = call.operation;
        let result = self.run(op, &call.params, request);
        match result {
            Ok(outcome) => match soap::write_response(op, outcome.returns) {
                Ok(body) => Answer {
                    status: 200,
                    body,
                    set_session: outcome.new_session,
                },
                Err(e) => {
                    tracing::error!(operation = op.name, "{e}");
                    self.fault_answer(&EnvelopeFault::Vasa(Fault::storage(e.to_string())))
                }
            },
            Err(fault) => {
                let fault = fault.declared_by(op);
                if fault.kind == "VasaProviderBusy" {
                    self.stats.busy.fetch_add(1, Ordering::Relaxed);
                }
                self.fault_answer(&EnvelopeFault::Vasa(fault))
            }
        }
    }

    fn fault_answer(&self, fault: &EnvelopeFault) -> Answer {
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        Answer {
            status: 500,
            body: soap::write_fault(fault),
            set_session: None,
        }
    }

    fn run(&self, op: &'static Operation, params: &Struct, request: &RequestContext) -> OpResult {
        let generation = self.certs.generation();
        // setContext makes the session every other call names.
        let session = if op.needs_session && op.name != "setContext" {
            Some(request.session_cookie.as_deref().ok_or_else(|| {
                Fault::invalid_session("no VASASESSIONID cookie: call setContext")
            })?)
        } else {
            None
        };
        let admitted = self.sessions.admit(session, generation)?;
        let call = Call {
            params,
            request,
            admitted: &admitted,
        };
        self.dispatch(op.name, &call)
    }

    fn dispatch(&self, name: &str, call: &Call) -> OpResult {
        match name {
            "setContext" => self.set_context(call),
            "queryArrays" => self.query_arrays(call),
            "queryStorageContainer" => self.query_storage_container(call),
            "queryStorageContainerForArray" => self.query_storage_container_for_array(call),
            "queryProtocolEndpoint" => self.query_protocol_endpoint(call),
            "queryProtocolEndpointForArray" => self.query_protocol_endpoint_for_array(call),
            "queryCatalog" => Ok(Outcome::none()),
            "getEvents" => self.get_events(call),
            "getAlarms" => self.get_alarms(call),
            "getTaskUpdate" => self.get_task_update(call),
            "getCurrentTask" => self.get_current_task(call),
            "cancelTask" => self.cancel_task(call),
            "createVirtualVolume" => self.create_virtual_volume(call),
            "deleteVirtualVolume" => self.delete_virtual_volume(call),
            "bindVirtualVolume" => self.bind_virtual_volume(call),
            "unbindVirtualVolume" => self.unbind_virtual_volume(call),
            "unbindAllVirtualVolumesFromHost" => self.unbind_all(call),
            "prepareToSnapshotVirtualVolume" => self.prepare_snapshot(call),
            "snapshotVirtualVolume" => self.snapshot_virtual_volume(call),
            "cloneVirtualVolume" => self.clone_virtual_volume(call, false),
            "fastCloneVirtualVolume" => self.clone_virtual_volume(call, true),
            "revertVirtualVolume" => self.revert_virtual_volume(call),
            "resizeVirtualVolume" => self.resize_virtual_volume(call),
            "allocatedBitmapVirtualVolume" => self.allocated_bitmap(call),
            "unsharedBitmapVirtualVolume" => self.unshared_bitmap(call),
            "unsharedChunksVirtualVolume" => self.unshared_chunks(call),
            "queryVirtualVolume" => self.query_virtual_volume(call),
            "queryVirtualVolumeInfo" => self.query_virtual_volume_info(call),
            "updateVirtualVolumeMetaData" => self.update_metadata(call),
            "spaceStatsForVirtualVolume" => self.space_stats_for_virtual_volume(call),
            "spaceStatsForStorageContainer" => self.space_stats_for_storage_container(call),
            "queryCapabilityMetadata" => self.query_capability_metadata(call),
            "queryDefaultProfileForStorageContainer" => self.query_default_profile(call),
            "queryComplianceResult" => self.query_compliance_result(call),
            "updateStorageProfileForVirtualVolume" => self.update_storage_profile(call),
            "registerVASACertificate" => self.register_vasa_certificate(call),
            "unregisterVASACertificate" => self.unregister_vasa_certificate(call),
            "requestCSR" => self.request_csr(call),
            "registerCASignedProviderCertificate" => self.register_ca_signed_certificate(call),
            "registerCACertificatesAndCRLs" => self.register_ca_certificates(call),
            "refreshCACertificatesAndCRLs" => self.refresh_ca_certificates(call),
            "queryCACertificates" => Ok(Outcome::many(self.certs.ca_certificates_pem())),
            "queryCACertificateRevocationLists" => Ok(Outcome::many(self.certs.crls_pem())),
            other => Err(Fault::new(
                "NotImplemented",
                format!("{other} is declared and not dispatched"),
            )),
        }
    }
}
