//! The pages past the overview: volumes (list, one volume with its actions),
//! containers, hosts and virtual volumes grouped by VM. Each is a function of
//! figures the API answers; forms post to the dashboard's action routes with
//! the session's anti-forgery token.

use lacuna_engine::{ContainerInfo, SnapshotInfo, VolumeInfo};
use lacuna_monitor::{LiveSession, Sample};
use lacuna_vvol::VvolInfo;
use maud::{html, Markup};

use super::pages::{size, utc};
use super::plot::{time_plot, Series};
use crate::HostInfo;

/// A form that posts `fields` to `action` with the anti-forgery token.
fn action_form(action: &str, csrf: &str, label: &str, fields: Markup) -> Markup {
    html! {
        form.action method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            (fields)
            button type="submit" { (label) }
        }
    }
}

fn ratio(r: f64) -> String {
    format!("{r:.2}:1")
}

/// The hosts a volume is connected to, by name.
fn hosts_of<'a>(hosts: &'a [HostInfo], volume: &str) -> Vec<&'a str> {
    let mut names: Vec<&str> = hosts
        .iter()
        .filter(|h| h.luns.iter().any(|l| l.volume == volume))
        .map(|h| h.name.as_str())
        .collect();
    names.sort_unstable();
    names
}

pub fn volume_list(
    volumes: &[VolumeInfo],
    destroyed: &[VolumeInfo],
    containers: &[ContainerInfo],
    hosts: &[HostInfo],
    csrf: &str,
) -> Markup {
    html! {
        section {
            table #volumes {
                tr { th { "name" } th { "size" } th { "written" } th { "physical" } th { "reduction" } th { "thin" } th { "snapshots" } th { "hosts" } th { "container" } }
                @for v in volumes {
                    tr data-volume=(v.name) {
                        td { a href=(format!("/volumes/{}", v.name)) { (v.name) } }
                        td.n data-bytes=(v.size_bytes) { (size(v.size_bytes)) }
                        td.n data-bytes=(v.written_bytes) { (size(v.written_bytes)) }
                        td.n data-bytes=(v.unique_physical_bytes) { (size(v.unique_physical_bytes)) }
                        td.n { (ratio(v.data_reduction_ratio)) }
                        td.n { (format!("{:.0}%", v.thin_provisioning_percent)) }
                        td.n data-count=(v.snapshot_count) { (v.snapshot_count) }
                        @let connected = hosts_of(hosts, &v.name);
                        td data-hosts=(connected.join(",")) { (connected.join(", ")) }
                        td { (v.container) }
                    }
                }
            }
        }
        section #create {
            h2 { "Create a volume" }
            (action_form("/volumes", csrf, "Create", html! {
                label { "name " input name="name" required pattern="[A-Za-z0-9_][A-Za-z0-9._\\-]{0,63}"; }
                label { " size " input name="size" required placeholder="10G"; }
                label { " container "
                    select name="container" {
                        @for c in containers { option value=(c.name) selected[c.name == "default"] { (c.name) } }
                    }
                }
                label { " provisioning "
                    select name="provisioning" {
                        option value="thin" selected { "thin" }
                        option value="zeroedthick" { "zeroed thick" }
                        option value="eagerzeroedthick" { "eager-zeroed thick" }
                    }
                }
                " "
            }))
        }
        @if !destroyed.is_empty() {
            section #destroyed {
                h2 { "Destroyed (recoverable)" }
                table {
                    tr { th { "name" } th { "size" } th { "destroyed (UTC)" } th { "" } }
                    @for v in destroyed {
                        tr data-destroyed=(v.name) {
                            td { (v.name) }
                            td.n { (size(v.size_bytes)) }
                            td { (v.destroyed_unix_s.map(utc).unwrap_or_default()) }
                            td { (action_form(&format!("/volumes/{}/recover", v.name), csrf, "Recover", html! {})) }
                        }
                    }
                }
            }
        }
    }
}

