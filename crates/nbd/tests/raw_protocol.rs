//! Conformance tests with a hand-rolled client over an in-memory stream: the
//! corners real clients never exercise (malformed options, oversized payloads,
//! bad magic, unknown commands) and reply ordering.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{MemoryExport, MemoryProvider};
use lacuna_nbd::protocol::{self as p, RequestHeader};
use lacuna_nbd::{
    BlockExport, ExportError, ExportProvider, ExportSummary, ExtentKind, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;

const SIZE: u64 = 1 << 20;

struct Client {
    stream: DuplexStream,
}

struct OptionReply {
    option: u32,
    reply_type: u32,
    data: Vec<u8>,
}

impl Client {
    /// Connects and reads the greeting; does not send client flags.
    async fn connect_with(provider: Arc<dyn ExportProvider>) -> Client {
        let (client, server) = tokio::io::duplex(1 << 20);
        tokio::spawn(lacuna_nbd::serve_connection(
            server,
            provider,
            ServerConfig::default(),
        ));
        let mut client = Client { stream: client };
        let mut greeting = [0u8; 18];
        client.stream.read_exact(&mut greeting).await.unwrap();
        assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
        assert_eq!(&greeting[16..], &[0, 3]);
        client
    }

    /// Connects to `server` over a stream buffering `buffer_bytes` each way
    /// and negotiates (export "disk"); also returns the serving task.
    async fn connect_to(
        server: &lacuna_nbd::Server,
        buffer_bytes: usize,
    ) -> (Client, JoinHandle<Result<(), lacuna_nbd::ConnectionError>>) {
        let (client, stream) = tokio::io::duplex(buffer_bytes);
        let server = server.clone();
        let serving = tokio::spawn(async move { server.serve_connection(stream).await });
        let mut client = Client { stream: client };
        let mut greeting = [0u8; 18];
        client.stream.read_exact(&mut greeting).await.unwrap();
        client.send(&3u32.to_be_bytes()).await;
        client.negotiate().await;
        (client, serving)
    }

    async fn connect() -> Client {
        let export = MemoryExport::new("disk", SIZE, false);
        let mut client = Client::connect_with(MemoryProvider::new(&[export])).await;
        client.send(&3u32.to_be_bytes()).await;
        client
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    async fn option(&mut self, code: u32, data: &[u8]) {
        let mut out = p::IHAVEOPT.to_be_bytes().to_vec();
        out.extend_from_slice(&code.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
        self.send(&out).await;
    }

    async fn option_reply(&mut self) -> OptionReply {
        let mut header = [0u8; 20];
        self.stream.read_exact(&mut header).await.unwrap();
        assert_eq!(&header[..8], &p::OPTION_REPLY_MAGIC.to_be_bytes());
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut data = vec![0u8; length as usize];
        self.stream.read_exact(&mut data).await.unwrap();
        OptionReply {
            option: u32::from_be_bytes(header[8..12].try_into().unwrap()),
            reply_type: u32::from_be_bytes(header[12..16].try_into().unwrap()),
            data,
        }
    }

    /// Structured replies, base:allocation and GO on "disk".
    async fn negotiate(&mut self) {
        self.option(p::NBD_OPT_STRUCTURED_REPLY, &[]).await;
        assert_eq!(self.option_reply().await.reply_type, p::NBD_REP_ACK);
        let mut go = 4u32.to_be_bytes().to_vec();
        go.extend_from_slice(b"disk");
        go.extend_from_slice(&0u16.to_be_bytes());
        self.option(p::NBD_OPT_GO, &go).await;
        loop {
            let reply = self.option_reply().await;
            if reply.reply_type == p::NBD_REP_ACK {
                break;
            }
            assert_eq!(reply.reply_type, p::NBD_REP_INFO);
        }
    }

    async fn request(&mut self, command: u16, flags: u16, handle: u64, offset: u64, length: u32) {
        let header = RequestHeader {
            flags,
            command,
            handle,
            offset,
            length,
        };
        self.send(&p::encode_request_header(&header)).await;
    }

    /// Reads one reply: a structured chunk as (flags, type, handle, payload), or
    /// a successful simple reply as (DONE, u16::MAX, handle, []).
    async fn chunk(&mut self) -> (u16, u16, u64, Vec<u8>) {
        let magic = self.stream.read_u32().await.unwrap();
        if magic == p::SIMPLE_REPLY_MAGIC {
            let error = self.stream.read_u32().await.unwrap();
            let handle = self.stream.read_u64().await.unwrap();
            assert_eq!(error, 0, "simple replies here are only successes");
            return (p::NBD_REPLY_FLAG_DONE, u16::MAX, handle, Vec::new());
        }
        assert_eq!(magic, p::STRUCTURED_REPLY_MAGIC);
        let flags = self.stream.read_u16().await.unwrap();
        let kind = self.stream.read_u16().await.unwrap();
        let handle = self.stream.read_u64().await.unwrap();
        let length = self.stream.read_u32().await.unwrap();
        let mut payload = vec![0u8; length as usize];
        self.stream.read_exact(&mut payload).await.unwrap();
        (flags, kind, handle, payload)
    }

    async fn expect_error(&mut self, handle: u64, errno: u32) {
        let (flags, kind, got, payload) = self.chunk().await;
        assert_eq!((kind, got), (p::NBD_REPLY_TYPE_ERROR, handle));
        assert_ne!(flags & p::NBD_REPLY_FLAG_DONE, 0);
        assert_eq!(u32::from_be_bytes(payload[0..4].try_into().unwrap()), errno);
    }

    /// Asserts the server closes the connection.
    async fn expect_closed(&mut self) {
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), self.stream.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "server did not close");
    }
}

#[tokio::test]
async fn unknown_client_flags_drop_the_connection() {
    let export = MemoryExport::new("disk", SIZE, false);
    let mut client = Client::connect_with(MemoryProvider::new(&[export])).await;
    client.send(&0x8000_0003u32.to_be_bytes()).await;
    client.expect_closed().await;
}

#[tokio::test]
async fn option_errors() {
    let mut client = Client::connect().await;
    client.option(42, b"whatever").await;
    let reply = client.option_reply().await;
    assert_eq!((reply.option, reply.reply_type), (42, p::NBD_REP_ERR_UNSUP));
    client.option(p::NBD_OPT_STARTTLS, &[]).await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_ERR_POLICY
    );
    client.option(p::NBD_OPT_EXTENDED_HEADERS, &[]).await;
    assert_eq!(client.option_reply().await.reply_type, p::NBD_REP_ERR_UNSUP);
    client.option(p::NBD_OPT_LIST, b"x").await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_ERR_INVALID
    );
    // Meta contexts need structured replies first.
    client
        .option(p::NBD_OPT_LIST_META_CONTEXT, &[0, 0, 0, 0, 0, 0, 0, 0])
        .await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_ERR_INVALID
    );
    // GO whose name length runs past the data.
    client.option(p::NBD_OPT_GO, &[0, 0, 0, 9, b'd']).await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_ERR_INVALID
    );
    let mut go = 4u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"nope\0\0");
    client.option(p::NBD_OPT_GO, &go).await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_ERR_UNKNOWN
    );
    // Oversized but drainable: refused, and the session continues.
    client.option(p::NBD_OPT_INFO, &vec![0u8; 100 * 1024]).await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_ERR_TOO_BIG
    );
    client.option(p::NBD_OPT_LIST, &[]).await;
    let server = client.option_reply().await;
    assert_eq!(server.reply_type, p::NBD_REP_SERVER);
    assert_eq!(&server.data[..8], &[0, 0, 0, 4, b'd', b'i', b's', b'k']);
    assert_eq!(client.option_reply().await.reply_type, p::NBD_REP_ACK);
    // Absurd: the connection is dropped.
    let mut header = p::IHAVEOPT.to_be_bytes().to_vec();
    header.extend_from_slice(&p::NBD_OPT_INFO.to_be_bytes());
    header.extend_from_slice(&u32::MAX.to_be_bytes());
    client.send(&header).await;
    client.expect_closed().await;
}

