//! `lacuna vvol …`: the vVol service from the command line, over the API
//! (tables for people, `--json` for scripts). Several vVols snapshot together
//! as one batch (prepare each, then one commit), as a host does.

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use lacuna_vvol::{
    AllocatedBitmap, Event, ItemResult, PreparedSnapshot, SnapshotCommit, TaskInfo, VvolInfo,
    VvolSpace,
};
use serde_json::{json, Value};

use crate::cli::print;
use crate::client::{path_segment, Client, Method};
use crate::table::{format_unix_utc, key_values, table, Align};
use lacuna_api::size::{format_size, parse_size};

#[derive(Clone, Copy, ValueEnum)]
pub enum Kind {
    Config,
    Data,
    Swap,
    Memory,
    Other,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Config => "Config",
            Kind::Data => "Data",
            Kind::Swap => "Swap",
            Kind::Memory => "Memory",
            Kind::Other => "Other",
        }
    }
}

#[derive(Subcommand)]
pub enum VvolCommand {
    /// Create a vVol: a size in whole MiB (e.g. 10G), a type, metadata pairs.
    Create {
        #[arg(long = "type", value_enum, ignore_case = true)]
        kind: Kind,
        #[arg(long, value_parser = parse_size)]
        size: u64,
        #[arg(long, default_value = "default")]
        container: String,
        /// thin, zeroedthick or eagerzeroedthick.
        #[arg(long, default_value = "thin")]
        provisioning: String,
        /// KEY=VALUE; repeat for several.
        #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_pair)]
        metadata: Vec<(String, String)>,
    },
    /// List vVols matching every filter given (a query, then their records).
    List {
        #[arg(long)]
        container: Option<String>,
        #[arg(long = "type", value_enum, ignore_case = true)]
        kind: Option<Kind>,
        #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_pair)]
        metadata: Vec<(String, String)>,
    },
    /// Show one vVol: record, metadata, bindings and space.
    Show { id: String },
    /// Delete a vVol and its snapshot vVols (refused while bound).
    Delete { id: String },
    /// Set metadata pairs (KEY= removes KEY).
    Meta {
        id: String,
        #[arg(value_name = "KEY=VALUE", value_parser = parse_pair, required = true)]
        pairs: Vec<(String, String)>,
    },
    /// Grow a vVol.
    Resize {
        id: String,
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Clone a vVol or snapshot vVol (instant); --fast keeps its container.
    Clone {
        id: String,
        #[arg(long, conflicts_with = "fast")]
        container: Option<String>,
        #[arg(long)]
        fast: bool,
        #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_pair)]
        metadata: Vec<(String, String)>,
    },
    /// Revert a vVol to one of its snapshot vVols.
    Revert {
        id: String,
        #[arg(long = "to", value_name = "SNAPSHOT")]
        snapshot: String,
    },
    /// Snapshot vVols at one instant (one batch): prints the commit window.
    Snapshot {
        #[arg(required = true)]
        ids: Vec<String>,
        /// Writable snapshot vVols (clones taken at the same instant).
        #[arg(long)]
        writable: bool,
    },
    /// Bind vVols to a host (through its protocol endpoint).
    Bind {
        host: String,
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Unbind vVols from a host, or --all of them.
    Unbind {
        host: String,
        #[arg(required_unless_present = "all")]
        ids: Vec<String>,
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
    /// Which chunks of a range hold data, and where data lies next.
    Bitmap {
        id: String,
        #[arg(long, default_value = "0", value_parser = parse_size)]
        offset: u64,
        #[arg(long, value_parser = parse_size)]
        length: u64,
        #[arg(long, default_value = "1M", value_parser = parse_size)]
        chunk: u64,
    },
    /// Configuration and binding events after an id.
    Events {
        #[arg(long, default_value_t = 0)]
        since: u64,
    },
    /// Tasks after an id (the operations VASA runs as tasks, with their outcome).
    Tasks {
        #[arg(long, default_value_t = 0)]
        since: u64,
    },
    /// The limits the array advertises to hosts (batch size, requests in flight…).
    Limits,
}

fn parse_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{text}' is not KEY=VALUE"))
}

fn mib(bytes: u64) -> anyhow::Result<u64> {
    anyhow::ensure!(
        bytes > 0 && bytes.is_multiple_of(1 << 20),
        "a vVol size is a whole number of MiB (e.g. 512M, 10G), not {bytes} bytes"
    );
    Ok(bytes >> 20)
}

fn vvol_path(id: &str) -> String {
    format!("/v1/vvols/{}", path_segment(id))
}

fn pairs_json(pairs: Vec<(String, String)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

pub fn run(client: &Client, command: VvolCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        VvolCommand::Create {
            kind,
            size,
            container,
            provisioning,
            metadata,
        } => {
            let body = json!({
                "container": container, "vvol_type": kind.name(), "size_mib": mib(size)?,
                "provisioning": provisioning, "metadata": pairs_json(metadata),
            });
            let answer = client.call(Method::Post, "/v1/vvols", Some(&body))?;
            print(as_json, &answer, |v: VvolInfo| {
                format!(
                    "created {} vVol {} ({})",
                    v.rec.vvol_type.as_str(),
                    v.rec.id,
                    format_size(v.size_bytes)
                )
            })
        }
        VvolCommand::List {
            container,
            kind,
            metadata,
        } => {
            let query = json!({
                "container": container, "vvol_type": kind.map(Kind::name), "metadata": pairs_json(metadata),
            });
            let ids = client.call(Method::Post, "/v1/vvols/query", Some(&query))?;
            let ids: Vec<String> =
                serde_json::from_value(ids["ids"].clone()).context("decoding the ids")?;
            let mut infos = Vec::new();
            for batch in ids.chunks(lacuna_vvol::MAX_BATCH) {
                let answer = client.call(
                    Method::Post,
                    "/v1/vvols/info",
                    Some(&json!({ "ids": batch })),
                )?;
                let items: Vec<ItemResult<VvolInfo>> = serde_json::from_value(answer)?;
                // A vVol deleted between the query and the info is left out.
                infos.extend(items.into_iter().filter_map(|i| i.result));
            }
            print(
                as_json,
                &serde_json::to_value(&infos)?,
                |infos: Vec<VvolInfo>| vvol_table(&infos),
            )
        }
        VvolCommand::Show { id } => {
            let info = client.call(Method::Get, &vvol_path(&id), None)?;
            let space = client.call(Method::Get, &format!("{}/space", vvol_path(&id)), None)?;
            if as_json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "vvol": info, "space": space }))?
                );
                return Ok(());
            }
            let info: VvolInfo = serde_json::from_value(info)?;
            let space: VvolSpace = serde_json::from_value(space)?;
            println!("{}", vvol_details(&info, &space));
            Ok(())
        }
        VvolCommand::Delete { id } => {
            client.call(Method::Delete, &vvol_path(&id), None)?;
            print(as_json, &json!({ "deleted": id }), |_: Value| {
                format!("deleted vVol {id}")
            })
        }
        VvolCommand::Meta { id, pairs } => {
            let body = json!({ "metadata": pairs_json(pairs) });
            let answer = client.call(
                Method::Patch,
                &format!("{}/metadata", vvol_path(&id)),
                Some(&body),
            )?;
            print(as_json, &answer, |v: VvolInfo| {
                format!("vVol {}: {} metadata pairs", v.rec.id, v.rec.metadata.len())
            })
        }
        VvolCommand::Resize { id, size } => {
            let body = json!({ "size_mib": mib(size)? });
            let answer = client.call(
                Method::Post,
                &format!("{}/resize", vvol_path(&id)),
                Some(&body),
            )?;
            print(as_json, &answer, |v: VvolInfo| {
                format!("vVol {} is {}", v.rec.id, format_size(v.size_bytes))
            })
        }
        VvolCommand::Clone {
            id,
            container,
            fast,
            metadata,
        } => {
            let body =
                json!({ "container": container, "fast": fast, "metadata": pairs_json(metadata) });
            let answer = client.call(
                Method::Post,
                &format!("{}/clone", vvol_path(&id)),
                Some(&body),
            )?;
            print(as_json, &answer, |v: VvolInfo| {
                format!("cloned {id} as {} in {}", v.rec.id, v.rec.container)
            })
        }
        VvolCommand::Revert { id, snapshot } => {
            let body = json!({ "snapshot": snapshot });
            let answer = client.call(
                Method::Post,
                &format!("{}/revert", vvol_path(&id)),
                Some(&body),
            )?;
            print(as_json, &answer, |v: VvolInfo| {
                format!("reverted {} to {snapshot}", v.rec.id)
            })
        }
        VvolCommand::Snapshot { ids, writable } => snapshot(client, &ids, writable, as_json),
        VvolCommand::Bind { host, ids } => {
            let answer = client.call(
                Method::Post,
                "/v1/vvols/bind",
                Some(&json!({ "host": host, "ids": ids })),
            )?;
            print_items(as_json, &answer, |b| {
                format!(
                    "LUN {} second-level 0x{:x}{}",
                    b["protocol_endpoint"]["lun"],
                    b["secondary_id"].as_u64().unwrap_or(0),
                    if b["read_only"] == true {
                        " (read-only)"
                    } else {
                        ""
                    }
                )
            })
        }
        VvolCommand::Unbind { host, ids, all } => {
            if all {
                let answer = client.call(
                    Method::Post,
                    "/v1/vvols/unbind-all",
                    Some(&json!({ "host": host })),
                )?;
                return print(as_json, &answer, |n: Value| {
                    format!("unbound {} vVols from {host}", n["unbound"])
                });
            }
            let answer = client.call(
                Method::Post,
                "/v1/vvols/unbind",
                Some(&json!({ "host": host, "ids": ids })),
            )?;
            print_items(as_json, &answer, |_| "unbound".to_string())
        }
        VvolCommand::Bitmap {
            id,
            offset,
            length,
            chunk,
        } => {
            let body =
                json!({ "offset_bytes": offset, "length_bytes": length, "chunk_bytes": chunk });
            let answer = client.call(
                Method::Post,
                &format!("{}/allocated-bitmap", vvol_path(&id)),
                Some(&body),
            )?;
            print(as_json, &answer, |b: AllocatedBitmap| bitmap_text(&b))
        }
        VvolCommand::Tasks { since } => {
            let answer =
                client.call(Method::Get, &format!("/v1/vvol-tasks?since={since}"), None)?;
            print(as_json, &answer, |tasks: Vec<TaskInfo>| tasks_table(&tasks))
        }
        VvolCommand::Limits => {
            let answer = client.call(Method::Get, "/v1/vvol-provider", None)?;
            print(as_json, &answer, |limits: Value| {
                let pairs: Vec<(&str, String)> = limits
                    .as_object()
                    .map(|o| o.iter().map(|(k, v)| (k.as_str(), v.to_string())).collect())
                    .unwrap_or_default();
                key_values(&pairs)
            })
        }
        VvolCommand::Events { since } => {
            let answer =
                client.call(Method::Get, &format!("/v1/vvol-events?since={since}"), None)?;
            print(as_json, &answer, |events: Vec<Event>| events_table(&events))
        }
    }
}

