//! Certificates: the provider's own (a self-signed one made at first start,
//! replaced by a CA-signed one or rotated, without a restart), and the
//! clients it trusts (certificates vCenter registered, and CAs with their
//! revocation lists).
//!
//! TLS accepts any client certificate and proves only that the client holds
//! its key; whether it is trusted is asked per call ([`Certificates::is_trusted_client`]),
//! so that registering one — the first call a vCenter makes — needs no trust
//! yet, and everything after it does. A change of the provider certificate
//! bumps [`Certificates::generation`]: connections made under the old one
//! close after their current request and sessions made under it end.
//!
//! Everything is kept in `<data dir>/vasa/` as PEM files, each replaced
//! whole (written beside, synced, renamed).

mod files;
mod verify;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::fault::Fault;

pub use verify::AnyClientCertificate;

/// How long a self-signed provider certificate is valid.
pub const SELF_SIGNED_DAYS: i64 = 365;
/// Most client certificates, CA certificates and CRLs kept (each).
pub const MAX_TRUSTED: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// What the provider's certificate says, for the CLI and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CertificateInfo {
    pub subject: String,
    pub issuer: String,
    pub serial_hex: String,
    pub not_before_unix_s: i64,
    pub not_after_unix_s: i64,
    pub sha256_fingerprint_hex: String,
    pub self_signed: bool,
}

struct State {
    key_pem: String,
    chain_pem: String,
    certified: Arc<CertifiedKey>,
    info: CertificateInfo,
    clients: Vec<CertificateDer<'static>>,
    ca_roots: Vec<CertificateDer<'static>>,
    crls: Vec<CertificateRevocationListDer<'static>>,
}

pub struct Certificates {
    dir: PathBuf,
    /// The names a new self-signed certificate carries (host names, addresses).
    names: Vec<String>,
    state: RwLock<State>,
    generation: AtomicU64,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates")
            .field("dir", &self.dir)
            .field("generation", &self.generation())
            .finish()
    }
}

fn invalid(message: impl Into<String>) -> Fault {
    Fault::new("InvalidCertificate", message)
}

pub(crate) fn now_unix_s() -> i64 {
    crate::now_unix_s() as i64
}

/// Parses PEM certificates (one or more).
pub fn parse_certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, Fault> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid("no certificate in the PEM text"));
    }
    for cert in &certs {
        x509_parser::parse_x509_certificate(cert)
            .map_err(|e| invalid(format!("not an X.509 certificate: {e}")))?;
    }
    Ok(certs)
}

fn parse_crls(pems: &[&str]) -> Result<Vec<CertificateRevocationListDer<'static>>, Fault> {
    let mut out = Vec::new();
    for pem in pems {
        let crls = CertificateRevocationListDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("not a PEM CRL: {e}")))?;
        if crls.is_empty() {
            return Err(invalid("no CRL in the PEM text"));
        }
        for crl in &crls {
            <x509_parser::revocation_list::CertificateRevocationList as x509_parser::prelude::FromDer<_>>::from_der(crl)
                .map_err(|e| invalid(format!("not an X.509 CRL: {e}")))?;
        }
        out.extend(crls);
    }
    Ok(out)
}

/// The facts of a certificate.
pub fn describe(cert: &CertificateDer) -> Result<CertificateInfo, Fault> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| invalid(format!("not an X.509 certificate: {e}")))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert);
    Ok(CertificateInfo {
        subject: x509.subject().to_string(),
        issuer: x509.issuer().to_string(),
        serial_hex: x509.raw_serial_as_string(),
        not_before_unix_s: x509.validity().not_before.timestamp(),
        not_after_unix_s: x509.validity().not_after.timestamp(),
        sha256_fingerprint_hex: hex::encode(digest.as_ref()),
        self_signed: x509.subject() == x509.issuer(),
    })
}

