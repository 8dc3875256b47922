//! What a 4 KiB grain holds, decided once on the write path before any metadata
//! is touched: a repeated 8-byte pattern (stored as metadata only), or data that
//! gets a fingerprint for dedup and a compressed (or raw) payload.

use bytes::Bytes;

use crate::GRAIN_BYTES;

/// Compressed payloads must save at least this share of the grain to be kept:
/// 1/8, so a record is stored compressed only at ≤ 3584 bytes.
pub const COMPRESSED_MAX_BYTES: usize = (GRAIN_BYTES as usize) - (GRAIN_BYTES as usize) / 8;
const _: () = assert!(COMPRESSED_MAX_BYTES < GRAIN_BYTES as usize);

/// XXH3-128 of the grain. Fast (a tenth of BLAKE3's cost, which was a quarter
/// of the daemon's CPU in 1 MiB writes) but not collision-resistant: a grain
/// can be crafted to share another's fingerprint, so a fingerprint hit is
/// only a candidate, and a write shares a block only once the block's stored
/// payload is found byte for byte equal to its own (`TxState::store_block`).
/// Blocks stored before XXH3 carry BLAKE3 truncated to 128 bits
/// ([`legacy_fingerprint`]); scrub accepts either.
pub type Fingerprint = [u8; 16];

/// The fingerprint of a grain.
pub fn fingerprint(grain: &[u8]) -> Fingerprint {
    xxhash_rust::xxh3::xxh3_128(grain).to_le_bytes()
}

/// The fingerprint blocks were given before XXH3 (BLAKE3, first 128 bits).
pub fn legacy_fingerprint(grain: &[u8]) -> Fingerprint {
    let mut fingerprint = [0u8; 16];
    fingerprint.copy_from_slice(&blake3::hash(grain).as_bytes()[..16]);
    fingerprint
}

/// Whether `stored` is the fingerprint of `grain`, of either kind.
pub fn fingerprint_matches(grain: &[u8], stored: &Fingerprint) -> bool {
    fingerprint(grain) == *stored || legacy_fingerprint(grain) == *stored
}

/// A grain's content, classified.
pub enum GrainContent {
    /// Every 8-byte word of the grain equals this value (zero is the common case).
    Pattern(u64),
    Data(DataGrain),
}

/// How a stored payload is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Raw,
    Lz4,
    Zstd,
}

impl Codec {
    /// The record flag bits that name this codec.
    pub fn flags(self) -> u16 {
        match self {
            Codec::Raw => 0,
            Codec::Lz4 => crate::segment::log::FLAG_COMPRESSED,
            Codec::Zstd => crate::segment::log::FLAG_ZSTD,
        }
    }

    /// The codec named by a record's flags.
    pub fn of_flags(flags: u16) -> Result<Codec, String> {
        let lz4 = flags & crate::segment::log::FLAG_COMPRESSED != 0;
        let zstd = flags & crate::segment::log::FLAG_ZSTD != 0;
        match (lz4, zstd) {
            (false, false) => Ok(Codec::Raw),
            (true, false) => Ok(Codec::Lz4),
            (false, true) => Ok(Codec::Zstd),
            (true, true) => Err(format!("record flags {flags:#x} name two codecs")),
        }
    }
}

/// Zstandard level for grains: fast (level 1 already beats LZ4's ratio on
/// typical data; higher levels cost the write path far more than they save).
const ZSTD_LEVEL: i32 = 1;

/// A data grain ready for the segment log.
pub struct DataGrain {
    pub fingerprint: Fingerprint,
    /// The encoded grain (raw 4 KiB when `codec` is `Raw`). Shared, so that
    /// a new block's record is written from here, not copied first (see
    /// [`crate::write::appends`]); a raw one may be a slice of the host's buffer
    /// (see [`classify_shared`]).
    pub payload: Bytes,
    /// CRC32C of `payload`, worked out here, before the writer mutex (see
    /// [`crate::segment::log::FLAG_PAYLOAD_CRC_FIRST`]); 0 while `deferred`.
    pub payload_crc: u32,
    pub codec: Codec,
    /// The compression not yet tried: the grain looked like a duplicate of a
    /// stored block (see [`crate::dedup::index_hints`]), and a duplicate is stored as a
    /// reference, never as a payload. Only with a raw payload; it must be
    /// [`DataGrain::reduced`] before it is stored.
    pub deferred: Option<crate::Compression>,
    /// The compression left to the background reducer: the grain is stored
    /// raw now (flagged, see [`crate::segment::log::FLAG_REDUCE_LATER`]) and
    /// compressed when cores are free. Only with a raw payload.
    pub background: Option<crate::Compression>,
}

