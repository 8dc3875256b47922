//! Test support: an in-memory export with a 4 KiB allocation map, a server on an
//! ephemeral port, and helpers that run the real NBD client tools.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lacuna_nbd::{
    BlockExport, Client, ExportError, ExportProvider, ExportSummary, ExtentKind, OpenError,
    ServerConfig,
};
use tempfile::TempDir;

/// Allocation granularity of the in-memory export.
pub const BLOCK_BYTES: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    Hole,
    Zero,
    Data,
}

struct State {
    bytes: Vec<u8>,
    blocks: Vec<Block>,
}

/// A `Vec<u8>` behind a mutex with a per-4-KiB-block allocation state.
pub struct MemoryExport {
    pub name: String,
    size: u64,
    read_only: bool,
    state: Mutex<State>,
    pub flushes: AtomicU64,
    /// Calls of `extents` (block status, and the hole search of large reads).
    pub extents_calls: AtomicU64,
    /// When set, `read_from_memory` finds nothing in memory.
    pub uncached: std::sync::atomic::AtomicBool,
}

impl MemoryExport {
    pub fn new(name: &str, size: u64, read_only: bool) -> Arc<MemoryExport> {
        let blocks = size.div_ceil(BLOCK_BYTES) as usize;
        Arc::new(MemoryExport {
            name: name.to_string(),
            size,
            read_only,
            state: Mutex::new(State {
                bytes: vec![0; size as usize],
                blocks: vec![Block::Hole; blocks],
            }),
            flushes: AtomicU64::new(0),
            extents_calls: AtomicU64::new(0),
            uncached: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Reads bytes directly (bypassing NBD) for assertions.
    pub fn contents(&self, offset: u64, length: u64) -> Vec<u8> {
        let state = self.state.lock().unwrap();
        state.bytes[offset as usize..(offset + length) as usize].to_vec()
    }

    /// Writes bytes directly (bypassing NBD) to set up a test.
    pub fn fill(&self, offset: u64, data: &[u8]) {
        self.write_unchecked(offset, data);
    }

    pub fn block(&self, index: usize) -> Block {
        self.state.lock().unwrap().blocks[index]
    }

    fn write_unchecked(&self, offset: u64, data: &[u8]) {
        let mut state = self.state.lock().unwrap();
        let start = offset as usize;
        state.bytes[start..start + data.len()].copy_from_slice(data);
        for block in blocks_touched(offset, data.len() as u64) {
            state.blocks[block] = Block::Data;
        }
    }

    /// Zeroes a range; whole blocks inside it take `whole`.
    fn zero_range(&self, offset: u64, length: u64, whole: Block) {
        let mut state = self.state.lock().unwrap();
        state.bytes[offset as usize..(offset + length) as usize].fill(0);
        for block in blocks_touched(offset, length) {
            let start = block as u64 * BLOCK_BYTES;
            let end = (start + BLOCK_BYTES).min(self.size);
            if offset <= start && end <= offset + length {
                state.blocks[block] = whole;
            }
        }
    }

    fn check(&self, offset: u64, length: u64) -> Result<(), ExportError> {
        match offset.checked_add(length) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(ExportError::Invalid(
                "out of range (server should have caught this)".into(),
            )),
        }
    }
}

fn blocks_touched(offset: u64, length: u64) -> std::ops::Range<usize> {
    if length == 0 {
        return 0..0;
    }
    (offset / BLOCK_BYTES) as usize..(offset + length).div_ceil(BLOCK_BYTES) as usize
}

impl BlockExport for MemoryExport {
    fn size_bytes(&self) -> Result<u64, ExportError> {
        Ok(self.size)
    }

    fn description(&self) -> String {
        format!("in-memory test export {}", self.name)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.check(offset, buf.len() as u64)?;
        let state = self.state.lock().unwrap();
        buf.copy_from_slice(&state.bytes[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn read_from_memory(&self, offset: u64, buf: &mut [u8]) -> Result<bool, ExportError> {
        if self.uncached.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(false);
        }
        self.read(offset, buf).map(|()| true)
    }

    fn write_is_quick(&self, _length: u64) -> bool {
        true
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        self.check(offset, data.len() as u64)?;
        if self.read_only {
            return Err(ExportError::ReadOnly("read-only".into()));
        }
        self.write_unchecked(offset, data);
        Ok(())
    }

    fn trim(&self, offset: u64, length: u64) -> Result<(), ExportError> {
        self.check(offset, length)?;
        // Only whole blocks can be deallocated; trim is a hint for the rest.
        let mut state = self.state.lock().unwrap();
        for block in blocks_touched(offset, length) {
            let start = block as u64 * BLOCK_BYTES;
            let end = (start + BLOCK_BYTES).min(self.size);
            if offset <= start && end <= offset + length {
                state.bytes[start as usize..end as usize].fill(0);
                state.blocks[block] = Block::Hole;
            }
        }
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, length: u64, allow_unmap: bool) -> Result<(), ExportError> {
        self.check(offset, length)?;
        let whole = if allow_unmap {
            Block::Hole
        } else {
            Block::Zero
        };
        self.zero_range(offset, length, whole);
        Ok(())
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError> {
        self.extents_calls
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.check(offset, length)?;
        let state = self.state.lock().unwrap();
        let mut extents: Vec<(u64, ExtentKind)> = Vec::new();
        let end = offset + length;
        for block in blocks_touched(offset, length) {
            let start = (block as u64 * BLOCK_BYTES).max(offset);
            let stop = ((block as u64 + 1) * BLOCK_BYTES).min(end);
            let kind = match state.blocks[block] {
                Block::Hole => ExtentKind::Hole,
                Block::Zero => ExtentKind::Zero,
                Block::Data => ExtentKind::Data,
            };
            match extents.last_mut() {
                Some((run, last)) if *last == kind => *run += stop - start,
                _ => extents.push((stop - start, kind)),
            }
        }
        Ok(extents)
    }
}

/// Exports by name.
pub struct MemoryProvider {
    exports: BTreeMap<String, Arc<MemoryExport>>,
}

impl MemoryProvider {
    pub fn new(exports: &[Arc<MemoryExport>]) -> Arc<MemoryProvider> {
        Arc::new(MemoryProvider {
            exports: exports
                .iter()
                .map(|e| (e.name.clone(), e.clone()))
                .collect(),
        })
    }
}

impl ExportProvider for MemoryProvider {
    fn list(&self, _client: &Client) -> Vec<ExportSummary> {
        self.exports
            .values()
            .map(|e| ExportSummary {
                name: e.name.clone(),
                description: e.description(),
            })
            .collect()
    }

    fn open(&self, _client: &Client, name: &str) -> Result<Arc<dyn BlockExport>, OpenError> {
        self.exports
            .get(name)
            .map(|e| e.clone() as Arc<dyn BlockExport>)
            .ok_or(OpenError::Unknown)
    }
}

/// A server on 127.0.0.1 (ephemeral port) and a Unix socket, on its own runtime.
pub struct TestServer {
    pub port: u16,
    pub socket: std::path::PathBuf,
    _socket_dir: TempDir,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TestServer {
    pub fn start(exports: Vec<Arc<MemoryExport>>) -> TestServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let provider: Arc<dyn ExportProvider> = MemoryProvider::new(&exports);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let socket_dir = temp_dir("sock");
        let socket = socket_dir.path().join("nbd.sock");
        let unix = {
            let _guard = runtime.enter();
            tokio::net::UnixListener::bind(&socket).unwrap()
        };
        let server = lacuna_nbd::Server::new(provider, ServerConfig::default());
        let tcp_server = server.clone();
        runtime.spawn(async move { tcp_server.serve_tcp(listener).await });
        runtime.spawn(async move { server.serve_unix(unix).await });
        TestServer {
            port,
            socket,
            _socket_dir: socket_dir,
            runtime: Some(runtime),
        }
    }

    pub fn uri(&self, name: &str) -> String {
        format!("nbd://127.0.0.1:{}/{}", self.port, name)
    }

    pub fn unix_uri(&self, name: &str) -> String {
        format!("nbd+unix:///{}?socket={}", name, self.socket.display())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A fresh, empty directory `lacuna-nbd-<tag>-<random>` under the system temp
/// dir, removed when the guard drops (test passed or failed): keep the guard
/// alive while anything uses the directory.
pub fn temp_dir(tag: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lacuna-nbd-{tag}-"))
        .tempdir()
        .expect("create a temporary directory")
}

/// Runs a client tool; a missing tool fails the test (it is never skipped).
pub fn tool(program: &str, args: &[&str]) -> Output {
    let mut command = Command::new(program);
    command.args(args);
    // nbdsh must run under the system python, which has the libnbd bindings.
    let path = std::env::var("PATH").unwrap_or_default();
    command.env("PATH", format!("/usr/bin:{path}"));
    command
        .output()
        .unwrap_or_else(|error| panic!("cannot run {program} (is it installed?): {error}"))
}

/// Runs a tool, asserts it succeeded, and returns its stdout.
pub fn tool_ok(program: &str, args: &[&str]) -> String {
    let output = tool(program, args);
    assert!(
        output.status.success(),
        "{program} {args:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs an nbdsh script against a URI (`h` is connected when the script starts,
/// unless the script connects itself: then pass `None`).
pub fn nbdsh(uri: Option<&str>, script: &str) -> String {
    match uri {
        Some(uri) => tool_ok("nbdsh", &["-u", uri, "-c", script]),
        None => tool_ok("nbdsh", &["-c", script]),
    }
}

/// Parses `nbdinfo --map` lines into (offset, length, description).
pub fn map_rows(output: &str) -> Vec<(u64, u64, String)> {
    output
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut parts = line.split_whitespace();
            let offset = parts.next().unwrap().parse().unwrap();
            let length = parts.next().unwrap().parse().unwrap();
            let _flags = parts.next().unwrap();
            (offset, length, parts.collect::<Vec<_>>().join(" "))
        })
        .collect()
}

/// A deterministic pseudo-random byte pattern.
pub fn pattern(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}
