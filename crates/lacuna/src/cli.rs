//! The CLI's commands: each is one API call (two where the answer needs a second
//! look, e.g. the recovery deadline after a delete), printed for a person (tables
//! and `key: value` lines) or, with `--json`, as the API's JSON unchanged.

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use lacuna_api::{
    ConnectVolumeRequest, CopyRangeRequest, CreateContainerRequest, CreateHostRequest,
    CreateSnapshotsRequest, CreateVolumeRequest, DisconnectVolumeRequest, HostInfo, LunInfo,
    ResizeVolumeRequest, RestoreVolumeRequest, SetNbdPskRequest, UpdateContainerRequest,
};
use lacuna_engine::{
    Compression, ContainerInfo, CopyReport, GroupSnapshot, Provisioning, ReclaimPolicy,
    SnapshotInfo, SpaceReport, VolumeInfo,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::client::{path_segment, Client, Method};
use crate::table::{
    container_details, container_reclaim_details, container_table, format_unix_utc, host_details,
    host_table, snapshot_details, snapshot_table, space_details, volume_details, volume_table,
};
use lacuna_api::size::{format_size, parse_size};

/// Environment variables the CHAP secrets may come from instead of the command
/// line (where they would land in shell history and `ps`).
pub const CHAP_SECRET_ENV: &str = "LACUNA_CHAP_SECRET";
pub const MUTUAL_CHAP_SECRET_ENV: &str = "LACUNA_MUTUAL_CHAP_SECRET";

/// A volume's provisioning type, as typed on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VolumeType {
    /// Reserves nothing; takes space as it is written.
    Thin,
    /// Reserves the full size, so writes to the volume never lack space.
    Zeroedthick,
    /// Zeroedthick, created already zeroed (as fast as thin: metadata only).
    Eagerzeroedthick,
}