/// One volume's reads and writes per sample (zero where it was not among
/// the busiest volumes of the interval).
/// (time, value) points of a plotted line.
type Points = Vec<(u64, f64)>;

fn volume_io(samples: &[Sample], volume_id: u64) -> (Points, Points) {
    let figures = |s: &Sample| s.volumes.iter().find(|v| v.volume_id == volume_id).cloned();
    let iops = |s: &Sample, read: bool| {
        figures(s).map_or(0.0, |v| if read { v.read_iops } else { v.write_iops })
    };
    (
        samples.iter().map(|s| (s.unix_s, iops(s, true))).collect(),
        samples.iter().map(|s| (s.unix_s, iops(s, false))).collect(),
    )
}

/// Who reaches a volume: the hosts it is connected to (by LUN) and the
/// sessions open to it now.
pub struct Reach<'a> {
    pub hosts: &'a [HostInfo],
    pub sessions: &'a [LiveSession],
}

pub fn volume_detail(
    v: &VolumeInfo,
    snapshots: &[SnapshotInfo],
    samples: &[Sample],
    reach: Reach<'_>,
    csrf: &str,
) -> Markup {
    let (reads, writes) = volume_io(samples, v.id);
    let luns: Vec<(&str, u64)> = reach
        .hosts
        .iter()
        .flat_map(|h| {
            h.luns
                .iter()
                .filter(|l| l.volume == v.name)
                .map(move |l| (h.name.as_str(), l.lun))
        })
        .collect();
    let figures = [
        ("size", v.size_bytes),
        ("written", v.written_bytes),
        ("logical data", v.logical_data_bytes),
        ("unique physical", v.unique_physical_bytes),
        ("shared physical", v.shared_physical_bytes),
        ("reserved", v.reserved_bytes),
    ];
    html! {
        div.cards {
            section #space {
                h2 { "Space" }
                table {
                    @for (name, bytes) in figures {
                        tr { td { (name) } td.n data-figure=(name) data-bytes=(bytes) { (size(bytes)) } }
                    }
                    tr { td { "data reduction" } td.n data-figure="data_reduction_ratio" data-value=(v.data_reduction_ratio) { (ratio(v.data_reduction_ratio)) } }
                    tr { td { "thin" } td.n { (format!("{:.0}%", v.thin_provisioning_percent)) } }
                    tr { td { "provisioning" } td.n { (v.provisioning.to_string()) } }
                    tr { td { "container" } td.n { a href="/containers" { (v.container) } } }
                    tr { td { "created (UTC)" } td.n { (utc(v.created_unix_s)) } }
                }
            }
            section #io {
                h2 { "I/O, last hour" }
                (time_plot("Volume IOPS", &[
                    Series { name: "read", class: "read", points: reads },
                    Series { name: "write", class: "write", points: writes },
                ], |x| format!("{x:.0}")))
            }
        }
        section #snapshots {
            h2 { "Snapshots" }
            @if snapshots.is_empty() { p { "None." } } @else {
                table {
                    tr { th { "name" } th { "size" } th { "created (UTC)" } th { "group" } }
                    @for s in snapshots {
                        tr data-snapshot=(s.full_name) {
                            td { (s.name) } td.n { (size(s.size_bytes)) } td { (utc(s.created_unix_s)) }
                            td { (s.group.clone().unwrap_or_default()) }
                        }
                    }
                }
            }
            (action_form(&format!("/volumes/{}/snapshot", v.name), csrf, "Take a snapshot", html! {
                label { "name " input name="snapshot" pattern="[A-Za-z0-9_][A-Za-z0-9._\\-]{0,63}" placeholder="(a time stamp)"; }
                " "
            }))
        }
        section #connections {
            h2 { "Connections" }
            @if luns.is_empty() { p { "Connected to no host." } } @else {
                table {
                    tr { th { "host" } th { "LUN" } }
                    @for (host, lun) in &luns { tr data-host=(host) { td { (host) } td.n { (lun) } } }
                }
            }
            @let open: Vec<&LiveSession> = reach.sessions.iter()
                .filter(|s| s.export.as_deref() == Some(v.name.as_str())
                    || (s.export.is_none() && luns.iter().any(|(h, _)| s.host.as_deref() == Some(*h))))
                .collect();
            p { (open.len()) " session(s) open now" }
            @if !reach.hosts.is_empty() {
                (action_form(&format!("/volumes/{}/connect", v.name), csrf, "Connect", html! {
                    label { "host "
                        select name="host" {
                            @for h in reach.hosts { option value=(h.name) { (h.name) } }
                        }
                    }
                    label { " LUN " input name="lun" type="number" min="0" max="16383" placeholder="(next free)"; }
                    " "
                }))
            }
        }
        section #actions {
            h2 { "Change" }
            (action_form(&format!("/volumes/{}/resize", v.name), csrf, "Resize", html! {
                label { "new size " input name="size" required placeholder=(size(v.size_bytes)); }
                " "
            }))
            (action_form(&format!("/volumes/{}/delete", v.name), csrf, "Destroy", html! {
                label { input type="checkbox" name="confirm" value="yes" required; " destroy " (v.name) " (recoverable until eradicated)" }
                " "
            }))
        }
    }
}