/// Prepares each vVol, then commits them in one batch.
fn snapshot(client: &Client, ids: &[String], writable: bool, as_json: bool) -> anyhow::Result<()> {
    let kind = if writable { "ReadWrite" } else { "ReadOnly" };
    let mut prepared = Vec::new();
    for id in ids {
        let path = format!("{}/prepare-snapshot", vvol_path(id));
        let answer = client.call(Method::Post, &path, Some(&json!({ "kind": kind })))?;
        let snapshot: PreparedSnapshot = serde_json::from_value(answer)?;
        prepared.push(json!({ "snapshot_id": snapshot.snapshot_id }));
    }
    let answer = client.call(
        Method::Post,
        "/v1/vvols/snapshot",
        Some(&json!({ "snapshots": prepared })),
    )?;
    let commit: SnapshotCommit = serde_json::from_value(answer.clone())?;
    if let Some(fault) = commit.results.iter().find_map(|r| r.fault.as_ref()) {
        anyhow::bail!("no snapshot taken: {}", fault.message);
    }
    print(as_json, &answer, |c: SnapshotCommit| {
        let mut text: Vec<String> = c
            .results
            .iter()
            .zip(ids)
            .map(|(r, base)| format!("{base}: snapshot {}", r.id))
            .collect();
        text.push(format!(
            "commit window {} µs (writes held)",
            c.commit_window_us
        ));
        text.join("\n")
    })
}

