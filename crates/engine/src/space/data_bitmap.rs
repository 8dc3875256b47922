//! Which grains of a volume hold data: the source of `written_bytes` and the
//! `thin_provisioning` figure. Kept in memory (rebuilt from the mappings at open)
//! in chunks so that a range operation over a terabyte costs one step per
//! 32 MiB chunk, and an empty or full chunk costs no memory.

const BITMAP_CHUNK_GRAINS: u64 = 8192;
const WORDS: usize = (BITMAP_CHUNK_GRAINS / 64) as usize;
const _: () = assert!(
    BITMAP_CHUNK_GRAINS.is_multiple_of(64),
    "a chunk is whole words"
);

#[derive(Debug, Clone)]
enum Chunk {
    Empty,
    Full,
    Bits(Box<[u64; WORDS]>, u32),
}

impl Chunk {
    fn count(&self) -> u64 {
        match self {
            Chunk::Empty => 0,
            Chunk::Full => BITMAP_CHUNK_GRAINS,
            Chunk::Bits(_, n) => u64::from(*n),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct DataBitmap {
    chunks: Vec<Chunk>,
    grains: u64,
    set_count: u64,
}

impl DataBitmap {
    pub fn new(grains: u64) -> Self {
        let mut bitmap = DataBitmap::default();
        bitmap.resize(grains);
        bitmap
    }

    pub fn count(&self) -> u64 {
        self.set_count
    }

    /// Grows or shrinks; bits beyond a shrink are dropped.
    pub fn resize(&mut self, grains: u64) {
        if grains < self.grains {
            self.set_range(grains, self.grains, false);
        }
        self.grains = grains;
        let chunks = grains.div_ceil(BITMAP_CHUNK_GRAINS) as usize;
        self.chunks.resize(chunks, Chunk::Empty);
        debug_assert_eq!(
            self.set_count,
            self.chunks.iter().map(Chunk::count).sum::<u64>()
        );
    }

    pub fn get(&self, grain: u64) -> bool {
        assert!(grain < self.grains);
        match &self.chunks[(grain / BITMAP_CHUNK_GRAINS) as usize] {
            Chunk::Empty => false,
            Chunk::Full => true,
            Chunk::Bits(words, _) => {
                let bit = grain % BITMAP_CHUNK_GRAINS;
                words[(bit / 64) as usize] & (1 << (bit % 64)) != 0
            }
        }
    }

    pub fn set(&mut self, grain: u64, value: bool) {
        self.set_range(grain, grain + 1, value);
    }

    /// Sets or clears [start, end): whole chunks in O(1) each.
    pub fn set_range(&mut self, start: u64, end: u64, value: bool) {
        assert!(start <= end && end <= self.grains);
        let mut grain = start;
        while grain < end {
            let index = (grain / BITMAP_CHUNK_GRAINS) as usize;
            let chunk_start = index as u64 * BITMAP_CHUNK_GRAINS;
            let chunk_end = (chunk_start + BITMAP_CHUNK_GRAINS).min(end);
            let before = self.chunks[index].count();
            if grain == chunk_start && chunk_end == chunk_start + BITMAP_CHUNK_GRAINS {
                self.chunks[index] = if value { Chunk::Full } else { Chunk::Empty };
            } else {
                self.set_bits(index, grain - chunk_start, chunk_end - chunk_start, value);
            }
            self.set_count = self.set_count - before + self.chunks[index].count();
            grain = chunk_end;
        }
    }

    /// Copies `len` bits of `source` starting at `source_start` to `start`: what a
    /// clone or range copy inherits. Whole chunks at matching alignment cost O(1);
    /// otherwise the bits move a word at a time, in runs that stay within one
    /// chunk of each side (a bit at a time, a 2 GiB copy took 0.25 s).
    pub fn copy_from(&mut self, source: &DataBitmap, source_start: u64, start: u64, len: u64) {
        let len = len
            .min(self.grains.saturating_sub(start))
            .min(source.grains.saturating_sub(source_start));
        let mut done = 0;
        let mut run_bits = Vec::with_capacity(WORDS + 1);
        while done < len {
            let (from, to) = (source_start + done, start + done);
            let whole_chunk = from % BITMAP_CHUNK_GRAINS == 0
                && to % BITMAP_CHUNK_GRAINS == 0
                && len - done >= BITMAP_CHUNK_GRAINS
                && to + BITMAP_CHUNK_GRAINS <= self.grains;
            if whole_chunk {
                let index = (to / BITMAP_CHUNK_GRAINS) as usize;
                let before = self.chunks[index].count();
                self.chunks[index] = source.chunks[(from / BITMAP_CHUNK_GRAINS) as usize].clone();
                self.set_count = self.set_count - before + self.chunks[index].count();
                done += BITMAP_CHUNK_GRAINS;
                continue;
            }
            let run = (len - done)
                .min(BITMAP_CHUNK_GRAINS - from % BITMAP_CHUNK_GRAINS)
                .min(BITMAP_CHUNK_GRAINS - to % BITMAP_CHUNK_GRAINS);
            match &source.chunks[(from / BITMAP_CHUNK_GRAINS) as usize] {
                Chunk::Empty => self.set_range(to, to + run, false),
                Chunk::Full => self.set_range(to, to + run, true),
                Chunk::Bits(words, _) => {
                    run_bits.clear();
                    extract_bits(words, from % BITMAP_CHUNK_GRAINS, run, &mut run_bits);
                    self.deposit_bits(to, run, &run_bits);
                }
            }
            done += run;
        }
    }

    /// Sets bits [start, start + len) — within one chunk — to `bits` (bit i of
    /// the run is bit i % 64 of word i / 64).
    fn deposit_bits(&mut self, start: u64, len: u64, bits: &[u64]) {
        let index = (start / BITMAP_CHUNK_GRAINS) as usize;
        let offset = start % BITMAP_CHUNK_GRAINS;
        assert!(len > 0 && offset + len <= BITMAP_CHUNK_GRAINS);
        assert_eq!(bits.len() as u64, len.div_ceil(64));
        let before = self.chunks[index].count();
        let mut words = self.take_words(index);
        for (i, &word) in bits.iter().enumerate() {
            let width = (len - 64 * i as u64).min(64);
            write_word(&mut words, offset + 64 * i as u64, width, word);
        }
        self.put_words(index, words);
        self.set_count = self.set_count - before + self.chunks[index].count();
    }

    /// Chunk `index` as words (taken out; `put_words` puts it back).
    fn take_words(&mut self, index: usize) -> Box<[u64; WORDS]> {
        match std::mem::replace(&mut self.chunks[index], Chunk::Empty) {
            Chunk::Empty => Box::new([0u64; WORDS]),
            Chunk::Full => Box::new([u64::MAX; WORDS]),
            Chunk::Bits(words, _) => words,
        }
    }

    /// Puts chunk `index` back, as Empty or Full when it is.
    fn put_words(&mut self, index: usize, words: Box<[u64; WORDS]>) {
        let count: u32 = words.iter().map(|w| w.count_ones()).sum();
        self.chunks[index] = match u64::from(count) {
            0 => Chunk::Empty,
            BITMAP_CHUNK_GRAINS => Chunk::Full,
            _ => Chunk::Bits(words, count),
        };
    }

    fn set_bits(&mut self, index: usize, from: u64, to: u64, value: bool) {
        match self.chunks[index] {
            Chunk::Empty if !value => return,
            Chunk::Full if value => return,
            _ => {}
        }
        let mut words = self.take_words(index);
        let mut bit = from;
        while bit < to {
            let width = (to - bit).min(64 - bit % 64);
            write_word(&mut words, bit, width, if value { u64::MAX } else { 0 });
            bit += width;
        }
        self.put_words(index, words);
    }
}

/// Appends bits [from, from + len) of `words` to `out`, packed from bit 0.
fn extract_bits(words: &[u64; WORDS], from: u64, len: u64, out: &mut Vec<u64>) {
    assert!(from + len <= BITMAP_CHUNK_GRAINS);
    let mut taken = 0;
    while taken < len {
        let bit = from + taken;
        let (word, shift) = ((bit / 64) as usize, bit % 64);
        let mut value = words[word] >> shift;
        if shift > 0 && word + 1 < WORDS {
            value |= words[word + 1] << (64 - shift);
        }
        let width = (len - taken).min(64);
        out.push(value & low_mask(width));
        taken += width;
    }
}

/// Writes the low `width` bits of `value` at bit `at` (may straddle two words).
fn write_word(words: &mut [u64; WORDS], at: u64, width: u64, value: u64) {
    assert!(width > 0 && width <= 64 && at + width <= BITMAP_CHUNK_GRAINS);
    let value = value & low_mask(width);
    let (word, shift) = ((at / 64) as usize, at % 64);
    let mask = low_mask(width) << shift;
    words[word] = (words[word] & !mask) | (value << shift);
    if shift + width > 64 {
        let spill = shift + width - 64;
        let high_mask = low_mask(spill);
        words[word + 1] = (words[word + 1] & !high_mask) | (value >> (64 - shift));
    }
}

/// A word with its low `width` bits set.
fn low_mask(width: u64) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_sets_and_ranges() {
        let mut b = DataBitmap::new(3 * BITMAP_CHUNK_GRAINS + 5);
        b.set(1, true);
        b.set(1, true);
        b.set(BITMAP_CHUNK_GRAINS * 3 + 4, true);
        assert_eq!(b.count(), 2);
        b.set_range(10, BITMAP_CHUNK_GRAINS * 2 + 3, true);
        assert_eq!(b.count(), 1 + (BITMAP_CHUNK_GRAINS * 2 + 3 - 10) + 1);
        assert!(b.get(BITMAP_CHUNK_GRAINS + 7));
        b.set_range(0, 3 * BITMAP_CHUNK_GRAINS + 5, false);
        assert_eq!(b.count(), 0);
        b.set_range(0, 3 * BITMAP_CHUNK_GRAINS, true);
        b.resize(BITMAP_CHUNK_GRAINS + 1);
        assert_eq!(b.count(), BITMAP_CHUNK_GRAINS + 1);
    }

    #[test]
    fn copies_ranges_aligned_and_not() {
        let mut source = DataBitmap::new(4 * BITMAP_CHUNK_GRAINS);
        source.set_range(0, BITMAP_CHUNK_GRAINS, true);
        source.set(BITMAP_CHUNK_GRAINS + 3, true);
        let mut copy = DataBitmap::new(4 * BITMAP_CHUNK_GRAINS);
        copy.copy_from(&source, 0, 0, 4 * BITMAP_CHUNK_GRAINS);
        assert_eq!(copy.count(), source.count());
        assert!(copy.get(BITMAP_CHUNK_GRAINS + 3) && !copy.get(BITMAP_CHUNK_GRAINS + 4));
        let mut shifted = DataBitmap::new(4 * BITMAP_CHUNK_GRAINS);
        shifted.copy_from(&source, BITMAP_CHUNK_GRAINS, 7, 10);
        assert_eq!(shifted.count(), 1);
        assert!(shifted.get(10));
    }

    /// Bit-by-bit reference for `copy_from`.
    fn copy_naive(dst: &mut DataBitmap, src: &DataBitmap, from: u64, to: u64, len: u64) {
        for i in 0..len {
            dst.set(to + i, src.get(from + i));
        }
    }

    #[test]
    fn word_copies_match_a_bit_by_bit_copy_at_any_alignment() {
        let grains = 5 * BITMAP_CHUNK_GRAINS + 77;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..200 {
            // Sources with empty, full and mixed chunks.
            let mut source = DataBitmap::new(grains);
            source.set_range(BITMAP_CHUNK_GRAINS, 2 * BITMAP_CHUNK_GRAINS, true);
            for _ in 0..(next() % 3000) {
                let g = next() % grains;
                source.set(g, next() % 2 == 0);
            }
            let mut expected = DataBitmap::new(grains);
            if case % 2 == 0 {
                expected.set_range(0, grains, true);
            }
            for _ in 0..50 {
                let g = next() % grains;
                expected.set(g, next() % 2 == 0);
            }
            let mut got = expected.clone();
            let from = next() % grains;
            let to = next() % grains;
            let len = next() % (grains - from.max(to) + 1);
            copy_naive(&mut expected, &source, from, to, len);
            got.copy_from(&source, from, to, len);
            assert_eq!(
                got.count(),
                expected.count(),
                "case {case}: {from} -> {to} x {len}"
            );
            for g in 0..grains {
                assert_eq!(got.get(g), expected.get(g), "case {case}: grain {g}");
            }
            let counted: u64 = got.chunks.iter().map(Chunk::count).sum();
            assert_eq!(counted, got.count());
        }
    }

    #[test]
    fn ranges_within_a_chunk_set_exactly_their_bits() {
        let mut b = DataBitmap::new(BITMAP_CHUNK_GRAINS);
        b.set_range(3, 200, true);
        b.set_range(64, 128, false);
        assert_eq!(b.count(), 197 - 64);
        assert!(b.get(3) && b.get(63) && !b.get(64) && !b.get(127) && b.get(128) && b.get(199));
        assert!(!b.get(2) && !b.get(200));
        b.set_range(0, BITMAP_CHUNK_GRAINS, true);
        assert!(matches!(b.chunks[0], Chunk::Full));
        b.set_range(5, 6, false);
        b.set_range(5, 6, true);
        assert!(
            matches!(b.chunks[0], Chunk::Full),
            "a full chunk is kept as Full"
        );
    }
}
