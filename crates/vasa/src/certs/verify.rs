//! Client certificate checks: TLS proves possession of the key for any
//! certificate ([`AnyClientCertificate`]); trust in a CA-issued one is
//! checked here with webpki against the registered CAs and CRLs.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::fault::Fault;

/// Asks for a client certificate, takes any (or none), and checks the
/// handshake's signature with it.
#[derive(Debug)]
pub struct AnyClientCertificate {
    provider: Arc<CryptoProvider>,
}

impl AnyClientCertificate {
    pub fn new(provider: Arc<CryptoProvider>) -> AnyClientCertificate {
        AnyClientCertificate { provider }
    }
}

impl ClientCertVerifier for AnyClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Every root must serve as a trust anchor.
pub fn check_anchors(roots: &[CertificateDer<'static>]) -> Result<(), Fault> {
    for root in roots {
        let not_ca =
            |why: String| Fault::new("InvalidCertificate", format!("not a CA certificate: {why}"));
        webpki::anchor_from_trusted_cert(root).map_err(|e| not_ca(e.to_string()))?;
        // webpki takes any certificate as an anchor; a CA says it is one.
        let (_, x509) =
            x509_parser::parse_x509_certificate(root).map_err(|e| not_ca(e.to_string()))?;
        let is_ca = x509
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|b| b.value.ca);
        if !is_ca {
            return Err(not_ca(format!(
                "{} has no basicConstraints CA:TRUE",
                x509.subject()
            )));
        }
    }
    Ok(())
}

/// Whether `chain` (end entity first) is issued for client authentication
/// by one of `roots` and not revoked by `crls`.
pub fn chains_to(
    chain: &[Vec<u8>],
    roots: &[CertificateDer<'static>],
    crls: &[CertificateRevocationListDer<'static>],
) -> bool {
    let anchors: Vec<_> = roots
        .iter()
        .filter_map(|r| webpki::anchor_from_trusted_cert(r).ok())
        .collect();
    let der: Vec<CertificateDer> = chain
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let Ok(end_entity) = webpki::EndEntityCert::try_from(&der[0]) else {
        return false;
    };
    let lists: Vec<webpki::CertRevocationList> = crls
        .iter()
        .filter_map(|c| webpki::BorrowedCertRevocationList::from_der(c).ok())
        .map(Into::into)
        .collect();
    let refs: Vec<&webpki::CertRevocationList> = lists.iter().collect();
    let revocation = if refs.is_empty() {
        None
    } else {
        webpki::RevocationOptionsBuilder::new(&refs)
            .ok()
            .map(|b| b.build())
    };
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &der[1..],
            UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            revocation,
            None,
        )
        .is_ok()
}
