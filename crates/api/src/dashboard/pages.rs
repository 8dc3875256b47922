//! The dashboard's pages, rendered on the server from the same figures the
//! API answers: overview (capacity, reduction, I/O plots, open alerts),
//! volumes, and events with acknowledge. Every figure a test compares with
//! the API carries it exactly in a `data-` attribute beside its rendering.

use lacuna_engine::SpaceReport;
use lacuna_monitor::{Direction, Event, Sample};
use maud::{html, Markup, DOCTYPE};

use super::plot::{time_plot, Series};

/// Binary units, as the CLI prints them.
pub use crate::size::format_size as size;

const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#1f3a5f;color:#fff;display:flex;flex-wrap:wrap;align-items:center;gap:1rem;padding:.5rem 1rem}
header a{color:#fff;text-decoration:none}header a.here{text-decoration:underline}
header form{margin-left:auto}main{padding:1rem;max-width:72rem;margin:auto}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(16rem,1fr));gap:1rem}
section{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:1rem;margin-bottom:1rem;overflow-x:auto}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #eee}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.plot svg{width:100%;height:10rem;background:#fbfcfd}.plot polyline{fill:none;stroke-width:1.5}
.plot .axis{stroke:#999}.read{stroke:#2a7ab0;color:#2a7ab0}.write{stroke:#c0562a;color:#c0562a}
.legend{list-style:none;padding:0;display:flex;gap:1rem;flex-wrap:wrap;font-size:.9rem}
.bar{display:flex;height:1.5rem;border-radius:4px;overflow:hidden;background:#e9edf1}
.bar span{display:block}.unique{background:#2a7ab0}.snapshot{background:#7a5ab0}.shared{background:#3aa57a}
.reserved{background:#c0a02a}form.action{margin:.5rem 0}input,select,button{font:inherit;margin:.15rem 0}
@media(max-width:40rem){main{padding:.5rem}td,th{padding:.2rem}}.critical{color:#b00020}.warning{color:#8a5a00}
";

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " — Lacuna" }
            style { (maud::PreEscaped(STYLE)) }
        }
    }
}

/// The page around `body`: navigation, sign-out (with the session's
/// anti-forgery token).
pub fn layout(title: &str, here: &str, csrf: &str, body: Markup) -> Markup {
    let nav = [
        ("/", "Overview"),
        ("/volumes", "Volumes"),
        ("/vvols", "vVols"),
        ("/containers", "Containers"),
        ("/hosts", "Hosts"),
        ("/events", "Events"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header {
                    strong { "Lacuna" }
                    @for (path, name) in nav {
                        a href=(path) class=[(path == here).then_some("here")] { (name) }
                    }
                    form method="post" action="/logout" {
                        input type="hidden" name="csrf" value=(csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

pub fn login(message: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("Sign in"))
            body {
                main {
                    h1 { "Lacuna" }
                    section {
                        form method="post" action="/login" {
                            p { label for="token" { "API token" } " (in the data directory's " code { "api-token" } ")" }
                            p { input #token type="password" name="token" autocomplete="current-password" required; }
                            @if let Some(message) = message { p.critical #message { (message) } }
                            button type="submit" { "Sign in" }
                        }
                    }
                }
            }
        }
    }
}

fn capacity_bar(space: &SpaceReport) -> Markup {
    let parts = [
        ("unique", "volume-unique", space.volume_unique_bytes),
        ("snapshot", "snapshot-only", space.snapshot_bytes),
        ("shared", "shared", space.shared_bytes),
        ("reserved", "reserved", space.reserved_bytes),
    ];
    let whole = space.capacity_bytes.max(1) as f64;
    html! {
        div.bar role="img" aria-label="capacity" {
            @for (class, _, bytes) in parts {
                span class=(class) style=(format!("width:{:.2}%", bytes as f64 * 100.0 / whole)) {}
            }
        }
        table {
            @for (class, name, bytes) in parts {
                tr { td { span class=(class) { "■ " } (name) } td.n data-figure=(name) data-bytes=(bytes) { (size(bytes)) } }
            }
            tr { td { "free" } td.n data-figure="free" data-bytes=(space.free_bytes) { (size(space.free_bytes)) } }
            tr { td { "capacity" } td.n data-figure="capacity" data-bytes=(space.capacity_bytes) { (size(space.capacity_bytes)) } }
        }
    }
}

/// The sum over protocols of one direction's figure, per sample.
fn per_direction(
    samples: &[Sample],
    direction: Direction,
    figure: fn(&lacuna_monitor::IoFigures) -> f64,
) -> Vec<(u64, f64)> {
    samples
        .iter()
        .map(|s| {
            let sum =
                s.io.iter()
                    .filter(|f| f.direction == direction)
                    .map(figure)
                    .sum();
            (s.unix_s, sum)
        })
        .collect()
}

fn io_plots(samples: &[Sample]) -> Markup {
    let two = |figure: fn(&lacuna_monitor::IoFigures) -> f64| {
        [
            Series {
                name: "read",
                class: "read",
                points: per_direction(samples, Direction::Read, figure),
            },
            Series {
                name: "write",
                class: "write",
                points: per_direction(samples, Direction::Write, figure),
            },
        ]
    };
    let worst = |direction| -> Vec<(u64, f64)> {
        samples
            .iter()
            .map(|s| {
                let p99 =
                    s.io.iter()
                        .filter(|f| f.direction == direction)
                        .map(|f| f.latency_p99_us)
                        .max()
                        .unwrap_or(0);
                (s.unix_s, p99 as f64)
            })
            .collect()
    };
    let latency = [
        Series {
            name: "read p99",
            class: "read",
            points: worst(Direction::Read),
        },
        Series {
            name: "write p99",
            class: "write",
            points: worst(Direction::Write),
        },
    ];
    html! {
        div.cards {
            (time_plot("IOPS", &two(|f| f.iops), |v| format!("{v:.0}")))
            (time_plot("Bandwidth", &two(|f| f.bytes_per_s), |v| format!("{}/s", size(v as u64))))
            (time_plot("Latency (p99)", &latency, |v| format!("{v:.0} µs")))
        }
    }
}

fn events_table(events: &[Event], csrf: &str) -> Markup {
    html! {
        table #events {
            tr { th { "id" } th { "when (UTC)" } th { "severity" } th { "what" } th { "" } }
            @for e in events.iter().rev() {
                tr data-event=(e.id) {
                    td.n { (e.id) }
                    td { (utc(e.unix_s)) }
                    td class=(format!("{:?}", e.severity).to_lowercase()) { (format!("{:?}", e.severity).to_lowercase()) }
                    td { (e.message) }
                    td {
                        @if e.acknowledged_unix_s.is_some() { "acknowledged" } @else {
                            form method="post" action=(format!("/events/{}/acknowledge", e.id)) {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Acknowledge" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `2026-12-02 21:20:05`, in UTC.
pub fn utc(unix_s: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_s);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .trim_end_matches('Z')
        .replace('T', " ")
}

pub fn overview(space: &SpaceReport, samples: &[Sample], open: &[Event], csrf: &str) -> Markup {
    let thin = if space.provisioned_bytes > 0 {
        100.0
            - space.logical_data_bytes.min(space.provisioned_bytes) as f64 * 100.0
                / space.provisioned_bytes as f64
    } else {
        0.0
    };
    html! {
        div.cards {
            section #capacity { h2 { "Capacity" } (capacity_bar(space)) }
            section #reduction {
                h2 { "Data reduction" }
                p { span.big data-figure="data_reduction_ratio" data-value=(space.data_reduction_ratio) { (format!("{:.2}:1", space.data_reduction_ratio)) } " data reduction" }
                p { span data-figure="thin_savings_percent" data-value=(format!("{thin:.1}")) { (format!("{thin:.1}%")) } " of provisioned space never written (thin savings)" }
                p { "state: " strong data-figure="state" { (format!("{:?}", space.health.state).to_lowercase()) } }
                p { span data-figure="reclaim_backlog" data-bytes=(space.reclaim_backlog_bytes) { (size(space.reclaim_backlog_bytes)) } " unmapped, not yet reclaimed" }
                @if space.reduction_backlog_bytes > 0 {
                    p { span data-figure="reduction_backlog" data-bytes=(space.reduction_backlog_bytes) { (size(space.reduction_backlog_bytes)) } " written raw, compressed in the background" }
                }
            }
        }
        section #performance { h2 { "Performance, last hour" } (io_plots(samples)) }
        section #alerts {
            h2 { "Open alerts" }
            @if open.is_empty() { p { "None." } } @else { (events_table(open, csrf)) }
        }
    }
}

pub fn events(events: &[Event], csrf: &str) -> Markup {
    html! { section { (events_table(events, csrf)) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_764_710_405), "2025-12-02 21:20:05");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
    }

    #[test]
    fn what_a_page_shows_is_escaped() {
        let page = layout("t", "/", "c", html! { p { ("<script>x</script>") } }).into_string();
        assert!(
            page.contains("&lt;script&gt;") && !page.contains("<script>"),
            "{page}"
        );
    }
}
