//! The OpenAPI 3.0 description of the API, written by hand next to the routes it
//! describes (a test checks that every route is in it).

use serde_json::{json, Value};

fn error_responses() -> Value {
    json!({
        "400": { "description": "Invalid argument or malformed body", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
        "401": { "description": "Missing or wrong token", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
        "404": { "description": "No such volume", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
        "409": { "description": "Volume exists", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
        "507": { "description": "Out of space", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
    })
}

fn with_errors(mut ok: Value) -> Value {
    let errors = error_responses();
    let map = ok.as_object_mut().expect("object");
    for (code, body) in errors.as_object().expect("object") {
        map.insert(code.clone(), body.clone());
    }
    ok
}

fn json_ok(description: &str, schema: Value) -> Value {
    json!({ "200": { "description": description, "content": { "application/json": { "schema": schema } } } })
}

pub fn document() -> Value {
    let volume = json!({ "$ref": "#/components/schemas/Volume" });
    let name_param =
        json!([{ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } }]);
    json!({
        "openapi": "3.0.3",
        "info": { "title": "Lacuna control API", "version": env!("CARGO_PKG_VERSION") },
        "servers": [{ "url": "http://127.0.0.1:8080" }],
        "security": [{ "bearer": [] }],
        "paths": {
            "/healthz": { "get": { "security": [], "summary": "Liveness", "responses": json_ok("Alive", json!({"type": "object"})) } },
            "/v1/volumes": {
                "get": { "summary": "List volumes", "responses": with_errors(json_ok("Volumes", json!({ "type": "array", "items": volume }))) },
                "post": {
                    "summary": "Create a volume",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/CreateVolume" } } } },
                    "responses": with_errors(json!({ "201": { "description": "Created", "content": { "application/json": { "schema": volume } } } }))
                }
            },
            "/v1/volumes/{name}": {
                "parameters": name_param,
                "get": { "summary": "Show a volume", "responses": with_errors(json_ok("The volume", volume.clone())) },
                "patch": {
                    "summary": "Resize a volume",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ResizeVolume" } } } },
                    "responses": with_errors(json_ok("The resized volume", volume.clone()))
                },
                "delete": { "summary": "Delete a volume", "responses": with_errors(json!({ "204": { "description": "Deleted" } })) }
            },
            "/v1/array/space": { "get": { "summary": "Array space report", "responses": with_errors(json_ok("Space", json!({ "$ref": "#/components/schemas/Space" }))) } },
            "/v1/openapi.json": { "get": { "summary": "This document", "responses": with_errors(json_ok("OpenAPI document", json!({"type": "object"}))) } }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" } } },
                "CreateVolume": { "type": "object", "required": ["name", "size_bytes"], "additionalProperties": false, "properties": {
                    "name": { "type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$" },
                    "size_bytes": { "type": "integer", "format": "int64", "minimum": 512, "description": "A multiple of 512" } } },
                "ResizeVolume": { "type": "object", "required": ["size_bytes"], "additionalProperties": false, "properties": {
                    "size_bytes": { "type": "integer", "format": "int64", "minimum": 512 } } },
                "Volume": { "type": "object", "properties": {
                    "name": { "type": "string" }, "id": { "type": "integer" }, "size_bytes": { "type": "integer" },
                    "written_bytes": { "type": "integer" }, "thin_provisioning_percent": { "type": "number" },
                    "logical_data_bytes": { "type": "integer" }, "unique_physical_bytes": { "type": "integer" },
                    "shared_physical_bytes": { "type": "integer" }, "data_reduction_ratio": { "type": "number" },
                    "created_unix_s": { "type": "integer" } } },
                "Space": { "type": "object", "properties": {
                    "capacity_bytes": { "type": "integer" }, "physical_used_bytes": { "type": "integer" },
                    "live_physical_bytes": { "type": "integer" }, "stale_bytes": { "type": "integer" },
                    "free_bytes": { "type": "integer" }, "provisioned_bytes": { "type": "integer" },
                    "logical_data_bytes": { "type": "integer" }, "reclaim_backlog_bytes": { "type": "integer" },
                    "data_reduction_ratio": { "type": "number" }, "total_reduction_ratio": { "type": "number" },
                    "volume_count": { "type": "integer" }, "segment_count": { "type": "integer" } } }
            }
        }
    })
}
