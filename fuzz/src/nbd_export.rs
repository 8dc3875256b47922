//! An in-memory NBD export that asserts the server's contract: the server checks every
//! range against the export size before calling in, so an out-of-range or empty request
//! reaching the export is a server bug and panics (which libFuzzer reports as a crash).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lacuna_nbd::{
    BlockExport, Client, ExportError, ExportProvider, ExportSummary, ExtentKind, OpenError,
};

/// Allocation granularity of the export's extent map.
const GRAIN_BYTES: u64 = 4096;

pub struct MemoryExport {
    name: String,
    size_bytes: u64,
    read_only: bool,
    /// Bytes and, per grain, whether it was ever written (else it is a hole).
    state: Mutex<(Vec<u8>, Vec<bool>)>,
}

impl MemoryExport {
    pub fn new(name: &str, size_bytes: u64, read_only: bool) -> Arc<Self> {
        let grains = size_bytes.div_ceil(GRAIN_BYTES) as usize;
        Arc::new(Self {
            name: name.to_string(),
            size_bytes,
            read_only,
            state: Mutex::new((vec![0; size_bytes as usize], vec![false; grains])),
        })
    }

    fn check(&self, offset: u64, length: u64) {
        assert!(length > 0, "the server passed an empty range to the export");
        let end = offset.checked_add(length).expect("range end overflows");
        assert!(
            end <= self.size_bytes,
            "the server passed {offset}+{length} beyond the export's {} bytes",
            self.size_bytes
        );
    }

    fn mark(&self, offset: u64, length: u64, allocated: bool) {
        let mut state = self.state.lock().unwrap();
        let first = (offset / GRAIN_BYTES) as usize;
        let last = (offset + length).div_ceil(GRAIN_BYTES) as usize;
        state.1[first..last].fill(allocated);
    }
}

impl BlockExport for MemoryExport {
    fn size_bytes(&self) -> Result<u64, ExportError> {
        Ok(self.size_bytes)
    }

    fn description(&self) -> String {
        format!("fuzz export {}", self.name)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.check(offset, buf.len() as u64);
        let state = self.state.lock().unwrap();
        buf.copy_from_slice(&state.0[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        self.check(offset, data.len() as u64);
        assert!(!self.read_only, "the server wrote to a read-only export");
        self.state.lock().unwrap().0[offset as usize..offset as usize + data.len()]
            .copy_from_slice(data);
        self.mark(offset, data.len() as u64, true);
        Ok(())
    }

    fn trim(&self, offset: u64, length: u64) -> Result<(), ExportError> {
        self.check(offset, length);
        assert!(!self.read_only, "the server trimmed a read-only export");
        self.write_zeroes(offset, length, true)
    }

    fn write_zeroes(
        &self,
        offset: u64,
        length: u64,
        _allow_unmap: bool,
    ) -> Result<(), ExportError> {
        self.check(offset, length);
        assert!(!self.read_only, "the server zeroed a read-only export");
        self.state.lock().unwrap().0[offset as usize..(offset + length) as usize].fill(0);
        Ok(())
    }

    fn flush(&self) -> Result<(), ExportError> {
        Ok(())
    }

    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError> {
        self.check(offset, length);
        let state = self.state.lock().unwrap();
        let mut extents: Vec<(u64, ExtentKind)> = Vec::new();
        let end = offset + length;
        let mut at = offset;
        while at < end {
            let grain_end = ((at / GRAIN_BYTES + 1) * GRAIN_BYTES).min(end);
            let kind = if state.1[(at / GRAIN_BYTES) as usize] {
                ExtentKind::Data
            } else {
                ExtentKind::Hole
            };
            match extents.last_mut() {
                Some(last) if last.1 == kind => last.0 += grain_end - at,
                _ => extents.push((grain_end - at, kind)),
            }
            at = grain_end;
        }
        Ok(extents)
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), ExportError> {
        self.check(offset, length);
        Ok(())
    }
}

/// Exports by name: "disk" (1 MiB), "ro" (read-only) and "odd" (size not a multiple of
/// the grain, so block status ends mid-grain).
pub struct MemoryProvider {
    exports: HashMap<String, Arc<MemoryExport>>,
}

impl MemoryProvider {
    pub fn new() -> Arc<Self> {
        let exports = [
            MemoryExport::new("disk", 1 << 20, false),
            MemoryExport::new("ro", 64 << 10, true),
            MemoryExport::new("odd", 12_345, false),
        ];
        Arc::new(Self {
            exports: exports
                .into_iter()
                .map(|export| (export.name.clone(), export))
                .collect(),
        })
    }
}

impl ExportProvider for MemoryProvider {
    fn list(&self, _client: &Client) -> Vec<ExportSummary> {
        let mut names: Vec<&String> = self.exports.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|name| ExportSummary {
                name: name.clone(),
                description: String::new(),
            })
            .collect()
    }

    fn open(&self, _client: &Client, name: &str) -> Result<Arc<dyn BlockExport>, OpenError> {
        self.exports
            .get(name)
            .map(|export| Arc::clone(export) as Arc<dyn BlockExport>)
            .ok_or(OpenError::Unknown)
    }
}
