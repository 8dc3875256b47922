//! The OpenAPI 3.0 description of the API, written by hand: the API is small, and a
//! hand-written document says what each figure means. The crate's tests check it
//! against the router (every documented operation exists) and against the
//! serialised types (every schema lists exactly the fields sent).

use serde_json::{json, Value};

/// The document served at `GET /v1/openapi.json`.
pub fn document() -> Value {
    let name_param = json!({
        "name": "name",
        "in": "path",
        "required": true,
        "description": "Volume name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.'). It is also the NBD export name.",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"}
    });
    let snapshot_param = json!({
        "name": "snapshot",
        "in": "path",
        "required": true,
        "description": "Snapshot as VOL@NAME (the '@' may be sent as is or as %40). It is also the read-only NBD export name.",
        "schema": {"type": "string", "pattern": "^[^@/]+@[^@/]+$"}
    });
    let host_param = json!({
        "name": "host",
        "in": "path",
        "required": true,
        "description": "Host name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"}
    });
    let container_param = json!({
        "name": "container",
        "in": "path",
        "required": true,
        "description": "Container name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"}
    });
    let destroyed_query = json!({
        "name": "destroyed",
        "in": "query",
        "required": false,
        "description": "true: list the destroyed (recoverable) ones instead of the live ones",
        "schema": {"type": "boolean", "default": false}
    });
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Lacuna control API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Manage the volumes, snapshots, storage containers (quota, reclaim rate, data reduction) and hosts (iSCSI LUN masking, NBD TLS-PSK access) of a Lacuna storage array and read its space figures. Host routes answer 501 on a server built without host management (the daemon always has it). Every operation except GET /healthz needs 'Authorization: Bearer <token>', the token being in <data-dir>/api-token. All sizes are in bytes."
        },
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "security": [{"bearerAuth": []}],
        "paths": {
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "summary": "Liveness check",
                    "security": [],
                    "responses": {
                        "200": json_response("The daemon is serving requests", "Health")
                    }
                }
            },
            "/v1/volumes": {
                "get": {
                    "operationId": "listVolumes",
                    "summary": "List live volumes (or destroyed ones), sorted by name",
                    "parameters": [destroyed_query.clone()],
                    "responses": with_errors(json!({
                        "200": {
                            "description": "The volumes, sorted by name",
                            "content": {"application/json": {"schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/VolumeInfo"}
                            }}}
                        }
                    }), &["400", "401", "500"])
                },
                "post": {
                    "operationId": "createVolume",
                    "summary": "Create a volume, or clone one",
                    "description": "Without 'source': a new volume of 'size_bytes' (required). With 'source' (VOL or VOL@SNAP): an instant, writable clone that is independent from then on; it has the source's size, so 'size_bytes' is best omitted and, if sent, must equal the source's size (else 400). 'provisioning' (default thin) applies to either; a thick type the array cannot reserve gets 507. 'container' (default: 'default' for a new volume, the source's container for a clone) must exist (else 404); a thick volume its quota cannot hold gets 507.",
                    "requestBody": json_request("CreateVolumeRequest"),
                    "responses": with_errors(json!({
                        "201": json_response("The new volume", "VolumeInfo")
                    }), &["400", "401", "404", "409", "413", "415", "500", "507"])
                }
            },
            "/v1/volumes/{name}": {
                "parameters": [name_param.clone()],
                "get": {
                    "operationId": "getVolume",
                    "summary": "One volume, live or destroyed (then destroyed_unix_s and eradicate_at_unix_s are set)",
                    "responses": with_errors(json!({
                        "200": json_response("The volume", "VolumeInfo")
                    }), &["400", "401", "404", "500"])
                },
                "patch": {
                    "operationId": "resizeVolume",
                    "summary": "Grow or shrink a volume (shrinking discards the data beyond the new end)",
                    "requestBody": json_request("ResizeVolumeRequest"),
                    "responses": with_errors(json!({
                        "200": json_response("The resized volume", "VolumeInfo")
                    }), &["400", "401", "404", "413", "415", "500", "507"])
                },
                "delete": {
                    "operationId": "deleteVolume",
                    "summary": "Destroy a volume: hosts lose it at once; it stays recoverable, with its snapshots, until its eradicate_at_unix_s, then its space is reclaimed in the background",
                    "responses": with_errors(json!({
                        "204": {"description": "Destroyed"}
                    }), &["400", "401", "404", "500"])
                }
            },
            "/v1/volumes/{name}/recover": {
                "parameters": [name_param.clone()],
                "post": {
                    "operationId": "recoverVolume",
                    "summary": "Bring a destroyed volume back, with its snapshots",
                    "responses": with_errors(json!({
                        "200": json_response("The recovered volume", "VolumeInfo")
                    }), &["400", "401", "404", "409", "500"])
                }
            },
            "/v1/volumes/{name}/eradicate": {
                "parameters": [name_param.clone()],
                "post": {
                    "operationId": "eradicateVolume",
                    "summary": "Eradicate a destroyed volume now (400 if it is not destroyed); its space goes to the background reclaimer, except what clones and copies still read",
                    "responses": with_errors(json!({
                        "204": {"description": "Eradicated"}
                    }), &["400", "401", "404", "500"])
                }
            },
            "/v1/volumes/{name}/restore": {
                "parameters": [name_param.clone()],
                "post": {
                    "operationId": "restoreVolume",
                    "summary": "Revert a volume to one of its snapshots (metadata only); the volume takes the snapshot's size",
                    "requestBody": json_request("RestoreVolumeRequest"),
                    "responses": with_errors(json!({
                        "200": json_response("The restored volume", "VolumeInfo")
                    }), &["400", "401", "404", "413", "415", "500", "507"])
                }
            },
            "/v1/volumes/{name}/copy": {
                "parameters": [name_param],
                "post": {
                    "operationId": "copyRange",
                    "summary": "Point-in-time copy of a byte range of this volume to a volume (the same one allowed, ranges may overlap): metadata only where grain-aligned (the engine side of SCSI EXTENDED COPY)",
                    "requestBody": json_request("CopyRangeRequest"),
                    "responses": with_errors(json!({
                        "200": json_response("What was copied by reference and as data", "CopyReport")
                    }), &["400", "401", "404", "413", "415", "500", "507"])
                }
            },
            "/v1/snapshots": {
                "get": {
                    "operationId": "listSnapshots",
                    "summary": "List named snapshots in creation order; destroyed ones (and those of destroyed volumes) only with destroyed=true",
                    "parameters": [
                        {
                            "name": "volume",
                            "in": "query",
                            "required": false,
                            "description": "Only this volume's snapshots (404 if no such volume)",
                            "schema": {"type": "string"}
                        },
                        destroyed_query
                    ],
                    "responses": with_errors(json!({
                        "200": {
                            "description": "The snapshots, in creation order",
                            "content": {"application/json": {"schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/SnapshotInfo"}
                            }}}
                        }
                    }), &["400", "401", "404", "500"])
                },
                "post": {
                    "operationId": "createSnapshots",
                    "summary": "Snapshot one volume, or several at one instant with respect to writes (a consistency group)",
                    "description": "Two phases: prepare (checks, writes flow) and commit (writes to the members are held). The answer reports both durations; commit_window_us is how long writes were held. Every snapshot gets 'name', else the group's name, else snap-<unix time>.",
                    "requestBody": json_request("CreateSnapshotsRequest"),
                    "responses": with_errors(json!({
                        "201": json_response("The snapshots taken", "GroupSnapshot")
                    }), &["400", "401", "404", "409", "413", "415", "500", "507"])
                }
            },
            "/v1/snapshots/{snapshot}": {
                "parameters": [snapshot_param.clone()],
                "get": {
                    "operationId": "getSnapshot",
                    "summary": "One snapshot, live or destroyed",
                    "responses": with_errors(json!({
                        "200": json_response("The snapshot", "SnapshotInfo")
                    }), &["400", "401", "404", "500"])
                },
                "delete": {
                    "operationId": "deleteSnapshot",
                    "summary": "Destroy a snapshot: hidden from hosts and lists, recoverable until its eradicate_at_unix_s",
                    "responses": with_errors(json!({
                        "204": {"description": "Destroyed"}
                    }), &["400", "401", "404", "500"])
                }
            },
            "/v1/snapshots/{snapshot}/recover": {
                "parameters": [snapshot_param.clone()],
                "post": {
                    "operationId": "recoverSnapshot",
                    "summary": "Bring a destroyed snapshot back (400 if it is not destroyed)",
                    "responses": with_errors(json!({
                        "200": json_response("The recovered snapshot", "SnapshotInfo")
                    }), &["400", "401", "404", "500"])
                }
            },
            "/v1/snapshots/{snapshot}/eradicate": {
                "parameters": [snapshot_param],
                "post": {
                    "operationId": "eradicateSnapshot",
                    "summary": "Eradicate a destroyed snapshot now (400 if it is not destroyed); what clones and copies still read is kept",
                    "responses": with_errors(json!({
                        "204": {"description": "Eradicated"}
                    }), &["400", "401", "404", "500"])
                }
            },
            "/v1/containers": {
                "get": {
                    "operationId": "listContainers",
                    "summary": "List storage containers by creation ('default' first), with policies, usage and reclaim counters",
                    "responses": with_errors(json!({
                        "200": {
                            "description": "The containers",
                            "content": {"application/json": {"schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/ContainerInfo"}
                            }}}
                        }
                    }), &["401", "500"])
                },
                "post": {
                    "operationId": "createContainer",
                    "summary": "Create a storage container: the quota, reclaim rate and data reduction its volumes share",
                    "description": "Policies left out take the defaults: no quota, reclaim 'unlimited' with a 256 MiB burst, lz4 compression, dedup on. A quota of 0 is refused (400). Volumes join with 'container' on create or clone.",
                    "requestBody": json_request("CreateContainerRequest"),
                    "responses": with_errors(json!({
                        "201": json_response("The new container", "ContainerInfo")
                    }), &["400", "401", "409", "413", "415", "500"])
                }
            },
            "/v1/containers/{container}": {
                "parameters": [container_param.clone()],
                "get": {
                    "operationId": "getContainer",
                    "summary": "One container: policy, usage and the reclaim counters (UNMAP/TRIM commands, bytes unmapped and reclaimed, current rate, backlog, ETA)",
                    "responses": with_errors(json!({
                        "200": json_response("The container", "ContainerInfo")
                    }), &["400", "401", "404", "500"])
                },
                "patch": {
                    "operationId": "updateContainer",
                    "summary": "Change a container's policies; fields left out are kept, \"quota_bytes\": null removes the quota",
                    "description": "A new reclaim policy applies at once. A new codec or dedup setting applies to data written from then on. A lower quota than what is used refuses new data until usage falls below it. An empty body is refused (400).",
                    "requestBody": json_request("UpdateContainerRequest"),
                    "responses": with_errors(json!({
                        "200": json_response("The changed container", "ContainerInfo")
                    }), &["400", "401", "404", "413", "415", "500"])
                },
                "delete": {
                    "operationId": "deleteContainer",
                    "summary": "Delete an empty container (400 for 'default' or while it holds volumes, destroyed ones included, or space still being reclaimed)",
                    "responses": with_errors(json!({
                        "204": {"description": "Deleted"}
                    }), &["400", "401", "404", "500"])
                }
            },
            "/v1/containers/{container}/reclaim": {
                "parameters": [container_param],
                "post": {
                    "operationId": "reclaimContainer",
                    "summary": "Work the container's reclaim backlog off now, whatever its policy (even 'off'); answers at once with reclaim.draining set until the backlog is empty",
                    "responses": with_errors(json!({
                        "200": json_response("The container as the drain starts", "ContainerInfo")
                    }), &["400", "401", "404", "500"])
                }
            },
            "/v1/array/space": {
                "get": {
                    "operationId": "getArraySpace",
                    "summary": "Array-wide space report",
                    "responses": with_errors(json!({
                        "200": json_response("Space figures", "SpaceReport")
                    }), &["401", "500"])
                }
            },
            "/v1/array/scrub": {
                "get": {
                    "operationId": "getScrub",
                    "summary": "The running scrub pass (progress), the last finished one (its findings) and the background schedule",
                    "responses": with_errors(json!({
                        "200": json_response("Scrub status", "ScrubStatus")
                    }), &["400", "401", "500"])
                },
                "post": {
                    "operationId": "startScrub",
                    "summary": "Start a scrub pass: read back and verify every stored record, at a rate if given; answers the pass running already if there is one",
                    "requestBody": json_request("ScrubRequest"),
                    "responses": with_errors(json!({
                        "202": json_response("The pass begun (started: true) or the one running already (started: false)", "ScrubStart")
                    }), &["400", "401", "413", "415", "500"])
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "getMetrics",
                    "summary": "The space report in Prometheus text format (0.0.4): gauges for space, counters for writes, unmaps and reclaim; then per container (label container) usage, quota, reclaim counters, current rate, backlog, ETA, rate limit and policy, and per volume (labels volume, container) unmap, reclaim and backlog figures",
                    "description": "lacuna_container_reclaim_eta_seconds has no sample for a container whose backlog never empties (reclaim off) or whose rate cannot be told yet; lacuna_container_reclaim_rate_limit_bytes_per_second is 0 for off and +Inf for unlimited; lacuna_container_quota_bytes has no sample without a quota; lacuna_container_reclaim_policy{container,policy} is always 1.",
                    "responses": with_errors(json!({
                        "200": {
                            "description": "Prometheus text exposition",
                            "content": {"text/plain": {"schema": {"type": "string"}}}
                        }
                    }), &["401", "500"])
                }
            },
            "/v1/hosts": {
                "get": {
                    "operationId": "listHosts",
                    "summary": "List hosts, sorted by name (CHAP users, never secrets)",
                    "responses": with_errors(json!({
                        "200": {
                            "description": "The hosts, sorted by name",
                            "content": {"application/json": {"schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/HostInfo"}
                            }}}
                        }
                    }), &["401", "500", "501"])
                },
                "post": {
                    "operationId": "createHost",
                    "summary": "Create a host: initiator names that share access, optionally with CHAP, and/or an NBD TLS pre-shared key",
                    "description": "Each initiator name belongs to at most one host (else 400). CHAP secrets are 12 to 255 characters; a user needs its secret and a secret its user; mutual CHAP needs one-way CHAP. Secrets are stored by the daemon (mode 0600) and never returned. The host sees nothing until volumes are connected to it.",
                    "requestBody": json_request("CreateHostRequest"),
                    "responses": with_errors(json!({
                        "201": json_response("The new host", "HostInfo")
                    }), &["400", "401", "409", "413", "415", "500", "501"])
                }
            },
            "/v1/hosts/{host}": {
                "parameters": [host_param.clone()],
                "get": {
                    "operationId": "getHost",
                    "summary": "One host, with its LUNs",
                    "responses": with_errors(json!({
                        "200": json_response("The host", "HostInfo")
                    }), &["400", "401", "404", "500", "501"])
                },
                "delete": {
                    "operationId": "deleteHost",
                    "summary": "Delete a host: its initiators lose every LUN at once (live sessions get REPORTED LUNS DATA HAS CHANGED); the volumes are untouched",
                    "responses": with_errors(json!({
                        "204": {"description": "Deleted"}
                    }), &["400", "401", "404", "500", "501"])
                }
            },
            "/v1/hosts/{host}/connect": {
                "parameters": [host_param.clone()],
                "post": {
                    "operationId": "connectVolume",
                    "summary": "Connect a volume (or a snapshot VOL@SNAP, read-only) to a host at a LUN",
                    "description": "The lowest free LUN unless 'lun' is given (0 to 16383). 400 if the LUN is taken, the volume is already connected to this host, the block size is not 512 or 4096, or the host has 1024 LUNs; 404 if the host, or the volume or snapshot, does not exist (a destroyed one counts as absent). Live sessions of the host's initiators see the new LUN at once.",
                    "requestBody": json_request("ConnectVolumeRequest"),
                    "responses": with_errors(json!({
                        "200": json_response("The LUN made", "LunInfo")
                    }), &["400", "401", "404", "413", "415", "500", "501"])
                }
            },
            "/v1/hosts/{host}/nbd-psk": {
                "parameters": [host_param.clone()],
                "put": {
                    "operationId": "setHostNbdPsk",
                    "summary": "Set (or replace) the host's NBD TLS pre-shared key; its PSK identity is the host's name",
                    "description": "NBD clients that start TLS with this identity and key may list and open the volumes and snapshots connected to the host. Open NBD connections keep running; new ones need the new key. 400 for a key that is not 16 to 64 bytes of hex.",
                    "requestBody": json_request("SetNbdPskRequest"),
                    "responses": with_errors(json!({
                        "200": json_response("The host", "HostInfo")
                    }), &["400", "401", "404", "413", "415", "500", "501"])
                },
                "delete": {
                    "operationId": "removeHostNbdPsk",
                    "summary": "Remove the host's NBD TLS key (400 if the host has no initiator either: it would have no way in)",
                    "responses": with_errors(json!({
                        "200": json_response("The host", "HostInfo")
                    }), &["400", "401", "404", "500", "501"])
                }
            },
            "/v1/hosts/{host}/disconnect": {
                "parameters": [host_param],
                "post": {
                    "operationId": "disconnectVolume",
                    "summary": "Take a volume (or snapshot) away from a host, whatever its LUN (400 if it is not connected)",
                    "requestBody": json_request("DisconnectVolumeRequest"),
                    "responses": with_errors(json!({
                        "204": {"description": "Disconnected"}
                    }), &["400", "401", "404", "413", "415", "500", "501"])
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "operationId": "getOpenApi",
                    "summary": "This document",
                    "responses": with_errors(json!({
                        "200": {
                            "description": "OpenAPI 3.0 document",
                            "content": {"application/json": {"schema": {"type": "object"}}}
                        }
                    }), &["401"])
                }
            }
        },
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The contents of <data-dir>/api-token"
                }
            },
            "responses": error_responses(),
            "schemas": schemas()
        }
    })
}

