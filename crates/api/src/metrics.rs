//! `GET /metrics`: the array's figures in the Prometheus text exposition format
//! (version 0.0.4), so a scraper can graph space, reduction and reclaim without
//! parsing the JSON API.

use std::fmt::Write;

use lacuna_engine::SpaceReport;

/// One sample: name, help text, type, value.
struct Metric {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    value: f64,
}

/// Renders the space report as Prometheus text.
pub fn render(space: &SpaceReport) -> String {
    let gauge = |name, help, value: u64| Metric {
        name,
        help,
        kind: "gauge",
        value: value as f64,
    };
    let counter = |name, help, value: u64| Metric {
        name,
        help,
        kind: "counter",
        value: value as f64,
    };
    let metrics = [
        gauge(
            "lacuna_capacity_bytes",
            "Physical capacity of the array.",
            space.capacity_bytes,
        ),
        gauge(
            "lacuna_physical_used_bytes",
            "Bytes occupied in segments (live + stale).",
            space.physical_used_bytes,
        ),
        gauge(
            "lacuna_live_physical_bytes",
            "Bytes of referenced records.",
            space.live_physical_bytes,
        ),
        gauge(
            "lacuna_stale_bytes",
            "Bytes of dead records awaiting cleaning.",
            space.stale_bytes,
        ),
        gauge(
            "lacuna_free_bytes",
            "Capacity less physical use.",
            space.free_bytes,
        ),
        gauge(
            "lacuna_volume_unique_bytes",
            "Live bytes referenced once, by one volume.",
            space.volume_unique_bytes,
        ),
        gauge(
            "lacuna_snapshot_bytes",
            "Live bytes only snapshots hold.",
            space.snapshot_bytes,
        ),
        gauge(
            "lacuna_shared_bytes",
            "Live bytes referenced more than once.",
            space.shared_bytes,
        ),
        gauge(
            "lacuna_reserved_bytes",
            "Bytes promised to thick volumes and not yet used.",
            space.reserved_bytes,
        ),
        gauge(
            "lacuna_thin_available_bytes",
            "Space thin volumes may still use.",
            space.thin_available_bytes,
        ),
        gauge(
            "lacuna_provisioned_bytes",
            "Sum of the volumes' sizes.",
            space.provisioned_bytes,
        ),
        gauge(
            "lacuna_logical_data_bytes",
            "Sum of the volumes' written bytes.",
            space.logical_data_bytes,
        ),
        gauge(
            "lacuna_reclaim_backlog_bytes",
            "Logical bytes unmapped whose old mappings are not yet dropped.",
            space.reclaim_backlog_bytes,
        ),
        gauge("lacuna_volumes", "Live volumes.", space.volume_count),
        gauge(
            "lacuna_destroyed_volumes",
            "Destroyed volumes awaiting eradication.",
            space.destroyed_volume_count,
        ),
        gauge("lacuna_snapshots", "Named snapshots.", space.snapshot_count),
        gauge("lacuna_segments", "Segment files.", space.segment_count),
        gauge(
            "lacuna_soft_threshold_exceeded",
            "1 when physical use is at or above the soft threshold.",
            u64::from(space.soft_threshold_exceeded),
        ),
        counter(
            "lacuna_soft_threshold_events_total",
            "Times physical use crossed the soft threshold upwards.",
            space.soft_threshold_events,
        ),
        counter(
            "lacuna_host_written_bytes_total",
            "Bytes hosts wrote.",
            space.host_written_bytes,
        ),
        counter(
            "lacuna_media_written_bytes_total",
            "Bytes appended to segments (host records and relocations).",
            space.media_written_bytes,
        ),
        counter(
            "lacuna_unmap_commands_total",
            "Unmap requests received (UNMAP, TRIM, unmapping WRITE SAME / WRITE ZEROES).",
            space.unmap_commands,
        ),
        counter(
            "lacuna_unmapped_bytes_total",
            "Logical bytes unmap requests covered.",
            space.unmapped_bytes,
        ),
        counter(
            "lacuna_reclaimed_bytes_total",
            "Logical bytes whose old mappings the reclaimer dropped.",
            space.reclaimed_bytes,
        ),
    ];
    let mut out = String::new();
    for m in metrics {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP {} {}", m.name, m.help);
        let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind);
        let _ = writeln!(out, "{} {}", m.name, m.value);
    }
    let ratios = [
        (
            "lacuna_data_reduction_ratio",
            "Logical data / live physical bytes.",
            space.data_reduction_ratio,
        ),
        (
            "lacuna_write_amplification_ratio",
            "Media written / host written bytes.",
            space.write_amplification,
        ),
    ];
    for (name, help, value) in ratios {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {value}");
    }
    out
}
