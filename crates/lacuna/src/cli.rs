//! The CLI's commands: each is one API call, printed for a person (tables and
//! `key: value` lines) or, with `--json`, as the API's JSON unchanged.

use anyhow::Context;
use clap::Subcommand;
use lacuna_api::{CreateVolumeRequest, ResizeVolumeRequest};
use lacuna_engine::{SpaceReport, VolumeInfo};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::client::{path_segment, Client, Method};
use crate::size::{format_size, parse_size};
use crate::table::{space_details, volume_details, volume_table};

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Create a thin-provisioned volume (exported over NBD under its name).
    Create {
        name: String,
        /// Size, e.g. 100G, 1.5T, 512M (binary units); a multiple of 512 bytes.
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// List volumes.
    List,
    /// Show one volume's size and space figures.
    Show { name: String },
    /// Grow or shrink a volume (shrinking discards data beyond the new end).
    Resize {
        name: String,
        /// New size, e.g. 200G.
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Delete a volume (its space comes back in the background).
    Delete { name: String },
}

#[derive(Subcommand)]
pub enum ArrayCommand {
    /// Capacity, physical use, stale space awaiting reclaim, free space, reduction.
    Space,
}

pub fn run_volume(client: &Client, command: VolumeCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        VolumeCommand::Create { name, size } => {
            let body = serde_json::to_value(CreateVolumeRequest {
                name,
                size_bytes: Some(size),
                ..CreateVolumeRequest::default()
            })?;
            let answer = client.call(Method::Post, "/v1/volumes", Some(&body))?;
            print(as_json, &answer, |v: VolumeInfo| {
                format!("created volume {} ({})", v.name, format_size(v.size_bytes))
            })
        }
        VolumeCommand::List => {
            let answer = client.call(Method::Get, "/v1/volumes", None)?;
            print(as_json, &answer, |volumes: Vec<VolumeInfo>| {
                volume_table(&volumes)
            })
        }
        VolumeCommand::Show { name } => {
            let path = format!("/v1/volumes/{}", path_segment(&name));
            let answer = client.call(Method::Get, &path, None)?;
            print(as_json, &answer, |v: VolumeInfo| volume_details(&v))
        }
        VolumeCommand::Resize { name, size } => {
            let path = format!("/v1/volumes/{}", path_segment(&name));
            let body = serde_json::to_value(ResizeVolumeRequest { size_bytes: size })?;
            let answer = client.call(Method::Patch, &path, Some(&body))?;
            print(as_json, &answer, |v: VolumeInfo| {
                format!("resized volume {} to {}", v.name, format_size(v.size_bytes))
            })
        }
        VolumeCommand::Delete { name } => {
            let path = format!("/v1/volumes/{}", path_segment(&name));
            client.call(Method::Delete, &path, None)?;
            // The API answers 204 with no body; give --json users something to parse.
            print(as_json, &json!({ "deleted": name }), |_: Value| {
                format!("deleted volume {name}")
            })
        }
    }
}

pub fn run_array(client: &Client, command: ArrayCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        ArrayCommand::Space => {
            let answer = client.call(Method::Get, "/v1/array/space", None)?;
            print(as_json, &answer, |s: SpaceReport| space_details(&s))
        }
    }
}

/// Prints the API's JSON as is, or decodes it into the type the human rendering
/// needs: a daemon speaking a different API version then fails loudly instead of
/// printing zeroes for fields it no longer sends.
fn print<T: DeserializeOwned>(
    as_json: bool,
    answer: &Value,
    human: impl FnOnce(T) -> String,
) -> anyhow::Result<()> {
    if as_json {
        println!("{}", serde_json::to_string_pretty(answer)?);
    } else {
        let decoded = T::deserialize(answer).context(
            "unexpected answer from the API (is the daemon the same version as this CLI?)",
        )?;
        println!("{}", human(decoded));
    }
    Ok(())
}