#[tokio::test]
async fn export_name_reply_honours_no_zeroes() {
    for (flags, expected) in [(3u32, 10usize), (1, 134)] {
        let export = MemoryExport::new("disk", SIZE, false);
        let mut client = Client::connect_with(MemoryProvider::new(&[export])).await;
        client.send(&flags.to_be_bytes()).await;
        client.option(p::NBD_OPT_EXPORT_NAME, b"disk").await;
        let mut reply = vec![0u8; expected];
        client.stream.read_exact(&mut reply).await.unwrap();
        assert_eq!(u64::from_be_bytes(reply[0..8].try_into().unwrap()), SIZE);
        assert!(reply[10..].iter().all(|&b| b == 0));
        // Transmission follows directly: a simple reply to a flush.
        client.request(p::NBD_CMD_FLUSH, 0, 5, 0, 0).await;
        let mut simple = [0u8; 16];
        client.stream.read_exact(&mut simple).await.unwrap();
        assert_eq!(&simple[0..8], &[0x67, 0x44, 0x66, 0x98, 0, 0, 0, 0]);
        assert_eq!(u64::from_be_bytes(simple[8..16].try_into().unwrap()), 5);
    }
    // An unknown name cannot be refused politely: the server hangs up.
    let mut client = Client::connect().await;
    client.option(p::NBD_OPT_EXPORT_NAME, b"nope").await;
    client.expect_closed().await;
}

