//! The OpenAPI 3.0 document served at `GET /v1/openapi.json`, derived from the
//! API's one list of routes (`open_routes` and `authenticated_routes` in the
//! crate root, the list the router is built from too): each handler's
//! `#[utoipa::path]` gives its operation, the request types and the engine's
//! answer types (their schemas derived under the engine's `openapi` feature)
//! give the schemas, and their doc comments the descriptions.
//!
//! What the router's layers and extractors do is added here rather than on each
//! handler: an operation behind the token documents 401, one with a JSON body
//! 400, 413 and 415, one with a path or query parameter 400; operations on the
//! open routes need no token. Path parameters are declared once per path.

use std::sync::OnceLock;

use axum::http::Method;
use serde_json::{json, Value};
use utoipa::openapi::path::{Operation, ParameterIn, PathItem};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{InfoBuilder, OpenApi, Ref, RefOr};
use utoipa::{OpenApi as _, ToResponse};

use crate::doc_only::{
    BadRequest, Conflict, InsufficientStorage, InternalError, NotFound, NotImplemented,
    PayloadTooLarge, Unauthorized, UnsupportedMediaType,
};
use crate::ErrorBody;

#[derive(utoipa::OpenApi)]
#[openapi(
    servers((url = "http://127.0.0.1:8080")),
    security(("bearerAuth" = [])),
    components(
        schemas(ErrorBody),
        responses(
            BadRequest,
            Unauthorized,
            NotFound,
            Conflict,
            PayloadTooLarge,
            UnsupportedMediaType,
            InternalError,
            NotImplemented,
            InsufficientStorage
        )
    )
)]
struct ApiDoc;

const DESCRIPTION: &str = "Manage the volumes, snapshots, storage containers (quota, reclaim \
    rate, data reduction) and hosts (iSCSI LUN masking, NBD TLS-PSK access) of a Lacuna storage \
    array and read its space figures. Host routes answer 501 on a server built without host \
    management (the daemon always has it). Every operation except GET /healthz needs \
    'Authorization: Bearer <token>', the token being in <data-dir>/api-token. All sizes are in \
    bytes.";

/// The document served at `GET /v1/openapi.json`.
pub fn document() -> Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT
        .get_or_init(|| {
            let mut value = serde_json::to_value(openapi()).expect("the document serialises");
            as_openapi_3_0(&mut value);
            value
        })
        .clone()
}

/// Every operation of the API (method, path template), `GET /healthz` included:
/// the routes the router serves, as the document lists them.
pub fn operations() -> Vec<(Method, String)> {
    let mut doc = openapi();
    let mut out = Vec::new();
    for (path, item) in doc.paths.paths.iter_mut() {
        for (method, _) in operations_mut(item) {
            out.push((method, path.clone()));
        }
    }
    out
}

/// The document as utoipa models it.
fn openapi() -> OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info = InfoBuilder::new()
        .title("Lacuna control API")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(DESCRIPTION))
        .build();
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(
            "bearerAuth",
            SecurityScheme::Http({
                let mut http = Http::new(HttpAuthScheme::Bearer);
                http.description = Some("The contents of <data-dir>/api-token".to_string());
                http
            }),
        );
    let mut open = crate::open_routes().into_openapi();
    for item in open.paths.paths.values_mut() {
        for (_, operation) in operations_mut(item) {
            operation.security = Some(Vec::new());
        }
    }
    let mut authenticated = crate::authenticated_routes().into_openapi();
    for item in authenticated.paths.paths.values_mut() {
        for (_, operation) in operations_mut(item) {
            add_error(operation, "401", Unauthorized::response().0);
        }
    }
    doc.merge(open);
    doc.merge(authenticated);
    for item in doc.paths.paths.values_mut() {
        for (_, operation) in operations_mut(item) {
            if operation.request_body.is_some() {
                add_error(operation, "400", BadRequest::response().0);
                add_error(operation, "413", PayloadTooLarge::response().0);
                add_error(operation, "415", UnsupportedMediaType::response().0);
            }
            if operation.parameters.as_ref().is_some_and(|p| !p.is_empty()) {
                add_error(operation, "400", BadRequest::response().0);
            }
        }
        declare_path_parameters_once(item);
    }
    doc
}

fn operations_mut(item: &mut PathItem) -> impl Iterator<Item = (Method, &mut Operation)> {
    [
        (Method::GET, &mut item.get),
        (Method::PUT, &mut item.put),
        (Method::POST, &mut item.post),
        (Method::DELETE, &mut item.delete),
        (Method::OPTIONS, &mut item.options),
        (Method::HEAD, &mut item.head),
        (Method::PATCH, &mut item.patch),
        (Method::TRACE, &mut item.trace),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.as_mut().map(|o| (method, o)))
}

fn add_error(operation: &mut Operation, status: &str, response: &str) {
    operation
        .responses
        .responses
        .insert(status.to_string(), Ref::from_response_name(response).into());
}

