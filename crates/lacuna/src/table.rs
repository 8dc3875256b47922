//! Human renderings of API answers: aligned tables and `key: value` blocks, with
//! sizes in binary units.

use std::time::{Duration, UNIX_EPOCH};

use lacuna_api::HostInfo;
use lacuna_engine::{ContainerInfo, ReclaimPolicy, SnapshotInfo, SpaceReport, VolumeInfo};

use lacuna_api::size::format_size;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Align {
    Left,
    /// For numbers, so digits and units line up.
    Right,
}

/// Renders a header and rows as columns two spaces apart. Lines carry no
/// trailing spaces (they would make the output awkward to compare or grep).
pub fn table(header: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let render = |cells: &mut dyn Iterator<Item = &str>| {
        let line: Vec<String> = cells
            .zip(header.iter().zip(&widths))
            .map(|(cell, ((_, align), &width))| match align {
                Align::Left => format!("{cell:<width$}"),
                Align::Right => format!("{cell:>width$}"),
            })
            .collect();
        line.join("  ").trim_end().to_string()
    };
    let mut lines = vec![render(&mut header.iter().map(|(h, _)| *h))];
    lines.extend(
        rows.iter()
            .map(|row| render(&mut row.iter().map(String::as_str))),
    );
    lines.join("\n")
}

/// `key: value` lines with the values aligned.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(key, value)| format!("{:<width$} {value}", format!("{key}:")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A reduction ratio as storage people write it: `3.20:1`.
pub fn format_ratio(ratio: f64) -> String {
    format!("{ratio:.2}:1")
}

/// A written figure that may still fall while a background job works out what copied
/// ranges hold (`written_settling`): the reader is told, not left to wonder why it moved.
fn settling(figure: String, settling: bool) -> String {
    if settling {
        format!("{figure} (settling)")
    } else {
        figure
    }
}

pub fn format_percent(percent: f64) -> String {
    format!("{percent:.1}%")
}

/// Seconds since the Unix epoch as `2024-03-05 17:04:09 UTC`; past the year 9999, which
/// RFC 3339 cannot write, `after 9999-12-31 23:59:59 UTC`.
pub fn format_unix_utc(unix_s: u64) -> String {
    /// 9999-12-31 23:59:59 UTC.
    const LAST_WRITABLE_S: u64 = 253_402_300_799;
    let at = UNIX_EPOCH + Duration::from_secs(unix_s.min(LAST_WRITABLE_S));
    // `2024-03-05T17:04:09Z`
    let rfc3339 = humantime::format_rfc3339_seconds(at).to_string();
    let date = format!(
        "{} UTC",
        rfc3339.replacen('T', " ", 1).trim_end_matches('Z')
    );
    if unix_s > LAST_WRITABLE_S {
        format!("after {date}")
    } else {
        date
    }
}

fn optional_time(unix_s: Option<u64>) -> String {
    unix_s
        .map(format_unix_utc)
        .unwrap_or_else(|| "-".to_string())
}

/// Live volumes, or (`destroyed`) destroyed ones with when each goes for good.
pub fn volume_table(volumes: &[VolumeInfo], destroyed: bool) -> String {
    if volumes.is_empty() {
        return if destroyed {
            "no destroyed volumes".to_string()
        } else {
            "no volumes (create one with 'lacuna volume create NAME 10G')".to_string()
        };
    }
    let rows: Vec<Vec<String>> = volumes
        .iter()
        .map(|v| {
            let mut row = vec![
                v.name.clone(),
                format_size(v.size_bytes),
                v.provisioning.to_string(),
                v.container.clone(),
                format_size(v.written_bytes),
                format_percent(v.thin_provisioning_percent),
                format_size(v.unique_physical_bytes + v.shared_physical_bytes),
                format_ratio(v.data_reduction_ratio),
                v.snapshot_count.to_string(),
            ];
            if destroyed {
                row.push(optional_time(v.destroyed_unix_s));
                row.push(optional_time(v.eradicate_at_unix_s));
            }
            row
        })
        .collect();
    let mut header = vec![
        ("NAME", Align::Left),
        ("SIZE", Align::Right),
        ("TYPE", Align::Left),
        ("CONTAINER", Align::Left),
        ("WRITTEN", Align::Right),
        ("THIN", Align::Right),
        ("PHYSICAL", Align::Right),
        ("REDUCTION", Align::Right),
        ("SNAPSHOTS", Align::Right),
    ];
    if destroyed {
        header.push(("DESTROYED", Align::Left));
        header.push(("ERADICATE AT", Align::Left));
    }
    table(&header, &rows)
}

