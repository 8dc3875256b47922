//! `GET /metrics`: the array's figures in the Prometheus text exposition format
//! (version 0.0.4), so a scraper can graph space, reduction and reclaim without
//! parsing the JSON API. The figures are read from the engine at each scrape
//! and encoded by `prometheus-client` as constant samples.

use std::fmt;

use lacuna_engine::{ContainerInfo, ReclaimPolicy, SpaceReport, VolumeInfo};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, CounterValueEncoder, DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue,
    EncodeMetric, GaugeValueEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The text of `GET /metrics`: the space report, then every container's and
/// volume's figures.
pub fn render(
    space: &SpaceReport,
    containers: &[ContainerInfo],
    volumes: &[VolumeInfo],
    vvols: Option<&VvolFigures>,
    vasa: Option<&VasaFigures>,
) -> String {
    let mut families = array_families(space);
    families.push(state_family(space));
    families.extend(container_families(containers, volumes));
    if let Some(vvols) = vvols {
        families.extend(vvol_families(vvols));
    }
    if let Some(vasa) = vasa {
        families.extend(vasa_families(vasa));
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(families)));
    let mut text = String::new();
    prometheus_text::encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

/// The vVol service's figures at one scrape.
#[derive(Debug, Clone, Default)]
pub struct VvolFigures {
    /// (container, type, count)
    pub counts: Vec<(String, &'static str, u64)>,
    pub bindings: u64,
    pub operations: u64,
    pub faults: u64,
    pub busy: u64,
    pub binds: u64,
    pub unbinds: u64,
    pub snapshots_committed: u64,
    pub last_commit_window_us: u64,
}

impl VvolFigures {
    pub fn of(service: &lacuna_vvol::VvolService) -> VvolFigures {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = &service.stats;
        VvolFigures {
            counts: service
                .counts()
                .into_iter()
                .map(|(container, kind, n)| (container, kind.as_str(), n))
                .collect(),
            bindings: service.binding_count() as u64,
            operations: stats.operations.load(Relaxed),
            faults: stats.faults.load(Relaxed),
            busy: stats.busy.load(Relaxed),
            binds: stats.binds.load(Relaxed),
            unbinds: stats.unbinds.load(Relaxed),
            snapshots_committed: stats.snapshots_committed.load(Relaxed),
            last_commit_window_us: stats.last_commit_window_us.load(Relaxed),
        }
    }
}

fn vvol_families(v: &VvolFigures) -> Vec<Family> {
    let counter =
        |name, help, value: u64| single(name, MetricType::Counter, help, Value::Int(value));
    vec![
        Family {
            name: "lacuna_vvols",
            kind: MetricType::Gauge,
            help: "vVols by storage container and type.",
            samples: v
                .counts
                .iter()
                .map(|(container, kind, n)| {
                    let labels = vec![("container", container.clone()), ("type", kind.to_string())];
                    (labels, Value::Int(*n))
                })
                .collect(),
        },
        single(
            "lacuna_vvol_bindings",
            MetricType::Gauge,
            "vVols bound, counted once per host.",
            Value::Int(v.bindings),
        ),
        counter(
            "lacuna_vvol_operations_total",
            "vVol operations answered.",
            v.operations,
        ),
        counter(
            "lacuna_vvol_faults_total",
            "vVol operations that answered a fault.",
            v.faults,
        ),
        counter(
            "lacuna_vvol_busy_total",
            "vVol requests refused as busy (too many in flight for a host).",
            v.busy,
        ),
        counter("lacuna_vvol_binds_total", "vVols bound.", v.binds),
        counter("lacuna_vvol_unbinds_total", "vVols unbound.", v.unbinds),
        counter(
            "lacuna_vvol_snapshots_committed_total",
            "Snapshot vVols committed.",
            v.snapshots_committed,
        ),
        single(
            "lacuna_vvol_last_commit_window_seconds",
            MetricType::Gauge,
            "How long writes were held by the last batch snapshot commit.",
            Value::Float(v.last_commit_window_us as f64 / 1e6),
        ),
    ]
}

/// The VASA provider's figures at one scrape.
#[derive(Debug, Clone, Default)]
pub struct VasaFigures {
    pub running: bool,
    pub sessions: u64,
    pub calls_in_flight: u64,
    pub calls: u64,
    pub faults: u64,
    pub busy: u64,
    pub sessions_created: u64,
    pub certificate_not_after_unix_s: i64,
    pub alarms: u64,
}

impl VasaFigures {
    pub fn of(server: &lacuna_vasa::ProviderServer) -> VasaFigures {
        use std::sync::atomic::Ordering::Relaxed;
        let provider = server.provider();
        let stats = &provider.stats;
        VasaFigures {
            running: server.local_addr().is_some(),
            sessions: provider.sessions.len() as u64,
            calls_in_flight: u64::from(provider.sessions.in_flight()),
            calls: stats.calls.load(Relaxed),
            faults: stats.faults.load(Relaxed),
            busy: stats.busy.load(Relaxed),
            sessions_created: stats.sessions_created.load(Relaxed),
            certificate_not_after_unix_s: provider.certs.info().not_after_unix_s,
            alarms: provider.alarms.active().len() as u64,
        }
    }
}

fn vasa_families(v: &VasaFigures) -> Vec<Family> {
    let counter =
        |name, help, value: u64| single(name, MetricType::Counter, help, Value::Int(value));
    let gauge = |name, help, value: u64| single(name, MetricType::Gauge, help, Value::Int(value));
    vec![
        gauge(
            "lacuna_vasa_up",
            "1 while the VASA provider listens.",
            u64::from(v.running),
        ),
        gauge("lacuna_vasa_sessions", "VASA sessions open.", v.sessions),
        gauge(
            "lacuna_vasa_calls_in_flight",
            "VASA calls being answered.",
            v.calls_in_flight,
        ),
        counter("lacuna_vasa_calls_total", "VASA calls answered.", v.calls),
        counter(
            "lacuna_vasa_faults_total",
            "VASA calls that answered a fault.",
            v.faults,
        ),
        counter(
            "lacuna_vasa_busy_total",
            "VASA calls refused as VasaProviderBusy.",
            v.busy,
        ),
        counter(
            "lacuna_vasa_sessions_created_total",
            "VASA sessions made by setContext.",
            v.sessions_created,
        ),
        gauge(
            "lacuna_vasa_certificate_expiry_timestamp_seconds",
            "When the provider's certificate expires, seconds since the Unix epoch.",
            v.certificate_not_after_unix_s.max(0) as u64,
        ),
        gauge(
            "lacuna_vasa_alarms",
            "VASA alarms raised and not cleared (certificate expiry).",
            v.alarms,
        ),
    ]
}

/// A sample's labels, in the order they are written.
type Labels = Vec<(&'static str, String)>;

/// One metric family: HELP and TYPE once, then its samples. A counter's name
/// ends in `_total` (prometheus-client adds the suffix to what it is given).
#[derive(Debug)]
struct Family {
    name: &'static str,
    kind: MetricType,
    help: &'static str,
    samples: Vec<(Labels, Value)>,
}

/// The families of one scrape, as constant samples.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for family in &self.0 {
            let name = match family.kind {
                MetricType::Counter => family
                    .name
                    .strip_suffix("_total")
                    .expect("a counter's name ends in _total"),
                _ => family.name,
            };
            let mut metric = encoder.encode_descriptor(name, family.help, None, family.kind)?;
            for (labels, value) in &family.samples {
                let sample = metric.encode_family(labels)?;
                match family.kind {
                    MetricType::Counter => ConstCounter::new(*value).encode(sample)?,
                    _ => ConstGauge::new(*value).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

/// An unlabelled family of one sample.
fn single(name: &'static str, kind: MetricType, help: &'static str, value: Value) -> Family {
    Family {
        name,
        kind,
        help,
        samples: vec![(Labels::new(), value)],
    }
}

/// The array's state, one sample per state with 1 on the current one, so an
/// alert can be `lacuna_array_state{state="fenced"} == 1`.
fn state_family(space: &SpaceReport) -> Family {
    use lacuna_engine::ArrayState;
    let states = [
        (ArrayState::Ok, "ok"),
        (ArrayState::Degraded, "degraded"),
        (ArrayState::ReadOnly, "read_only"),
        (ArrayState::Fenced, "fenced"),
    ];
    Family {
        name: "lacuna_array_state",
        kind: MetricType::Gauge,
        help:
            "1 for the array's current state (ok, degraded, read_only, fenced), 0 for the others.",
        samples: states
            .iter()
            .map(|(state, label)| {
                let current = u64::from(space.health.state == *state);
                (vec![("state", label.to_string())], Value::Int(current))
            })
            .collect(),
    }
}

/// The space report's families.
fn array_families(space: &SpaceReport) -> Vec<Family> {
    let gauge = |name, help, value: u64| single(name, MetricType::Gauge, help, Value::Int(value));
    let counter =
        |name, help, value: u64| single(name, MetricType::Counter, help, Value::Int(value));
    let ratio = |name, help, value: f64| single(name, MetricType::Gauge, help, Value::Float(value));
    vec![
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
        gauge(
            "lacuna_reduction_backlog_bytes",
            "Bytes of records stored raw, waiting for the background reducer to compress them.",
            space.reduction_backlog_bytes,
        ),
        counter(
            "lacuna_reduced_bytes_total",
            "Bytes of raw records the background reducer compressed.",
            space.reduced_bytes,
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
            "lacuna_reusable_freed_bytes",
            "Bytes of freed segment files kept for reuse by new segments.",
            space.reusable_freed_bytes,
        ),
        counter(
            "lacuna_reused_segment_files_total",
            "New segments written into a freed segment's file.",
            space.reused_segment_files,
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
        ratio(
            "lacuna_data_reduction_ratio",
            "Logical data / live physical bytes.",
            space.data_reduction_ratio,
        ),
        ratio(
            "lacuna_write_amplification_ratio",
            "Media written / host written bytes.",
            space.write_amplification,
        ),
    ]
}

/// A sample's value: integers are written exactly (byte counters pass 2^53
/// long before they pass u64), rates and times as floats (`+Inf`, `-Inf` and
/// `NaN` spelt so); a float with no fraction as an integer (`25000000`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(u64),
    Float(f64),
}

impl EncodeGaugeValue for Value {
    fn encode(&self, encoder: &mut GaugeValueEncoder) -> fmt::Result {
        match *self {
            Value::Int(n) => EncodeGaugeValue::encode(&n, encoder),
            Value::Float(x) if x.fract() == 0.0 && x.abs() < i64::MAX as f64 => {
                EncodeGaugeValue::encode(&(x as i64), encoder)
            }
            Value::Float(x) => EncodeGaugeValue::encode(&x, encoder),
        }
    }
}

impl EncodeCounterValue for Value {
    fn encode(&self, encoder: &mut CounterValueEncoder) -> fmt::Result {
        match *self {
            Value::Int(n) => EncodeCounterValue::encode(&n, encoder),
            Value::Float(x) => EncodeCounterValue::encode(&x, encoder),
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
fn container_families(containers: &[ContainerInfo], volumes: &[VolumeInfo]) -> Vec<Family> {
    let by_container = |c: &ContainerInfo| vec![("container", c.name.clone())];
    type ContainerFigure = fn(&ContainerInfo) -> Option<Value>;
    let container_families: [(&str, MetricType, &str, ContainerFigure); 13] = [
        (
            "lacuna_container_volumes",
            MetricType::Gauge,
            "Volumes in the container (live and destroyed-recoverable).",
            |c| Some(Value::Int(c.volume_count)),
        ),
        (
            "lacuna_container_provisioned_bytes",
            MetricType::Gauge,
            "Sum of the container's volume sizes.",
            |c| Some(Value::Int(c.provisioned_bytes)),
        ),
        (
            "lacuna_container_used_bytes",
            MetricType::Gauge,
            "Bytes counted against the quota: written data plus thick reservations.",
            |c| Some(Value::Int(c.used_bytes)),
        ),
        (
            "lacuna_container_quota_bytes",
            MetricType::Gauge,
            "The container's quota (no sample when it has none).",
            |c| c.policy.quota_bytes.map(Value::Int),
        ),
        (
            "lacuna_container_unmap_commands_total",
            MetricType::Counter,
            "Unmap requests received by the container's volumes (UNMAP, TRIM, unmapping WRITE SAME / WRITE ZEROES).",
            |c| Some(Value::Int(c.reclaim.stats.unmap_commands)),
        ),
        (
            "lacuna_container_unmapped_bytes_total",
            MetricType::Counter,
            "Logical bytes those unmap requests covered.",
            |c| Some(Value::Int(c.reclaim.stats.unmapped_bytes)),
        ),
        (
            "lacuna_container_reclaimed_bytes_total",
            MetricType::Counter,
            "Bytes of dead data the reclaimer released for the container.",
            |c| Some(Value::Int(c.reclaim.stats.reclaimed_bytes)),
        ),
        (
            "lacuna_container_reclaim_bytes_per_second",
            MetricType::Gauge,
            "Bytes reclaimed per second over the last 2 s (sliding window).",
            |c| Some(Value::Float(c.reclaim.current_bytes_per_s)),
        ),
        (
            "lacuna_container_reclaim_backlog_bytes",
            MetricType::Gauge,
            "Dead bytes not yet reclaimed.",
            |c| Some(Value::Int(c.reclaim.stats.backlog_bytes)),
        ),
        (
            "lacuna_container_reclaim_eta_seconds",
            MetricType::Gauge,
            "Estimated seconds until the backlog is empty (no sample when it never will be, reclaim off, or cannot be told yet).",
            |c| c.reclaim.eta_s.map(Value::Float),
        ),
        (
            "lacuna_container_reclaim_rate_limit_bytes_per_second",
            MetricType::Gauge,
            "Reclaim rate the policy allows: 0 for off, +Inf for unlimited.",
            |c| Some(Value::Float(rate_limit_bytes_per_s(c.reclaim.policy))),
        ),
        (
            "lacuna_container_reclaim_burst_bytes",
            MetricType::Gauge,
            "Reclaim allowance spent before the rate applies, refilled while idle.",
            |c| Some(Value::Int(c.reclaim.burst_bytes)),
        ),
        (
            "lacuna_container_reclaim_draining",
            MetricType::Gauge,
            "1 while 'reclaim --now' works the backlog off regardless of the policy.",
            |c| Some(Value::Int(u64::from(c.reclaim.draining))),
        ),
    ];
    let mut families: Vec<Family> = container_families
        .into_iter()
        .map(|(name, kind, help, figure)| Family {
            name,
            kind,
            help,
            samples: containers
                .iter()
                .filter_map(|c| figure(c).map(|v| (by_container(c), v)))
                .collect(),
        })
        .collect();
    families.push(Family {
        name: "lacuna_container_reclaim_policy",
        kind: MetricType::Gauge,
        help: "The reclaim policy in force (off, low, unlimited or a rate such as 2000MB/s), as the label; always 1.",
        samples: containers
            .iter()
            .map(|c| {
                let labels = vec![
                    ("container", c.name.clone()),
                    ("policy", c.reclaim.policy.to_string()),
                ];
                (labels, Value::Int(1))
            })
            .collect(),
    });
    let by_volume = |v: &VolumeInfo| {
        vec![
            ("volume", v.name.clone()),
            ("container", v.container.clone()),
        ]
    };
    type VolumeFigure = fn(&VolumeInfo) -> u64;
    let volume_families: [(&str, MetricType, &str, VolumeFigure); 4] = [
        (
            "lacuna_volume_unmap_commands_total",
            MetricType::Counter,
            "Unmap requests the volume received.",
            |v| v.reclaim.unmap_commands,
        ),
        (
            "lacuna_volume_unmapped_bytes_total",
            MetricType::Counter,
            "Logical bytes the volume's unmap requests covered.",
            |v| v.reclaim.unmapped_bytes,
        ),
        (
            "lacuna_volume_reclaimed_bytes_total",
            MetricType::Counter,
            "Bytes of the volume's dead data the reclaimer released.",
            |v| v.reclaim.reclaimed_bytes,
        ),
        (
            "lacuna_volume_reclaim_backlog_bytes",
            MetricType::Gauge,
            "The volume's dead bytes not yet reclaimed.",
            |v| v.reclaim.backlog_bytes,
        ),
    ];
    families.extend(
        volume_families
            .into_iter()
            .map(|(name, kind, help, figure)| Family {
                name,
                kind,
                help,
                samples: volumes
                    .iter()
                    .map(|v| (by_volume(v), Value::Int(figure(v))))
                    .collect(),
            }),
    );
    families
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of one family, encoded.
    fn encoded(family: Family) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape(vec![family])));
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn vvol_figures_are_labelled_by_container_and_type() {
        let figures = VvolFigures {
            counts: vec![("default".into(), "Config", 3), ("gold".into(), "Data", 5)],
            bindings: 4,
            busy: 2,
            last_commit_window_us: 250,
            ..VvolFigures::default()
        };
        let text: String = vvol_families(&figures).into_iter().map(encoded).collect();
        assert!(
            text.contains("lacuna_vvols{container=\"default\",type=\"Config\"} 3"),
            "{text}"
        );
        assert!(text.contains("lacuna_vvols{container=\"gold\",type=\"Data\"} 5"));
        assert!(text.contains("lacuna_vvol_bindings 4"));
        assert!(text.contains("lacuna_vvol_busy_total 2"));
        assert!(text.contains("lacuna_vvol_last_commit_window_seconds 0.00025"));
    }

    #[test]
    fn vasa_figures_name_the_certificate_expiry_and_the_refusals() {
        let figures = VasaFigures {
            running: true,
            sessions: 3,
            calls: 40,
            faults: 5,
            busy: 2,
            sessions_created: 7,
            certificate_not_after_unix_s: 1_900_000_000,
            ..VasaFigures::default()
        };
        let text: String = vasa_families(&figures).into_iter().map(encoded).collect();
        for line in [
            "lacuna_vasa_up 1",
            "lacuna_vasa_sessions 3",
            "lacuna_vasa_calls_total 40",
            "lacuna_vasa_faults_total 5",
            "lacuna_vasa_busy_total 2",
            "lacuna_vasa_sessions_created_total 7",
            "lacuna_vasa_certificate_expiry_timestamp_seconds 1900000000",
            "lacuna_vasa_alarms 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    fn sample_text(value: Value) -> String {
        let text = encoded(single("x", MetricType::Gauge, "X.", value));
        text.lines()
            .last()
            .unwrap()
            .strip_prefix("x ")
            .unwrap()
            .to_string()
    }

    #[test]
    fn label_values_are_escaped() {
        let sample = |container: &str| {
            let text = encoded(Family {
                name: "lacuna_container_reclaim_policy",
                kind: MetricType::Gauge,
                help: "Policy.",
                samples: vec![(
                    vec![
                        ("container", container.to_string()),
                        ("policy", "low".into()),
                    ],
                    Value::Int(1),
                )],
            });
            text.lines().last().unwrap().to_string()
        };
        let line = |escaped: &str| {
            format!("lacuna_container_reclaim_policy{{container=\"{escaped}\",policy=\"low\"}} 1")
        };
        assert_eq!(sample("plain-name_1.x"), line("plain-name_1.x"));
        assert_eq!(sample("a\"b"), line("a\\\"b"));
        assert_eq!(sample("a\\b"), line("a\\\\b"));
        assert_eq!(sample("a\nb"), line("a\\nb"));
        assert_eq!(sample("c\"1"), line("c\\\"1"));
    }

    #[test]
    fn each_family_has_its_help_and_type_and_a_counter_its_total() {
        let text = encoded(single(
            "lacuna_read_errors_total",
            MetricType::Counter,
            "Segment reads the filesystem failed (EIO).",
            Value::Int(7),
        ));
        assert_eq!(
            text,
            "# HELP lacuna_read_errors_total Segment reads the filesystem failed (EIO).\n\
             # TYPE lacuna_read_errors_total counter\n\
             lacuna_read_errors_total 7\n"
        );
    }

    #[test]
    fn special_floats_use_the_exposition_spelling() {
        assert_eq!(sample_text(Value::Float(f64::INFINITY)), "+Inf");
        assert_eq!(sample_text(Value::Float(f64::NEG_INFINITY)), "-Inf");
        assert_eq!(sample_text(Value::Float(f64::NAN)), "NaN");
        assert_eq!(sample_text(Value::Float(12.5)), "12.5");
        assert_eq!(sample_text(Value::Float(25e6)), "25000000");
        assert_eq!(sample_text(Value::Int(u64::MAX)), "18446744073709551615");
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
