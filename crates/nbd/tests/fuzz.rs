//! Bounded fuzzing of the handshake and request parser: arbitrary byte streams,
//! and mutated valid sessions, fed through an in-memory duplex stream against an
//! in-memory export. Each case must end (no hang) without any panic, in the
//! connection task or in the request tasks it spawns.
//!
//! `PROPTEST_CASES` raises the case count (default kept small for CI).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Duration;

use common::{MemoryExport, MemoryProvider};
use lacuna_nbd::protocol::{self as p, RequestHeader};
use lacuna_nbd::ServerConfig;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EXPORT_BYTES: u64 = 1 << 20;
const CASE_TIMEOUT: Duration = Duration::from_secs(20);
const DEFAULT_CASES: u32 = 512;

static PANICS: AtomicUsize = AtomicUsize::new(0);
static HOOK: Once = Once::new();

/// Counts every panic on any thread, including spawned server tasks whose
/// panics Tokio would otherwise swallow.
fn count_panics() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Runs one connection over `input`, returning what the server sent.
fn run_session(input: Vec<u8>) -> Vec<u8> {
    count_panics();

    let before = PANICS.load(Ordering::SeqCst);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let output = runtime.block_on(async move {
        let export = MemoryExport::new("disk", EXPORT_BYTES, false);
        let provider = MemoryProvider::new(&[export]);
        let (client, server) = tokio::io::duplex(64 * 1024);
        let config = ServerConfig {
            handshake_timeout: Duration::from_secs(5),
            ..ServerConfig::default()
        };
        let serving = tokio::spawn(lacuna_nbd::serve_connection(server, provider, config));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            // The server may close early; a broken pipe is fine.
            let _ = client_write.write_all(&input).await;
            let _ = client_write.shutdown().await;
            client_write
        });
        let mut output = Vec::new();
        let finished = tokio::time::timeout(CASE_TIMEOUT, async {
            let _ = client_read.read_to_end(&mut output).await;
            let _ = serving.await.expect("connection task panicked");
        })
        .await;
        assert!(finished.is_ok(), "server did not terminate");
        drop(writer.await);
        output
    });
    drop(runtime);
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        before,
        "a server task panicked"
    );
    output
}

fn option(code: u32, data: &[u8]) -> Vec<u8> {
    let mut out = p::IHAVEOPT.to_be_bytes().to_vec();
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

fn string(text: &str) -> Vec<u8> {
    let mut out = (text.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

/// A valid fixed-newstyle handshake: structured replies, base:allocation, GO.
fn handshake() -> Vec<u8> {
    let mut out = 3u32.to_be_bytes().to_vec();
    out.extend(option(p::NBD_OPT_STRUCTURED_REPLY, &[]));
    let mut meta = string("disk");
    meta.extend_from_slice(&1u32.to_be_bytes());
    meta.extend(string("base:allocation"));
    out.extend(option(p::NBD_OPT_SET_META_CONTEXT, &meta));
    let mut go = string("disk");
    go.extend_from_slice(&0u16.to_be_bytes());
    out.extend(option(p::NBD_OPT_GO, &go));
    out
}

fn request_strategy() -> impl Strategy<Value = Vec<u8>> {
    let offset = prop_oneof![
        0..EXPORT_BYTES + 8192,
        Just(u64::MAX - 10),
        Just(EXPORT_BYTES - 1),
        any::<u64>(),
    ];
    let length = prop_oneof![0u32..70_000, Just(0u32), Just(u32::MAX), Just(32 << 20 | 1)];
    (0u16..10, 0u16..64, any::<u64>(), offset, length).prop_map(
        |(command, flags, handle, offset, length)| {
            let header = RequestHeader {
                flags,
                command,
                handle,
                offset,
                length,
            };
            let mut out = p::encode_request_header(&header).to_vec();
            if command == p::NBD_CMD_WRITE && length <= 70_000 {
                out.resize(out.len() + length as usize, 0xa5);
            }
            out
        },
    )
}

/// A valid session, then byte flips and a possible truncation.
fn mutated_session() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(request_strategy(), 0..12),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(|(requests, flips, cut)| {
            let mut bytes = handshake();
            for request in requests {
                bytes.extend(request);
            }
            for (index, value) in flips {
                let at = index.index(bytes.len());
                bytes[at] ^= value;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes
        })
}

/// Arbitrary options after a valid greeting reply.
fn random_options() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((0u32..14, prop::collection::vec(any::<u8>(), 0..64)), 0..8).prop_map(
        |options| {
            let mut out = 3u32.to_be_bytes().to_vec();
            out.extend(option(p::NBD_OPT_STRUCTURED_REPLY, &[]));
            for (code, data) in options {
                out.extend(option(code, &data));
            }
            out
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_or_hang(input in prop::collection::vec(any::<u8>(), 0..512)) {
        run_session(input);
    }

    #[test]
    fn random_options_never_panic_or_hang(input in random_options()) {
        run_session(input);
    }

    #[test]
    fn mutated_sessions_never_panic_or_hang(input in mutated_session()) {
        run_session(input);
    }
}

#[test]
fn valid_session_gets_replies() {
    // The harness itself works: a valid handshake and a read produce replies.
    let mut input = handshake();
    let read = RequestHeader {
        flags: 0,
        command: p::NBD_CMD_READ,
        handle: 42,
        offset: 0,
        length: 4096,
    };
    input.extend(p::encode_request_header(&read));
    let output = run_session(input);
    let needle = 42u64.to_be_bytes();
    assert!(
        output.windows(8).any(|w| w == needle),
        "no reply for handle 42"
    );
    assert_eq!(&output[..8], b"NBDMAGIC");
}