pub fn volume_details(v: &VolumeInfo) -> String {
    let mut pairs = vec![
        ("name", v.name.clone()),
        ("size", format_size(v.size_bytes)),
        ("type", v.provisioning.to_string()),
        ("reserved", format_size(v.reserved_bytes)),
        ("snapshots", v.snapshot_count.to_string()),
        (
            "written",
            settling(format_size(v.written_bytes), v.written_settling),
        ),
        (
            "thin_provisioning",
            format_percent(v.thin_provisioning_percent),
        ),
        ("logical data", format_size(v.logical_data_bytes)),
        ("unique physical", format_size(v.unique_physical_bytes)),
        ("shared physical", format_size(v.shared_physical_bytes)),
        ("data reduction", format_ratio(v.data_reduction_ratio)),
        ("created", format_unix_utc(v.created_unix_s)),
        ("container", v.container.clone()),
        ("unmap commands", v.reclaim.unmap_commands.to_string()),
        ("unmapped", format_size(v.reclaim.unmapped_bytes)),
        ("reclaimed", format_size(v.reclaim.reclaimed_bytes)),
        ("reclaim backlog", format_size(v.reclaim.backlog_bytes)),
    ];
    if let Some(at) = v.destroyed_unix_s {
        pairs.push(("destroyed", format_unix_utc(at)));
    }
    if let Some(at) = v.eradicate_at_unix_s {
        pairs.push(("eradicate at", format_unix_utc(at)));
    }
    key_values(&pairs)
}

/// A counter both readable and exact: `4 MiB (4194304 B)`.
pub fn exact_size(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else {
        format!("{} ({bytes} B)", format_size(bytes))
    }
}

/// Bytes per second in decimal megabytes, as reclaim policies are written.
pub fn format_rate(bytes_per_s: f64) -> String {
    format!("{:.1} MB/s", bytes_per_s / 1e6)
}

/// A reclaim policy with what it means: `low (25 MB/s)`, `off`, `200MB/s`.
pub fn format_reclaim_policy(policy: ReclaimPolicy) -> String {
    match policy {
        ReclaimPolicy::Low => format!("low ({})", format_rate(LOW_BYTES_PER_S)),
        other => other.to_string(),
    }
}

/// `low`'s rate, for printing only (the engine owns the figure).
const LOW_BYTES_PER_S: f64 = 25e6;

/// Seconds as `0 s`, `12.5 s`, `4 min 10 s`, `3 h 20 min`.
pub fn format_seconds(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "unknown".to_string();
    }
    if seconds < 60.0 {
        let text = format!("{seconds:.1}");
        return format!("{} s", text.trim_end_matches('0').trim_end_matches('.'));
    }
    let whole = seconds.round() as u64;
    if whole < 3600 {
        format!("{} min {} s", whole / 60, whole % 60)
    } else {
        format!("{} h {} min", whole / 3600, whole / 60 % 60)
    }
}

fn on_off(flag: bool) -> &'static str {
    if flag {
        "on"
    } else {
        "off"
    }
}

fn quota_text(c: &ContainerInfo) -> String {
    c.policy
        .quota_bytes
        .map(format_size)
        .unwrap_or_else(|| "none".to_string())
}

/// One line of policies: `quota 1 GiB, reclaim low (25 MB/s), burst 256 MiB,
/// lz4, dedup on`.
pub fn policy_summary(c: &ContainerInfo) -> String {
    format!(
        "quota {}, reclaim {}, burst {}, {}, dedup {}",
        quota_text(c),
        format_reclaim_policy(c.policy.reclaim),
        format_size(c.policy.reclaim_burst_bytes),
        c.policy.compression,
        on_off(c.policy.dedup)
    )
}

/// Containers with their volumes, usage, policies and reclaim backlog.
pub fn container_table(containers: &[ContainerInfo]) -> String {
    let rows: Vec<Vec<String>> = containers
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.volume_count.to_string(),
                format_size(c.used_bytes),
                quota_text(c),
                c.policy.reclaim.to_string(),
                c.policy.compression.to_string(),
                on_off(c.policy.dedup).to_string(),
                format_size(c.reclaim.stats.backlog_bytes),
            ]
        })
        .collect();
    table(
        &[
            ("NAME", Align::Left),
            ("VOLUMES", Align::Right),
            ("USED", Align::Right),
            ("QUOTA", Align::Right),
            ("RECLAIM", Align::Left),
            ("COMPRESSION", Align::Left),
            ("DEDUP", Align::Left),
            ("BACKLOG", Align::Right),
        ],
        &rows,
    )
}

