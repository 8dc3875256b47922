//! Damage done to a stopped array's files, for the tests that check what the
//! daemon makes of it: finding a grain's record in the segment files and
//! flipping one bit of it.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const GRAIN: u64 = 4096;
pub const RECORD_HEADER_BYTES: usize = 24;
pub const RECORD_MAGIC: u32 = 0x4c43_4e52;

/// The segment files of a data directory with their sizes, oldest first.
pub fn segment_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("data/segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .map(|p| {
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect();
    files.sort();
    files
}

/// (segment file, record offset) of the record holding grain `grain`, whose
/// data starts with `GRAIN-<grain as 10 digits>`.
pub fn find_record(dir: &Path, grain: u64) -> (PathBuf, u64) {
    let marker = format!("GRAIN-{grain:010}");
    for (path, _) in segment_files(dir) {
        let data = std::fs::read(&path).unwrap();
        let mut at = 0usize;
        while at + RECORD_HEADER_BYTES <= data.len() {
            let magic = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            if magic != RECORD_MAGIC {
                break;
            }
            let len = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
            let payload = &data[at + RECORD_HEADER_BYTES..at + RECORD_HEADER_BYTES + len];
            if payload.starts_with(marker.as_bytes()) {
                return (path, at as u64);
            }
            at += RECORD_HEADER_BYTES + len;
        }
    }
    panic!("no record holds grain {grain}");
}

pub fn flip_bit(path: &Path, offset: u64) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_all_at(&[byte[0] ^ 0x08], offset).unwrap();
    file.sync_all().unwrap();
}