fn json_response(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}
    })
}

fn json_request(schema: &str) -> Value {
    json!({
        "required": true,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}
    })
}

/// Adds references to the shared error responses for the given status codes.
fn with_errors(mut responses: Value, statuses: &[&str]) -> Value {
    let map = responses.as_object_mut().expect("responses is an object");
    for status in statuses {
        map.insert(
            status.to_string(),
            json!({"$ref": format!("#/components/responses/{}", error_response_name(status))}),
        );
    }
    responses
}

const ERRORS: &[(&str, &str, &str)] = &[
    (
        "400",
        "BadRequest",
        "Invalid argument (name, size, range, state) or malformed body or query",
    ),
    ("401", "Unauthorized", "Missing or wrong bearer token"),
    (
        "404",
        "NotFound",
        "No such volume, snapshot, container or host",
    ),
    (
        "409",
        "Conflict",
        "A volume, snapshot, container or host with that name exists",
    ),
    ("413", "PayloadTooLarge", "Request body over 64 KiB"),
    (
        "415",
        "UnsupportedMediaType",
        "Body sent without Content-Type: application/json",
    ),
    (
        "500",
        "InternalError",
        "I/O or metadata failure in the array or the host registry",
    ),
    (
        "501",
        "NotImplemented",
        "Host management is not available on this server",
    ),
    (
        "507",
        "InsufficientStorage",
        "The array is out of space, a container's quota is reached, or a thick reservation cannot be honoured",
    ),
];