/// A container's policies and usage.
pub fn container_details(c: &ContainerInfo) -> String {
    let quota = match c.policy.quota_bytes {
        Some(quota) => format!(
            "{} ({} used)",
            format_size(quota),
            format_percent(100.0 * c.used_bytes as f64 / quota as f64)
        ),
        None => "none".to_string(),
    };
    key_values(&[
        ("name", c.name.clone()),
        ("created", format_unix_utc(c.created_unix_s)),
        ("volumes", c.volume_count.to_string()),
        ("provisioned", format_size(c.provisioned_bytes)),
        ("used", format_size(c.used_bytes)),
        ("quota", quota),
        ("reclaim", format_reclaim_policy(c.policy.reclaim)),
        ("reclaim burst", format_size(c.policy.reclaim_burst_bytes)),
        ("compression", c.policy.compression.to_string()),
        ("dedup", on_off(c.policy.dedup).to_string()),
        (
            "reclaim backlog",
            format_size(c.reclaim.stats.backlog_bytes),
        ),
    ])
}

/// A container's reclaim counters and state (`container show --reclaim`).
pub fn container_reclaim_details(c: &ContainerInfo) -> String {
    let r = &c.reclaim;
    let rate_limit = match (r.policy, r.rate_bytes_per_s) {
        (ReclaimPolicy::Off, _) => "none: reclaim is off".to_string(),
        (_, Some(rate)) => format_rate(rate as f64),
        (_, None) => "unlimited".to_string(),
    };
    let eta = match r.eta_s {
        Some(seconds) => format_seconds(seconds),
        None if r.policy == ReclaimPolicy::Off && !r.draining => format!(
            "never (reclaim is off: 'lacuna container reclaim {} --now')",
            c.name
        ),
        None => "unknown (no reclaim measured yet)".to_string(),
    };
    key_values(&[
        ("container", c.name.clone()),
        ("policy", format_reclaim_policy(r.policy)),
        ("rate limit", rate_limit),
        ("burst", format_size(r.burst_bytes)),
        ("unmap commands", r.stats.unmap_commands.to_string()),
        ("unmapped", exact_size(r.stats.unmapped_bytes)),
        ("reclaimed", exact_size(r.stats.reclaimed_bytes)),
        (
            "current rate",
            format!("{} (last 2 s)", format_rate(r.current_bytes_per_s)),
        ),
        ("backlog", exact_size(r.stats.backlog_bytes)),
        ("time to empty", eta),
        (
            "draining",
            if r.draining { "yes" } else { "no" }.to_string(),
        ),
    ])
}

/// Snapshots in the order given; `destroyed` adds when each goes for good.
pub fn snapshot_table(snapshots: &[SnapshotInfo], destroyed: bool) -> String {
    if snapshots.is_empty() {
        return if destroyed {
            "no destroyed snapshots".to_string()
        } else {
            "no snapshots (take one with 'lacuna snapshot create VOL --name NAME')".to_string()
        };
    }
    let rows: Vec<Vec<String>> = snapshots
        .iter()
        .map(|s| {
            let mut row = vec![
                s.full_name.clone(),
                format_size(s.size_bytes),
                format_unix_utc(s.created_unix_s),
                s.group.clone().unwrap_or_else(|| "-".to_string()),
            ];
            if destroyed {
                row.push(optional_time(s.destroyed_unix_s));
                row.push(optional_time(s.eradicate_at_unix_s));
            }
            row
        })
        .collect();
    let mut header = vec![
        ("NAME", Align::Left),
        ("SIZE", Align::Right),
        ("CREATED", Align::Left),
        ("GROUP", Align::Left),
    ];
    if destroyed {
        header.push(("DESTROYED", Align::Left));
        header.push(("ERADICATE AT", Align::Left));
    }
    table(&header, &rows)
}

pub fn snapshot_details(s: &SnapshotInfo) -> String {
    let mut pairs = vec![
        ("name", s.full_name.clone()),
        ("volume", s.volume.clone()),
        ("size", format_size(s.size_bytes)),
        ("created", format_unix_utc(s.created_unix_s)),
        ("group", s.group.clone().unwrap_or_else(|| "-".to_string())),
    ];
    if let Some(at) = s.destroyed_unix_s {
        pairs.push(("destroyed", format_unix_utc(at)));
    }
    if let Some(at) = s.eradicate_at_unix_s {
        pairs.push(("eradicate at", format_unix_utc(at)));
    }
    key_values(&pairs)
}