/// When a data grain's compression is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceWhen {
    /// On the write path, before the write is acknowledged.
    Inline,
    /// Later, by the background reducer (the write path is short of CPU).
    Background,
}

impl DataGrain {
    /// The grain as [`classify_with`] makes it, if its reduction was
    /// deferred (a hint that proved wrong: the write stores it after all).
    pub fn reduced(&self) -> Option<DataGrain> {
        let compression = self.deferred?;
        assert_eq!(self.codec, Codec::Raw, "a deferred grain is raw");
        let payload = self.payload.clone();
        let GrainContent::Data(data) = classify_shared(
            &self.payload,
            || payload,
            compression,
            ReduceWhen::Inline,
            |_| false,
        ) else {
            unreachable!("a grain classified as data once is data again");
        };
        assert_eq!(data.fingerprint, self.fingerprint);
        Some(data)
    }
}

/// Classifies a full grain with LZ4 compression.
pub fn classify(grain: &[u8]) -> GrainContent {
    classify_with(grain, crate::Compression::Lz4)
}

/// Classifies a full grain: pattern detection first (cheapest), then fingerprint
/// and compression with the container's codec. A compressed payload is kept only
/// if it saves at least an eighth.
pub fn classify_with(grain: &[u8], compression: crate::Compression) -> GrainContent {
    let raw = || Bytes::copy_from_slice(grain);
    classify_shared(grain, raw, compression, ReduceWhen::Inline, |_| false)
}

/// [`classify_with`] of a grain that `raw` hands over as a shared buffer
/// when it is kept raw (a duplicate's, or one that does not compress); a
/// grain whose fingerprint `likely_duplicate` says the dedup index holds is
/// left raw, its compression deferred. With [`ReduceWhen::Background`] every
/// data grain is left raw for the background reducer (patterns are still
/// found and fingerprints still taken: dedup stays inline).
///
/// Why: in 1 MiB writes a third of the grains repeat stored blocks and stay
/// raw until the dedup index proves them; copying each out of the host's
/// buffer was 3.4% of the daemon's CPU. A caller that holds the data in a
/// [`Bytes`] passes a slice of it: no copy.
pub fn classify_shared(
    grain: &[u8],
    raw: impl FnOnce() -> Bytes,
    compression: crate::Compression,
    when: ReduceWhen,
    likely_duplicate: impl FnOnce(&Fingerprint) -> bool,
) -> GrainContent {
    assert_eq!(grain.len() as u64, GRAIN_BYTES);
    let raw = || {
        let payload = raw();
        debug_assert!(payload[..] == grain[..], "raw hands over the grain itself");
        payload
    };
    if let Some(pattern) = repeated_pattern(grain) {
        return GrainContent::Pattern(pattern);
    }
    let fingerprint = fingerprint(grain);
    if compression != crate::Compression::Off && when == ReduceWhen::Background {
        let payload = raw();
        return GrainContent::Data(DataGrain {
            fingerprint,
            payload_crc: crate::segment::log::payload_crc(&payload),
            payload,
            codec: Codec::Raw,
            deferred: None,
            background: Some(compression),
        });
    }
    if compression != crate::Compression::Off && likely_duplicate(&fingerprint) {
        return GrainContent::Data(DataGrain {
            fingerprint,
            payload: raw(),
            payload_crc: 0,
            codec: Codec::Raw,
            deferred: Some(compression),
            background: None,
        });
    }
    let compressed = match compression {
        crate::Compression::Lz4 => lz4_compress(grain).map(|p| (p, Codec::Lz4)),
        crate::Compression::Zstd => zstd_compress(grain).map(|p| (p, Codec::Zstd)),
        crate::Compression::Off => None,
    };
    let (payload, codec) = match compressed {
        Some((payload, codec)) if payload.len() <= COMPRESSED_MAX_BYTES => (payload, codec),
        _ => (raw(), Codec::Raw),
    };
    GrainContent::Data(DataGrain {
        fingerprint,
        payload_crc: crate::segment::log::payload_crc(&payload),
        payload,
        codec,
        deferred: None,
        background: None,
    })
}

