//! The NBD server on one connection: the input is everything the client sends (handshake
//! options, then requests and write payloads), fed through an in-memory duplex stream to
//! `lacuna_nbd::serve_connection` over in-memory exports.
//!
//! Checked beyond "no panic" (a panic in any task or export call aborts the process):
//! the connection ends once the input does (no hang), the server never hands the export an
//! out-of-range or empty request (the export asserts it), the output starts with the
//! greeting and every handshake reply is framed with the option-reply magic and a known
//! reply type. The wire decoders are also run on the raw input, with a round trip for
//! request headers.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use lacuna_fuzz::nbd_export::MemoryProvider;
use lacuna_nbd::protocol as p;
use lacuna_nbd::ServerConfig;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A session that has not ended this long after its input did is a hang.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(4)
            .build()
            .expect("runtime")
    })
}

fn serve(input: &[u8]) -> Vec<u8> {
    let input = input.to_vec();
    runtime().block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(lacuna_nbd::serve_connection(
            server,
            MemoryProvider::new(),
            ServerConfig::default(),
        ));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            // The server may close first: a broken pipe is expected.
            let _ = client_write.write_all(&input).await;
            let _ = client_write.shutdown().await;
        });
        let mut output = Vec::new();
        tokio::time::timeout(SESSION_TIMEOUT, async {
            let _ = client_read.read_to_end(&mut output).await;
            // Protocol errors are expected; a panic is not.
            let _ = serving.await.expect("connection task panicked");
        })
        .await
        .expect("the server did not end the connection after its input ended");
        writer.await.expect("writer task");
        output
    })
}

/// The greeting, then handshake replies as long as they are framed as such (what follows
/// is an EXPORT_NAME reply or transmission replies).
fn check_handshake_output(output: &[u8]) {
    if output.is_empty() {
        return;
    }
    let greeting = p::encode_greeting();
    assert!(
        output.starts_with(&greeting),
        "output does not start with the greeting"
    );
    let mut rest = &output[greeting.len()..];
    while rest.len() >= 20 && rest[..8] == p::OPTION_REPLY_MAGIC.to_be_bytes() {
        let reply_type = u32::from_be_bytes(rest[12..16].try_into().unwrap());
        let len_bytes = u32::from_be_bytes(rest[16..20].try_into().unwrap()) as usize;
        assert!(
            matches!(
                reply_type,
                p::NBD_REP_ACK | p::NBD_REP_SERVER | p::NBD_REP_INFO | p::NBD_REP_META_CONTEXT
            ) || reply_type & (1 << 31) != 0,
            "unknown option reply type {reply_type:#x}"
        );
        if reply_type == p::NBD_REP_ACK {
            assert_eq!(len_bytes, 0, "ACK with data");
        }
        assert!(
            len_bytes <= p::MAX_STRING_BYTES * 2 + 64,
            "option reply of {len_bytes} bytes"
        );
        rest = &rest[(20 + len_bytes).min(rest.len())..];
    }
}

fn check_decoders(input: &[u8]) {
    if let Ok(header) = <&[u8; p::REQUEST_HEADER_BYTES]>::try_from(&input[..input.len().min(28)]) {
        if let Some(request) = p::decode_request_header(header) {
            assert_eq!(
                &p::encode_request_header(&request),
                header,
                "request header round trip"
            );
        }
    }
    if let Ok(header) = <&[u8; p::OPTION_HEADER_BYTES]>::try_from(&input[..input.len().min(16)]) {
        let _ = p::decode_option_header(header);
    }
    let _ = p::decode_string(input);
    let _ = p::decode_info_request(input);
    let _ = p::decode_meta_context_request(input);
}

fuzz_target!(|input: &[u8]| {
    check_decoders(input);
    let output = serve(input);
    check_handshake_output(&output);
});