/// "no CHAP", "CHAP (user esx1)" or "mutual CHAP (users esx1 / array)".
pub fn chap_mode(h: &HostInfo) -> String {
    match (&h.chap_user, &h.mutual_chap_user) {
        (Some(user), Some(target)) => format!("mutual CHAP (users {user} / {target})"),
        (Some(user), None) => format!("CHAP (user {user})"),
        _ => "no CHAP".to_string(),
    }
}

fn chap_column(h: &HostInfo) -> &'static str {
    match (&h.chap_user, &h.mutual_chap_user) {
        (Some(_), Some(_)) => "mutual",
        (Some(_), None) => "one-way",
        _ => "none",
    }
}

/// Hosts with their initiators (comma-separated), CHAP mode and LUN count.
pub fn host_table(hosts: &[HostInfo]) -> String {
    if hosts.is_empty() {
        return "no hosts (create one with 'lacuna host create NAME --iqn IQN' or '--nbd-psk-key HEX')".to_string();
    }
    let rows: Vec<Vec<String>> = hosts
        .iter()
        .map(|h| {
            vec![
                h.name.clone(),
                chap_column(h).to_string(),
                if h.nbd_psk { "set" } else { "-" }.to_string(),
                h.luns.len().to_string(),
                h.iqns.join(","),
            ]
        })
        .collect();
    table(
        &[
            ("NAME", Align::Left),
            ("CHAP", Align::Left),
            ("NBD-PSK", Align::Left),
            ("LUNS", Align::Right),
            ("INITIATORS", Align::Left),
        ],
        &rows,
    )
}