/// Whether a certificate is valid now.
fn check_valid_now(cert: &CertificateDer) -> Result<CertificateInfo, Fault> {
    let info = describe(cert)?;
    let now = now_unix_s();
    if now < info.not_before_unix_s || now > info.not_after_unix_s {
        return Err(invalid(format!(
            "certificate '{}' is not valid now (valid {} to {})",
            info.subject,
            crate::codec::format_date_time(info.not_before_unix_s),
            crate::codec::format_date_time(info.not_after_unix_s)
        )));
    }
    Ok(info)
}

fn to_pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn certified_key(
    key_pem: &str,
    chain: Vec<CertificateDer<'static>>,
) -> Result<Arc<CertifiedKey>, Fault> {
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| Fault::storage(format!("the provider key: {e}")))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| Fault::storage(format!("the provider key: {e}")))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// A new key and a self-signed certificate for `names`.
fn self_signed(names: &[String]) -> Result<(String, String), Fault> {
    let key = rcgen::KeyPair::generate().map_err(|e| Fault::storage(format!("a new key: {e}")))?;
    let mut params = provider_params(names)?;
    // Its own issuer: OpenSSL clients (Python's, ESXi's) take a self-signed
    // certificate as a trust anchor only when it says it may sign.
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    let cert = params
        .self_signed(&key)
        .map_err(|e| Fault::storage(format!("a self-signed certificate: {e}")))?;
    Ok((key.serialize_pem(), cert.pem()))
}

fn provider_params(names: &[String]) -> Result<rcgen::CertificateParams, Fault> {
    let mut params = rcgen::CertificateParams::new(names.to_vec())
        .map_err(|e| Fault::storage(format!("certificate names {names:?}: {e}")))?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, "Lacuna VASA provider");
    dn.push(rcgen::DnType::OrganizationName, "Lacuna");
    params.distinguished_name = dn;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(SELF_SIGNED_DAYS);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    Ok(params)
}

