//! Types that only carry parts of the OpenAPI document ([`crate::openapi`]) and
//! belong to the API alone: the shared error responses and the path
//! parameters. Their doc comments are the document's descriptions. The
//! schemas of what the engine answers are derived on the engine's own types
//! (its `openapi` feature), from their doc comments.
//!
//! None of these types is ever built: they only carry parts of the document.

#![allow(dead_code)]

use utoipa::{IntoParams, ToResponse};

use crate::ErrorBody;

/// Invalid argument (name, size, range, state) or malformed body or query
#[derive(ToResponse)]
pub struct BadRequest(ErrorBody);

/// Missing or wrong bearer token
#[derive(ToResponse)]
pub struct Unauthorized(ErrorBody);

/// No such volume, snapshot, container or host
#[derive(ToResponse)]
pub struct NotFound(ErrorBody);

/// A volume, snapshot, container or host with that name exists
#[derive(ToResponse)]
pub struct Conflict(ErrorBody);

/// Request body over 64 KiB
#[derive(ToResponse)]
pub struct PayloadTooLarge(ErrorBody);

/// Body sent without Content-Type: application/json
#[derive(ToResponse)]
pub struct UnsupportedMediaType(ErrorBody);

/// I/O or metadata failure in the array or the host registry
#[derive(ToResponse)]
pub struct InternalError(ErrorBody);

/// Host management is not available on this server
#[derive(ToResponse)]
pub struct NotImplemented(ErrorBody);

/// The array is out of space, a container's quota is reached, or a thick reservation cannot be
/// honoured
#[derive(ToResponse)]
pub struct InsufficientStorage(ErrorBody);

/// The volume in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct VolumePath {
    /// Volume name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.'). It is also the NBD
    /// export name.
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")]
    name: String,
}

/// The snapshot in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SnapshotPath {
    /// Snapshot as VOL@NAME (the '@' may be sent as is or as %40). It is also the read-only NBD
    /// export name.
    #[param(pattern = "^[^@/]+@[^@/]+$")]
    snapshot: String,
}

/// The host in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct HostPath {
    /// Host name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")]
    host: String,
}

/// The container in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ContainerPath {
    /// Container name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")]
    container: String,
}
