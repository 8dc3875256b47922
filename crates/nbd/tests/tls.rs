//! TLS-PSK and per-client access with an OpenSSL client over an in-memory
//! stream: the upgrade, what each identity may list and open, the FORCEDTLS
//! mode, and the malformed upgrades (the libnbd/GnuTLS and qemu interop is in
//! the daemon's `nbd_access` tests).

mod common;

use std::pin::Pin;
use std::sync::Arc;

use common::MemoryExport;
use lacuna_nbd::protocol as p;
use lacuna_nbd::{
    BlockExport, Client, ConnectionError, ExportProvider, ExportSummary, OpenError, PskKeys,
    Server, ServerConfig, TlsMode,
};
use openssl::ssl::{Ssl, SslContext, SslMethod, SslVerifyMode, SslVersion};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;
use tokio_openssl::SslStream;

const SIZE: u64 = 1 << 20;
const ALICE_KEY: [u8; 32] = [0xa1; 32];
const BOB_KEY: [u8; 32] = [0xb0; 32];

struct Keys;

impl PskKeys for Keys {
    fn key(&self, identity: &str) -> Option<Vec<u8>> {
        match identity {
            "alice" => Some(ALICE_KEY.to_vec()),
            "bob" => Some(BOB_KEY.to_vec()),
            _ => None,
        }
    }
}

/// `<identity>-disk` belongs to that identity; "public" is for anonymous clients.
struct PerIdentity {
    exports: Vec<Arc<MemoryExport>>,
}

impl PerIdentity {
    fn new() -> Arc<PerIdentity> {
        Arc::new(PerIdentity {
            exports: ["alice-disk", "bob-disk", "public"]
                .iter()
                .map(|name| MemoryExport::new(name, SIZE, false))
                .collect(),
        })
    }

    fn allowed(client: &Client, name: &str) -> bool {
        match &client.identity {
            Some(identity) => name == format!("{identity}-disk"),
            None => name == "public",
        }
    }
}

impl ExportProvider for PerIdentity {
    fn list(&self, client: &Client) -> Vec<ExportSummary> {
        self.exports
            .iter()
            .filter(|e| Self::allowed(client, &e.name))
            .map(|e| ExportSummary {
                name: e.name.clone(),
                description: String::new(),
            })
            .collect()
    }

    fn open(&self, client: &Client, name: &str) -> Result<Arc<dyn BlockExport>, OpenError> {
        if client.identity.is_none() && name != "public" {
            return Err(OpenError::Denied("anonymous: use TLS".into()));
        }
        self.exports
            .iter()
            .find(|e| e.name == name && Self::allowed(client, name))
            .map(|e| e.clone() as Arc<dyn BlockExport>)
            .ok_or(OpenError::Unknown)
    }
}

struct Reply {
    reply_type: u32,
    data: Vec<u8>,
}