pub fn containers(list: &[ContainerInfo], samples: &[Sample]) -> Markup {
    html! {
        section {
            table #containers {
                tr { th { "name" } th { "volumes" } th { "quota" } th { "used" } th { "provisioned" } th { "reduction" } th { "reclaim" } th { "backlog" } th { "rate" } th { "ETA" } }
                @for c in list {
                    tr data-container=(c.name) {
                        td { (c.name) }
                        td.n { (c.volume_count) }
                        td.n { (c.policy.quota_bytes.map_or("none".to_string(), size)) }
                        td.n data-bytes=(c.used_bytes) { (size(c.used_bytes)) }
                        td.n { (size(c.provisioned_bytes)) }
                        td { (c.policy.compression.to_string()) @if c.policy.dedup { ", dedup" } }
                        td { (c.reclaim.policy.to_string()) }
                        td.n data-figure="backlog" data-bytes=(c.reclaim.stats.backlog_bytes) { (size(c.reclaim.stats.backlog_bytes)) }
                        td.n { (size(c.reclaim.current_bytes_per_s as u64)) "/s" }
                        td.n { (eta(c.reclaim.eta_s)) }
                    }
                }
            }
        }
        @for c in list.iter().take(lacuna_monitor::history::MAX_CONTAINERS) {
            section data-plots=(c.name) {
                h2 { (c.name) ", last hour" }
                @let of = |s: &Sample| s.containers.iter().find(|f| f.name == c.name).cloned().unwrap_or_default();
                div.cards {
                    (time_plot("Reclaim backlog", &[Series { name: "backlog", class: "write",
                        points: samples.iter().map(|s| (s.unix_s, of(s).backlog_bytes as f64)).collect() }],
                        |x| size(x as u64)))
                    (time_plot("Reclaim rate", &[Series { name: "reclaimed", class: "read",
                        points: samples.iter().map(|s| (s.unix_s, of(s).reclaim_bytes_per_s)).collect() }],
                        |x| format!("{}/s", size(x as u64))))
                }
            }
        }
    }
}