fn print_items(as_json: bool, answer: &Value, ok: impl Fn(&Value) -> String) -> anyhow::Result<()> {
    print(as_json, answer, |items: Vec<Value>| {
        items
            .iter()
            .map(|i| match i.get("fault") {
                Some(f) => format!(
                    "{}: {} ({})",
                    i["id"].as_str().unwrap_or("?"),
                    f["message"].as_str().unwrap_or(""),
                    f["kind"].as_str().unwrap_or("")
                ),
                None => format!("{}: {}", i["id"].as_str().unwrap_or("?"), ok(&i["result"])),
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

fn vvol_table(infos: &[VvolInfo]) -> String {
    if infos.is_empty() {
        return "no vVols (create one with 'lacuna vvol create --type Data --size 10G')"
            .to_string();
    }
    let rows: Vec<Vec<String>> = infos
        .iter()
        .map(|v| {
            vec![
                v.rec.id.to_string(),
                v.rec.vvol_type.as_str().to_string(),
                format_size(v.size_bytes),
                v.rec.container.clone(),
                v.rec
                    .metadata
                    .get("VMW_VVolName")
                    .cloned()
                    .unwrap_or_else(|| "-".into()),
                if v.bound_hosts.is_empty() {
                    "-".into()
                } else {
                    v.bound_hosts.join(",")
                },
            ]
        })
        .collect();
    table(
        &[
            ("ID", Align::Left),
            ("TYPE", Align::Left),
            ("SIZE", Align::Right),
            ("CONTAINER", Align::Left),
            ("NAME", Align::Left),
            ("BOUND", Align::Left),
        ],
        &rows,
    )
}

fn vvol_details(v: &VvolInfo, space: &VvolSpace) -> String {
    let optional = |bytes: Option<u64>| bytes.map_or("-".to_string(), format_size);
    let mut pairs = vec![
        ("id", v.rec.id.to_string()),
        ("type", v.rec.vvol_type.as_str().to_string()),
        ("size", format_size(v.size_bytes)),
        ("written", optional(space.written_bytes)),
        ("container", v.rec.container.clone()),
        ("provisioning", v.rec.provisioning.as_str().to_string()),
        ("created", format_unix_utc(v.rec.created_unix_s)),
        (
            "bound to",
            if v.bound_hosts.is_empty() {
                "-".into()
            } else {
                v.bound_hosts.join(", ")
            },
        ),
    ];
    if let Some(parent) = &v.rec.parent {
        pairs.push(("parent", parent.to_string()));
    }
    if let Some(snapshot) = &v.rec.snapshot {
        pairs.push((
            "snapshot of",
            format!("{} ({:?})", snapshot.base, snapshot.kind),
        ));
    }
    let mut text = key_values(&pairs);
    for (k, value) in &v.rec.metadata {
        text.push_str(&format!("\n  {k} = {value}"));
    }
    text
}

fn bitmap_text(b: &AllocatedBitmap) -> String {
    let chunks = b.length_bytes.div_ceil(b.chunk_bytes);
    let set = (0..chunks)
        .filter(|&i| b.bitmap[(i / 8) as usize] & (0x80 >> (i % 8)) != 0)
        .count();
    let next = b
        .next_allocated_offset_bytes
        .map_or("none".to_string(), |o| format!("{o} ({})", format_size(o)));
    format!(
        "{set} of {chunks} chunks of {} hold data; next data after the range: {next}",
        format_size(b.chunk_bytes)
    )
}

fn tasks_table(tasks: &[TaskInfo]) -> String {
    if tasks.is_empty() {
        return "no tasks".to_string();
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                format_unix_utc(t.started_unix_s),
                t.operation.clone(),
                format!("{:?}", t.state),
                t.result
                    .clone()
                    .or_else(|| t.fault.as_ref().map(|f| f.message.clone()))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            ("ID", Align::Right),
            ("STARTED", Align::Left),
            ("OPERATION", Align::Left),
            ("STATE", Align::Left),
            ("RESULT", Align::Left),
        ],
        &rows,
    )
}

fn events_table(events: &[Event]) -> String {
    if events.is_empty() {
        return "no events".to_string();
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                format_unix_utc(e.unix_s),
                format!("{:?}", e.kind),
                e.object.clone(),
                e.host.clone().unwrap_or_else(|| "-".into()),
                e.what.clone(),
            ]
        })
        .collect();
    table(
        &[
            ("ID", Align::Right),
            ("TIME", Align::Left),
            ("KIND", Align::Left),
            ("VVOL", Align::Left),
            ("HOST", Align::Left),
            ("WHAT", Align::Left),
        ],
        &rows,
    )
}