thread_local! {
    /// One compression context per thread: creating one per grain would cost
    /// more than compressing it.
    static ZSTD: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// What LZ4 compression keeps per thread between grains.
struct Lz4Scratch {
    /// Output of the largest size a grain can take: `lz4_flex::block::compress`
    /// allocated and zeroed one per grain, and the fresh pages that took cost
    /// a twentieth of 4 KiB write CPU.
    out: Vec<u8>,
    /// The match table: `compress_into` allocated and zeroed a new one per
    /// grain (2% of the daemon's CPU at 4 KiB writes); reused, it is only cleared.
    table: lz4_flex::block::CompressTable,
}

thread_local! {
    static LZ4: std::cell::RefCell<Lz4Scratch> = std::cell::RefCell::new(Lz4Scratch {
        out: vec![0; lz4_flex::block::get_maximum_output_size(GRAIN_BYTES as usize)],
        table: lz4_flex::block::CompressTable::small(),
    });
}

/// The grain's LZ4 block, if it is small enough to be kept (only then is it
/// copied out of the thread's buffer).
fn lz4_compress(grain: &[u8]) -> Option<Bytes> {
    LZ4.with(|cell| {
        let scratch = &mut *cell.borrow_mut();
        let length =
            lz4_flex::block::compress_into_with_table(grain, &mut scratch.out, &mut scratch.table)
                .expect("the buffer has the largest output size of a grain");
        (length <= COMPRESSED_MAX_BYTES).then(|| Bytes::copy_from_slice(&scratch.out[..length]))
    })
}

fn zstd_compress(grain: &[u8]) -> Option<Bytes> {
    ZSTD.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
        }
        cell.as_mut()?.compress(grain).ok().map(Bytes::from)
    })
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
pub fn decode(payload: &[u8], codec: Codec, out: &mut [u8]) -> Result<(), String> {
    assert_eq!(out.len() as u64, GRAIN_BYTES);
    let decoded = match codec {
        Codec::Raw => {
            if payload.len() != out.len() {
                return Err(format!("raw payload of {} bytes", payload.len()));
            }
            out.copy_from_slice(payload);
            return Ok(());
        }
        Codec::Lz4 => {
            lz4_flex::block::decompress_into(payload, out).map_err(|e| format!("lz4: {e}"))?
        }
        Codec::Zstd => {
            zstd::bulk::decompress_to_buffer(payload, out).map_err(|e| format!("zstd: {e}"))?
        }
    };
    if decoded != out.len() {
        return Err(format!("decompressed to {decoded} bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_fingerprint_of_either_kind_matches_its_grain_only() {
        let grain: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 253) as u8).collect();
        let mut other = grain.clone();
        other[4095] ^= 1;
        let GrainContent::Data(data) = classify(&grain) else {
            panic!("not a pattern")
        };
        assert_eq!(data.fingerprint, fingerprint(&grain));
        assert_ne!(fingerprint(&grain), legacy_fingerprint(&grain));
        for stored in [fingerprint(&grain), legacy_fingerprint(&grain)] {
            assert!(fingerprint_matches(&grain, &stored));
            assert!(!fingerprint_matches(&other, &stored));
        }
    }

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
        assert_eq!(data.codec, Codec::Lz4);
        assert!(data.payload.len() <= COMPRESSED_MAX_BYTES);
        let mut out = vec![0u8; 4096];
        decode(&data.payload, data.codec, &mut out).unwrap();
        assert_eq!(out, grain);
    }

    #[test]
    fn each_container_codec_round_trips() {
        let grain: Vec<u8> = (0..4096u32)
            .map(|i| (i % 251) as u8 ^ (i / 512) as u8)
            .collect();
        for (compression, codec) in [
            (crate::Compression::Lz4, Codec::Lz4),
            (crate::Compression::Zstd, Codec::Zstd),
            (crate::Compression::Off, Codec::Raw),
        ] {
            let GrainContent::Data(data) = classify_with(&grain, compression) else {
                panic!("not data")
            };
            assert_eq!(data.codec, codec, "{compression}");
            assert_eq!(Codec::of_flags(codec.flags()), Ok(codec));
            let mut out = vec![0u8; 4096];
            decode(&data.payload, data.codec, &mut out).unwrap();
            assert_eq!(out, grain, "{compression}");
        }
    }

    /// Decoding bytes that are not what the encoder wrote (only a bug could
    /// get them past the record's checksum) is an error, never a panic or a
    /// grain reported as decoded.
    #[test]
    fn malformed_lz4_is_refused() {
        let mut out = vec![0xAAu8; GRAIN_BYTES as usize];
        let cases: [&[u8]; 4] = [
            &[],
            // A literal run longer than the input holds.
            &[0xF0, 0xFF, 0xFF, 1, 2, 3],
            // A match whose offset reaches before the output's start.
            &[0x10, b'a', 0xFF, 0x00],
            // A match with offset zero.
            &[0x10, b'a', 0x00, 0x00],
        ];
        for payload in cases {
            assert!(
                decode(payload, Codec::Lz4, &mut out).is_err(),
                "{payload:?}"
            );
        }
        // A valid block of fewer bytes than a grain is refused too.
        let short = lz4_flex::block::compress(&[7u8; 100]);
        assert!(decode(&short, Codec::Lz4, &mut out).is_err());
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
        assert_eq!(data.codec, Codec::Raw);
        assert_eq!(data.payload[..], grain[..]);
    }

    /// Left to the background, a compressible grain is stored raw with its
    /// fingerprint and checksum, and says which codec it waits for; a pattern
    /// is still a pattern, and with compression off there is nothing to wait for.
    #[test]
    fn a_grain_left_to_the_background_is_raw_and_names_its_codec() {
        let mut grain = vec![0u8; GRAIN_BYTES as usize];
        grain[5] = 1;
        let background = |grain: &[u8], compression| {
            classify_shared(
                grain,
                || Bytes::copy_from_slice(grain),
                compression,
                ReduceWhen::Background,
                |_| false,
            )
        };
        let GrainContent::Data(data) = background(&grain, crate::Compression::Zstd) else {
            panic!("not a pattern")
        };
        assert_eq!(
            (data.codec, data.background),
            (Codec::Raw, Some(crate::Compression::Zstd))
        );
        assert_eq!(data.payload[..], grain[..]);
        assert_eq!(data.fingerprint, fingerprint(&grain));
        assert_eq!(data.payload_crc, crate::segment::log::payload_crc(&grain));
        let GrainContent::Data(off) = background(&grain, crate::Compression::Off) else {
            panic!("not a pattern")
        };
        assert_eq!(off.background, None);
        let zeroes = vec![0u8; GRAIN_BYTES as usize];
        assert!(matches!(
            background(&zeroes, crate::Compression::Lz4),
            GrainContent::Pattern(0)
        ));
    }

    /// A grain kept raw from a shared buffer is that buffer's bytes, not a
    /// copy: one that does not compress, and a likely duplicate (whose
    /// compression waits). One that compresses owns its encoded bytes.
    #[test]
    fn a_raw_grain_from_a_shared_buffer_is_a_slice_of_it() {
        let mut buffer = crate::testing::test_data::unique_bytes(3 * GRAIN_BYTES as usize, 9);
        buffer[2 * GRAIN_BYTES as usize..].fill(0);
        buffer[2 * GRAIN_BYTES as usize + 5] = 1; // not a pattern, compresses
        let shared = Bytes::from(buffer);
        let grain_at = |at: usize, duplicate: bool| {
            let slice = || shared.slice(at..at + GRAIN_BYTES as usize);
            let GrainContent::Data(data) = classify_shared(
                &shared[at..at + GRAIN_BYTES as usize],
                slice,
                crate::Compression::Lz4,
                ReduceWhen::Inline,
                |_| duplicate,
            ) else {
                panic!("not a pattern")
            };
            data
        };
        let lies_in_shared = |data: &DataGrain, at: usize| {
            std::ptr::eq(data.payload.as_ptr(), shared[at..].as_ptr())
        };

        let incompressible = grain_at(0, false);
        assert_eq!(
            (incompressible.codec, incompressible.deferred),
            (Codec::Raw, None)
        );
        assert!(lies_in_shared(&incompressible, 0));

        let at = GRAIN_BYTES as usize;
        let duplicate = grain_at(at, true);
        assert_eq!(duplicate.deferred, Some(crate::Compression::Lz4));
        assert!(lies_in_shared(&duplicate, at));

        let at = 2 * GRAIN_BYTES as usize;
        let compressed = grain_at(at, false);
        assert_eq!(compressed.codec, Codec::Lz4);
        assert!(!lies_in_shared(&compressed, at));
        let mut out = vec![0u8; GRAIN_BYTES as usize];
        decode(&compressed.payload, compressed.codec, &mut out).unwrap();
        assert_eq!(out[..], shared[at..]);
    }
}
