//! The CLI's commands: each is one API call, printed as a table or key: value
//! lines (or the API's JSON with `--json`).

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use clap::Subcommand;
use serde_json::{json, Value};

use crate::size::{format_size, parse_size};

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Create a thin volume.
    Create {
        name: String,
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// List volumes.
    List,
    /// Show one volume's space figures.
    Show { name: String },
    /// Grow or shrink a volume.
    Resize {
        name: String,
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Delete a volume (its space comes back in the background).
    Delete { name: String },
}

#[derive(Subcommand)]
pub enum ArrayCommand {
    /// Capacity, physical use, stale space awaiting reclaim, free space, reduction.
    Space,
}

pub struct Client {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(api: &str, token: Option<String>, data_dir: &Path) -> anyhow::Result<Client> {
        let token = match token {
            Some(t) => t,
            None => {
                let path = data_dir.join("api-token");
                std::fs::read_to_string(&path)
                    .map(|t| t.trim().to_string())
                    .with_context(|| {
                        format!(
                            "no API token: cannot read {} (use --token or --data-dir)",
                            path.display()
                        )
                    })?
            }
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(60)))
            .build()
            .into();
        Ok(Client {
            base: api.trim_end_matches('/').to_string(),
            token,
            agent,
        })
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{}", self.base, path);
        let auth = format!("Bearer {}", self.token);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("Authorization", &auth)
                .call(),
            ("POST", Some(b)) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_json(b),
            ("PATCH", Some(b)) => self
                .agent
                .patch(&url)
                .header("Authorization", &auth)
                .send_json(b),
            _ => unreachable!("every call site passes a body where needed"),
        };
        let mut response = response.map_err(|e| {
            anyhow!(
                "cannot reach the Lacuna API at {} (is 'lacuna serve' running?): {e}",
                self.base
            )
        })?;
        let status = response.status();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let value: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let message = value
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            bail!("{message}");
        }
        Ok(value)
    }

    pub fn volume(&self, command: VolumeCommand, as_json: bool) -> anyhow::Result<()> {
        match command {
            VolumeCommand::Create { name, size } => {
                let v = self.call(
                    "POST",
                    "/v1/volumes",
                    Some(json!({ "name": name, "size_bytes": size })),
                )?;
                print_or(as_json, &v, || {
                    format!("created volume {} ({})", name, format_size(size))
                });
            }
            VolumeCommand::List => {
                let v = self.call("GET", "/v1/volumes", None)?;
                print_or(as_json, &v, || volume_table(&v));
            }
            VolumeCommand::Show { name } => {
                let v = self.call("GET", &format!("/v1/volumes/{name}"), None)?;
                print_or(as_json, &v, || volume_details(&v));
            }
            VolumeCommand::Resize { name, size } => {
                let v = self.call(
                    "PATCH",
                    &format!("/v1/volumes/{name}"),
                    Some(json!({ "size_bytes": size })),
                )?;
                print_or(as_json, &v, || {
                    format!("resized volume {} to {}", name, format_size(size))
                });
            }
            VolumeCommand::Delete { name } => {
                self.call("DELETE", &format!("/v1/volumes/{name}"), None)?;
                print_or(as_json, &json!({ "deleted": name }), || {
                    format!("deleted volume {name}")
                });
            }
        }
        Ok(())
    }

    pub fn array(&self, command: ArrayCommand, as_json: bool) -> anyhow::Result<()> {
        match command {
            ArrayCommand::Space => {
                let v = self.call("GET", "/v1/array/space", None)?;
                print_or(as_json, &v, || space_details(&v));
            }
        }
        Ok(())
    }
}

fn print_or(as_json: bool, value: &Value, human: impl FnOnce() -> String) {
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).expect("JSON values print")
        );
    } else {
        println!("{}", human());
    }
}

fn bytes(v: &Value, key: &str) -> String {
    format_size(v[key].as_u64().unwrap_or(0))
}

fn ratio(v: &Value, key: &str) -> String {
    format!("{:.2}:1", v[key].as_f64().unwrap_or(1.0))
}

/// Renders rows as left-aligned columns.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(header.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}

fn volume_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|vol| {
            vec![
                vol["name"].as_str().unwrap_or("?").to_string(),
                bytes(vol, "size_bytes"),
                bytes(vol, "written_bytes"),
                format!(
                    "{:.1}%",
                    vol["thin_provisioning_percent"].as_f64().unwrap_or(0.0)
                ),
                ratio(vol, "data_reduction_ratio"),
            ]
        })
        .collect();
    table(&["NAME", "SIZE", "WRITTEN", "THIN", "REDUCTION"], &rows)
}

fn volume_details(v: &Value) -> String {
    [
        ("name", v["name"].as_str().unwrap_or("?").to_string()),
        ("size", bytes(v, "size_bytes")),
        ("written", bytes(v, "written_bytes")),
        (
            "thin_provisioning",
            format!(
                "{:.2}%",
                v["thin_provisioning_percent"].as_f64().unwrap_or(0.0)
            ),
        ),
        ("logical data", bytes(v, "logical_data_bytes")),
        ("unique physical", bytes(v, "unique_physical_bytes")),
        ("shared physical", bytes(v, "shared_physical_bytes")),
        ("data reduction", ratio(v, "data_reduction_ratio")),
    ]
    .iter()
    .map(|(k, val)| format!("{:<18} {val}", format!("{k}:")))
    .collect::<Vec<_>>()
    .join("\n")
}

fn space_details(v: &Value) -> String {
    [
        ("capacity", bytes(v, "capacity_bytes")),
        ("physical used", bytes(v, "physical_used_bytes")),
        ("  live", bytes(v, "live_physical_bytes")),
        ("  stale (reclaim)", bytes(v, "stale_bytes")),
        ("free", bytes(v, "free_bytes")),
        ("provisioned", bytes(v, "provisioned_bytes")),
        ("logical data", bytes(v, "logical_data_bytes")),
        ("reclaim backlog", bytes(v, "reclaim_backlog_bytes")),
        ("data reduction", ratio(v, "data_reduction_ratio")),
        ("total reduction", ratio(v, "total_reduction_ratio")),
        ("volumes", v["volume_count"].to_string()),
    ]
    .iter()
    .map(|(k, val)| format!("{:<20} {val}", format!("{k}:")))
    .collect::<Vec<_>>()
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["A", "BB"],
            &[
                vec!["xyz".into(), "1".into()],
                vec!["q".into(), "22".into()],
            ],
        );
        assert_eq!(t, "A    BB\nxyz  1\nq    22");
    }

    #[test]
    fn details_show_thin_provisioning() {
        let v = json!({"name": "v", "size_bytes": 1u64 << 30, "written_bytes": 1u64 << 29, "thin_provisioning_percent": 50.0,
            "logical_data_bytes": 1u64 << 29, "unique_physical_bytes": 1u64 << 28, "shared_physical_bytes": 0, "data_reduction_ratio": 2.0});
        let text = volume_details(&v);
        assert!(text.contains("thin_provisioning: 50.00%"), "{text}");
        assert!(text.contains("data reduction:    2.00:1"), "{text}");
    }
}