impl From<VolumeType> for Provisioning {
    fn from(t: VolumeType) -> Provisioning {
        match t {
            VolumeType::Thin => Provisioning::Thin,
            VolumeType::Zeroedthick => Provisioning::ZeroedThick,
            VolumeType::Eagerzeroedthick => Provisioning::EagerZeroedThick,
        }
    }
}

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Create a volume (exported over NBD under its name).
    Create {
        /// Volume name (also its NBD export name).
        name: String,
        /// Size, e.g. 100G, 1.5T, 512M (binary units); a multiple of 512 bytes.
        #[arg(
            value_parser = parse_size,
            required_unless_present = "size_flag",
            conflicts_with = "size_flag"
        )]
        size: Option<u64>,
        /// The size as an option (same as the SIZE argument).
        #[arg(long = "size", id = "size_flag", value_name = "SIZE", value_parser = parse_size)]
        size_flag: Option<u64>,
        /// Provisioning type.
        #[arg(long = "type", value_enum, default_value_t = VolumeType::Thin)]
        volume_type: VolumeType,
        /// The storage container the volume joins.
        #[arg(long, default_value = "default")]
        container: String,
    },
    /// List volumes (live ones, or with --destroyed those awaiting eradication).
    List {
        /// List destroyed volumes, with when each is eradicated.
        #[arg(long)]
        destroyed: bool,
    },
    /// Show one volume's size, type, snapshots and space figures.
    Show { name: String },
    /// Grow or shrink a volume (shrinking discards data beyond the new end).
    Resize {
        name: String,
        /// New size, e.g. 200G.
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Destroy a volume: hosts lose it at once, it stays recoverable (with its
    /// snapshots) for the array's retention period, then its space is reclaimed.
    Delete { name: String },
    /// Bring a destroyed volume back, with its snapshots.
    Recover { name: String },
    /// Eradicate a destroyed volume now (delete it first).
    Eradicate { name: String },
    /// Create NEW as an instant, writable clone of SOURCE (a volume, or VOL@SNAP).
    Clone {
        /// A volume (cloned as it is now) or a snapshot, VOL@SNAP.
        source: String,
        /// Name of the new volume.
        new: String,
        /// Provisioning type of the clone.
        #[arg(long = "type", value_enum, default_value_t = VolumeType::Thin)]
        volume_type: VolumeType,
        /// The storage container the clone joins (default: the source's).
        #[arg(long)]
        container: Option<String>,
    },
    /// Revert a volume to one of its snapshots (metadata only).
    Restore {
        volume: String,
        /// The snapshot: its name, or VOL@NAME.
        #[arg(long)]
        from_snapshot: String,
    },
    /// Point-in-time copy of a byte range from SRC to DST (the same volume
    /// allowed); metadata only where 4 KiB aligned.
    Copy {
        /// Source volume.
        src: String,
        /// Destination volume.
        dst: String,
        /// Where the range starts in SRC, e.g. 0, 64K, 1G.
        #[arg(long, value_parser = parse_size)]
        offset: u64,
        /// How much to copy, e.g. 1M.
        #[arg(long, value_parser = parse_size)]
        length: u64,
        /// Where the copy lands in DST.
        #[arg(long, value_parser = parse_size)]
        to: u64,
    },
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot one volume, or several at one instant (a consistency group).
    Create {
        /// Volumes to snapshot together.
        #[arg(required = true, value_name = "VOL")]
        volumes: Vec<String>,
        /// Snapshot name (default: the group's name, else snap-<unix time>).
        #[arg(long)]
        name: Option<String>,
        /// Consistency group name, recorded with each snapshot.
        #[arg(long)]
        group: Option<String>,
    },
    /// List snapshots, of one volume or all (with --destroyed, the destroyed ones).
    List {
        /// Only this volume's snapshots.
        volume: Option<String>,
        /// List destroyed snapshots (and those of destroyed volumes).
        #[arg(long)]
        destroyed: bool,
    },
    /// Show one snapshot (VOL@SNAP).
    Show { snapshot: String },
    /// Destroy a snapshot (VOL@SNAP): recoverable for the array's retention period.
    Delete { snapshot: String },
    /// Bring a destroyed snapshot back.
    Recover { snapshot: String },
    /// Eradicate a destroyed snapshot now (delete it first).
    Eradicate { snapshot: String },
}

#[derive(Subcommand)]
pub enum HostCommand {
    /// Create a host: the initiators (IQNs) that share its LUNs, optionally with
    /// CHAP, and/or an NBD TLS pre-shared key (its PSK identity is the host
    /// name). A CHAP secret (12 to 255 characters) is best given in the
    /// environment, LACUNA_CHAP_SECRET and LACUNA_MUTUAL_CHAP_SECRET, rather than
    /// on the command line; the flag wins when both are given. Secrets and keys
    /// are never shown again.
    Create {
        /// Host name (1 to 64 of A-Z a-z 0-9 . _ -); also its NBD PSK identity.
        name: String,
        /// iSCSI initiator name (iqn.…, eui.… or naa.…); repeat for several.
        #[arg(long = "iqn", value_name = "IQN", required_unless_present_any = ["nbd_psk_key", "nbd_psk_file"])]
        iqns: Vec<String>,
        #[command(flatten)]
        nbd_psk: NbdPskArgs,
        /// One-way CHAP: the user the initiator authenticates as.
        #[arg(long)]
        chap_user: Option<String>,
        /// One-way CHAP secret (default: $LACUNA_CHAP_SECRET when --chap-user is given).
        #[arg(long, requires = "chap_user", value_name = "SECRET")]
        chap_secret: Option<String>,
        /// Mutual CHAP: the user the array authenticates to the initiator as.
        #[arg(long, requires = "chap_user")]
        mutual_chap_user: Option<String>,
        /// Mutual CHAP secret (default: $LACUNA_MUTUAL_CHAP_SECRET when
        /// --mutual-chap-user is given).
        #[arg(long, requires = "mutual_chap_user", value_name = "SECRET")]
        mutual_chap_secret: Option<String>,
    },
    /// List hosts with their initiators, CHAP and LUN count.
    List,
    /// Show one host: initiators, CHAP users and every LUN.
    Show { name: String },
    /// Delete a host: its initiators lose every LUN at once (volumes are kept).
    Delete { name: String },
    /// Connect a volume (or a snapshot VOL@SNAP, read-only) to a host.
    Connect {
        host: String,
        /// VOL, or VOL@SNAP for a read-only snapshot LUN.
        volume: String,
        /// The LUN (0 to 16383; default: the lowest free one).
        #[arg(long)]
        lun: Option<u64>,
        /// Logical block size presented: 512 (512e) or 4096 (4Kn).
        #[arg(long, default_value_t = 512, value_parser = parse_block_size)]
        block_size: u32,
        /// Present the LUN as removable medium.
        #[arg(long)]
        removable: bool,
    },
    /// Take a volume (or snapshot) away from a host.
    Disconnect { host: String, volume: String },
    /// Give a host the array's vVol protocol endpoint at a LUN (the lowest free
    /// one unless --lun), or move it; --remove takes it away. vVols bound to
    /// the host are reached through it.
    ProtocolEndpoint {
        host: String,
        /// The LUN (0 to 16383).
        #[arg(long, conflicts_with = "remove")]
        lun: Option<u64>,
        #[arg(long)]
        remove: bool,
    },
    /// Set or remove a host's NBD TLS pre-shared key (open NBD connections keep
    /// running).
    Set {
        name: String,
        #[command(flatten)]
        nbd_psk: NbdPskArgs,
        /// Remove the NBD key.
        #[arg(long, conflicts_with_all = ["nbd_psk_key", "nbd_psk_file"])]
        no_nbd_psk: bool,
    },
}

/// Where a host's NBD key comes from.
#[derive(clap::Args)]
pub struct NbdPskArgs {
    /// NBD TLS pre-shared key in hex, 16 to 64 bytes (e.g. `openssl rand -hex 32`).
    #[arg(long, value_name = "HEX", conflicts_with = "nbd_psk_file")]
    nbd_psk_key: Option<String>,
    /// Read the key from a psktool-format file (lines `identity:hex`): the line
    /// whose identity is the host name. Keeps the key off the command line.
    #[arg(long, value_name = "FILE")]
    nbd_psk_file: Option<std::path::PathBuf>,
}

impl NbdPskArgs {
    /// The key in hex, if one was given.
    fn key(self, host: &str) -> anyhow::Result<Option<String>> {
        if let Some(key) = self.nbd_psk_key {
            return Ok(Some(key));
        }
        let Some(path) = self.nbd_psk_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let key = text
            .lines()
            .filter_map(|line| line.trim().split_once(':'))
            .find(|(identity, _)| *identity == host)
            .map(|(_, key)| key.trim().to_string());
        match key {
            Some(key) => Ok(Some(key)),
            None => anyhow::bail!("{} has no line for identity '{host}'", path.display()),
        }
    }
}

fn parse_block_size(text: &str) -> Result<u32, String> {
    match text {
        "512" => Ok(512),
        "4096" | "4k" | "4K" => Ok(4096),
        _ => Err("must be 512 or 4096".to_string()),
    }
}

/// A container's policies as options: shared by `create` and `set`.
#[derive(clap::Args, Debug, Default)]
pub struct ContainerPolicyArgs {
    /// Most space its volumes may hold (written data plus thick reservations),
    /// e.g. 500G; `none` for no quota. Writes past it fail with ENOSPC.
    #[arg(long, value_name = "SIZE|none", value_parser = parse_quota)]
    quota: Option<Quota>,
    /// How fast dead space is reclaimed: off, low (25 MB/s), unlimited, or a
    /// rate such as 200MB/s or 2GB/s (decimal units).
    #[arg(long, value_name = "off|low|unlimited|<N>MB/s", value_parser = parse_reclaim)]
    reclaim: Option<ReclaimPolicy>,
    /// Reclaim allowance spent before the rate applies, e.g. 256M.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    reclaim_burst: Option<u64>,
    /// Codec of new data.
    #[arg(long, value_name = "lz4|zstd|off", value_parser = parse_compression)]
    compression: Option<Compression>,
    /// Deduplicate new data.
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    dedup: Option<bool>,
}

/// `--quota SIZE` or `--quota none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quota {
    None,
    Bytes(u64),
}

