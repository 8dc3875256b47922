//! `lacuna scrub`: asks the running daemon to read back and verify every stored
//! record (or follows the pass already running), shows a progress bar while it
//! runs, and prints what it found: records checked, bad records, and the
//! volumes, snapshots and byte ranges that read them. Bad records make the
//! command fail, so scripts and cron notice.

use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use lacuna_engine::integrity::scrub::{ScrubReport, ScrubStart, ScrubStatus};
use lacuna_engine::space::rate::BYTES_PER_MB;
use serde_json::{json, Value};

use crate::client::{Client, Method};
use lacuna_api::size::format_size;

/// How often the status is polled while a pass runs.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A rate in (decimal) MB/s as bytes per second; refuses zero, negatives, NaN.
pub fn rate_bytes_per_s(rate_mb_per_s: f64) -> anyhow::Result<u64> {
    let bytes = rate_mb_per_s * BYTES_PER_MB as f64;
    if !(bytes >= 1.0 && bytes.is_finite()) {
        bail!("invalid scrub rate {rate_mb_per_s} MB/s: must be above zero");
    }
    Ok(bytes as u64)
}

pub fn run(client: &Client, rate_mb_per_s: Option<f64>, as_json: bool) -> anyhow::Result<()> {
    let rate = rate_mb_per_s.map(rate_bytes_per_s).transpose()?;
    let body = match rate {
        Some(rate) => json!({ "rate_bytes_per_s": rate }),
        None => json!({}),
    };
    let answer = client.call(Method::Post, "/v1/array/scrub", Some(&body))?;
    let start: ScrubStart = decode(&answer)?;
    let pass = start.report.pass;
    if !start.started {
        eprintln!("lacuna: scrub pass {pass} was running already: following it");
    }
    let report = follow(client, &start.report)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", summary(&report));
    }
    if let Some(error) = &report.error {
        bail!("scrub pass {pass} stopped early: {error}");
    }
    if report.bad_records > 0 {
        bail!(
            "scrub pass {pass} found {} bad record(s)",
            report.bad_records
        );
    }
    Ok(())
}

/// Stops the running pass and prints what it had checked.
pub fn cancel(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let answer = client.call(Method::Delete, "/v1/array/scrub", None)?;
    let report: ScrubReport = decode(&answer)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("cancelled scrub pass {}\n{}", report.pass, summary(&report));
    }
    Ok(())
}

/// Polls until pass `first.pass` has finished, drawing its progress.
fn follow(client: &Client, first: &ScrubReport) -> anyhow::Result<ScrubReport> {
    let bar = ProgressBar::new(first.bytes_total.max(1));
    bar.set_style(
        ProgressStyle::with_template(
            "scrub {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left) {msg}",
        )
        .context("progress bar template")?,
    );
    loop {
        let status: ScrubStatus = decode(&client.call(Method::Get, "/v1/array/scrub", None)?)?;
        if let Some(last) = status.last.filter(|l| l.pass == first.pass) {
            bar.finish_and_clear();
            return Ok(last);
        }
        match status.current {
            Some(current) if current.pass == first.pass => {
                bar.set_length(current.bytes_total.max(current.bytes_checked).max(1));
                bar.set_position(current.bytes_checked);
                bar.set_message(format!(
                    "{} records, {} bad",
                    current.records_checked, current.bad_records
                ));
            }
            _ => {
                bar.abandon();
                bail!(
                    "scrub pass {} is neither running nor the last finished (the daemon restarted, or another pass superseded it)",
                    first.pass
                );
            }
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn decode<T: serde::de::DeserializeOwned>(answer: &Value) -> anyhow::Result<T> {
    T::deserialize(answer)
        .context("unexpected answer from the API (is the daemon the same version as this CLI?)")
}

/// The human summary of a finished pass.
pub fn summary(report: &ScrubReport) -> String {
    let mut out = format!(
        "scrub pass {}: {} records ({}) checked, {} bad",
        report.pass,
        report.records_checked,
        format_size(report.bytes_checked),
        report.bad_records
    );
    if !report.bad.is_empty() {
        out.push_str("\nbad records:");
        for bad in &report.bad {
            out.push_str(&format!(
                "\n  block {} in segment {} at byte {}: {}",
                bad.block_id, bad.segment, bad.offset_bytes, bad.reason
            ));
        }
        if report.bad_records > report.bad.len() as u64 {
            out.push_str(&format!(
                "\n  ... and {} more",
                report.bad_records - report.bad.len() as u64
            ));
        }
    }
    if !report.affected.is_empty() {
        out.push_str("\naffected ranges:");
        for range in &report.affected {
            let mut readers = Vec::new();
            if range.live {
                readers.push(range.volume.clone());
            }
            readers.extend(range.snapshots.iter().cloned());
            out.push_str(&format!(
                "\n  {} bytes {}..{} ({}), read by {}",
                range.volume,
                range.offset_bytes,
                range.offset_bytes + range.length_bytes,
                format_size(range.length_bytes),
                readers.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_decimal_megabytes_and_positive() {
        assert_eq!(rate_bytes_per_s(25.0).unwrap(), 25_000_000);
        assert_eq!(rate_bytes_per_s(0.5).unwrap(), 500_000);
        assert!(rate_bytes_per_s(0.0).is_err());
        assert!(rate_bytes_per_s(-1.0).is_err());
        assert!(rate_bytes_per_s(f64::NAN).is_err());
    }
}
