//! Session, array, containers, protocol endpoints, events, alarms and tasks.

use lacuna_vvol::{EventKind, TaskInfo, TaskState, VvolId, MAX_BATCH};

use super::{Call, OpResult, Outcome, Provider};
use crate::codec::{Struct, Value};
use crate::fault::Fault;
use crate::session::{HostContext, MAX_REQUESTS_PER_SESSION};
use crate::wsdl::VASA_API_VERSION;

/// The namespace of the provider's capabilities and its vendor and model ids.
pub(crate) const VENDOR_ID: &str = "LACUNA";
pub(crate) const MODEL_ID: &str = "Lacuna";

impl Provider {
    /// The provider's information (`sessionId` "0" outside a session).
    pub(crate) fn provider_info(&self, session_id: &str, timeout_s: u64) -> Struct {
        Struct::new("VasaProviderInfo")
            .with(
                "defaultNamespace",
                crate::provider::policy::CAPABILITY_NAMESPACE,
            )
            .with("defaultSessionTimeoutInSeconds", timeout_s as i64)
            .with("maxBatchSize", MAX_BATCH as i64)
            .with(
                "maxConcurrentRequestsPerSession",
                i64::from(MAX_REQUESTS_PER_SESSION),
            )
            .with("name", "Lacuna VASA provider")
            .with("needsExplicitActivation", false)
            .with("retainVasaProviderCertificate", false)
            .with("sessionId", session_id)
            .with("supportedProfile", "ProfileBasedManagementProfile")
            .with(
                "supportedVendorModel",
                Struct::new("VendorModel")
                    .with("modelId", MODEL_ID)
                    .with("vendorId", VENDOR_ID),
            )
            .with("uid", self.config.array_id.clone())
            .with("vasaApiVersion", VASA_API_VERSION)
            .with("vasaProviderVersion", env!("CARGO_PKG_VERSION"))
    }

