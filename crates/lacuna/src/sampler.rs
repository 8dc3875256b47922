//! The daemon's sampler: every 5 s it reads the engine's space report, its
//! containers, scrub state and read faults (and the VASA provider's
//! certificate), hands the figures to the monitor's history, and raises the
//! events they imply in its event log.
//!
//! Why here: the monitor knows nothing of the engine; this is the one place
//! that maps the engine's reports onto the monitor's plain figures.

use std::sync::Arc;
use std::time::Duration;

use lacuna_engine::{ArrayState, Engine, SpaceReport};
use lacuna_monitor::events::{EventKind, NewEvent, Severity};
use lacuna_monitor::history::FINE_INTERVAL_S;
use lacuna_monitor::{
    Condition, ContainerTotals, Monitor, Observation, ScrubResult, SpaceFigures, Watch,
};

/// Seconds since the Unix epoch.
pub fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Samples until the task is dropped (the daemon's end).
pub async fn run(
    engine: Arc<Engine>,
    monitor: Arc<Monitor>,
    vasa: Option<Arc<lacuna_vasa::ProviderServer>>,
) {
    let mut watch = Watch::default();
    let mut tick = tokio::time::interval(Duration::from_secs(FINE_INTERVAL_S));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (engine, monitor, vasa) = (engine.clone(), monitor.clone(), vasa.clone());
        let taken = tokio::task::spawn_blocking(move || {
            let mut watch = watch;
            let result = sample(&engine, &monitor, vasa.as_deref(), &mut watch, unix_now_s());
            (watch, result)
        })
        .await;
        match taken {
            Ok((back, result)) => {
                watch = back;
                if let Err(error) = result {
                    tracing::warn!("sampling the array: {error}");
                }
            }
            Err(error) => {
                tracing::error!("the sampler failed: {error}");
                return;
            }
        }
    }
}

/// One sample: the history's observation, then the events.
fn sample(
    engine: &Engine,
    monitor: &Monitor,
    vasa: Option<&lacuna_vasa::ProviderServer>,
    watch: &mut Watch,
    now_unix_s: u64,
) -> Result<(), lacuna_monitor::EventLogError> {
    let space = engine.space();
    let containers = engine.list_containers();
    monitor.history.observe(Observation {
        unix_s: now_unix_s,
        io: monitor.io.totals(),
        space: space_figures(&space),
        containers: containers
            .iter()
            .map(|c| ContainerTotals {
                name: c.name.clone(),
                unmapped_bytes: c.reclaim.stats.unmapped_bytes,
                reclaimed_bytes: c.reclaim.stats.reclaimed_bytes,
                backlog_bytes: c.reclaim.stats.backlog_bytes,
            })
            .collect(),
        volumes: monitor.volumes.totals(),
    });
    let scrub = engine.scrub_status();
    let condition = Condition {
        used_percent: percent(space.physical_used_bytes, space.capacity_bytes),
        soft_threshold_percent: space.soft_threshold_percent,
        soft_threshold_exceeded: space.soft_threshold_exceeded,
        read_only: space.health.state == ArrayState::ReadOnly,
        fenced: (space.health.state == ArrayState::Fenced)
            .then(|| space.health.reasons.first().cloned().unwrap_or_default()),
        quota_full: containers
            .iter()
            .filter(|c| c.policy.quota_bytes.is_some_and(|q| c.used_bytes >= q))
            .map(|c| c.name.clone())
            .collect(),
        last_scrub: scrub.last.map(|r| ScrubResult {
            pass: r.pass,
            bad_records: r.bad_records,
            bytes_checked: r.bytes_checked,
            cancelled: r.cancelled,
        }),
        certificate_days_left: vasa.map(|server| {
            let not_after = server.provider().certs.info().not_after_unix_s;
            (not_after - now_unix_s as i64).div_euclid(86_400)
        }),
    };
    let mut events = watch.events(&condition);
    events.extend(read_fault_events(engine));
    events.extend(monitor.refusals.take());
    monitor.events.raise(now_unix_s, events)?;
    Ok(())
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    part as f64 * 100.0 / whole as f64
}

fn space_figures(space: &SpaceReport) -> SpaceFigures {
    SpaceFigures {
        capacity_bytes: space.capacity_bytes,
        physical_used_bytes: space.physical_used_bytes,
        volume_unique_bytes: space.volume_unique_bytes,
        snapshot_bytes: space.snapshot_bytes,
        shared_bytes: space.shared_bytes,
        reserved_bytes: space.reserved_bytes,
        free_bytes: space.free_bytes,
        provisioned_bytes: space.provisioned_bytes,
        logical_data_bytes: space.logical_data_bytes,
        data_reduction_ratio: space.data_reduction_ratio,
        thin_savings_percent: 100.0
            - percent(
                space.logical_data_bytes.min(space.provisioned_bytes),
                space.provisioned_bytes,
            ),
        reduction_backlog_bytes: space.reduction_backlog_bytes,
    }
}

/// An event per host read that failed since the last sample, with where.
fn read_fault_events(engine: &Engine) -> Vec<NewEvent> {
    use lacuna_engine::integrity::faults::ReadFaultKind;
    let (faults, not_kept) = engine.take_read_faults();
    let mut events: Vec<NewEvent> = faults
        .into_iter()
        .map(|fault| {
            let (kind, what) = match fault.kind {
                ReadFaultKind::Io => (EventKind::ReadError, "read error"),
                ReadFaultKind::Checksum => (EventKind::ChecksumError, "checksum error"),
            };
            NewEvent {
                severity: Severity::Critical,
                kind,
                message: format!(
                    "{what} reading {} bytes at offset {} of {}: {}",
                    fault.length_bytes, fault.offset_bytes, fault.volume, fault.message
                ),
                subject: Some(fault.volume),
            }
        })
        .collect();
    if not_kept > 0 {
        events.push(NewEvent {
            severity: Severity::Critical,
            kind: EventKind::ReadError,
            subject: None,
            message: format!("{not_kept} more failed reads not listed"),
        });
    }
    events
}