fn parse_quota(text: &str) -> Result<Quota, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(Quota::None);
    }
    match parse_size(text)? {
        0 => Err("a quota of 0 would refuse every write: use 'none' to remove it".to_string()),
        bytes => Ok(Quota::Bytes(bytes)),
    }
}

fn parse_reclaim(text: &str) -> Result<ReclaimPolicy, String> {
    text.parse()
}

fn parse_compression(text: &str) -> Result<Compression, String> {
    text.parse()
}

fn parse_on_off(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(format!("invalid value '{text}': use on or off")),
    }
}

#[derive(Subcommand)]
pub enum ContainerCommand {
    /// Create a storage container: the quota, reclaim rate and data reduction
    /// its volumes share (volumes join with `volume create --container`).
    /// Defaults: no quota, reclaim unlimited (256 MiB burst), lz4, dedup on.
    Create {
        /// Container name (1 to 64 of A-Z a-z 0-9 . _ -).
        name: String,
        #[command(flatten)]
        policy: ContainerPolicyArgs,
    },
    /// List containers with their volumes, usage, quota, policies and backlog.
    List,
    /// Show a container's policies and usage (with --reclaim: its reclaim
    /// counters, current rate, backlog and time to empty).
    Show {
        name: String,
        /// Show the reclaim counters instead.
        #[arg(long)]
        reclaim: bool,
    },
    /// Change a container's policies (the options of create; `--quota none`
    /// removes the quota). A new reclaim policy applies at once.
    Set {
        name: String,
        #[command(flatten)]
        policy: ContainerPolicyArgs,
    },
    /// Work a container's reclaim backlog off now, whatever its policy.
    Reclaim {
        name: String,
        /// Required: reclaim now (the backlog otherwise goes at the policy's rate).
        #[arg(long, required = true)]
        now: bool,
        /// Wait until the backlog is empty, showing progress.
        #[arg(long)]
        wait: bool,
    },
    /// Delete an empty container (not `default`).
    Delete { name: String },
}