    pub(crate) fn set_context(&self, call: &Call) -> OpResult {
        if !self.certs.is_trusted_client(&call.request.client_chain) {
            return Err(Fault::invalid_session(
                "the connection presents no registered client certificate: register it with registerVASACertificate",
            ));
        }
        let usage = call
            .params
            .child("usageContext")
            .ok_or_else(|| Fault::invalid_argument("setContext needs a usageContext"))?;
        let initiators: Vec<String> = usage
            .children("hostInitiator")
            .iter()
            .filter_map(|i| i.opt_str("iscsiIdentifier"))
            .map(str::to_string)
            .collect();
        let context = HostContext {
            host_guid: usage.opt_str("hostGuid").map(str::to_string),
            vcenter_guid: usage.opt_str("vcGuid").map(str::to_string),
            host: self.hosts.host_of_initiators(&initiators),
            initiators,
        };
        let (id, timeout_s) = self.sessions.create(
            context,
            usage.opt_long("sessionTimeoutInSeconds"),
            self.certs.generation(),
            call.request.session_cookie.as_deref(),
        )?;
        self.stats
            .sessions_created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Outcome {
            returns: vec![Value::Struct(self.provider_info(&id, timeout_s))],
            new_session: Some(id),
        })
    }

    fn array(&self) -> Struct {
        Struct::new("StorageArray")
            .with("uniqueIdentifier", self.config.array_id.clone())
            .with("arrayName", self.config.array_name.clone())
            .with("firmware", env!("CARGO_PKG_VERSION"))
            .with("modelId", MODEL_ID)
            .with("priority", 1i32)
            .with("supportedBlock", "ISCSI")
            .with_all(
                "supportedProfile",
                [
                    "BlockDeviceProfile",
                    "CapabilityProfile",
                    "VirtualVolumeProfile",
                ],
            )
            .with("vendorId", VENDOR_ID)
    }

    fn check_array(&self, id: &str) -> Result<(), Fault> {
        if id == self.config.array_id {
            Ok(())
        } else {
            Err(Fault::new(
                "NotFound",
                format!("array '{}'", id.escape_debug()),
            ))
        }
    }

    pub(crate) fn query_arrays(&self, call: &Call) -> OpResult {
        for id in call.params.strs("arrayUniqueId") {
            if id != self.config.array_id {
                return Err(Fault::invalid_argument(format!(
                    "no array '{}'",
                    id.escape_debug()
                )));
            }
        }
        Ok(Outcome::one(self.array()))
    }

    pub(crate) fn query_storage_container(&self, call: &Call) -> OpResult {
        let wanted = call.params.strs("containerId");
        let containers = self.vvols.containers()?;
        Ok(Outcome::many(
            containers
                .into_iter()
                .filter(|c| wanted.is_empty() || wanted.contains(&c.container.as_str()))
                .map(|c| {
                    Struct::new("StorageContainer")
                        .with("uniqueIdentifier", c.container.clone())
                        .with("maxVvolSizeMB", c.max_vvol_size_mib as i64)
                        .with("name", c.container)
                        .with("protocolEndPointType", "SCSI")
                }),
        ))
    }

    pub(crate) fn query_storage_container_for_array(&self, call: &Call) -> OpResult {
        self.check_array(call.params.str("arrayId")?)?;
        Ok(Outcome::many(
            self.vvols.containers()?.into_iter().map(|c| c.container),
        ))
    }

    /// The protocol endpoints the session may see: its host's, or every
    /// host's for a session without a host (vCenter).
    fn endpoints(&self, call: &Call) -> Result<Vec<lacuna_vvol::HostEndpoint>, Fault> {
        let host = call.context()?.host.clone();
        Ok(self
            .vvols
            .protocol_endpoints()
            .into_iter()
            .filter(|e| host.as_ref().is_none_or(|h| h == &e.host))
            .collect())
    }

    pub(crate) fn protocol_endpoint_id(host: &str) -> String {
        format!("pe:{host}")
    }

    pub(crate) fn in_band_id(lun_id: &str) -> Struct {
        Struct::new("ProtocolEndpointInbandId")
            .with("lunId", lun_id)
            .with("protocolEndpointType", "SCSI")
    }

    pub(crate) fn query_protocol_endpoint(&self, call: &Call) -> OpResult {
        let wanted = call.params.strs("peId");
        let endpoints = self.endpoints(call)?;
        Ok(Outcome::many(
            endpoints
                .into_iter()
                .filter(|e| {
                    wanted.is_empty()
                        || wanted.contains(&Self::protocol_endpoint_id(&e.host).as_str())
                })
                .map(|e| {
                    Struct::new("ProtocolEndpoint")
                        .with("uniqueIdentifier", Self::protocol_endpoint_id(&e.host))
                        .with("inBandBindCapability", "None")
                        .with(
                            "inBandId",
                            Self::in_band_id(&e.protocol_endpoint.in_band_id),
                        )
                        .with_all("transportIpAddress", self.config.iscsi_portals.clone())
                }),
        ))
    }

    pub(crate) fn query_protocol_endpoint_for_array(&self, call: &Call) -> OpResult {
        self.check_array(call.params.str("arrayId")?)?;
        let endpoints = self.endpoints(call)?;
        Ok(Outcome::many(
            endpoints
                .iter()
                .map(|e| Self::protocol_endpoint_id(&e.host)),
        ))
    }

    pub(crate) fn get_events(&self, call: &Call) -> OpResult {
        let last = match call.params.opt_long("lastEventId") {
            None | Some(-1) => 0,
            Some(n) if n < -1 => {
                return Err(Fault::invalid_argument(format!("lastEventId {n}")));
            }
            Some(n) => n as u64,
        };
        let host = call.context()?.host.clone();
        let events = self.vvols.events_since(last)?;
        Ok(Outcome::many(
            events
                .into_iter()
                .filter(|e| e.host.is_none() || host.is_none() || e.host == host)
                .map(|e| {
                    let (event_type, object_type, object) = match e.kind {
                        EventKind::Config => ("Config", "VirtualVolumeInfo", e.object.clone()),
                        EventKind::Rebind => (
                            "ConfigProtocolEndpoint",
                            "ProtocolEndpoint",
                            e.host
                                .as_deref()
                                .map_or(e.object.clone(), Self::protocol_endpoint_id),
                        ),
                    };
                    let config_type = match e.what.as_str() {
                        "deleted" => "Delete",
                        w if w.contains("created")
                            || w.contains("cloned")
                            || w.contains("snapshot") =>
                        {
                            "New"
                        }
                        _ => "Update",
                    };
                    Struct::new("StorageEvent")
                        .with("arrayId", self.config.array_id.clone())
                        .with("eventConfigType", config_type)
                        .with("eventId", e.id as i64)
                        .with("eventObjType", object_type)
                        .with("eventTimeStamp", Value::DateTime(e.unix_s as i64))
                        .with("eventType", event_type)
                        .with(
                            "messageId",
                            format!("lacuna.vvol.{}", e.what.replace(' ', "-")),
                        )
                        .with("objectId", object)
                        .with(
                            "parameterList",
                            Struct::new("NameValuePair")
                                .with("parameterName", "vvolId")
                                .with("parameterValue", e.object),
                        )
                }),
        ))
    }

    pub(crate) fn get_alarms(&self, call: &Call) -> OpResult {
        let last = match call.params.opt_long("lastAlarmId") {
            None | Some(-1) => 0,
            Some(n) if n < -1 => return Err(Fault::invalid_argument(format!("lastAlarmId {n}"))),
            Some(n) => n as u64,
        };
        let alarms = self.alarms.since(last)?;
        Ok(Outcome::many(alarms.into_iter().map(|a| {
            Struct::new("StorageAlarm")
                .with("alarmId", a.id as i64)
                .with("alarmTimeStamp", Value::DateTime(a.unix_s as i64))
                .with("alarmType", a.alarm_type)
                .with("messageId", a.message_id)
                .with(
                    "objectId",
                    a.object.unwrap_or_else(|| self.config.array_id.clone()),
                )
                .with("objectType", a.object_type)
                .with(
                    "parameterList",
                    Struct::new("NameValuePair")
                        .with("parameterName", "message")
                        .with("parameterValue", a.message),
                )
                .with("status", a.status.as_str())
        })))
    }

    /// A task as VASA answers it.
    pub(crate) fn task_info(&self, task: &TaskInfo) -> Struct {
        let state = match task.state {
            TaskState::Queued => "Queued",
            TaskState::Running => "Running",
            TaskState::Success => "Success",
            TaskState::Error => "Error",
        };
        let result = task.result.as_ref().map(|r| self.task_result(task, r));
        let error = task
            .fault
            .as_ref()
            .map(|f| Value::Struct(Fault::from_body(f).to_struct()));
        Struct::new("TaskInfo")
            .with("arrayId", self.config.array_id.clone())
            .with("cancelable", false)
            .with("cancelled", false)
            .with_opt("error", error)
            .with("name", task.operation.clone())
            .with("progress", i32::from(task.progress_percent))
            .with("progressUpdateAvailable", true)
            .with_opt("result", result)
            .with("startTime", Value::DateTime(task.started_unix_s as i64))
            .with("taskId", task.id.to_string())
            .with("taskState", state)
    }

    /// A task's result: the vVol it made, or for a prepared snapshot the
    /// snapshot's id with its base's information and space.
    fn task_result(&self, task: &TaskInfo, result: &str) -> Value {
        if task.operation != "prepareToSnapshotVirtualVolume" {
            return Value::Str(result.to_string());
        }
        let base = task.subject.as_deref().and_then(|s| VvolId::parse(s).ok());
        let parent = base.and_then(|b| {
            let info = self.vvols.get(&b).ok()?;
            let space = self.vvols.space(&b).ok()?;
            Some((info, space))
        });
        match parent {
            Some((info, space)) => Value::Struct(
                Struct::new("PrepareSnapshotResult")
                    .with("parentInfo", Self::vvol_info(&info))
                    .with("parentStats", Self::space_stats(&space))
                    .with("snapshotId", result),
            ),
            None => Value::Str(result.to_string()),
        }
    }

    fn task_id(call: &Call) -> Result<u64, Fault> {
        let text = call.params.str("taskId")?;
        text.trim().parse().map_err(|_| {
            Fault::invalid_argument(format!("'{}' is not a task id", text.escape_debug()))
        })
    }

    pub(crate) fn get_task_update(&self, call: &Call) -> OpResult {
        let task = self.vvols.task(Self::task_id(call)?)?;
        Ok(Outcome::one(self.task_info(&task)))
    }

    pub(crate) fn get_current_task(&self, call: &Call) -> OpResult {
        if let Some(array) = call.params.opt_str("arrayId") {
            self.check_array(array)?;
        }
        // Every task finishes within its call: none is ever current.
        let running: Vec<Struct> = self
            .vvols
            .tasks_since(0)
            .iter()
            .filter(|t| matches!(t.state, TaskState::Queued | TaskState::Running))
            .map(|t| self.task_info(t))
            .collect();
        Ok(Outcome::many(running))
    }

    pub(crate) fn cancel_task(&self, call: &Call) -> OpResult {
        let task = self.vvols.task(Self::task_id(call)?)?;
        Err(Fault::new(
            "NotCancellable",
            format!("task {} ({}) has finished", task.id, task.operation),
        ))
    }
}