fn error_response_name(status: &str) -> &'static str {
    ERRORS
        .iter()
        .find(|(s, _, _)| *s == status)
        .map(|(_, name, _)| *name)
        .expect("every status used has a shared error response")
}

fn error_responses() -> Value {
    ERRORS
        .iter()
        .map(|(_, name, description)| (name.to_string(), json_response(description, "Error")))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn bytes(description: &str) -> Value {
    json!({"type": "integer", "format": "int64", "minimum": 0, "description": description})
}

fn ratio(description: &str) -> Value {
    json!({"type": "number", "format": "double", "description": description})
}

/// A non-negative integer: a count, microseconds or seconds since the epoch.
fn count(description: &str) -> Value {
    json!({"type": "integer", "format": "int64", "minimum": 0, "description": description})
}

/// A field always sent, `null` when it does not apply.
fn nullable(mut schema: Value) -> Value {
    schema["nullable"] = Value::Bool(true);
    schema
}

/// The policy fields shared by the create and update bodies, all optional:
/// on create a missing one takes the default, on update it keeps its value.
fn container_policy_fields(create: bool) -> Value {
    let when_absent = |default: &str| {
        if create {
            format!("default: {default}")
        } else {
            "absent: kept".to_string()
        }
    };
    json!({
        "quota_bytes": bytes(&format!("Most bytes the volumes may hold: written data plus thick reservations; a write past it gets ENOSPC ({})", when_absent("none"))),
        "reclaim": reclaim_policy(&format!("How fast dead space is reclaimed ({})", when_absent("unlimited"))),
        "reclaim_burst_bytes": bytes(&format!("Reclaim allowance spent before the rate applies, refilled while idle ({})", when_absent("256 MiB"))),
        "compression": compression(&when_absent("lz4")),
        "dedup": {"type": "boolean", "description": format!("Deduplicate new data ({})", when_absent("true"))}
    })
}

fn reclaim_policy(description: &str) -> Value {
    json!({
        "type": "string",
        "example": "low",
        "description": format!("{description}: off (nothing until POST .../reclaim or a new policy), low (25 MB/s), unlimited, or a rate in decimal units: NMB/s, NGB/s, NB/s (a bare number is MB/s)")
    })
}

fn compression(note: &str) -> Value {
    json!({
        "type": "string",
        "enum": ["lz4", "zstd", "off"],
        "description": format!("Codec of new data: lz4 (cheap), zstd (better ratio, more CPU) or off (stored raw) ({note})")
    })
}

fn provisioning(description: &str) -> Value {
    json!({
        "type": "string",
        "enum": ["thin", "zeroedthick", "eagerzeroedthick"],
        "description": description
    })
}

/// An object whose every property is always present. (OpenAPI 3.0 wants a
/// `required` list to have an element: an object of optional fields has none.)
fn object(properties: Value) -> Value {
    let required: Vec<&String> = properties.as_object().expect("properties").keys().collect();
    if required.is_empty() {
        return json!({"type": "object", "properties": properties});
    }
    json!({"type": "object", "required": required, "properties": properties})
}

/// An object with required properties and optional ones (absent when not sent).
fn object_with_optional(required: Value, optional: Value) -> Value {
    let mut schema = object(required);
    let properties = schema["properties"].as_object_mut().expect("properties");
    for (key, value) in optional.as_object().expect("optional properties") {
        properties.insert(key.clone(), value.clone());
    }
    schema
}

/// Request bodies reject unknown fields (a misspelt `size_bytes` is an error, not
/// a silently ignored field).
fn closed(mut schema: Value) -> Value {
    schema["additionalProperties"] = Value::Bool(false);
    schema
}

fn schemas() -> Value {
    json!({
        "Error": object(json!({
            "error": {"type": "string", "description": "What went wrong, for a person to read"}
        })),
        "Health": object(json!({
            "status": {"type": "string", "enum": ["ok"]}
        })),
        "CreateVolumeRequest": closed(object_with_optional(json!({
            "name": {"type": "string", "description": "1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')"}
        }), json!({
            "size_bytes": bytes("Volume size: a non-zero multiple of 512, at most 1 PiB. Required without 'source'; with 'source', omit it or give the source's size"),
            "provisioning": provisioning("thin (default: reserves nothing), zeroedthick (reserves the full size so writes never lack space) or eagerzeroedthick (zeroedthick, created already zeroed with one metadata record)"),
            "source": {"type": "string", "description": "Clone this: a volume (VOL, as it is now) or a snapshot (VOL@SNAP)"},
            "container": {"type": "string", "description": "The storage container the volume joins (default: 'default', or for a clone the source's container)"}
        }))),
        "CreateContainerRequest": closed(object_with_optional(json!({
            "name": {"type": "string", "description": "1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')"}
        }), container_policy_fields(true))),
        "UpdateContainerRequest": closed(object_with_optional(json!({}), {
            let mut fields = container_policy_fields(false);
            fields["quota_bytes"] = nullable(bytes("New quota; null removes it; absent keeps it"));
            fields
        })),
        "ContainerPolicy": object(json!({
            "quota_bytes": nullable(bytes("Most bytes the volumes may hold (written data plus thick reservations); null: no quota")),
            "reclaim": reclaim_policy("How fast dead space is reclaimed"),
            "reclaim_burst_bytes": bytes("Reclaim allowance spent before the rate applies, refilled while idle"),
            "compression": compression("the container's codec"),
            "dedup": {"type": "boolean", "description": "New data is deduplicated"}
        })),
        "ContainerReclaim": object(json!({
            "policy": reclaim_policy("The reclaim policy in force"),
            "rate_bytes_per_s": nullable(count("The policy's rate in bytes per second; null for off and unlimited")),
            "burst_bytes": bytes("Reclaim allowance spent before the rate applies"),
            "unmap_commands": count("UNMAP / TRIM / unmapping WRITE SAME and WRITE ZEROES requests the container's volumes received since the daemon started"),
            "unmapped_bytes": bytes("Logical bytes those requests covered"),
            "reclaimed_bytes": bytes("Bytes of dead data (unmapped, overwritten by a range, of eradicated volumes) the reclaimer released since the daemon started"),
            "backlog_bytes": bytes("Dead bytes not yet reclaimed"),
            "current_bytes_per_s": ratio("Bytes reclaimed per second over the last 2 seconds (sliding window)"),
            "eta_s": nullable(ratio("Seconds until the backlog is empty at the policy's rate (or, unlimited or draining, at the current rate); 0 when empty; null when it never will be (off) or cannot be told yet")),
            "draining": {"type": "boolean", "description": "Set by POST .../reclaim until the backlog is empty"}
        })),
        "ContainerInfo": object(json!({
            "name": {"type": "string"},
            "id": count("Internal container number, never reused; 'default' is 1"),
            "created_unix_s": count("Creation time, seconds since the Unix epoch"),
            "policy": {"$ref": "#/components/schemas/ContainerPolicy"},
            "volume_count": count("Volumes in the container, live and destroyed (recoverable)"),
            "provisioned_bytes": bytes("Sum of those volumes' sizes"),
            "used_bytes": bytes("What counts against the quota: written data plus thick reservations"),
            "reclaim": {"$ref": "#/components/schemas/ContainerReclaim"}
        })),
        "ResizeVolumeRequest": closed(object(json!({
            "size_bytes": bytes("New volume size: a non-zero multiple of 512, at most 1 PiB")
        }))),
        "RestoreVolumeRequest": closed(object(json!({
            "snapshot": {"type": "string", "description": "A snapshot of this volume: its NAME or VOL@NAME"}
        }))),
        "CopyRangeRequest": closed(object(json!({
            "offset_bytes": bytes("Where the range starts in the source volume (the path's)"),
            "length_bytes": bytes("How many bytes to copy"),
            "destination": {"type": "string", "description": "Destination volume (may be the source)"},
            "destination_offset_bytes": bytes("Where the copy lands in the destination")
        }))),
        "CopyReport": object(json!({
            "referenced_bytes": bytes("Bytes copied by reference (metadata only)"),
            "data_bytes": bytes("Bytes copied as data (unaligned edges or mismatched alignment within a 4 KiB grain)")
        })),
        "CreateSnapshotsRequest": closed(object_with_optional(json!({
            "volumes": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string"},
                "description": "Volumes to snapshot at one instant, each named once"
            }
        }), json!({
            "name": {"type": "string", "description": "Snapshot name for every member (default: the group's name, else snap-<unix time>)"},
            "group": {"type": "string", "description": "Consistency group name, recorded with each snapshot"}
        }))),
        "SnapshotInfo": object(json!({
            "id": count("Internal snapshot number, never reused"),
            "volume": {"type": "string", "description": "The volume it is a snapshot of"},
            "name": {"type": "string"},
            "full_name": {"type": "string", "description": "VOL@NAME: the read-only NBD export name and the clone/restore source syntax"},
            "size_bytes": bytes("The volume's size when the snapshot was taken"),
            "created_unix_s": count("Creation time, seconds since the Unix epoch"),
            "group": nullable(json!({"type": "string", "description": "Consistency group it was taken in, if any"})),
            "destroyed_unix_s": nullable(count("When it was destroyed; null while live")),
            "eradicate_at_unix_s": nullable(count("When a destroyed snapshot is eradicated automatically; null while live"))
        })),
        "GroupSnapshot": object(json!({
            "snapshots": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/SnapshotInfo"}
            },
            "prepare_us": count("Checks and name resolution before the commit, in microseconds (writes flow meanwhile)"),
            "commit_window_us": count("How long writes to the member volumes were held, in microseconds")
        })),
        "VolumeInfo": object(json!({
            "name": {"type": "string"},
            "id": {"type": "integer", "format": "int64", "minimum": 0, "description": "Internal volume number, never reused"},
            "size_bytes": bytes("Size the host sees"),
            "written_bytes": bytes("Bytes holding data (not holes, not zeroes)"),
            "written_settling": {"type": "boolean", "description": "Ranges a clone or copy references still count as written whole while a background job works out their source's data bits (after a restart, a clone of an older snapshot, a copy of a copy still settling): written_bytes may yet fall"},
            "thin_provisioning_percent": ratio("Share of the volume never written or unmapped, in percent"),
            "logical_data_bytes": bytes("Logical bytes of data the volume references"),
            "unique_physical_bytes": bytes("Physical bytes of blocks only this volume references"),
            "shared_physical_bytes": bytes("Physical bytes of deduplicated blocks shared with other volumes, in proportion to this volume's references"),
            "data_reduction_ratio": ratio("logical_data_bytes / (unique + shared physical bytes); 1.0 when empty"),
            "created_unix_s": count("Creation time, seconds since the Unix epoch"),
            "provisioning": provisioning("The volume's provisioning type"),
            "reserved_bytes": bytes("Physical bytes held in reserve for this (thick) volume's unwritten grains"),
            "snapshot_count": count("Named snapshots of the volume"),
            "destroyed_unix_s": nullable(count("When it was destroyed; null while live")),
            "eradicate_at_unix_s": nullable(count("When a destroyed volume is eradicated automatically; null while live")),
            "container": {"type": "string", "description": "The storage container the volume belongs to"},
            "reclaim": {"$ref": "#/components/schemas/ReclaimStats"}
        })),
        "ReclaimStats": object(json!({
            "unmap_commands": count("UNMAP / TRIM / unmapping WRITE SAME and WRITE ZEROES requests received since the daemon started"),
            "unmapped_bytes": bytes("Logical bytes those requests covered"),
            "reclaimed_bytes": bytes("Bytes of dead data (mappings unmapped, overwritten by a range, or of eradicated volumes) whose references the reclaimer released"),
            "backlog_bytes": bytes("Dead bytes not yet reclaimed")
        })),
        "CreateHostRequest": closed(object_with_optional(json!({
            "name": {"type": "string", "description": "1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.'); also the host's NBD TLS-PSK identity"}
        }), json!({
            "iqns": {
                "type": "array",
                "maxItems": 64,
                "uniqueItems": true,
                "items": {"type": "string", "maxLength": 223, "description": "iqn.…, eui.… or naa.…"},
                "description": "iSCSI initiator names that log in as this host, none of them another host's; may be empty (or absent) only with nbd_psk_key"
            },
            "nbd_psk_key": {"type": "string", "pattern": "^([0-9a-fA-F]{2}){16,64}$", "writeOnly": true, "description": "NBD TLS pre-shared key in hex (16 to 64 bytes); NBD clients that prove it with the host's name as PSK identity open the volumes connected to the host. Never returned"},
            "chap_user": {"type": "string", "minLength": 1, "maxLength": 255, "description": "One-way CHAP: the user the initiator authenticates as (needs chap_secret)"},
            "chap_secret": {"type": "string", "minLength": 12, "maxLength": 255, "writeOnly": true, "description": "One-way CHAP secret; never returned"},
            "mutual_chap_user": {"type": "string", "minLength": 1, "maxLength": 255, "description": "Mutual CHAP: the user the target authenticates to the initiator as (needs one-way CHAP and mutual_chap_secret)"},
            "mutual_chap_secret": {"type": "string", "minLength": 12, "maxLength": 255, "writeOnly": true, "description": "Mutual CHAP secret; never returned"}
        }))),
        "ConnectVolumeRequest": closed(object_with_optional(json!({
            "volume": {"type": "string", "description": "VOL, or VOL@SNAP for a read-only snapshot LUN"}
        }), json!({
            "lun": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 16383, "description": "The LUN (default: the lowest free one)"},
            "block_size_bytes": {"type": "integer", "enum": [512, 4096], "default": 512, "description": "Logical block size presented: 512 (512e) or 4096 (4Kn)"},
            "removable": {"type": "boolean", "default": false, "description": "Present as removable medium (eject and load with START STOP UNIT)"}
        }))),
        "SetNbdPskRequest": closed(object(json!({
            "key": {"type": "string", "pattern": "^([0-9a-fA-F]{2}){16,64}$", "writeOnly": true, "description": "NBD TLS pre-shared key in hex (16 to 64 bytes)"}
        }))),
        "DisconnectVolumeRequest": closed(object(json!({
            "volume": {"type": "string", "description": "The volume or VOL@SNAP to take away, whatever its LUN"}
        }))),
        "LunInfo": object(json!({
            "lun": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 16383},
            "volume": {"type": "string", "description": "VOL, or VOL@SNAP for a snapshot"},
            "block_size_bytes": {"type": "integer", "enum": [512, 4096], "description": "Logical block size presented"},
            "removable": {"type": "boolean", "description": "Presented as removable medium"},
            "read_only": {"type": "boolean", "description": "A snapshot LUN: write-protected"}
        })),
        "HostInfo": object(json!({
            "name": {"type": "string"},
            "iqns": {"type": "array", "items": {"type": "string"}, "description": "Initiator names that log in as this host"},
            "chap_user": nullable(json!({"type": "string", "description": "One-way CHAP user; null without CHAP"})),
            "mutual_chap_user": nullable(json!({"type": "string", "description": "Mutual CHAP user; null without mutual CHAP"})),
            "nbd_psk": {"type": "boolean", "description": "The host has an NBD TLS pre-shared key (never shown)"},
            "luns": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/LunInfo"},
                "description": "What the host sees, by ascending LUN"
            }
        })),
        "SpaceReport": object(json!({
            "capacity_bytes": bytes("Physical capacity of the array"),
            "physical_used_bytes": bytes("Bytes occupied in segments: live + stale"),
            "live_physical_bytes": bytes("Bytes of referenced records"),
            "stale_bytes": bytes("Bytes of dead records awaiting reclaim"),
            "free_bytes": bytes("capacity - physical used"),
            "provisioned_bytes": bytes("Sum of the volumes' sizes"),
            "logical_data_bytes": bytes("Sum of the volumes' written bytes"),
            "written_settling_volumes": count("Volumes whose written bytes are still settling (see VolumeInfo.written_settling): logical_data_bytes may yet fall"),
            "reclaim_backlog_bytes": bytes("Logical bytes unmapped or zeroed whose old mappings the background reclaimer has not yet dropped"),
            "data_reduction_ratio": ratio("logical data / live physical (dedup, compression, pattern removal)"),
            "total_reduction_ratio": ratio("provisioned / physical used (adds thin provisioning)"),
            "volume_count": count("Live volumes"),
            "segment_count": count("Segment files"),
            "cleaned_segments": count("Segments the cleaner emptied since the daemon started"),
            "relocated_bytes": bytes("Live bytes the cleaner relocated since the daemon started"),
            "writer_cleans": count("Cleaning passes host writes ran themselves because background cleaning had fallen behind"),
            "punched_bytes": bytes("Bytes of freed records punched out of segment files since the daemon started"),
            "volume_unique_bytes": bytes("Live bytes referenced once, by one volume"),
            "snapshot_bytes": bytes("Live bytes only snapshots hold (what eradicating them would free)"),
            "shared_bytes": bytes("Live bytes referenced more than once (dedup, clones, copies, snapshots sharing with their volume); volume_unique + snapshot + shared = live"),
            "reserved_bytes": bytes("Physical bytes promised to thick volumes and not yet used"),
            "thin_available_bytes": bytes("Space thin volumes may still use: free less reservations and headroom"),
            "soft_threshold_percent": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Physical use, in percent of capacity, at which the soft-threshold event is raised"},
            "soft_threshold_exceeded": {"type": "boolean", "description": "Physical use is at or above the soft threshold"},
            "soft_threshold_events": count("Times physical use crossed the soft threshold upwards since the daemon started"),
            "snapshot_count": count("Named snapshots, live and destroyed"),
            "destroyed_volume_count": count("Destroyed volumes awaiting eradication"),
            "host_written_bytes": bytes("Bytes hosts wrote since the daemon started"),
            "media_written_bytes": bytes("Bytes appended to segments since the daemon started: records of host writes plus records the cleaner relocated (metadata excluded)"),
            "write_amplification": ratio("media_written / host_written (below 1 when data reduction saves more than cleaning costs); 0 before any host write"),
            "unmap_commands": count("Unmap requests received since the daemon started (UNMAP, TRIM, WRITE SAME or WRITE ZEROES allowed to unmap)"),
            "unmapped_bytes": bytes("Logical bytes those requests covered"),
            "reclaimed_bytes": bytes("Logical bytes whose old mappings the background reclaimer has dropped since the daemon started"),
            "checksum_errors": count("Records that failed verification when read since the daemon started (the host got an error, never the bytes)"),
            "read_errors": count("Segment reads the filesystem failed (EIO) since the daemon started")
        })),
        "ScrubRequest": closed(json!({
            "type": "object",
            "properties": {
                "rate_bytes_per_s": {"type": "integer", "format": "int64", "minimum": 1, "description": "Most bytes of records read per second; unlimited when absent"}
            }
        })),
        "ScrubStart": object(json!({
            "report": {"$ref": "#/components/schemas/ScrubReport"},
            "started": {"type": "boolean", "description": "false: a pass was running already and this is it"}
        })),
        "ScrubStatus": object(json!({
            "current": nullable(json!({"allOf": [{"$ref": "#/components/schemas/ScrubReport"}], "description": "The running pass; null when none runs"})),
            "last": nullable(json!({"allOf": [{"$ref": "#/components/schemas/ScrubReport"}], "description": "The last finished pass; null before the first"})),
            "background_rate_bytes_per_s": nullable(json!({"type": "integer", "format": "int64", "minimum": 1, "description": "Rate of the background scrub; null when none is scheduled"}))
        })),
        "ScrubReport": object(json!({
            "pass": count("Pass number since the daemon started, from 1"),
            "background": {"type": "boolean", "description": "Started by the background scrub"},
            "running": {"type": "boolean"},
            "rate_bytes_per_s": nullable(json!({"type": "integer", "format": "int64", "minimum": 1, "description": "The pass's rate limit; null when unlimited"})),
            "started_unix_s": count("When the pass started"),
            "finished_unix_s": nullable(count("When the pass finished; null while running")),
            "records_total": count("Records stored when the pass started"),
            "bytes_total": bytes("Bytes of those records"),
            "records_checked": count("Records read back and verified so far"),
            "bytes_checked": bytes("Bytes of those records"),
            "bad_records": count("Records that failed (checksum, decoding, fingerprint or read error)"),
            "bad": {"type": "array", "items": {"$ref": "#/components/schemas/BadRecord"}, "description": "The first 100 bad records"},
            "affected": {"type": "array", "items": {"$ref": "#/components/schemas/AffectedRange"}, "description": "What reads the bad records (at most 1000 ranges); complete once the pass finished"},
            "error": nullable(json!({"type": "string", "description": "Why the pass stopped early; null if it did not"}))
        })),
        "BadRecord": object(json!({
            "block_id": count("The stored block"),
            "segment": count("Segment file number"),
            "offset_bytes": bytes("Where the record starts in the segment"),
            "reason": {"type": "string"}
        })),
        "AffectedRange": object(json!({
            "volume": {"type": "string"},
            "live": {"type": "boolean", "description": "The volume itself reads the range (false: only its snapshots do)"},
            "snapshots": {"type": "array", "items": {"type": "string"}, "description": "Snapshots (VOL@NAME) that read the range"},
            "offset_bytes": bytes("Start of the range in the volume"),
            "length_bytes": bytes("Length of the range")
        }))
    })
}
