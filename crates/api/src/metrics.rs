//! `GET /metrics`: the array's figures in the Prometheus text exposition format
//! (version 0.0.4), so a scraper can graph space, reduction and reclaim without
//! parsing the JSON API.

use std::fmt::Write;

use lacuna_engine::{ContainerInfo, ReclaimPolicy, SpaceReport, VolumeInfo};

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
            "lacuna_written_settling_volumes",
            "Volumes whose written bytes a background job is still working out (may yet fall).",
            space.written_settling_volumes,
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
        counter(
            "lacuna_cleaned_segments_total",
            "Segments the cleaner emptied.",
            space.cleaned_segments,
        ),
        counter(
            "lacuna_relocated_bytes_total",
            "Live bytes the cleaner relocated.",
            space.relocated_bytes,
        ),
        counter(
            "lacuna_writer_cleans_total",
            "Cleaning passes host writes ran because background cleaning fell behind.",
            space.writer_cleans,
        ),
        counter(
            "lacuna_punched_bytes_total",
            "Bytes of freed records punched out of segment files.",
            space.punched_bytes,
        ),
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
        counter(
            "lacuna_checksum_errors_total",
            "Records that failed verification when read (the host got an error, never the bytes).",
            space.checksum_errors,
        ),
        counter(
            "lacuna_read_errors_total",
            "Segment reads the filesystem failed (EIO).",
            space.read_errors,
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

/// A sample's value: integers are printed exactly (byte counters pass 2^53
/// long before they pass u64), rates and times as floats.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(u64),
    Float(f64),
}

impl Value {
    /// The exposition format spells the special floats `+Inf`, `-Inf`, `NaN`.
    fn text(self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Float(x) if x.is_nan() => "NaN".to_string(),
            Value::Float(x) if x == f64::INFINITY => "+Inf".to_string(),
            Value::Float(x) if x == f64::NEG_INFINITY => "-Inf".to_string(),
            Value::Float(x) => x.to_string(),
        }
    }
}

/// A label value escaped per the text format: backslash, double quote and line
/// feed are the three characters that need it.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape_label_value(value)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// One labelled family: HELP and TYPE once, then a sample per item that has a
/// value (`None` leaves the item's sample out: the value is unknown).
fn family<T>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    items: &[T],
    sample: impl Fn(&T) -> Option<(String, Value)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for item in items {
        if let Some((labels, value)) = sample(item) {
            let _ = writeln!(out, "{name}{labels} {}", value.text());
        }
    }
}

/// The reclaim rate a policy allows: 0 for `off`, `+Inf` for `unlimited`.
pub fn rate_limit_bytes_per_s(policy: ReclaimPolicy) -> f64 {
    match (policy, policy.bytes_per_s()) {
        (ReclaimPolicy::Off, _) => 0.0,
        (_, Some(rate)) => rate as f64,
        (_, None) => f64::INFINITY,
    }
}