/// A host's initiators and CHAP users, then its LUNs as a table.
pub fn host_details(h: &HostInfo) -> String {
    let mut pairs = vec![("name", h.name.clone())];
    for iqn in &h.iqns {
        pairs.push(("initiator", iqn.clone()));
    }
    pairs.push(("chap", chap_mode(h)));
    let nbd_psk = if h.nbd_psk { "set" } else { "none" };
    pairs.push(("nbd-psk", nbd_psk.to_string()));
    let endpoint = match h.protocol_endpoint_lun {
        Some(lun) => format!("LUN {lun}"),
        None => "none".to_string(),
    };
    pairs.push(("vVol PE", endpoint));
    let mut text = key_values(&pairs);
    text.push_str("\n\n");
    if h.luns.is_empty() {
        text.push_str(&format!(
            "no LUNs (connect a volume with 'lacuna host connect {} VOLUME')",
            h.name
        ));
        return text;
    }
    let rows: Vec<Vec<String>> = h
        .luns
        .iter()
        .map(|l| {
            vec![
                l.lun.to_string(),
                l.volume.clone(),
                l.block_size_bytes.to_string(),
                if l.read_only {
                    "read-only"
                } else {
                    "read-write"
                }
                .to_string(),
                if l.removable { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            ("LUN", Align::Right),
            ("VOLUME", Align::Left),
            ("BLOCK", Align::Right),
            ("ACCESS", Align::Left),
            ("REMOVABLE", Align::Left),
        ],
        &rows,
    ));
    text
}

pub fn space_details(s: &SpaceReport) -> String {
    let threshold = if s.soft_threshold_exceeded {
        format!("{}% of capacity: EXCEEDED", s.soft_threshold_percent)
    } else {
        format!("{}% of capacity: not reached", s.soft_threshold_percent)
    };
    let state = serde_json::to_value(s.health.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let state = std::iter::once(state)
        .chain(s.health.reasons.iter().cloned())
        .collect::<Vec<_>>()
        .join("; ");
    key_values(&[
        ("state", state),
        ("capacity", format_size(s.capacity_bytes)),
        ("physical used", format_size(s.physical_used_bytes)),
        ("  live", format_size(s.live_physical_bytes)),
        ("    volume unique", format_size(s.volume_unique_bytes)),
        ("    snapshots only", format_size(s.snapshot_bytes)),
        ("    shared", format_size(s.shared_bytes)),
        ("  stale awaiting reclaim", format_size(s.stale_bytes)),
        ("free", format_size(s.free_bytes)),
        ("reserved (thick)", format_size(s.reserved_bytes)),
        ("thin available", format_size(s.thin_available_bytes)),
        ("provisioned", format_size(s.provisioned_bytes)),
        (
            "logical data",
            settling(
                format_size(s.logical_data_bytes),
                s.written_settling_volumes > 0,
            ),
        ),
        ("reclaim backlog", format_size(s.reclaim_backlog_bytes)),
        (
            "deferred reduction",
            format!(
                "{} waiting, {} reduced",
                format_size(s.reduction_backlog_bytes),
                format_size(s.reduced_bytes)
            ),
        ),
        (
            "unmaps",
            format!(
                "{} requests, {} unmapped, {} reclaimed",
                s.unmap_commands,
                format_size(s.unmapped_bytes),
                format_size(s.reclaimed_bytes)
            ),
        ),
        (
            "write amplification",
            format!(
                "{:.2} ({} to media for {} from hosts)",
                s.write_amplification,
                format_size(s.media_written_bytes),
                format_size(s.host_written_bytes)
            ),
        ),
        ("data reduction", format_ratio(s.data_reduction_ratio)),
        ("total reduction", format_ratio(s.total_reduction_ratio)),
        ("soft threshold", threshold),
        ("soft threshold events", s.soft_threshold_events.to_string()),
        (
            "volumes",
            format!(
                "{} live, {} destroyed (recoverable)",
                s.volume_count, s.destroyed_volume_count
            ),
        ),
        ("snapshots", s.snapshot_count.to_string()),
        (
            "read errors",
            format!(
                "{} checksum, {} I/O (since start)",
                s.checksum_errors, s.read_errors
            ),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(name: &str, size_bytes: u64, written_bytes: u64) -> VolumeInfo {
        VolumeInfo {
            name: name.to_string(),
            id: 1,
            size_bytes,
            written_bytes,
            thin_provisioning_percent: 100.0 * (1.0 - written_bytes as f64 / size_bytes as f64),
            logical_data_bytes: written_bytes,
            written_settling: false,
            unique_physical_bytes: written_bytes / 4,
            shared_physical_bytes: written_bytes / 16,
            data_reduction_ratio: 3.2,
            created_unix_s: 0,
            provisioning: lacuna_engine::Provisioning::Thin,
            reserved_bytes: 0,
            snapshot_count: 0,
            destroyed_unix_s: None,
            eradicate_at_unix_s: None,
            container: "default".into(),
            reclaim: Default::default(),
        }
    }

    #[test]
    fn table_aligns_left_and_right_columns() {
        let t = table(
            &[("A", Align::Left), ("BB", Align::Right), ("C", Align::Left)],
            &[
                vec!["xyz".into(), "1".into(), "".into()],
                vec!["q".into(), "22".into(), "end".into()],
            ],
        );
        assert_eq!(t, "A    BB  C\nxyz   1\nq    22  end");
    }

    #[test]
    fn table_counts_characters_not_bytes() {
        let t = table(
            &[("N", Align::Left), ("X", Align::Left)],
            &[vec!["é".into(), "1".into()], vec!["ab".into(), "2".into()]],
        );
        assert_eq!(t, "N   X\né   1\nab  2");
    }

    #[test]
    fn volume_table_has_human_sizes() {
        let t = volume_table(
            &[volume("db", 100 << 30, 3 << 29), volume("logs", 1 << 20, 0)],
            false,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("NAME"), "{t}");
        assert!(
            lines[1].contains("100 GiB") && lines[1].contains("1.5 GiB"),
            "{t}"
        );
        assert!(
            lines[1].contains("98.5%") && lines[1].contains("3.20:1"),
            "{t}"
        );
        // Right-aligned columns end at the same place.
        assert_eq!(lines[0].len(), lines[1].len(), "{t}");
        assert_eq!(lines[1].len(), lines[2].len(), "{t}");
        assert!(lines[1].contains(" thin "), "{t}");
        assert!(
            lines[0].contains("CONTAINER") && lines[1].contains(" default "),
            "{t}"
        );
        assert!(volume_table(&[], false).starts_with("no volumes"));
        assert_eq!(volume_table(&[], true), "no destroyed volumes");
    }

    #[test]
    fn volume_details_lists_every_figure() {
        let text = volume_details(&volume("db", 1 << 30, 1 << 29));
        for expected in [
            "name:              db",
            "size:              1 GiB",
            "written:           512 MiB",
            "thin_provisioning: 50.0%",
            "logical data:      512 MiB",
            "unique physical:   128 MiB",
            "shared physical:   32 MiB",
            "data reduction:    3.20:1",
            "type:              thin",
            "reserved:          0 B",
            "snapshots:         0",
            "created:           1970-01-01 00:00:00 UTC",
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "{expected:?} in\n{text}"
            );
        }
    }

    #[test]
    fn unix_times_are_utc_dates() {
        assert_eq!(format_unix_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_unix_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_unix_utc(1_709_658_249), "2024-03-05 17:04:09 UTC");
        assert_eq!(format_unix_utc(4_102_444_799), "2099-12-31 23:59:59 UTC");
        // No panic at the far end.
        assert!(format_unix_utc(u64::MAX).ends_with(" UTC"));
    }

    #[test]
    fn unix_times_past_9999_say_so() {
        assert_eq!(format_unix_utc(253_402_300_799), "9999-12-31 23:59:59 UTC");
        assert_eq!(
            format_unix_utc(253_402_300_800),
            "after 9999-12-31 23:59:59 UTC"
        );
        assert_eq!(format_unix_utc(u64::MAX), "after 9999-12-31 23:59:59 UTC");
    }

    #[test]
    fn destroyed_volumes_show_when_they_go() {
        let mut v = volume("old", 1 << 30, 0);
        v.provisioning = lacuna_engine::Provisioning::ZeroedThick;
        v.reserved_bytes = 1 << 30;
        v.snapshot_count = 2;
        v.destroyed_unix_s = Some(1_709_658_249);
        v.eradicate_at_unix_s = Some(1_709_658_249 + 86_400);
        let text = volume_details(&v);
        for expected in [
            "type:              zeroedthick",
            "reserved:          1 GiB",
            "snapshots:         2",
            "destroyed:         2024-03-05 17:04:09 UTC",
            "eradicate at:      2024-03-06 17:04:09 UTC",
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "{expected:?} in\n{text}"
            );
        }
        assert!(!volume_details(&volume("live", 512, 0)).contains("destroyed"));
        let t = volume_table(&[v], true);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[1].ends_with("2024-03-05 17:04:09 UTC  2024-03-06 17:04:09 UTC"),
            "{t}"
        );
        // Each heading starts where its column's values do.
        assert_eq!(
            lines[0].find("DESTROYED"),
            lines[1].find("2024-03-05"),
            "{t}"
        );
        assert_eq!(
            lines[0].find("ERADICATE AT"),
            lines[1].find("2024-03-06"),
            "{t}"
        );
    }

    #[test]
    fn snapshot_table_and_details() {
        let snapshot = |volume: &str, name: &str, group: Option<&str>| SnapshotInfo {
            id: 9,
            volume: volume.to_string(),
            name: name.to_string(),
            full_name: format!("{volume}@{name}"),
            size_bytes: 1 << 30,
            created_unix_s: 1_709_658_249,
            group: group.map(str::to_string),
            destroyed_unix_s: None,
            eradicate_at_unix_s: None,
        };
        let t = snapshot_table(
            &[
                snapshot("db", "s1", None),
                snapshot("logs", "g1", Some("g1")),
            ],
            false,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert_eq!(lines[0], "NAME      SIZE  CREATED                  GROUP");
        assert_eq!(lines[1], "db@s1    1 GiB  2024-03-05 17:04:09 UTC  -");
        assert_eq!(lines[2], "logs@g1  1 GiB  2024-03-05 17:04:09 UTC  g1");
        assert!(snapshot_table(&[], false).starts_with("no snapshots"));
        assert_eq!(snapshot_table(&[], true), "no destroyed snapshots");
        let mut gone = snapshot("db", "s1", None);
        gone.destroyed_unix_s = Some(0);
        gone.eradicate_at_unix_s = Some(86_400);
        let text = snapshot_details(&gone);
        assert!(text.contains("name:         db@s1"), "{text}");
        assert!(
            text.contains("eradicate at: 1970-01-02 00:00:00 UTC"),
            "{text}"
        );
        let t = snapshot_table(&[gone], true);
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .ends_with("1970-01-02 00:00:00 UTC"),
            "{t}"
        );
    }

    #[test]
    fn host_table_and_details() {
        let host = HostInfo {
            name: "esx1".into(),
            iqns: vec!["iqn.a:1".into(), "iqn.a:2".into()],
            chap_user: Some("esx1".into()),
            mutual_chap_user: None,
            nbd_psk: true,
            luns: vec![
                lacuna_api::LunInfo::new(0, "vm1", 512, false),
                lacuna_api::LunInfo::new(12, "vm1@s1", 4096, true),
            ],
            protocol_endpoint_lun: Some(255),
        };
        let t = host_table(std::slice::from_ref(&host));
        assert_eq!(
            t,
            "NAME  CHAP     NBD-PSK  LUNS  INITIATORS\nesx1  one-way  set         2  iqn.a:1,iqn.a:2"
        );
        assert!(host_table(&[]).starts_with("no hosts"));
        let text = host_details(&host);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "name:      esx1",
                "initiator: iqn.a:1",
                "initiator: iqn.a:2",
                "chap:      CHAP (user esx1)",
                "nbd-psk:   set",
                "vVol PE:   LUN 255",
                "",
                "LUN  VOLUME  BLOCK  ACCESS      REMOVABLE",
                "  0  vm1       512  read-write  no",
                " 12  vm1@s1   4096  read-only   yes",
            ],
            "{text}"
        );
        let bare = HostInfo {
            luns: vec![],
            chap_user: None,
            nbd_psk: false,
            protocol_endpoint_lun: None,
            ..host
        };
        assert!(host_details(&bare)
            .ends_with("no LUNs (connect a volume with 'lacuna host connect esx1 VOLUME')"));
        assert!(host_details(&bare).contains("chap:      no CHAP"));
        assert!(host_details(&bare).contains("nbd-psk:   none"));
        assert!(host_details(&bare).contains("vVol PE:   none"));
    }

    #[test]
    fn space_details_lists_every_figure() {
        let report = SpaceReport {
            capacity_bytes: 16 << 30,
            physical_used_bytes: 3 << 30,
            live_physical_bytes: 2 << 30,
            stale_bytes: 1 << 30,
            free_bytes: 13 << 30,
            provisioned_bytes: 1 << 40,
            logical_data_bytes: 6 << 30,
            written_settling_volumes: 0,
            reclaim_backlog_bytes: 64 << 20,
            reduction_backlog_bytes: 0,
            reduced_bytes: 0,
            data_reduction_ratio: 3.0,
            total_reduction_ratio: 341.33,
            volume_count: 2,
            segment_count: 10,
            cleaned_segments: 0,
            relocated_bytes: 0,
            writer_cleans: 0,
            punched_bytes: 0,
            reusable_freed_bytes: 0,
            reused_segment_files: 0,
            checksum_errors: 0,
            read_errors: 0,
            volume_unique_bytes: 1 << 30,
            snapshot_bytes: 512 << 20,
            shared_bytes: 512 << 20,
            reserved_bytes: 0,
            thin_available_bytes: 12 << 30,
            soft_threshold_percent: 80,
            soft_threshold_exceeded: false,
            soft_threshold_events: 0,
            snapshot_count: 1,
            destroyed_volume_count: 0,
            host_written_bytes: 0,
            media_written_bytes: 0,
            write_amplification: 0.0,
            unmap_commands: 0,
            unmapped_bytes: 0,
            reclaimed_bytes: 0,
            health: lacuna_engine::ArrayHealth {
                state: lacuna_engine::ArrayState::Degraded,
                reasons: vec!["physical use is past the soft threshold of 80% of capacity".into()],
            },
        };
        let text = space_details(&report);
        for expected in [
            "state:",
            "degraded; physical use is past the soft threshold",
            "capacity:",
            "16 GiB",
            "physical used:",
            "live:",
            "stale awaiting reclaim:",
            "free:",
            "13 GiB",
            "provisioned:",
            "1 TiB",
            "logical data:",
            "reclaim backlog:",
            "64 MiB",
            "data reduction:",
            "3.00:1",
            "total reduction:",
            "341.33:1",
            "volume unique:",
            "snapshots only:",
            "shared:",
            "reserved (thick):",
            "thin available:",
            "12 GiB",
            "soft threshold:",
            "80% of capacity: not reached",
            "soft threshold events:",
            "volumes:",
            "2 live, 0 destroyed (recoverable)",
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
        let value_columns: Vec<usize> = text
            .lines()
            .map(|l| {
                l.find(':').unwrap() + l[l.find(':').unwrap() + 1..].find(|c| c != ' ').unwrap()
            })
            .collect();
        assert!(value_columns.windows(2).all(|w| w[0] == w[1]), "{text}");
        let exceeded = SpaceReport {
            soft_threshold_exceeded: true,
            soft_threshold_events: 3,
            ..report
        };
        let text = space_details(&exceeded);
        assert!(text.contains("80% of capacity: EXCEEDED"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("soft threshold events:") && l.ends_with(" 3")),
            "{text}"
        );
    }

    fn container(name: &str, reclaim: ReclaimPolicy, eta_s: Option<f64>) -> ContainerInfo {
        let policy = lacuna_engine::ContainerPolicy {
            quota_bytes: Some(4 << 30),
            reclaim,
            ..lacuna_engine::ContainerPolicy::default()
        };
        ContainerInfo {
            name: name.to_string(),
            id: 2,
            created_unix_s: 0,
            policy,
            volume_count: 3,
            provisioned_bytes: 100 << 30,
            used_bytes: 1 << 30,
            reclaim: lacuna_engine::ContainerReclaim {
                policy: reclaim,
                rate_bytes_per_s: reclaim.bytes_per_s(),
                burst_bytes: policy.reclaim_burst_bytes,
                stats: lacuna_engine::ReclaimStats {
                    unmap_commands: 5,
                    unmapped_bytes: 3 << 20,
                    reclaimed_bytes: 1 << 20,
                    backlog_bytes: 2 << 20,
                },
                current_bytes_per_s: 12.5e6,
                eta_s,
                draining: false,
            },
        }
    }

    #[test]
    fn container_table_and_details() {
        let low = container("vms", ReclaimPolicy::Low, Some(0.08));
        let off = container("cold", ReclaimPolicy::Off, None);
        let t = container_table(&[low.clone(), off.clone()]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines,
            [
                "NAME  VOLUMES   USED  QUOTA  RECLAIM  COMPRESSION  DEDUP  BACKLOG",
                "vms         3  1 GiB  4 GiB  low      lz4          on       2 MiB",
                "cold        3  1 GiB  4 GiB  off      lz4          on       2 MiB",
            ],
            "{t}"
        );
        let text = container_details(&low);
        for expected in [
            "quota:           4 GiB (25.0% used)",
            "reclaim:         low (25.0 MB/s)",
            "reclaim burst:   256 MiB",
            "provisioned:     100 GiB",
            "volumes:         3",
            "dedup:           on",
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "{expected:?} in\n{text}"
            );
        }
        let text = container_reclaim_details(&low);
        for expected in [
            "policy:         low (25.0 MB/s)",
            "rate limit:     25.0 MB/s",
            "unmap commands: 5",
            "unmapped:       3 MiB (3145728 B)",
            "reclaimed:      1 MiB (1048576 B)",
            "backlog:        2 MiB (2097152 B)",
            "current rate:   12.5 MB/s (last 2 s)",
            "time to empty:  0.1 s",
            "draining:       no",
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "{expected:?} in\n{text}"
            );
        }
        let text = container_reclaim_details(&off);
        assert!(
            text.contains("rate limit:     none: reclaim is off"),
            "{text}"
        );
        assert!(
            text.contains(
                "time to empty:  never (reclaim is off: 'lacuna container reclaim cold --now')"
            ),
            "{text}"
        );
        let unlimited = container("u", ReclaimPolicy::Unlimited, None);
        let text = container_reclaim_details(&unlimited);
        assert!(text.contains("rate limit:     unlimited"), "{text}");
        assert!(text.contains("time to empty:  unknown"), "{text}");
        assert_eq!(
            policy_summary(&off),
            "quota 4 GiB, reclaim off, burst 256 MiB, lz4, dedup on"
        );
    }

    #[test]
    fn seconds_read_as_durations() {
        assert_eq!(format_seconds(0.0), "0 s");
        assert_eq!(format_seconds(12.5), "12.5 s");
        assert_eq!(format_seconds(250.0), "4 min 10 s");
        assert_eq!(format_seconds(12_000.0), "3 h 20 min");
        assert_eq!(format_seconds(f64::NAN), "unknown");
    }

    #[test]
    fn volume_details_show_container_and_reclaim() {
        let mut v = volume("db", 1 << 30, 1 << 29);
        v.container = "vms".into();
        v.reclaim.unmap_commands = 4;
        v.reclaim.backlog_bytes = 8 << 20;
        let text = volume_details(&v);
        for expected in [
            "container:         vms",
            "unmap commands:    4",
            "reclaim backlog:   8 MiB",
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "{expected:?} in\n{text}"
            );
        }
    }
}
