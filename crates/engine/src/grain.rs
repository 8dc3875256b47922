//! What a 4 KiB grain holds, decided once on the write path before any metadata
//! is touched: a repeated 8-byte pattern (stored as metadata only), or data that
//! gets a fingerprint for dedup and a compressed (or raw) payload.

use crate::GRAIN_BYTES;

/// Compressed payloads must save at least this share of the grain to be kept:
/// 1/8, so a record is stored compressed only at ≤ 3584 bytes.
pub const COMPRESSED_MAX_BYTES: usize = (GRAIN_BYTES as usize) - (GRAIN_BYTES as usize) / 8;

/// BLAKE3 truncated to 128 bits: collision probability is negligible at any
/// array size we can address, so a fingerprint hit needs no byte compare.
pub type Fingerprint = [u8; 16];

/// A grain's content, classified.
pub enum GrainContent {
    /// Every 8-byte word of the grain equals this value (zero is the common case).
    Pattern(u64),
    Data(DataGrain),
}

/// A data grain ready for the segment log.
pub struct DataGrain {
    pub fingerprint: Fingerprint,
    /// LZ4 block when `compressed`, else the raw 4 KiB.
    pub payload: Vec<u8>,
    pub compressed: bool,
}

/// Classifies a full grain: pattern detection first (cheapest), then fingerprint
/// and compression.
pub fn classify(grain: &[u8]) -> GrainContent {
    assert_eq!(grain.len() as u64, GRAIN_BYTES);
    if let Some(pattern) = repeated_pattern(grain) {
        return GrainContent::Pattern(pattern);
    }
    let hash = blake3::hash(grain);
    let mut fingerprint = [0u8; 16];
    fingerprint.copy_from_slice(&hash.as_bytes()[..16]);
    let compressed = lz4_flex::block::compress(grain);
    let data = if compressed.len() <= COMPRESSED_MAX_BYTES {
        DataGrain {
            fingerprint,
            payload: compressed,
            compressed: true,
        }
    } else {
        DataGrain {
            fingerprint,
            payload: grain.to_vec(),
            compressed: false,
        }
    };
    GrainContent::Data(data)
}

/// The 8-byte word repeated across the whole grain, if there is one.
pub fn repeated_pattern(grain: &[u8]) -> Option<u64> {
    let (head, rest) = grain.split_at(8);
    let word = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    if rest.chunks_exact(8).all(|chunk| chunk == head) {
        Some(word)
    } else {
        None
    }
}

/// Fills `out` (a grain or part of one, starting at byte `grain_offset` within the
/// grain) with a pattern word.
pub fn fill_pattern(pattern: u64, grain_offset: usize, out: &mut [u8]) {
    let bytes = pattern.to_le_bytes();
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = bytes[(grain_offset + i) % 8];
    }
}

/// Restores a grain from its stored payload.
pub fn decode(payload: &[u8], compressed: bool, out: &mut [u8]) -> Result<(), String> {
    assert_eq!(out.len() as u64, GRAIN_BYTES);
    if !compressed {
        if payload.len() != out.len() {
            return Err(format!("raw payload of {} bytes", payload.len()));
        }
        out.copy_from_slice(payload);
        return Ok(());
    }
    match lz4_flex::block::decompress_into(payload, out) {
        Ok(n) if n == out.len() => Ok(()),
        Ok(n) => Err(format!("decompressed to {n} bytes")),
        Err(e) => Err(format!("lz4: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_grain_is_a_pattern() {
        let grain = vec![0u8; 4096];
        assert!(matches!(classify(&grain), GrainContent::Pattern(0)));
    }

    #[test]
    fn repeated_word_is_a_pattern_and_fills_back() {
        let word = 0x0102_0304_0506_0708u64;
        let mut grain = vec![0u8; 4096];
        fill_pattern(word, 0, &mut grain);
        assert_eq!(repeated_pattern(&grain), Some(word));
        let mut part = vec![0u8; 13];
        fill_pattern(word, 5, &mut part);
        assert_eq!(&part[..], &grain[5..18]);
    }

    #[test]
    fn compressible_data_is_compressed_and_round_trips() {
        let mut grain = vec![0u8; 4096];
        for (i, b) in grain.iter_mut().enumerate() {
            *b = (i / 64) as u8;
        }
        let GrainContent::Data(data) = classify(&grain) else {
            panic!("not data")
        };
        assert!(data.compressed);
        assert!(data.payload.len() <= COMPRESSED_MAX_BYTES);
        let mut out = vec![0u8; 4096];
        decode(&data.payload, true, &mut out).unwrap();
        assert_eq!(out, grain);
    }

    #[test]
    fn random_data_is_stored_raw() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let grain: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let GrainContent::Data(data) = classify(&grain) else {
            panic!("not data")
        };
        assert!(!data.compressed);
        assert_eq!(data.payload, grain);
    }
}