/// Per-container and per-volume series, labelled `container="…"` (and
/// `volume="…"`; `volumes` holds the live and the destroyed-recoverable ones,
/// whose dead space is a real backlog too). Counters run since the daemon
/// started, like the array's.
///
/// Choices a scraper should know: `lacuna_container_reclaim_eta_seconds` is
/// left out for a container whose backlog never empties at its policy (`off`)
/// or whose rate cannot be told yet, rather than sent as NaN or +Inf, so that
/// `max()` and alerts over it see only real estimates; the rate limit is 0 for
/// `off` and +Inf for `unlimited`; `lacuna_container_quota_bytes` is left out
/// for a container without a quota; `lacuna_container_reclaim_policy` is an
/// info series (value 1) whose `policy` label is the policy as the CLI prints it.
pub fn render_containers(containers: &[ContainerInfo], volumes: &[VolumeInfo]) -> String {
    let mut out = String::new();
    let by_container = |c: &ContainerInfo| labels(&[("container", &c.name)]);
    type ContainerFigure = fn(&ContainerInfo) -> Option<Value>;
    let container_families: [(&str, &str, &str, ContainerFigure); 13] = [
        (
            "lacuna_container_volumes",
            "gauge",
            "Volumes in the container (live and destroyed-recoverable).",
            |c| Some(Value::Int(c.volume_count)),
        ),
        (
            "lacuna_container_provisioned_bytes",
            "gauge",
            "Sum of the container's volume sizes.",
            |c| Some(Value::Int(c.provisioned_bytes)),
        ),
        (
            "lacuna_container_used_bytes",
            "gauge",
            "Bytes counted against the quota: written data plus thick reservations.",
            |c| Some(Value::Int(c.used_bytes)),
        ),
        (
            "lacuna_container_quota_bytes",
            "gauge",
            "The container's quota (no sample when it has none).",
            |c| c.policy.quota_bytes.map(Value::Int),
        ),
        (
            "lacuna_container_unmap_commands_total",
            "counter",
            "Unmap requests received by the container's volumes (UNMAP, TRIM, unmapping WRITE SAME / WRITE ZEROES).",
            |c| Some(Value::Int(c.reclaim.stats.unmap_commands)),
        ),
        (
            "lacuna_container_unmapped_bytes_total",
            "counter",
            "Logical bytes those unmap requests covered.",
            |c| Some(Value::Int(c.reclaim.stats.unmapped_bytes)),
        ),
        (
            "lacuna_container_reclaimed_bytes_total",
            "counter",
            "Bytes of dead data the reclaimer released for the container.",
            |c| Some(Value::Int(c.reclaim.stats.reclaimed_bytes)),
        ),
        (
            "lacuna_container_reclaim_bytes_per_second",
            "gauge",
            "Bytes reclaimed per second over the last 2 s (sliding window).",
            |c| Some(Value::Float(c.reclaim.current_bytes_per_s)),
        ),
        (
            "lacuna_container_reclaim_backlog_bytes",
            "gauge",
            "Dead bytes not yet reclaimed.",
            |c| Some(Value::Int(c.reclaim.stats.backlog_bytes)),
        ),
        (
            "lacuna_container_reclaim_eta_seconds",
            "gauge",
            "Estimated seconds until the backlog is empty (no sample when it never will be, reclaim off, or cannot be told yet).",
            |c| c.reclaim.eta_s.map(Value::Float),
        ),
        (
            "lacuna_container_reclaim_rate_limit_bytes_per_second",
            "gauge",
            "Reclaim rate the policy allows: 0 for off, +Inf for unlimited.",
            |c| Some(Value::Float(rate_limit_bytes_per_s(c.reclaim.policy))),
        ),
        (
            "lacuna_container_reclaim_burst_bytes",
            "gauge",
            "Reclaim allowance spent before the rate applies, refilled while idle.",
            |c| Some(Value::Int(c.reclaim.burst_bytes)),
        ),
        (
            "lacuna_container_reclaim_draining",
            "gauge",
            "1 while 'reclaim --now' works the backlog off regardless of the policy.",
            |c| Some(Value::Int(u64::from(c.reclaim.draining))),
        ),
    ];
    for (name, kind, help, figure) in container_families {
        family(&mut out, name, kind, help, containers, |c| {
            figure(c).map(|v| (by_container(c), v))
        });
    }
    family(
        &mut out,
        "lacuna_container_reclaim_policy",
        "gauge",
        "The reclaim policy in force (off, low, unlimited or a rate such as 2000MB/s), as the label; always 1.",
        containers,
        |c| {
            let policy = c.reclaim.policy.to_string();
            let labels = labels(&[("container", &c.name), ("policy", &policy)]);
            Some((labels, Value::Int(1)))
        },
    );
    let by_volume = |v: &VolumeInfo| labels(&[("volume", &v.name), ("container", &v.container)]);
    type VolumeFigure = fn(&VolumeInfo) -> u64;
    let volume_families: [(&str, &str, &str, VolumeFigure); 4] = [
        (
            "lacuna_volume_unmap_commands_total",
            "counter",
            "Unmap requests the volume received.",
            |v| v.reclaim.unmap_commands,
        ),
        (
            "lacuna_volume_unmapped_bytes_total",
            "counter",
            "Logical bytes the volume's unmap requests covered.",
            |v| v.reclaim.unmapped_bytes,
        ),
        (
            "lacuna_volume_reclaimed_bytes_total",
            "counter",
            "Bytes of the volume's dead data the reclaimer released.",
            |v| v.reclaim.reclaimed_bytes,
        ),
        (
            "lacuna_volume_reclaim_backlog_bytes",
            "gauge",
            "The volume's dead bytes not yet reclaimed.",
            |v| v.reclaim.backlog_bytes,
        ),
    ];
    for (name, kind, help, figure) in volume_families {
        family(&mut out, name, kind, help, volumes, |v| {
            Some((by_volume(v), Value::Int(figure(v))))
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value("plain-name_1.x"), "plain-name_1.x");
        assert_eq!(escape_label_value("a\"b"), "a\\\"b");
        assert_eq!(escape_label_value("a\\b"), "a\\\\b");
        assert_eq!(escape_label_value("a\nb"), "a\\nb");
        assert_eq!(
            labels(&[("container", "c\"1"), ("policy", "low")]),
            "{container=\"c\\\"1\",policy=\"low\"}"
        );
    }

    #[test]
    fn special_floats_use_the_exposition_spelling() {
        assert_eq!(Value::Float(f64::INFINITY).text(), "+Inf");
        assert_eq!(Value::Float(f64::NEG_INFINITY).text(), "-Inf");
        assert_eq!(Value::Float(f64::NAN).text(), "NaN");
        assert_eq!(Value::Float(12.5).text(), "12.5");
        assert_eq!(Value::Int(u64::MAX).text(), "18446744073709551615");
    }

    #[test]
    fn rate_limits_by_policy() {
        assert_eq!(rate_limit_bytes_per_s(ReclaimPolicy::Off), 0.0);
        assert_eq!(rate_limit_bytes_per_s(ReclaimPolicy::Low), 25e6);
        assert_eq!(
            rate_limit_bytes_per_s(ReclaimPolicy::Fixed {
                bytes_per_s: 2_000_000_000
            }),
            2e9
        );
        assert_eq!(
            rate_limit_bytes_per_s(ReclaimPolicy::Unlimited),
            f64::INFINITY
        );
    }
}
