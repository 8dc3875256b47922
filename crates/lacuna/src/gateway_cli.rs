//! `lacuna gateway list`: the gateways sharing the array's Ceph pool and who
//! owns each shard, as the owner's API answers it (`GET /v1/gateways`), or
//! read from the cluster itself with `--ceph-conf` and `--pool` (when no
//! gateway serves, say after a failure of all of them).

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use lacuna_api::gateways::GatewaysAnswer;

use crate::cli::print;
use crate::client::{Client, Method};
use crate::table::{table, Align};

#[derive(Subcommand, Debug)]
pub enum GatewayCommand {
    /// Gateways (owner, standby, gone) and the owner of each shard.
    List {
        /// Read the records from the cluster of this Ceph configuration
        /// instead of asking a gateway's API (needs --pool).
        #[arg(long, requires = "pool")]
        ceph_conf: Option<PathBuf>,
        /// The array's Ceph pool (with --ceph-conf).
        #[arg(long, requires = "ceph_conf")]
        pool: Option<String>,
    },
}

pub fn run(
    client: impl FnOnce() -> anyhow::Result<Client>,
    command: GatewayCommand,
    as_json: bool,
) -> anyhow::Result<()> {
    let GatewayCommand::List { ceph_conf, pool } = command;
    let answer = match (ceph_conf, pool) {
        (Some(conf), Some(pool)) => {
            let answer = crate::rados_shard::read_gateways(&conf, &pool, None)?;
            serde_json::to_value(answer).context("encoding the answer")?
        }
        _ => client()?.call(Method::Get, "/v1/gateways", None)?,
    };
    print(as_json, &answer, |a: GatewaysAnswer| gateways_table(&a))
}

fn gateways_table(answer: &GatewaysAnswer) -> String {
    let rows: Vec<Vec<String>> = answer
        .gateways
        .iter()
        .map(|g| {
            vec![
                g.gateway.clone(),
                g.state.clone(),
                g.shard.clone(),
                g.portals
                    .iter()
                    .map(|p| format!("{} {}", p.service, p.address))
                    .collect::<Vec<_>>()
                    .join(", "),
                format!("{:.1} s", g.last_seen_ms_ago as f64 / 1000.0),
                g.address.clone(),
            ]
        })
        .collect();
    let mut out = format!("pool {}\n", answer.pool);
    out += &table(
        &[
            ("GATEWAY", Align::Left),
            ("STATE", Align::Left),
            ("SHARD", Align::Left),
            ("PORTALS", Align::Left),
            ("SEEN", Align::Right),
            ("ADDRESS", Align::Left),
        ],
        &rows,
    );
    for shard in &answer.shards {
        out += &format!(
            "\n{}: owned by {}",
            shard.shard,
            match (&shard.owner, &shard.owner_address) {
                (Some(owner), Some(address)) => format!("{owner} ({address})"),
                (Some(owner), None) => owner.clone(),
                _ => "no gateway".into(),
            }
        );
    }
    out
}
