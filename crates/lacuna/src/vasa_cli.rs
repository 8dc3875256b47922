//! `lacuna vasa …`: the VASA provider from the command line, over the API —
//! where to register it in vCenter, its certificate and when it expires, its
//! sessions; a restart, and a new self-signed certificate.

use clap::Subcommand;
use lacuna_api::vasa::VasaStatus;

use crate::cli::print;
use crate::client::{Client, Method};
use crate::table::{format_unix_utc, key_values};

#[derive(Subcommand)]
pub enum VasaCommand {
    /// Where to register the provider, its certificate, sessions and alarms.
    Status {
        /// Print the provider's certificate (PEM) instead, for a client to trust.
        #[arg(long)]
        certificate: bool,
    },
    /// Restart the provider: its sessions end, vVol bindings and I/O stay.
    Restart,
    /// Replace the provider's certificate with a new self-signed one (a
    /// CA-signed one comes over VASA, from vCenter); sessions end.
    RotateCertificate,
}

pub fn run(client: &Client, command: VasaCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        VasaCommand::Status { certificate } => {
            let answer = client.call(Method::Get, "/v1/vasa", None)?;
            if certificate && !as_json {
                return print(false, &answer, |s: VasaStatus| {
                    s.certificate.pem.trim_end().to_string()
                });
            }
            print(as_json, &answer, |s: VasaStatus| human(&s))
        }
        VasaCommand::Restart => {
            let answer = client.call(Method::Post, "/v1/vasa/restart", None)?;
            print(as_json, &answer, |s: VasaStatus| {
                format!("restarted\n{}", human(&s))
            })
        }
        VasaCommand::RotateCertificate => {
            let answer = client.call(Method::Post, "/v1/vasa/certificate/rotate", None)?;
            print(as_json, &answer, |s: VasaStatus| {
                format!(
                    "new certificate {} (expires {})",
                    s.certificate.sha256_fingerprint_hex,
                    format_unix_utc(s.certificate.not_after_unix_s.max(0) as u64)
                )
            })
        }
    }
}

fn human(s: &VasaStatus) -> String {
    let cert = &s.certificate;
    let issuer = if cert.self_signed {
        "self-signed".to_string()
    } else {
        cert.issuer.clone()
    };
    let alarms = if s.alarms.is_empty() {
        "none".to_string()
    } else {
        s.alarms.join("; ")
    };
    key_values(&[
        (
            "running",
            match &s.listen {
                Some(listen) if s.running => format!("yes, on {listen}"),
                _ => "no".to_string(),
            },
        ),
        ("register in vCenter", s.version_url.clone()),
        (
            "user name",
            format!("{} (the password is the API token)", s.user_name),
        ),
        ("certificate", format!("{} ({issuer})", cert.subject)),
        (
            "expires",
            format!(
                "{} ({} days)",
                format_unix_utc(cert.not_after_unix_s.max(0) as u64),
                cert.days_left
            ),
        ),
        ("fingerprint", cert.sha256_fingerprint_hex.clone()),
        ("sessions", s.sessions.to_string()),
        ("calls in flight", s.calls_in_flight.to_string()),
        (
            "trusted clients",
            format!(
                "{} registered, {} CA certificates",
                s.registered_clients, s.ca_certificates
            ),
        ),
        ("alarms", alarms),
    ])
}
