//! `lacuna array history` and `lacuna event list|ack`: the daemon's history of
//! figures and its event log, as tables (or the API's JSON with `--json`).

use anyhow::Context;
use clap::{Args, Subcommand};
use lacuna_api::monitor::{EventsAnswer, HistoryAnswer};
use lacuna_monitor::{Direction, Event, Protocol, Sample};
use serde_json::Value;

use crate::cli::print;
use crate::client::{Client, Method};
use crate::table::{format_rate, format_ratio, format_unix_utc, table, Align};
use lacuna_api::size::format_size;

/// `lacuna array history`.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// `hour` (5 s samples) or `day` (1 min samples).
    #[arg(long, default_value = "hour", value_parser = ["hour", "day"])]
    pub window: String,
    /// Only the last N samples.
    #[arg(long, default_value_t = 12)]
    pub last: usize,
}

#[derive(Subcommand, Debug)]
pub enum EventCommand {
    /// The event log, oldest first: soft threshold, space, read and checksum
    /// errors, scrub results, fencing, refused hosts, certificate expiry.
    List {
        /// Only events not acknowledged.
        #[arg(long)]
        open: bool,
        /// Only events with a larger id.
        #[arg(long)]
        after: Option<u64>,
        /// At most this many (the newest), 1 to 1000.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Acknowledge events by id.
    Ack {
        #[arg(required = true)]
        ids: Vec<u64>,
    },
}

pub fn run_history(client: &Client, args: HistoryArgs, as_json: bool) -> anyhow::Result<()> {
    let answer = client.call(
        Method::Get,
        &format!("/v1/array/history?window={}", args.window),
        None,
    )?;
    print(as_json, &answer, |h: HistoryAnswer| {
        history_table(&h.samples[h.samples.len().saturating_sub(args.last)..])
    })
}

fn lane(sample: &Sample, protocol: Protocol, direction: Direction) -> (f64, f64, u64) {
    sample
        .io
        .iter()
        .find(|f| f.protocol == protocol && f.direction == direction)
        .map_or((0.0, 0.0, 0), |f| (f.iops, f.bytes_per_s, f.latency_p99_us))
}

fn history_table(samples: &[Sample]) -> String {
    if samples.is_empty() {
        return "no samples yet (the daemon samples every 5 s)".to_string();
    }
    let rows: Vec<Vec<String>> = samples
        .iter()
        .map(|s| {
            let mut iops = 0.0;
            let mut rate = [0.0, 0.0];
            let mut p99 = [0u64, 0];
            for protocol in Protocol::ALL {
                for (i, direction) in Direction::ALL.into_iter().enumerate() {
                    let (ops, bytes, lane_p99) = lane(s, protocol, direction);
                    iops += ops;
                    rate[i] += bytes;
                    p99[i] = p99[i].max(lane_p99);
                }
            }
            let reclaim: f64 = s.containers.iter().map(|c| c.reclaim_bytes_per_s).sum();
            vec![
                format_unix_utc(s.unix_s),
                format!("{iops:.0}"),
                format_rate(rate[0]),
                format_rate(rate[1]),
                format!("{} µs", p99[0]),
                format!("{} µs", p99[1]),
                format_size(s.space.physical_used_bytes),
                format_size(s.space.free_bytes),
                format_ratio(s.space.data_reduction_ratio),
                format_rate(reclaim),
            ]
        })
        .collect();
    use Align::{Left, Right};
    table(
        &[
            ("TIME (UTC)", Left),
            ("IOPS", Right),
            ("READ", Right),
            ("WRITE", Right),
            ("READ P99", Right),
            ("WRITE P99", Right),
            ("USED", Right),
            ("FREE", Right),
            ("REDUCTION", Right),
            ("RECLAIM", Right),
        ],
        &rows,
    )
}

pub fn run_event(client: &Client, command: EventCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        EventCommand::List { open, after, limit } => {
            let mut path = format!("/v1/events?open={open}&limit={limit}");
            if let Some(after) = after {
                path.push_str(&format!("&after_id={after}"));
            }
            let answer = client.call(Method::Get, &path, None)?;
            print(as_json, &answer, |e: EventsAnswer| events_table(&e))
        }
        EventCommand::Ack { ids } => {
            let mut acknowledged: Vec<Value> = Vec::new();
            for id in ids {
                let answer = client
                    .call(Method::Post, &format!("/v1/events/{id}/acknowledge"), None)
                    .with_context(|| format!("acknowledging event {id}"))?;
                acknowledged.push(answer);
            }
            let all = Value::Array(acknowledged);
            print(as_json, &all, |events: Vec<Event>| {
                let ids: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
                format!("acknowledged {}", ids.join(", "))
            })
        }
    }
}

fn events_table(answer: &EventsAnswer) -> String {
    let rows: Vec<Vec<String>> = answer
        .events
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                format_unix_utc(e.unix_s),
                format!("{:?}", e.severity).to_lowercase(),
                serde_json::to_value(e.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                if e.acknowledged_unix_s.is_some() {
                    "acknowledged"
                } else {
                    "open"
                }
                .to_string(),
                e.message.clone(),
            ]
        })
        .collect();
    use Align::{Left, Right};
    let listing = table(
        &[
            ("ID", Right),
            ("TIME (UTC)", Left),
            ("SEVERITY", Left),
            ("KIND", Left),
            ("STATE", Left),
            ("MESSAGE", Left),
        ],
        &rows,
    );
    format!(
        "{listing}\nopen: {} critical, {} warnings",
        answer.open_critical, answer.open_warnings
    )
}