impl Certificates {
    /// Opens (or at first start makes) the certificates in `dir`.
    pub fn open(dir: &Path, names: Vec<String>) -> Result<Arc<Certificates>, CertError> {
        files::create_dir(dir)?;
        let (key_pem, chain_pem) = match files::read(dir, files::IDENTITY)? {
            Some(text) => files::split_identity(&text).ok_or_else(|| {
                CertError::Invalid(format!("{}: no private key", files::IDENTITY))
            })?,
            None => {
                let (key_pem, chain_pem) =
                    self_signed(&names).map_err(|f| CertError::Invalid(f.message))?;
                files::write(
                    dir,
                    files::IDENTITY,
                    &files::identity_text(&key_pem, &chain_pem),
                )?;
                (key_pem, chain_pem)
            }
        };
        // The public copy lags the identity after a crash between the two writes.
        if files::read(dir, files::CERT)?.as_deref() != Some(chain_pem.as_str()) {
            files::write(dir, files::CERT, &chain_pem)?;
        }
        let load = |name: &str| -> Result<Vec<CertificateDer<'static>>, CertError> {
            match files::read(dir, name)? {
                Some(pem) if !pem.trim().is_empty() => parse_certificates(&pem)
                    .map_err(|f| CertError::Invalid(format!("{name}: {}", f.message))),
                _ => Ok(Vec::new()),
            }
        };
        let chain = parse_certificates(&chain_pem)
            .map_err(|f| CertError::Invalid(format!("{}: {}", files::IDENTITY, f.message)))?;
        let clients = load(files::CLIENTS)?;
        let ca_roots = load(files::CA)?;
        let crls = match files::read(dir, files::CRLS)? {
            Some(pem) if !pem.trim().is_empty() => {
                parse_crls(&[&pem]).map_err(|f| CertError::Invalid(f.message))?
            }
            _ => Vec::new(),
        };
        let first = chain
            .first()
            .ok_or_else(|| CertError::Invalid(format!("{}: no certificate", files::IDENTITY)))?;
        let info = describe(first).map_err(|f| CertError::Invalid(f.message))?;
        let certified =
            certified_key(&key_pem, chain).map_err(|f| CertError::Invalid(f.message))?;
        Ok(Arc::new(Certificates {
            dir: dir.to_path_buf(),
            names,
            state: RwLock::new(State {
                key_pem,
                chain_pem,
                certified,
                info,
                clients,
                ca_roots,
                crls,
            }),
            generation: AtomicU64::new(1),
        }))
    }

    /// Increases whenever the provider certificate changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The key and chain TLS presents now.
    pub fn certified_key(&self) -> Arc<CertifiedKey> {
        self.state.read().certified.clone()
    }

    pub fn info(&self) -> CertificateInfo {
        self.state.read().info.clone()
    }

    /// The provider certificate chain, PEM.
    pub fn provider_certificate_pem(&self) -> String {
        self.state.read().chain_pem.clone()
    }

    pub fn client_count(&self) -> usize {
        self.state.read().clients.len()
    }

    pub fn ca_certificates_pem(&self) -> Vec<String> {
        self.state
            .read()
            .ca_roots
            .iter()
            .map(|c| to_pem("CERTIFICATE", c))
            .collect()
    }

    pub fn crls_pem(&self) -> Vec<String> {
        self.state
            .read()
            .crls
            .iter()
            .map(|c| to_pem("X509 CRL", c))
            .collect()
    }

    fn install(&self, key_pem: String, chain_pem: String) -> Result<(), Fault> {
        let chain = parse_certificates(&chain_pem)?;
        let info = describe(&chain[0])?;
        let certified = certified_key(&key_pem, chain)?;
        let io = |e: CertError| Fault::storage(e.to_string());
        files::write(
            &self.dir,
            files::IDENTITY,
            &files::identity_text(&key_pem, &chain_pem),
        )
        .map_err(io)?;
        files::write(&self.dir, files::CERT, &chain_pem).map_err(io)?;
        let mut state = self.state.write();
        state.key_pem = key_pem;
        state.chain_pem = chain_pem;
        state.certified = certified;
        state.info = info;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// A new key and self-signed certificate, in place of the current ones.
    pub fn rotate_self_signed(&self) -> Result<CertificateInfo, Fault> {
        let (key_pem, cert_pem) = self_signed(&self.names)?;
        self.install(key_pem, cert_pem)?;
        Ok(self.info())
    }

    /// A certificate signing request for the provider's key (VASA `requestCSR`).
    pub fn request_csr(&self) -> Result<String, Fault> {
        let key_pem = self.state.read().key_pem.clone();
        let key = rcgen::KeyPair::from_pem(&key_pem)
            .map_err(|e| Fault::storage(format!("the provider key: {e}")))?;
        let params = provider_params(&self.names)?;
        let csr = params
            .serialize_request(&key)
            .map_err(|e| Fault::storage(format!("a CSR: {e}")))?;
        csr.pem().map_err(|e| Fault::storage(format!("a CSR: {e}")))
    }

    /// Installs a CA-signed certificate (and its chain) for the provider's
    /// key. Without `force_apply` one that expires before the current one is
    /// refused.
    pub fn install_signed(
        &self,
        chain_pem: &str,
        force_apply: bool,
    ) -> Result<CertificateInfo, Fault> {
        let chain = parse_certificates(chain_pem)?;
        let info = check_valid_now(&chain[0])?;
        let key_pem = self.state.read().key_pem.clone();
        let key = rcgen::KeyPair::from_pem(&key_pem)
            .map_err(|e| Fault::storage(format!("the provider key: {e}")))?;
        let (_, x509) = x509_parser::parse_x509_certificate(&chain[0])
            .map_err(|e| invalid(format!("not an X.509 certificate: {e}")))?;
        if x509.public_key().raw != rcgen::PublicKeyData::subject_public_key_info(&key).as_slice() {
            return Err(invalid(
                "the certificate is not for the provider's key (sign the CSR requestCSR answers)",
            ));
        }
        let current = self.info();
        if !force_apply && info.not_after_unix_s < current.not_after_unix_s {
            return Err(invalid(format!(
                "the certificate expires before the current one ({}); forceApply to install it anyway",
                crate::codec::format_date_time(current.not_after_unix_s)
            )));
        }
        self.install(key_pem, chain_pem.to_string())?;
        Ok(self.info())
    }

    /// Trusts a client certificate (VASA `registerVASACertificate`).
    pub fn register_client(&self, pem: &str) -> Result<CertificateInfo, Fault> {
        let certs = parse_certificates(pem)?;
        let info = check_valid_now(&certs[0])?;
        let mut state = self.state.write();
        if !state.clients.contains(&certs[0]) {
            if state.clients.len() >= MAX_TRUSTED {
                return Err(invalid(format!(
                    "{MAX_TRUSTED} client certificates are registered"
                )));
            }
            state.clients.push(certs[0].clone());
            self.persist_clients(&state)?;
        }
        Ok(info)
    }

    /// Stops trusting a client certificate (VASA `unregisterVASACertificate`).
    pub fn unregister_client(&self, pem: &str) -> Result<(), Fault> {
        let certs = parse_certificates(pem)?;
        let mut state = self.state.write();
        let before = state.clients.len();
        state.clients.retain(|c| c != &certs[0]);
        if state.clients.len() == before {
            return Err(invalid("that certificate is not registered"));
        }
        self.persist_clients(&state)
    }

    fn persist_clients(&self, state: &State) -> Result<(), Fault> {
        let pem: String = state
            .clients
            .iter()
            .map(|c| to_pem("CERTIFICATE", c))
            .collect();
        files::write(&self.dir, files::CLIENTS, &pem).map_err(|e| Fault::storage(e.to_string()))
    }

    /// Replaces the trusted CAs and their CRLs (VASA
    /// `registerCACertificatesAndCRLs`, `refreshCACertificatesAndCRLs`).
    pub fn set_ca(&self, roots: &[&str], crls: &[&str]) -> Result<(), Fault> {
        let mut parsed = Vec::new();
        for pem in roots {
            parsed.extend(parse_certificates(pem)?);
        }
        let crls = parse_crls(crls)?;
        if parsed.len() > MAX_TRUSTED || crls.len() > MAX_TRUSTED {
            return Err(invalid(format!(
                "at most {MAX_TRUSTED} CA certificates and CRLs"
            )));
        }
        verify::check_anchors(&parsed)?;
        let ca_pem: String = parsed.iter().map(|c| to_pem("CERTIFICATE", c)).collect();
        let crl_pem: String = crls.iter().map(|c| to_pem("X509 CRL", c)).collect();
        let io = |e: CertError| Fault::storage(e.to_string());
        files::write(&self.dir, files::CA, &ca_pem).map_err(io)?;
        files::write(&self.dir, files::CRLS, &crl_pem).map_err(io)?;
        let mut state = self.state.write();
        state.ca_roots = parsed;
        state.crls = crls;
        Ok(())
    }

    /// Whether a client's chain (DER, end entity first) is trusted: its
    /// certificate registered and valid now, or issued by a registered CA and
    /// not revoked.
    pub fn is_trusted_client(&self, chain: &[Vec<u8>]) -> bool {
        let Some(end_entity) = chain.first() else {
            return false;
        };
        let state = self.state.read();
        let registered = state
            .clients
            .iter()
            .any(|c| c.as_ref() == end_entity.as_slice());
        if registered {
            return check_valid_now(&CertificateDer::from(end_entity.as_slice())).is_ok();
        }
        !state.ca_roots.is_empty() && verify::chains_to(chain, &state.ca_roots, &state.crls)
    }
}

/// TLS asks this for the certificate to present: always the current one.
#[derive(Debug)]
pub struct ProviderCertResolver(pub Arc<Certificates>);

impl rustls::server::ResolvesServerCert for ProviderCertResolver {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.certified_key())
    }
}

#[cfg(test)]
mod tests;