#[tokio::test]
async fn bad_requests_get_errors_and_the_session_continues() {
    let mut client = Client::connect().await;
    client.negotiate().await;
    client.request(42, 0, 1, 0, 1).await;
    client.expect_error(1, p::NBD_EINVAL).await;
    client.request(p::NBD_CMD_BLOCK_STATUS, 0, 2, 0, 4096).await;
    client.expect_error(2, p::NBD_EINVAL).await; // no context selected
    client.request(p::NBD_CMD_READ, 1 << 9, 3, 0, 4096).await;
    client.expect_error(3, p::NBD_EINVAL).await; // unknown flag
    client.request(p::NBD_CMD_WRITE, 0, 4, SIZE - 1, 2).await;
    client.send(&[1, 2]).await;
    client.expect_error(4, p::NBD_ENOSPC).await;
    // An oversized write is drained, refused, and the stream stays framed.
    let length = 40 << 20;
    client.request(p::NBD_CMD_WRITE, 0, 5, 0, length).await;
    let payload = vec![7u8; length as usize];
    client.send(&payload).await;
    client.expect_error(5, p::NBD_EINVAL).await;
    client
        .request(p::NBD_CMD_READ, p::NBD_CMD_FLAG_DF, 6, 0, 4096)
        .await;
    let (flags, kind, handle, payload) = client.chunk().await;
    assert_eq!((kind, handle), (p::NBD_REPLY_TYPE_OFFSET_DATA, 6));
    assert_ne!(flags & p::NBD_REPLY_FLAG_DONE, 0);
    assert_eq!(payload.len(), 8 + 4096);
    assert!(
        payload[8..].iter().all(|&b| b == 0),
        "the drained write did not land"
    );
    // A payload too large to drain ends the connection.
    client.request(p::NBD_CMD_WRITE, 0, 7, 0, 100 << 20).await;
    client.expect_closed().await;
}

#[tokio::test]
async fn bad_request_magic_drops_the_connection() {
    let mut client = Client::connect().await;
    client.negotiate().await;
    client.send(&[0u8; 28]).await;
    client.expect_closed().await;
}

