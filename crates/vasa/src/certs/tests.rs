use std::os::unix::fs::PermissionsExt as _;

use super::*;

fn names() -> Vec<String> {
    vec!["127.0.0.1".to_string(), "localhost".to_string()]
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_first_open_makes_an_identity_the_next_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = Certificates::open(dir.path(), names()).unwrap();
    let info = first.info();
    assert!(info.self_signed, "{info:?}");
    assert!(info.not_after_unix_s - info.not_before_unix_s >= SELF_SIGNED_DAYS * 86_400);
    for name in [files::IDENTITY, files::CERT] {
        assert_eq!(mode(&dir.path().join(name)), 0o600, "{name}");
    }
    let copy = std::fs::read_to_string(dir.path().join(files::CERT)).unwrap();
    assert_eq!(copy, first.provider_certificate_pem());
    drop(first);
    let again = Certificates::open(dir.path(), names()).unwrap();
    assert_eq!(again.info(), info, "the same certificate after a reopen");
}

#[test]
fn a_stale_public_copy_is_made_again_from_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::open(dir.path(), names()).unwrap();
    let pem = certs.provider_certificate_pem();
    drop(certs);
    // As after a crash between the identity's rename and the copy's.
    std::fs::write(dir.path().join(files::CERT), "stale").unwrap();
    let certs = Certificates::open(dir.path(), names()).unwrap();
    assert_eq!(certs.provider_certificate_pem(), pem);
    let copy = std::fs::read_to_string(dir.path().join(files::CERT)).unwrap();
    assert_eq!(copy, pem);
}

#[test]
fn a_rotation_replaces_key_and_certificate_together_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::open(dir.path(), names()).unwrap();
    let before = certs.info();
    let generation = certs.generation();
    let csr_before = certs.request_csr().unwrap();
    let after = certs.rotate_self_signed().unwrap();
    assert_ne!(after.sha256_fingerprint_hex, before.sha256_fingerprint_hex);
    assert_eq!(certs.generation(), generation + 1);
    assert_ne!(certs.request_csr().unwrap(), csr_before, "a new key");
    drop(certs);
    let reopened = Certificates::open(dir.path(), names()).unwrap();
    assert_eq!(reopened.info(), after);
    let text = std::fs::read_to_string(dir.path().join(files::IDENTITY)).unwrap();
    let (key, chain) = files::split_identity(&text).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----") && key.ends_with("-----\n"));
    assert_eq!(chain, reopened.provider_certificate_pem());
}

#[test]
fn a_certificate_for_another_key_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::open(dir.path(), names()).unwrap();
    let other = tempfile::tempdir().unwrap();
    let stranger = Certificates::open(other.path(), names()).unwrap();
    let before = certs.info();
    let refused = certs
        .install_signed(&stranger.provider_certificate_pem(), true)
        .unwrap_err();
    assert_eq!(refused.kind, "InvalidCertificate", "{refused:?}");
    assert!(refused.message.contains("provider's key"), "{refused:?}");
    assert_eq!(certs.info(), before);
    assert_eq!(certs.generation(), 1);
}

#[test]
fn an_identity_without_a_key_is_an_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::open(dir.path(), names()).unwrap();
    let pem = certs.provider_certificate_pem();
    drop(certs);
    std::fs::write(dir.path().join(files::IDENTITY), pem).unwrap();
    let Err(error) = Certificates::open(dir.path(), names()) else {
        panic!("an identity without its key opened");
    };
    assert!(error.to_string().contains("no private key"), "{error}");
}
