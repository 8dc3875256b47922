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
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Lacuna control API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Manage the volumes of a Lacuna storage array and read its space figures. Every operation except GET /healthz needs 'Authorization: Bearer <token>', the token being in <data-dir>/api-token. All sizes are in bytes."
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
                    "summary": "List volumes, sorted by name",
                    "responses": with_errors(json!({
                        "200": {
                            "description": "All volumes, sorted by name",
                            "content": {"application/json": {"schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/VolumeInfo"}
                            }}}
                        }
                    }), &["401", "500"])
                },
                "post": {
                    "operationId": "createVolume",
                    "summary": "Create a thin-provisioned volume",
                    "requestBody": json_request("CreateVolumeRequest"),
                    "responses": with_errors(json!({
                        "201": json_response("The new volume", "VolumeInfo")
                    }), &["400", "401", "409", "413", "415", "500", "507"])
                }
            },
            "/v1/volumes/{name}": {
                "parameters": [name_param],
                "get": {
                    "operationId": "getVolume",
                    "summary": "One volume's size and space figures",
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
                    "summary": "Delete a volume; its space is reclaimed in the background",
                    "responses": with_errors(json!({
                        "204": {"description": "Deleted"}
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
        "Invalid argument (name, size) or malformed body",
    ),
    ("401", "Unauthorized", "Missing or wrong bearer token"),
    ("404", "NotFound", "No such volume"),
    ("409", "Conflict", "A volume with that name exists"),
    ("413", "PayloadTooLarge", "Request body over 64 KiB"),
    (
        "415",
        "UnsupportedMediaType",
        "Body sent without Content-Type: application/json",
    ),
    (
        "500",
        "InternalError",
        "I/O or metadata failure in the array",
    ),
    ("507", "InsufficientStorage", "The array is out of space"),
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

fn object(properties: Value) -> Value {
    let required: Vec<&String> = properties.as_object().expect("properties").keys().collect();
    json!({"type": "object", "required": required, "properties": properties})
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
        "CreateVolumeRequest": closed(object(json!({
            "name": {"type": "string", "description": "1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')"},
            "size_bytes": bytes("Volume size: a non-zero multiple of 512, at most 1 PiB")
        }))),
        "ResizeVolumeRequest": closed(object(json!({
            "size_bytes": bytes("New volume size: a non-zero multiple of 512, at most 1 PiB")
        }))),
        "VolumeInfo": object(json!({
            "name": {"type": "string"},
            "id": {"type": "integer", "format": "int64", "minimum": 0, "description": "Internal volume number, never reused"},
            "size_bytes": bytes("Size the host sees"),
            "written_bytes": bytes("Bytes holding data (not holes, not zeroes)"),
            "thin_provisioning_percent": ratio("Share of the volume never written or unmapped, in percent"),
            "logical_data_bytes": bytes("Logical bytes of data the volume references"),
            "unique_physical_bytes": bytes("Physical bytes of blocks only this volume references"),
            "shared_physical_bytes": bytes("Physical bytes of deduplicated blocks shared with other volumes, in proportion to this volume's references"),
            "data_reduction_ratio": ratio("logical_data_bytes / (unique + shared physical bytes); 1.0 when empty"),
            "created_unix_s": {"type": "integer", "format": "int64", "minimum": 0, "description": "Creation time, seconds since the Unix epoch"}
        })),
        "SpaceReport": object(json!({
            "capacity_bytes": bytes("Physical capacity of the array"),
            "physical_used_bytes": bytes("Bytes occupied in segments: live + stale"),
            "live_physical_bytes": bytes("Bytes of referenced records"),
            "stale_bytes": bytes("Bytes of dead records awaiting reclaim"),
            "free_bytes": bytes("capacity - physical used"),
            "provisioned_bytes": bytes("Sum of the volumes' sizes"),
            "logical_data_bytes": bytes("Sum of the volumes' written bytes"),
            "reclaim_backlog_bytes": bytes("Logical bytes unmapped or zeroed whose old mappings the background reclaimer has not yet dropped"),
            "data_reduction_ratio": ratio("logical data / live physical (dedup, compression, pattern removal)"),
            "total_reduction_ratio": ratio("provisioned / physical used (adds thin provisioning)"),
            "volume_count": {"type": "integer", "format": "int64", "minimum": 0},
            "segment_count": {"type": "integer", "format": "int64", "minimum": 0}
        }))
    })
}