#[derive(Subcommand)]
pub enum ArrayCommand {
    /// Capacity, physical use (volume-unique, snapshot and shared bytes), stale
    /// space, reservations, free space, reduction and the soft threshold.
    Space,
    /// The figures over time (the daemon samples every 5 s, keeps an hour of
    /// those and a day of 1 min samples): IOPS, bandwidth, p99 latency, space,
    /// reduction and reclaim.
    History(crate::monitor_cli::HistoryArgs),
}

fn volume_path(name: &str) -> String {
    format!("/v1/volumes/{}", path_segment(name))
}

fn snapshot_path(full_name: &str) -> String {
    format!("/v1/snapshots/{}", path_segment(full_name))
}

/// "thin", or "zeroedthick, 1 GiB reserved".
fn type_and_reservation(v: &VolumeInfo) -> String {
    if v.reserved_bytes > 0 {
        format!(
            "{}, {} reserved",
            v.provisioning,
            format_size(v.reserved_bytes)
        )
    } else {
        v.provisioning.to_string()
    }
}

/// " in container C", or nothing for the default container (most arrays have
/// no other).
fn in_container(v: &VolumeInfo) -> String {
    if v.container == lacuna_engine::space::container::DEFAULT_CONTAINER {
        String::new()
    } else {
        format!(" in container {}", v.container)
    }
}