/// Moves the path parameters of a path's operations to the path item: they
/// belong to the path, whatever the method.
fn declare_path_parameters_once(item: &mut PathItem) {
    let mut declared = Vec::new();
    for (_, operation) in operations_mut(item) {
        let Some(parameters) = operation.parameters.as_mut() else {
            continue;
        };
        let (path, other): (Vec<_>, Vec<_>) = parameters
            .drain(..)
            .partition(|p| matches!(p, RefOr::T(p) if matches!(p.parameter_in, ParameterIn::Path)));
        for parameter in path {
            let name = |p: &RefOr<_>| match p {
                RefOr::T(utoipa::openapi::path::Parameter { name, .. }) => name.clone(),
                RefOr::Ref(r) => r.ref_location.clone(),
            };
            if !declared.iter().any(|d| name(d) == name(&parameter)) {
                declared.push(parameter);
            }
        }
        operation.parameters = (!other.is_empty()).then_some(other);
    }
    if !declared.is_empty() {
        item.parameters = Some(declared);
    }
}

/// Renders utoipa's model (OpenAPI 3.1) as the OpenAPI 3.0.3 this API has
/// always served: a `null` among a schema's types becomes `nullable`, a nullable
/// reference (`oneOf` a `null`) and a reference with a description become
/// `allOf` the reference (an `allOf` of one inline schema, that schema; of inline
/// objects, one object), a schema's `examples` its `example`. Doc comments are
/// wrapped in the source; their lines are joined (paragraphs kept).
fn as_openapi_3_0(value: &mut Value) {
    match value {
        Value::Object(map) => {
            nullable_one_of(map);
            map.values_mut().for_each(as_openapi_3_0);
            if map.get("openapi").is_some_and(Value::is_string) {
                map.insert("openapi".into(), "3.0.3".into());
            }
            if let Some(Value::Array(types)) = map.get("type") {
                let mut types: Vec<Value> =
                    types.iter().filter(|t| *t != "null").cloned().collect();
                if types.len() == 1 {
                    map.insert("type".into(), types.remove(0));
                    map.insert("nullable".into(), true.into());
                }
            }
            merge_inline_objects(map);
            // An `allOf` of one schema that is not a reference is that schema.
            if let Some(Value::Array(parts)) = map.get("allOf") {
                if let [Value::Object(part)] = parts.as_slice() {
                    if !part.contains_key("$ref") {
                        let part = part.clone();
                        map.remove("allOf");
                        for (key, value) in part {
                            map.entry(key).or_insert(value);
                        }
                    }
                }
            }
            if map.len() > 1 {
                if let Some(reference) = map.remove("$ref") {
                    map.insert("allOf".into(), json!([{ "$ref": reference }]));
                }
            }
            if let Some(Value::Array(examples)) = map.get("examples") {
                let first = examples.first().cloned();
                map.remove("examples");
                if let Some(example) = first {
                    map.insert("example".into(), example);
                }
            }
            for key in ["summary", "description"] {
                if let Some(Value::String(text)) = map.get_mut(key) {
                    *text = join_lines(text);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(as_openapi_3_0),
        _ => {}
    }
}

/// `oneOf` a schema and `null` becomes `allOf` the schema, `nullable`; what
/// describes a reference (utoipa puts it beside the `$ref`) describes the whole.
fn nullable_one_of(map: &mut serde_json::Map<String, Value>) {
    let null = json!({"type": "null"});
    let Some(Value::Array(alternatives)) = map.get("oneOf") else {
        return;
    };
    if alternatives.len() != 2 || !alternatives.contains(&null) {
        return;
    }
    let mut schema = alternatives.iter().find(|a| **a != null).cloned().unwrap();
    map.remove("oneOf");
    if let Some(reference) = schema.as_object_mut().and_then(|s| s.remove("$ref")) {
        for (key, value) in std::mem::take(schema.as_object_mut().unwrap()) {
            map.entry(key).or_insert(value);
        }
        schema = json!({ "$ref": reference });
    }
    map.insert("allOf".into(), json!([schema]));
    map.insert("nullable".into(), true.into());
}

/// An `allOf` of inline objects, as utoipa renders a struct with a flattened
/// field (the engine's `ContainerReclaim` and its counters), becomes one object
/// with their properties and required fields: the same values validate, and
/// the object lists every field it is sent with. The `allOf`'s own description
/// stays; the parts' (the flattened type's) go. Parts that are references, are
/// not plain objects, or name a property twice are left as they are.
fn merge_inline_objects(map: &mut serde_json::Map<String, Value>) {
    let Some(Value::Array(parts)) = map.get("allOf") else {
        return;
    };
    let plain_object = |part: &Value| {
        part.as_object().is_some_and(|part| {
            part.get("type") == Some(&json!("object"))
                && part.keys().all(|k| {
                    ["type", "properties", "required", "description"].contains(&k.as_str())
                })
        })
    };
    if parts.len() < 2 || !parts.iter().all(plain_object) {
        return;
    }
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for part in parts {
        for (name, schema) in part["properties"].as_object().into_iter().flatten() {
            if properties.insert(name.clone(), schema.clone()).is_some() {
                return;
            }
        }
        required.extend(part["required"].as_array().into_iter().flatten().cloned());
    }
    map.remove("allOf");
    map.insert("type".into(), "object".into());
    map.insert("properties".into(), properties.into());
    if !required.is_empty() {
        map.insert("required".into(), required.into());
    }
}

fn join_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}
