//! Human renderings of API answers: aligned tables and `key: value` blocks, with
//! sizes in binary units.

use lacuna_engine::{SpaceReport, VolumeInfo};

use crate::size::format_size;

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

pub fn format_percent(percent: f64) -> String {
    format!("{percent:.1}%")
}

pub fn volume_table(volumes: &[VolumeInfo]) -> String {
    if volumes.is_empty() {
        return "no volumes (create one with 'lacuna volume create NAME --size 10G')".to_string();
    }
    let rows: Vec<Vec<String>> = volumes
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                format_size(v.size_bytes),
                format_size(v.written_bytes),
                format_percent(v.thin_provisioning_percent),
                format_size(v.unique_physical_bytes + v.shared_physical_bytes),
                format_ratio(v.data_reduction_ratio),
            ]
        })
        .collect();
    table(
        &[
            ("NAME", Align::Left),
            ("SIZE", Align::Right),
            ("WRITTEN", Align::Right),
            ("THIN", Align::Right),
            ("PHYSICAL", Align::Right),
            ("REDUCTION", Align::Right),
        ],
        &rows,
    )
}

pub fn volume_details(v: &VolumeInfo) -> String {
    key_values(&[
        ("name", v.name.clone()),
        ("size", format_size(v.size_bytes)),
        ("written", format_size(v.written_bytes)),
        (
            "thin_provisioning",
            format_percent(v.thin_provisioning_percent),
        ),
        ("logical data", format_size(v.logical_data_bytes)),
        ("unique physical", format_size(v.unique_physical_bytes)),
        ("shared physical", format_size(v.shared_physical_bytes)),
        ("data reduction", format_ratio(v.data_reduction_ratio)),
    ])
}

pub fn space_details(s: &SpaceReport) -> String {
    key_values(&[
        ("capacity", format_size(s.capacity_bytes)),
        ("physical used", format_size(s.physical_used_bytes)),
        ("  live", format_size(s.live_physical_bytes)),
        ("  stale awaiting reclaim", format_size(s.stale_bytes)),
        ("free", format_size(s.free_bytes)),
        ("provisioned", format_size(s.provisioned_bytes)),
        ("logical data", format_size(s.logical_data_bytes)),
        ("reclaim backlog", format_size(s.reclaim_backlog_bytes)),
        ("data reduction", format_ratio(s.data_reduction_ratio)),
        ("total reduction", format_ratio(s.total_reduction_ratio)),
        ("volumes", s.volume_count.to_string()),
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
            unique_physical_bytes: written_bytes / 4,
            shared_physical_bytes: written_bytes / 16,
            data_reduction_ratio: 3.2,
            created_unix_s: 0,
            provisioning: lacuna_engine::Provisioning::Thin,
            reserved_bytes: 0,
            snapshot_count: 0,
            destroyed_unix_s: None,
            eradicate_at_unix_s: None,
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
        let t = volume_table(&[volume("db", 100 << 30, 3 << 29), volume("logs", 1 << 20, 0)]);
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
        assert!(volume_table(&[]).starts_with("no volumes"));
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
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "{expected:?} in\n{text}"
            );
        }
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
            reclaim_backlog_bytes: 64 << 20,
            data_reduction_ratio: 3.0,
            total_reduction_ratio: 341.33,
            volume_count: 2,
            segment_count: 10,
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
        };
        let text = space_details(&report);
        for expected in [
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
    }
}