pub fn run_volume(client: &Client, command: VolumeCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        VolumeCommand::Create {
            name,
            size,
            size_flag,
            volume_type,
            container,
        } => {
            let body = serde_json::to_value(CreateVolumeRequest {
                name,
                size_bytes: size.or(size_flag),
                provisioning: Some(volume_type.into()),
                source: None,
                container: Some(container),
            })?;
            let answer = client.call(Method::Post, "/v1/volumes", Some(&body))?;
            print(as_json, &answer, |v: VolumeInfo| {
                format!(
                    "created volume {} ({}, {}){}",
                    v.name,
                    format_size(v.size_bytes),
                    type_and_reservation(&v),
                    in_container(&v)
                )
            })
        }
        VolumeCommand::List { destroyed } => {
            let path = format!("/v1/volumes?destroyed={destroyed}");
            let answer = client.call(Method::Get, &path, None)?;
            print(as_json, &answer, |volumes: Vec<VolumeInfo>| {
                volume_table(&volumes, destroyed)
            })
        }
        VolumeCommand::Show { name } => {
            let answer = client.call(Method::Get, &volume_path(&name), None)?;
            print(as_json, &answer, |v: VolumeInfo| volume_details(&v))
        }
        VolumeCommand::Resize { name, size } => {
            let body = serde_json::to_value(ResizeVolumeRequest { size_bytes: size })?;
            let answer = client.call(Method::Patch, &volume_path(&name), Some(&body))?;
            print(as_json, &answer, |v: VolumeInfo| {
                format!("resized volume {} to {}", v.name, format_size(v.size_bytes))
            })
        }
        VolumeCommand::Delete { name } => {
            client.call(Method::Delete, &volume_path(&name), None)?;
            // The API answers 204; the destroyed volume says until when it can be
            // recovered.
            match client.call(Method::Get, &volume_path(&name), None) {
                Ok(answer) => print(as_json, &answer, |v: VolumeInfo| {
                    destroyed_message("volume", &name, v.eradicate_at_unix_s)
                }),
                // Already eradicated (a zero retention period), or the second
                // call failed: the delete itself succeeded all the same.
                Err(e) => print(as_json, &json!({ "deleted": name }), |_: Value| {
                    format!("destroyed volume {name} (cannot show its recovery deadline: {e})")
                }),
            }
        }
        VolumeCommand::Recover { name } => {
            let path = format!("{}/recover", volume_path(&name));
            let answer = client.call(Method::Post, &path, None)?;
            print(as_json, &answer, |v: VolumeInfo| {
                format!(
                    "recovered volume {} ({}, {} snapshots)",
                    v.name,
                    format_size(v.size_bytes),
                    v.snapshot_count
                )
            })
        }
        VolumeCommand::Eradicate { name } => {
            let path = format!("{}/eradicate", volume_path(&name));
            client.call(Method::Post, &path, None)?;
            print(as_json, &json!({ "eradicated": name }), |_: Value| {
                format!("eradicated volume {name}; its space is reclaimed in the background")
            })
        }
        VolumeCommand::Clone {
            source,
            new,
            volume_type,
            container,
        } => {
            let body = serde_json::to_value(CreateVolumeRequest {
                name: new,
                size_bytes: None,
                provisioning: Some(volume_type.into()),
                source: Some(source.clone()),
                container,
            })?;
            let answer = client.call(Method::Post, "/v1/volumes", Some(&body))?;
            print(as_json, &answer, |v: VolumeInfo| {
                format!(
                    "cloned {source} to volume {} ({}, {}){}",
                    v.name,
                    format_size(v.size_bytes),
                    type_and_reservation(&v),
                    in_container(&v)
                )
            })
        }
        VolumeCommand::Restore {
            volume,
            from_snapshot,
        } => {
            let path = format!("{}/restore", volume_path(&volume));
            let body = serde_json::to_value(RestoreVolumeRequest {
                snapshot: from_snapshot.clone(),
            })?;
            let answer = client.call(Method::Post, &path, Some(&body))?;
            let full_name = if from_snapshot.contains('@') {
                from_snapshot
            } else {
                format!("{volume}@{from_snapshot}")
            };
            print(as_json, &answer, |v: VolumeInfo| {
                format!(
                    "restored volume {} from snapshot {full_name} ({})",
                    v.name,
                    format_size(v.size_bytes)
                )
            })
        }
        VolumeCommand::Copy {
            src,
            dst,
            offset,
            length,
            to,
        } => {
            let path = format!("{}/copy", volume_path(&src));
            let body = serde_json::to_value(CopyRangeRequest {
                offset_bytes: offset,
                length_bytes: length,
                destination: dst.clone(),
                destination_offset_bytes: to,
            })?;
            let answer = client.call(Method::Post, &path, Some(&body))?;
            print(as_json, &answer, |r: CopyReport| {
                format!(
                    "copied {} from {src} at byte {offset} to {dst} at byte {to}: {} by reference, {} as data",
                    format_size(length),
                    format_size(r.referenced_bytes),
                    format_size(r.data_bytes)
                )
            })
        }
    }
}