fn eta(eta_s: Option<f64>) -> String {
    match eta_s {
        None => "never (off)".to_string(),
        Some(s) if s <= 0.0 => "-".to_string(),
        Some(s) if s < 120.0 => format!("{s:.0} s"),
        Some(s) if s < 7200.0 => format!("{:.0} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
    }
}

pub fn hosts(list: &[HostInfo], sessions: &[LiveSession]) -> Markup {
    let of = |host: &str| -> Vec<&LiveSession> {
        sessions
            .iter()
            .filter(|s| s.host.as_deref() == Some(host))
            .collect()
    };
    let strangers: Vec<&LiveSession> = sessions.iter().filter(|s| s.host.is_none()).collect();
    html! {
        @if list.is_empty() { section { p { "No hosts. Create one with " code { "lacuna host create" } "." } } }
        @for h in list {
            section data-host=(h.name) {
                h2 { (h.name) }
                table {
                    tr { td { "initiators" } td { @for iqn in &h.iqns { code { (iqn) } br; } @if h.iqns.is_empty() { "none" } } }
                    tr { td { "CHAP" } td data-figure="chap" {
                        @match (&h.chap_user, &h.mutual_chap_user) {
                            (Some(user), Some(mutual)) => { "mutual (user " (user) ", target " (mutual) ")" }
                            (Some(user), None) => { "one-way (user " (user) ")" }
                            _ => { "none" }
                        }
                    } }
                    tr { td { "NBD TLS key" } td { @if h.nbd_psk { "set" } @else { "none" } } }
                    tr { td { "protocol endpoint" } td { (h.protocol_endpoint_lun.map_or("none".to_string(), |l| format!("LUN {l}"))) } }
                }
                h3 { "Volumes" }
                @if h.luns.is_empty() { p { "None connected." } } @else {
                    table {
                        tr { th { "LUN" } th { "volume" } th { "block size" } }
                        @for l in &h.luns {
                            tr data-lun=(l.lun) { td.n { (l.lun) } td { a href=(format!("/volumes/{}", l.volume.split('@').next().unwrap_or(&l.volume))) { (l.volume) } } td.n { (l.block_size_bytes) } }
                        }
                    }
                }
                h3 { "Sessions open now" }
                (session_table(&of(&h.name)))
            }
        }
        @if !strangers.is_empty() {
            section #strangers { h2 { "Sessions of no host (open access)" } (session_table(&strangers)) }
        }
    }
}

fn session_table(sessions: &[&LiveSession]) -> Markup {
    html! {
        @if sessions.is_empty() { p data-sessions="0" { "None." } } @else {
            table data-sessions=(sessions.len()) {
                tr { th { "protocol" } th { "initiator" } th { "export" } th { "since (UTC)" } }
                @for s in sessions {
                    tr {
                        td { (format!("{:?}", s.protocol).to_lowercase()) }
                        td { code { (s.initiator) } }
                        td { (s.export.clone().unwrap_or_else(|| "its LUNs".to_string())) }
                        td { (s.since_unix_s.map(utc).unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

/// vVols grouped by the VM their metadata names (`VMW_VmID`), the others last.
pub fn vvols(list: &[VvolInfo], truncated: bool) -> Markup {
    let mut by_vm: std::collections::BTreeMap<&str, Vec<&VvolInfo>> = Default::default();
    for v in list {
        let vm = v.rec.metadata.get("VMW_VmID").map_or("", String::as_str);
        by_vm.entry(vm).or_default().push(v);
    }
    html! {
        @if list.is_empty() { section { p { "No virtual volumes." } } }
        @if truncated { p.warning { "Only the first " (list.len()) " vVols are shown; the API lists all of them." } }
        @for (vm, vvols) in &by_vm {
            section data-vm=(vm) {
                h2 { @if vm.is_empty() { "Not part of a VM" } @else { "VM " code { (vm) } } }
                table {
                    tr { th { "name" } th { "type" } th { "size" } th { "container" } th { "bound to" } th { "id" } }
                    @for v in vvols {
                        tr data-vvol=(v.rec.id.as_str()) {
                            td { (v.rec.metadata.get("VMW_VVolName").cloned().unwrap_or_default()) @if v.rec.snapshot.is_some() { " (snapshot)" } }
                            td { (v.rec.vvol_type.as_str()) }
                            td.n data-bytes=(v.size_bytes) { (size(v.size_bytes)) }
                            td { (v.rec.container) }
                            td { (v.bound_hosts.join(", ")) }
                            td { code { (v.rec.id.as_str()) } }
                        }
                    }
                }
            }
        }
    }
}
