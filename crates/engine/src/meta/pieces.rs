//! Byte ranges of a metadata file held in memory (written but not yet stored):
//! pieces keyed by offset that never overlap, merged as they are written, and
//! laid over what a read found in storage. The sync pipeline
//! ([`crate::meta::sync_pipeline`]) and external backends (RADOS) keep them.

use std::collections::BTreeMap;

/// Pieces by offset; no two overlap or touch.
pub type Pieces = BTreeMap<u64, Vec<u8>>;

/// Copies the bytes of `pieces` that fall in `[offset, offset + out.len())`
/// into `out`.
pub fn overlay(pieces: &Pieces, offset: u64, out: &mut [u8]) {
    let end = offset + out.len() as u64;
    for (start, bytes) in pieces.range(..end) {
        let piece_end = start + bytes.len() as u64;
        if piece_end <= offset {
            continue;
        }
        let from = offset.max(*start);
        let to = end.min(piece_end);
        out[(from - offset) as usize..(to - offset) as usize]
            .copy_from_slice(&bytes[(from - start) as usize..(to - start) as usize]);
    }
}

/// Puts `data` at `offset` into `pieces`, replacing what it overlaps and
/// merging what it touches. Returns the change in bytes held.
pub fn buffer(pieces: &mut Pieces, offset: u64, data: &[u8]) -> isize {
    let end = offset + data.len() as u64;
    let mut merged_start = offset;
    let mut merged = data.to_vec();
    let mut delta = data.len() as isize;
    // Pieces overlapping or touching [offset, end): merged into one. Pieces
    // never overlap, so going down from `end` their ends fall too.
    let overlapping: Vec<u64> = pieces
        .range(..=end)
        .rev()
        .take_while(|(start, bytes)| *start + bytes.len() as u64 >= offset)
        .map(|(start, _)| *start)
        .collect();
    for start in overlapping {
        let old = pieces.remove(&start).expect("listed");
        delta -= old.len() as isize;
        let old_end = start + old.len() as u64;
        if start < merged_start {
            let mut front = old[..(merged_start - start) as usize].to_vec();
            front.extend_from_slice(&merged);
            merged = front;
            merged_start = start;
        }
        let merged_end = merged_start + merged.len() as u64;
        if old_end > merged_end {
            merged.extend_from_slice(&old[(merged_end - start) as usize..]);
        }
    }
    delta += (merged.len() - data.len()) as isize;
    pieces.insert(merged_start, merged);
    delta
}

/// Drops every byte at or past `len_bytes` (the file was cut there). Returns
/// the bytes dropped.
pub fn cut_past(pieces: &mut Pieces, len_bytes: u64) -> usize {
    let mut dropped = 0;
    let past: Vec<u64> = pieces.range(len_bytes..).map(|(start, _)| *start).collect();
    for start in past {
        dropped += pieces.remove(&start).expect("listed").len();
    }
    if let Some((start, bytes)) = pieces.range_mut(..len_bytes).next_back() {
        let keep = (len_bytes - start) as usize;
        if bytes.len() > keep {
            dropped += bytes.len() - keep;
            bytes.truncate(keep);
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffered_writes_merge_and_the_newest_bytes_win() {
        let mut pieces = Pieces::new();
        buffer(&mut pieces, 10, b"aaaa");
        buffer(&mut pieces, 20, b"bbbb");
        assert_eq!(pieces.len(), 2);
        buffer(&mut pieces, 12, b"XXXXXXXXXX"); // overlaps both: 12..22
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[&10], b"aaXXXXXXXXXXbb");
        buffer(&mut pieces, 24, b"c"); // touches the end: merged
        assert_eq!(pieces[&10], b"aaXXXXXXXXXXbbc");
        buffer(&mut pieces, 0, b"z");
        assert_eq!(pieces.len(), 2);
        let total: usize = pieces.values().map(Vec::len).sum();
        assert_eq!(total, 16);
    }

    #[test]
    fn overlay_copies_only_the_bytes_in_range() {
        let mut pieces = Pieces::new();
        buffer(&mut pieces, 4, b"abcd");
        buffer(&mut pieces, 12, b"wxyz");
        let mut out = [b'.'; 12];
        overlay(&pieces, 2, &mut out);
        assert_eq!(&out, b"..abcd....wx");
    }

    #[test]
    fn a_cut_drops_what_lies_past_it() {
        let mut pieces = Pieces::new();
        buffer(&mut pieces, 0, b"abcd");
        buffer(&mut pieces, 10, b"efgh");
        assert_eq!(cut_past(&mut pieces, 12), 2);
        assert_eq!(pieces[&10], b"ef");
        assert_eq!(cut_past(&mut pieces, 2), 4);
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[&0], b"ab");
    }
}