pub fn run_snapshot(
    client: &Client,
    command: SnapshotCommand,
    as_json: bool,
) -> anyhow::Result<()> {
    match command {
        SnapshotCommand::Create {
            volumes,
            name,
            group,
        } => {
            let body = serde_json::to_value(CreateSnapshotsRequest {
                volumes,
                name,
                group: group.clone(),
            })?;
            let answer = client.call(Method::Post, "/v1/snapshots", Some(&body))?;
            print(as_json, &answer, |g: GroupSnapshot| {
                let mut lines: Vec<String> = g
                    .snapshots
                    .iter()
                    .map(|s| format!("created snapshot {}", s.full_name))
                    .collect();
                if let Some(group) = &group {
                    lines.push(format!(
                        "consistency group {group}: {} volumes",
                        g.snapshots.len()
                    ));
                }
                lines.push(format!(
                    "commit window: {} µs (writes held), prepare: {} µs",
                    g.commit_window_us, g.prepare_us
                ));
                lines.join("\n")
            })
        }
        SnapshotCommand::List { volume, destroyed } => {
            let mut path = format!("/v1/snapshots?destroyed={destroyed}");
            if let Some(volume) = &volume {
                path.push_str(&format!("&volume={}", path_segment(volume)));
            }
            let answer = client.call(Method::Get, &path, None)?;
            print(as_json, &answer, |snapshots: Vec<SnapshotInfo>| {
                snapshot_table(&snapshots, destroyed)
            })
        }
        SnapshotCommand::Show { snapshot } => {
            let answer = client.call(Method::Get, &snapshot_path(&snapshot), None)?;
            print(as_json, &answer, |s: SnapshotInfo| snapshot_details(&s))
        }
        SnapshotCommand::Delete { snapshot } => {
            client.call(Method::Delete, &snapshot_path(&snapshot), None)?;
            match client.call(Method::Get, &snapshot_path(&snapshot), None) {
                Ok(answer) => print(as_json, &answer, |s: SnapshotInfo| {
                    destroyed_message("snapshot", &s.full_name, s.eradicate_at_unix_s)
                }),
                Err(e) => print(as_json, &json!({ "deleted": snapshot }), |_: Value| {
                    format!(
                        "destroyed snapshot {snapshot} (cannot show its recovery deadline: {e})"
                    )
                }),
            }
        }
        SnapshotCommand::Recover { snapshot } => {
            let path = format!("{}/recover", snapshot_path(&snapshot));
            let answer = client.call(Method::Post, &path, None)?;
            print(as_json, &answer, |s: SnapshotInfo| {
                format!("recovered snapshot {}", s.full_name)
            })
        }
        SnapshotCommand::Eradicate { snapshot } => {
            let path = format!("{}/eradicate", snapshot_path(&snapshot));
            client.call(Method::Post, &path, None)?;
            print(as_json, &json!({ "eradicated": snapshot }), |_: Value| {
                format!("eradicated snapshot {snapshot}; its space is reclaimed in the background")
            })
        }
    }
}

pub(crate) fn host_path(name: &str) -> String {
    format!("/v1/hosts/{}", path_segment(name))
}

/// A secret from its flag, else from the environment variable, when its user is
/// given; an empty variable counts as unset.
fn secret(
    user: &Option<String>,
    flag: Option<String>,
    env_var: &str,
    user_flag: &str,
) -> anyhow::Result<Option<String>> {
    if user.is_none() {
        return Ok(None);
    }
    match flag.or_else(|| std::env::var(env_var).ok().filter(|s| !s.is_empty())) {
        Some(secret) => Ok(Some(secret)),
        None => {
            anyhow::bail!("{user_flag} needs a secret: set {env_var} (or pass the secret flag)")
        }
    }
}