#[tokio::test]
async fn disconnect_completes_in_flight_requests_first() {
    let mut client = Client::connect().await;
    client.negotiate().await;
    for handle in 0..100u64 {
        client
            .request(p::NBD_CMD_WRITE, 0, handle, handle * 4096, 4096)
            .await;
        client.send(&[handle as u8; 4096]).await;
    }
    client.request(p::NBD_CMD_DISC, 0, 999, 0, 0).await;
    let mut handles = Vec::new();
    for _ in 0..100 {
        let (_, _, handle, _) = client.chunk().await;
        handles.push(handle);
    }
    handles.sort_unstable();
    assert_eq!(handles, (0..100).collect::<Vec<_>>());
    client.expect_closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_small_requests_beyond_the_in_flight_limit_all_get_their_replies() {
    // Reads and writes the server runs on the connection's own task, sent
    // all at once: more than MAX_IN_FLIGHT_PER_CONNECTION, and small enough
    // that their gathered replies stay below the size at which they are
    // written anyway, so the reader must write them before it waits for a slot.
    const BLOCK: u64 = 512;
    const REQUESTS: u64 = 3 * lacuna_nbd::MAX_IN_FLIGHT_PER_CONNECTION as u64;
    let export = MemoryExport::new("disk", SIZE, false);
    let contents: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    export.fill(0, &contents);
    let mut client = Client::connect_with(MemoryProvider::new(&[export])).await;
    client.send(&3u32.to_be_bytes()).await;
    client.negotiate().await;
    let blocks = SIZE / BLOCK;
    for handle in 0..REQUESTS {
        let offset = (handle % blocks) * BLOCK;
        if handle % 3 == 0 {
            client
                .request(p::NBD_CMD_WRITE, 0, handle, offset, BLOCK as u32)
                .await;
            client
                .send(&contents[offset as usize..][..BLOCK as usize])
                .await;
        } else {
            client
                .request(p::NBD_CMD_READ, 0, handle, offset, BLOCK as u32)
                .await;
        }
    }
    let replies = async {
        let mut handles = Vec::new();
        for _ in 0..REQUESTS {
            let (flags, kind, handle, payload) = client.chunk().await;
            assert_ne!(flags & p::NBD_REPLY_FLAG_DONE, 0);
            if handle % 3 != 0 {
                assert_eq!(kind, p::NBD_REPLY_TYPE_OFFSET_DATA);
                let offset = (handle % blocks) * BLOCK;
                assert_eq!(u64::from_be_bytes(payload[..8].try_into().unwrap()), offset);
                assert!(payload[8..] == contents[offset as usize..][..BLOCK as usize]);
            }
            handles.push(handle);
        }
        handles
    };
    let mut handles = tokio::time::timeout(Duration::from_secs(20), replies)
        .await
        .expect("every request is answered");
    handles.sort_unstable();
    assert_eq!(handles, (0..REQUESTS).collect::<Vec<_>>());
}

/// An export whose reads at offset 0 are slow, to observe out-of-order replies.
struct SlowStart(Arc<MemoryExport>);

impl BlockExport for SlowStart {
    fn size_bytes(&self) -> Result<u64, ExportError> {
        self.0.size_bytes()
    }
    fn description(&self) -> String {
        self.0.description()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        if offset == 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        self.0.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        self.0.write(offset, data)
    }
    fn trim(&self, offset: u64, length: u64) -> Result<(), ExportError> {
        self.0.trim(offset, length)
    }
    fn write_zeroes(&self, offset: u64, length: u64, allow_unmap: bool) -> Result<(), ExportError> {
        self.0.write_zeroes(offset, length, allow_unmap)
    }
    fn flush(&self) -> Result<(), ExportError> {
        self.0.flush()
    }
    fn extents(&self, _offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError> {
        Ok(vec![(length, ExtentKind::Data)])
    }
}

struct SlowProvider;

impl ExportProvider for SlowProvider {
    fn list(&self, _client: &lacuna_nbd::Client) -> Vec<ExportSummary> {
        Vec::new()
    }
    fn open(
        &self,
        _client: &lacuna_nbd::Client,
        _name: &str,
    ) -> Result<Arc<dyn BlockExport>, lacuna_nbd::OpenError> {
        Ok(Arc::new(SlowStart(MemoryExport::new("disk", SIZE, false))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_are_sent_as_requests_complete() {
    let mut client = Client::connect_with(Arc::new(SlowProvider)).await;
    client.send(&3u32.to_be_bytes()).await;
    client.negotiate().await;
    client.request(p::NBD_CMD_READ, 0, 1, 0, 4096).await;
    client.request(p::NBD_CMD_READ, 0, 2, 4096, 4096).await;
    let (_, _, first, _) = client.chunk().await;
    let (_, _, second, _) = client.chunk().await;
    assert_eq!(
        (first, second),
        (2, 1),
        "the fast read overtakes the slow one"
    );
}

/// A server over one 64 MiB export "disk" with `config`, its first 32 MiB
/// data (a read of zeroes is answered by a small hole chunk).
fn server_of_64_mib(config: ServerConfig) -> lacuna_nbd::Server {
    let export = MemoryExport::new("disk", 64 << 20, false);
    export.fill(
        0,
        &vec![0x5a; lacuna_nbd::MAX_REQUEST_PAYLOAD_BYTES as usize],
    );
    lacuna_nbd::Server::new(MemoryProvider::new(&[export]), config)
}

/// Replies buffered for clients that do not read them are bounded across
/// connections: one client's unread 32 MiB read holds the whole budget, and
/// another client's read waits until that is freed (it was answered at
/// once, each connection having only a budget of its own).
#[tokio::test]
async fn buffered_replies_are_bounded_across_connections() {
    let server = server_of_64_mib(ServerConfig {
        max_buffered_bytes: lacuna_nbd::MAX_REQUEST_PAYLOAD_BYTES as usize,
        ..ServerConfig::default()
    });
    let (mut hog, _) = Client::connect_to(&server, 64 << 10).await;
    let (mut other, _) = Client::connect_to(&server, 64 << 10).await;
    hog.request(
        p::NBD_CMD_READ,
        0,
        1,
        0,
        lacuna_nbd::MAX_REQUEST_PAYLOAD_BYTES,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    other.request(p::NBD_CMD_READ, 0, 2, 0, 4096).await;
    let waited = tokio::time::timeout(Duration::from_millis(500), other.chunk()).await;
    assert!(waited.is_err(), "answered while the budget was held");

    drop(hog);
    let (_, _, handle, _) = tokio::time::timeout(Duration::from_secs(5), other.chunk())
        .await
        .expect("answered once the budget is freed");
    assert_eq!(handle, 2);
}

/// A client that reads none of its replies is dropped after the reply
/// write timeout, freeing what its requests held (it was kept for ever).
#[tokio::test]
async fn a_client_that_reads_no_replies_is_dropped_after_the_write_timeout() {
    let server = server_of_64_mib(ServerConfig {
        reply_write_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    });
    let (mut client, serving) = Client::connect_to(&server, 64 << 10).await;
    client.request(p::NBD_CMD_READ, 0, 1, 0, 1 << 20).await;

    let ended = tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("the connection ended")
        .unwrap();
    assert!(ended.is_err(), "{ended:?}");
}

/// A SET_META_CONTEXT replaces the selection even when it fails (NBD
/// protocol): after a good SET and a malformed one, no context is selected
/// and BLOCK_STATUS is refused (the first SET's selection used to survive).
#[tokio::test]
async fn a_failed_set_meta_context_leaves_nothing_selected() {
    let mut client = Client::connect().await;
    client.option(p::NBD_OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(client.option_reply().await.reply_type, p::NBD_REP_ACK);
    let query = b"base:allocation";
    let mut set = 4u32.to_be_bytes().to_vec();
    set.extend_from_slice(b"disk");
    set.extend_from_slice(&1u32.to_be_bytes());
    set.extend_from_slice(&(query.len() as u32).to_be_bytes());
    set.extend_from_slice(query);
    client.option(p::NBD_OPT_SET_META_CONTEXT, &set).await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_META_CONTEXT
    );
    assert_eq!(client.option_reply().await.reply_type, p::NBD_REP_ACK);
    // Two queries announced, one present.
    let mut malformed = set.clone();
    malformed[8..12].copy_from_slice(&2u32.to_be_bytes());
    client.option(p::NBD_OPT_SET_META_CONTEXT, &malformed).await;
    assert_eq!(
        client.option_reply().await.reply_type,
        p::NBD_REP_ERR_INVALID
    );
    let mut go = 4u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"disk");
    go.extend_from_slice(&0u16.to_be_bytes());
    client.option(p::NBD_OPT_GO, &go).await;
    while client.option_reply().await.reply_type != p::NBD_REP_ACK {}

    client.request(p::NBD_CMD_BLOCK_STATUS, 0, 7, 0, 4096).await;
    client.expect_error(7, p::NBD_EINVAL).await;
}

/// A structured read large enough to look for holes runs on the blocking
/// pool, never on the reader's task: its extents lookup is not memory-only
/// (the engine commits pending writes for it). It used to run there first,
/// then again on the pool when the data was not in memory: two lookups.
#[tokio::test]
async fn a_large_structured_read_looks_up_extents_once_and_off_the_reader() {
    let export = MemoryExport::new("disk", SIZE, false);
    let server = lacuna_nbd::Server::new(
        MemoryProvider::new(std::slice::from_ref(&export)),
        ServerConfig::default(),
    );
    let (mut client, _) = Client::connect_to(&server, 1 << 20).await;
    // Data (not a hole) to read, and none of it in memory.
    client.request(p::NBD_CMD_WRITE, 0, 9, 0, 96 * 1024).await;
    client.send(&[0x5a; 96 * 1024]).await;
    assert_eq!(client.chunk().await.2, 9);
    export
        .uncached
        .store(true, std::sync::atomic::Ordering::SeqCst);

    client.request(p::NBD_CMD_READ, 0, 1, 0, 96 * 1024).await;
    let (flags, _, handle, _) = client.chunk().await;

    assert_eq!(
        (flags & p::NBD_REPLY_FLAG_DONE, handle),
        (p::NBD_REPLY_FLAG_DONE, 1)
    );
    assert_eq!(
        export
            .extents_calls
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}