/// A hand-rolled option client over any stream.
struct Wire<S> {
    stream: S,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Wire<S> {
    async fn option(&mut self, code: u32, data: &[u8]) {
        let mut out = p::IHAVEOPT.to_be_bytes().to_vec();
        out.extend_from_slice(&code.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
        self.stream.write_all(&out).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    async fn reply(&mut self, option: u32) -> Reply {
        let mut header = [0u8; 20];
        self.stream.read_exact(&mut header).await.unwrap();
        assert_eq!(&header[..8], &p::OPTION_REPLY_MAGIC.to_be_bytes());
        assert_eq!(
            u32::from_be_bytes(header[8..12].try_into().unwrap()),
            option
        );
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut data = vec![0u8; length as usize];
        self.stream.read_exact(&mut data).await.unwrap();
        Reply {
            reply_type: u32::from_be_bytes(header[12..16].try_into().unwrap()),
            data,
        }
    }

    async fn ask(&mut self, code: u32, data: &[u8]) -> Reply {
        self.option(code, data).await;
        self.reply(code).await
    }

    /// The names `NBD_OPT_LIST` answers.
    async fn list(&mut self) -> Vec<String> {
        self.option(p::NBD_OPT_LIST, &[]).await;
        let mut names = Vec::new();
        loop {
            let reply = self.reply(p::NBD_OPT_LIST).await;
            match reply.reply_type {
                p::NBD_REP_ACK => return names,
                p::NBD_REP_SERVER => {
                    let length = u32::from_be_bytes(reply.data[..4].try_into().unwrap());
                    let name = &reply.data[4..4 + length as usize];
                    names.push(String::from_utf8(name.to_vec()).unwrap());
                }
                other => panic!("unexpected reply {other:#x} to LIST"),
            }
        }
    }

    /// `NBD_OPT_INFO` on `name`: the final reply type and its message.
    async fn info(&mut self, name: &str) -> (u32, String) {
        self.option(p::NBD_OPT_INFO, &info_request(name)).await;
        loop {
            let reply = self.reply(p::NBD_OPT_INFO).await;
            if reply.reply_type != p::NBD_REP_INFO {
                return (
                    reply.reply_type,
                    String::from_utf8_lossy(&reply.data).into_owned(),
                );
            }
        }
    }
}

fn info_request(name: &str) -> Vec<u8> {
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    data
}

/// A connection to a server with TLS in `mode`: the greeting read and the
/// client flags sent. The handle answers how the server ended the connection.
async fn connect(mode: TlsMode) -> (Wire<DuplexStream>, JoinHandle<Result<(), ConnectionError>>) {
    let server = Server::with_tls(
        PerIdentity::new(),
        ServerConfig::default(),
        mode,
        Arc::new(Keys),
    )
    .unwrap();
    let (client, stream) = tokio::io::duplex(1 << 20);
    let served = tokio::spawn(async move { server.serve_connection(stream).await });
    let mut wire = Wire { stream: client };
    let mut greeting = [0u8; 18];
    wire.stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
    wire.stream
        .write_all(&p::NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .await
        .unwrap();
    (wire, served)
}

/// An OpenSSL PSK client context for `identity` with `key`, at most `version`.
fn client_context(identity: &'static str, key: [u8; 32], version: SslVersion) -> SslContext {
    let mut builder = SslContext::builder(SslMethod::tls_client()).unwrap();
    builder.set_verify(SslVerifyMode::NONE);
    builder.set_max_proto_version(Some(version)).unwrap();
    builder.set_cipher_list("ECDHE-PSK:DHE-PSK:PSK").unwrap();
    builder.set_psk_client_callback(move |_, _hint, identity_out, key_out| {
        identity_out[..identity.len()].copy_from_slice(identity.as_bytes());
        identity_out[identity.len()] = 0;
        key_out[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    builder.build()
}

/// STARTTLS, acknowledged, then the TLS handshake as `identity`.
async fn start_tls(
    mut wire: Wire<DuplexStream>,
    identity: &'static str,
    key: [u8; 32],
    version: SslVersion,
) -> Result<Wire<SslStream<DuplexStream>>, openssl::ssl::Error> {
    let ack = wire.ask(p::NBD_OPT_STARTTLS, &[]).await;
    assert_eq!((ack.reply_type, ack.data.len()), (p::NBD_REP_ACK, 0));
    let ssl = Ssl::new(&client_context(identity, key, version)).unwrap();
    let mut stream = SslStream::new(ssl, wire.stream).unwrap();
    Pin::new(&mut stream).connect().await?;
    Ok(Wire { stream })
}

#[tokio::test]
async fn each_identity_lists_and_opens_only_its_own_exports() {
    for (version, name) in [
        (SslVersion::TLS1_3, "TLSv1.3"),
        (SslVersion::TLS1_2, "TLSv1.2"),
    ] {
        let (wire, served) = connect(TlsMode::Offered).await;
        let mut tls = start_tls(wire, "alice", ALICE_KEY, version).await.unwrap();
        let negotiated = tls.stream.ssl().version_str().to_owned();
        assert_eq!(negotiated, name);
        assert_eq!(tls.list().await, ["alice-disk"], "{negotiated}");
        assert_eq!(tls.info("alice-disk").await.0, p::NBD_REP_ACK);
        // Another identity's export and a missing one answer alike.
        assert_eq!(tls.info("bob-disk").await.0, p::NBD_REP_ERR_UNKNOWN);
        assert_eq!(tls.info("nope").await.0, p::NBD_REP_ERR_UNKNOWN);
        assert_eq!(tls.info("public").await.0, p::NBD_REP_ERR_UNKNOWN);
        // TLS twice is refused, and the session goes on.
        let again = tls.ask(p::NBD_OPT_STARTTLS, &[]).await;
        assert_eq!(again.reply_type, p::NBD_REP_ERR_INVALID);
        assert_eq!(
            tls.ask(p::NBD_OPT_ABORT, &[]).await.reply_type,
            p::NBD_REP_ACK
        );
        served.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn anonymous_clients_get_only_what_the_provider_allows() {
    let (mut wire, served) = connect(TlsMode::Offered).await;
    assert_eq!(wire.list().await, ["public"]);
    // Refused before the upgrade the server offers: TLS is required.
    let (reply, message) = wire.info("alice-disk").await;
    assert_eq!(reply, p::NBD_REP_ERR_TLS_REQD);
    assert_eq!(message, "anonymous: use TLS");
    assert_eq!(wire.info("public").await.0, p::NBD_REP_ACK);
    wire.ask(p::NBD_OPT_ABORT, &[]).await;
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn wrong_key_and_unknown_identity_fail_the_handshake() {
    for (identity, key) in [("alice", BOB_KEY), ("mallory", ALICE_KEY)] {
        for version in [SslVersion::TLS1_3, SslVersion::TLS1_2] {
            let (wire, served) = connect(TlsMode::Offered).await;
            assert!(
                start_tls(wire, identity, key, version).await.is_err(),
                "{identity} with the wrong key got in over {version:?}"
            );
            let ended = served.await.unwrap();
            assert!(
                matches!(ended, Err(ConnectionError::Tls(_))),
                "{identity}: {ended:?}"
            );
        }
    }
}

#[tokio::test]
async fn negotiated_options_are_forgotten_after_tls() {
    let (mut wire, _served) = connect(TlsMode::Offered).await;
    let structured = wire.ask(p::NBD_OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(structured.reply_type, p::NBD_REP_ACK);
    let mut tls = start_tls(wire, "bob", BOB_KEY, SslVersion::TLS1_3)
        .await
        .unwrap();
    // Meta contexts need structured replies, which must be negotiated again.
    let mut query = info_request("bob-disk");
    query.truncate(4 + "bob-disk".len());
    query.extend_from_slice(&0u32.to_be_bytes());
    let meta = tls.ask(p::NBD_OPT_LIST_META_CONTEXT, &query).await;
    assert_eq!(meta.reply_type, p::NBD_REP_ERR_INVALID);
    assert_eq!(tls.list().await, ["bob-disk"]);
}

#[tokio::test]
async fn required_tls_refuses_every_plain_option() {
    let (mut wire, served) = connect(TlsMode::Required).await;
    for option in [
        p::NBD_OPT_LIST,
        p::NBD_OPT_INFO,
        p::NBD_OPT_GO,
        p::NBD_OPT_STRUCTURED_REPLY,
        42,
    ] {
        let data = if option == p::NBD_OPT_INFO || option == p::NBD_OPT_GO {
            info_request("public")
        } else {
            Vec::new()
        };
        let reply = wire.ask(option, &data).await;
        assert_eq!(reply.reply_type, p::NBD_REP_ERR_TLS_REQD, "option {option}");
    }
    // Then STARTTLS works, and nothing is refused for want of TLS any more.
    let mut tls = start_tls(wire, "alice", ALICE_KEY, SslVersion::TLS1_3)
        .await
        .unwrap();
    assert_eq!(tls.list().await, ["alice-disk"]);
    tls.ask(p::NBD_OPT_ABORT, &[]).await;
    served.await.unwrap().unwrap();

    // EXPORT_NAME has no error reply: the connection is ended.
    let (mut wire, served) = connect(TlsMode::Required).await;
    wire.option(p::NBD_OPT_EXPORT_NAME, b"public").await;
    let mut rest = Vec::new();
    wire.stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    assert!(matches!(
        served.await.unwrap(),
        Err(ConnectionError::TlsRequired)
    ));
}

#[tokio::test]
async fn malformed_upgrades_are_refused_or_end_the_connection() {
    // STARTTLS with data: refused, the plain session goes on.
    let (mut wire, served) = connect(TlsMode::Offered).await;
    let reply = wire.ask(p::NBD_OPT_STARTTLS, b"junk").await;
    assert_eq!(reply.reply_type, p::NBD_REP_ERR_INVALID);
    assert_eq!(wire.list().await, ["public"]);
    // Garbage instead of a ClientHello: the server ends the connection.
    let ack = wire.ask(p::NBD_OPT_STARTTLS, &[]).await;
    assert_eq!(ack.reply_type, p::NBD_REP_ACK);
    wire.stream
        .write_all(b"this is not a TLS ClientHello at all\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = wire.stream.read_to_end(&mut rest).await;
    assert!(matches!(
        served.await.unwrap(),
        Err(ConnectionError::Tls(_))
    ));
    // A client that hangs up right after the ACK.
    let (mut wire, served) = connect(TlsMode::Offered).await;
    wire.ask(p::NBD_OPT_STARTTLS, &[]).await;
    drop(wire);
    assert!(served.await.unwrap().is_err());
}

#[tokio::test]
async fn a_server_without_tls_refuses_starttls_by_policy() {
    let server = Server::new(PerIdentity::new(), ServerConfig::default());
    let (client, stream) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move { server.serve_connection(stream).await });
    let mut wire = Wire { stream: client };
    let mut greeting = [0u8; 18];
    wire.stream.read_exact(&mut greeting).await.unwrap();
    wire.stream
        .write_all(&p::NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .await
        .unwrap();
    let reply = wire.ask(p::NBD_OPT_STARTTLS, &[]).await;
    assert_eq!(reply.reply_type, p::NBD_REP_ERR_POLICY);
    assert_eq!(wire.list().await, ["public"]);
}