pub fn run_host(client: &Client, command: HostCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        HostCommand::Create {
            name,
            iqns,
            nbd_psk,
            chap_user,
            chap_secret,
            mutual_chap_user,
            mutual_chap_secret,
        } => {
            let chap_secret = secret(&chap_user, chap_secret, CHAP_SECRET_ENV, "--chap-user")?;
            let mutual_chap_secret = secret(
                &mutual_chap_user,
                mutual_chap_secret,
                MUTUAL_CHAP_SECRET_ENV,
                "--mutual-chap-user",
            )?;
            let nbd_psk_key = nbd_psk.key(&name)?;
            let body = serde_json::to_value(CreateHostRequest {
                name,
                iqns,
                chap_user,
                chap_secret,
                mutual_chap_user,
                mutual_chap_secret,
                nbd_psk_key,
            })?;
            let answer = client.call(Method::Post, "/v1/hosts", Some(&body))?;
            print(as_json, &answer, |h: HostInfo| {
                format!(
                    "created host {} ({} initiator{}, {}{})",
                    h.name,
                    h.iqns.len(),
                    if h.iqns.len() == 1 { "" } else { "s" },
                    crate::table::chap_mode(&h),
                    if h.nbd_psk { ", nbd-psk set" } else { "" }
                )
            })
        }
        HostCommand::Set {
            name,
            nbd_psk,
            no_nbd_psk,
        } => {
            let path = format!("{}/nbd-psk", host_path(&name));
            let answer = match nbd_psk.key(&name)? {
                Some(key) => {
                    let body = serde_json::to_value(SetNbdPskRequest { key })?;
                    client.call(Method::Put, &path, Some(&body))?
                }
                None if no_nbd_psk => client.call(Method::Delete, &path, None)?,
                None => anyhow::bail!(
                    "nothing to set: give --nbd-psk-key, --nbd-psk-file or --no-nbd-psk"
                ),
            };
            print(as_json, &answer, |h: HostInfo| {
                let state = if h.nbd_psk { "set" } else { "removed" };
                format!("host {}: nbd-psk {state}", h.name)
            })
        }
        HostCommand::ProtocolEndpoint { host, lun, remove } => {
            let path = format!("{}/protocol-endpoint", host_path(&host));
            let answer = if remove {
                client.call(Method::Delete, &path, None)?
            } else {
                client.call(Method::Put, &path, Some(&json!({ "lun": lun })))?
            };
            print(as_json, &answer, |h: HostInfo| {
                match h.protocol_endpoint_lun {
                    Some(lun) => format!("host {}: protocol endpoint at LUN {lun}", h.name),
                    None => format!("host {}: no protocol endpoint", h.name),
                }
            })
        }
        HostCommand::List => {
            let answer = client.call(Method::Get, "/v1/hosts", None)?;
            print(as_json, &answer, |hosts: Vec<HostInfo>| host_table(&hosts))
        }
        HostCommand::Show { name } => {
            let answer = client.call(Method::Get, &host_path(&name), None)?;
            print(as_json, &answer, |h: HostInfo| host_details(&h))
        }
        HostCommand::Delete { name } => {
            client.call(Method::Delete, &host_path(&name), None)?;
            print(as_json, &json!({ "deleted": name }), |_: Value| {
                format!("deleted host {name}")
            })
        }
        HostCommand::Connect {
            host,
            volume,
            lun,
            block_size,
            removable,
        } => {
            let body = serde_json::to_value(ConnectVolumeRequest {
                volume,
                lun,
                block_size_bytes: Some(block_size),
                removable: Some(removable),
            })?;
            let path = format!("{}/connect", host_path(&host));
            let answer = client.call(Method::Post, &path, Some(&body))?;
            print(as_json, &answer, |l: LunInfo| {
                let mut extras = vec![format!("{}-byte blocks", l.block_size_bytes)];
                if l.read_only {
                    extras.push("read-only".to_string());
                }
                if l.removable {
                    extras.push("removable".to_string());
                }
                format!(
                    "connected {} to host {host} at LUN {} ({})",
                    l.volume,
                    l.lun,
                    extras.join(", ")
                )
            })
        }
        HostCommand::Disconnect { host, volume } => {
            let body = serde_json::to_value(DisconnectVolumeRequest {
                volume: volume.clone(),
            })?;
            let path = format!("{}/disconnect", host_path(&host));
            client.call(Method::Post, &path, Some(&body))?;
            print(
                as_json,
                &json!({ "host": host, "disconnected": volume }),
                |_: Value| format!("disconnected {volume} from host {host}"),
            )
        }
    }
}

fn container_path(name: &str) -> String {
    format!("/v1/containers/{}", path_segment(name))
}

pub fn run_container(
    client: &Client,
    command: ContainerCommand,
    as_json: bool,
) -> anyhow::Result<()> {
    match command {
        ContainerCommand::Create { name, policy } => {
            let body = serde_json::to_value(CreateContainerRequest {
                name,
                quota_bytes: match policy.quota {
                    Some(Quota::Bytes(bytes)) => Some(bytes),
                    Some(Quota::None) | None => None,
                },
                reclaim: policy.reclaim,
                reclaim_burst_bytes: policy.reclaim_burst,
                compression: policy.compression,
                dedup: policy.dedup,
            })?;
            let answer = client.call(Method::Post, "/v1/containers", Some(&body))?;
            print(as_json, &answer, |c: ContainerInfo| {
                format!(
                    "created container {} ({})",
                    c.name,
                    crate::table::policy_summary(&c)
                )
            })
        }
        ContainerCommand::List => {
            let answer = client.call(Method::Get, "/v1/containers", None)?;
            print(as_json, &answer, |containers: Vec<ContainerInfo>| {
                container_table(&containers)
            })
        }
        ContainerCommand::Show { name, reclaim } => {
            let answer = client.call(Method::Get, &container_path(&name), None)?;
            print(as_json, &answer, |c: ContainerInfo| {
                if reclaim {
                    container_reclaim_details(&c)
                } else {
                    container_details(&c)
                }
            })
        }
        ContainerCommand::Set { name, policy } => {
            let request = UpdateContainerRequest {
                quota_bytes: policy.quota.map(|q| match q {
                    Quota::Bytes(bytes) => Some(bytes),
                    Quota::None => None,
                }),
                reclaim: policy.reclaim,
                reclaim_burst_bytes: policy.reclaim_burst,
                compression: policy.compression,
                dedup: policy.dedup,
            };
            if request.is_empty() {
                anyhow::bail!(
                    "nothing to change: give --quota, --reclaim, --reclaim-burst, --compression or --dedup"
                );
            }
            let body = serde_json::to_value(request)?;
            let answer = client.call(Method::Patch, &container_path(&name), Some(&body))?;
            print(as_json, &answer, |c: ContainerInfo| {
                format!(
                    "changed container {} ({})",
                    c.name,
                    crate::table::policy_summary(&c)
                )
            })
        }
        ContainerCommand::Reclaim { name, now, wait } => {
            // clap requires --now; the flag exists so the command says what it does.
            assert!(now, "clap requires --now");
            let path = format!("{}/reclaim", container_path(&name));
            let answer = client.call(Method::Post, &path, None)?;
            if wait {
                let done = wait_for_reclaim(client, &name)?;
                return print(as_json, &done, |c: ContainerInfo| {
                    format!(
                        "container {}: backlog empty; {} reclaimed in all",
                        c.name,
                        format_size(c.reclaim.stats.reclaimed_bytes)
                    )
                });
            }
            print(as_json, &answer, |c: ContainerInfo| {
                // The drain runs in the background (it may be done already).
                format!(
                    "reclaiming container {} now, whatever its policy ({}): {} backlog left; follow it with 'lacuna container show {} --reclaim' (or pass --wait)",
                    c.name,
                    c.reclaim.policy,
                    format_size(c.reclaim.stats.backlog_bytes),
                    c.name
                )
            })
        }
        ContainerCommand::Delete { name } => {
            client.call(Method::Delete, &container_path(&name), None)?;
            print(as_json, &json!({ "deleted": name }), |_: Value| {
                format!("deleted container {name}")
            })
        }
    }
}

/// Polls a container until its reclaim backlog is empty, with a progress bar
/// (bytes reclaimed of the backlog there was) on a terminal. Returns the last
/// answer.
fn wait_for_reclaim(client: &Client, name: &str) -> anyhow::Result<Value> {
    const POLL: std::time::Duration = std::time::Duration::from_millis(200);
    let first = client.call(Method::Get, &container_path(name), None)?;
    let info: ContainerInfo = serde_json::from_value(first.clone())?;
    let start_reclaimed = info.reclaim.stats.reclaimed_bytes;
    let bar = indicatif::ProgressBar::new(info.reclaim.stats.backlog_bytes.max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} reclaimed, {msg}")
            .expect("a valid template"),
    );
    let mut answer = first;
    loop {
        let info: ContainerInfo = serde_json::from_value(answer.clone())?;
        let stats = &info.reclaim.stats;
        let reclaimed = stats.reclaimed_bytes.saturating_sub(start_reclaimed);
        bar.set_length((reclaimed + stats.backlog_bytes).max(1));
        bar.set_position(reclaimed);
        bar.set_message(format!(
            "{}/s",
            format_size(info.reclaim.current_bytes_per_s as u64)
        ));
        if stats.backlog_bytes == 0 {
            bar.finish_and_clear();
            return Ok(answer);
        }
        std::thread::sleep(POLL);
        answer = client.call(Method::Get, &container_path(name), None)?;
    }
}

/// What a delete did and how to undo it or finish it.
fn destroyed_message(kind: &str, name: &str, eradicate_at_unix_s: Option<u64>) -> String {
    let until = match eradicate_at_unix_s {
        Some(at) => format!("recoverable until {}", format_unix_utc(at)),
        None => "recoverable".to_string(),
    };
    format!(
        "destroyed {kind} {name}: {until}\n  undo:      lacuna {kind} recover {name}\n  free now:  lacuna {kind} eradicate {name}"
    )
}

pub fn run_array(client: &Client, command: ArrayCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        ArrayCommand::Space => {
            let answer = client.call(Method::Get, "/v1/array/space", None)?;
            print(as_json, &answer, |s: SpaceReport| space_details(&s))
        }
        ArrayCommand::History(args) => crate::monitor_cli::run_history(client, args, as_json),
    }
}

/// Prints the API's JSON as is, or decodes it into the type the human rendering
/// needs: a daemon speaking a different API version then fails loudly instead of
/// printing zeroes for fields it no longer sends.
pub(crate) fn print<T: DeserializeOwned>(
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
