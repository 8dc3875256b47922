//! Which grains of a volume hold data: the source of `written_bytes` and the
//! `thin_provisioning` figure. Kept in memory (rebuilt from the mappings at open)
//! in chunks so that a range operation over a terabyte costs one step per
//! 32 MiB chunk, and an empty or full chunk costs no memory.

const CHUNK_GRAINS: u64 = 8192;
const WORDS: usize = (CHUNK_GRAINS / 64) as usize;

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
            Chunk::Full => CHUNK_GRAINS,
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
        let chunks = grains.div_ceil(CHUNK_GRAINS) as usize;
        self.chunks.resize(chunks, Chunk::Empty);
        debug_assert_eq!(
            self.set_count,
            self.chunks.iter().map(Chunk::count).sum::<u64>()
        );
    }

    pub fn get(&self, grain: u64) -> bool {
        assert!(grain < self.grains);
        match &self.chunks[(grain / CHUNK_GRAINS) as usize] {
            Chunk::Empty => false,
            Chunk::Full => true,
            Chunk::Bits(words, _) => {
                let bit = grain % CHUNK_GRAINS;
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
            let index = (grain / CHUNK_GRAINS) as usize;
            let chunk_start = index as u64 * CHUNK_GRAINS;
            let chunk_end = (chunk_start + CHUNK_GRAINS).min(end);
            let before = self.chunks[index].count();
            if grain == chunk_start && chunk_end == chunk_start + CHUNK_GRAINS {
                self.chunks[index] = if value { Chunk::Full } else { Chunk::Empty };
            } else {
                self.set_bits(index, grain - chunk_start, chunk_end - chunk_start, value);
            }
            self.set_count = self.set_count - before + self.chunks[index].count();
            grain = chunk_end;
        }
    }

    /// Copies `len` bits of `source` starting at `source_start` to `start`: what a
    /// clone or range copy inherits. Whole chunks at matching alignment cost O(1).
    pub fn copy_from(&mut self, source: &DataBitmap, source_start: u64, start: u64, len: u64) {
        let len = len
            .min(self.grains.saturating_sub(start))
            .min(source.grains.saturating_sub(source_start));
        let mut done = 0;
        while done < len {
            let (from, to) = (source_start + done, start + done);
            let whole_chunk = from % CHUNK_GRAINS == 0
                && to % CHUNK_GRAINS == 0
                && len - done >= CHUNK_GRAINS
                && to + CHUNK_GRAINS <= self.grains;
            if whole_chunk {
                let index = (to / CHUNK_GRAINS) as usize;
                let before = self.chunks[index].count();
                self.chunks[index] = source.chunks[(from / CHUNK_GRAINS) as usize].clone();
                self.set_count = self.set_count - before + self.chunks[index].count();
                done += CHUNK_GRAINS;
            } else {
                self.set(to, source.get(from));
                done += 1;
            }
        }
    }

    fn set_bits(&mut self, index: usize, from: u64, to: u64, value: bool) {
        let chunk = &mut self.chunks[index];
        let mut words = match chunk {
            Chunk::Empty if !value => return,
            Chunk::Full if value => return,
            Chunk::Empty => Box::new([0u64; WORDS]),
            Chunk::Full => Box::new([u64::MAX; WORDS]),
            Chunk::Bits(words, _) => std::mem::replace(words, Box::new([0u64; WORDS])),
        };
        for bit in from..to {
            let mask = 1u64 << (bit % 64);
            let word = &mut words[(bit / 64) as usize];
            if value {
                *word |= mask;
            } else {
                *word &= !mask;
            }
        }
        let count: u32 = words.iter().map(|w| w.count_ones()).sum();
        *chunk = match u64::from(count) {
            0 => Chunk::Empty,
            CHUNK_GRAINS => Chunk::Full,
            _ => Chunk::Bits(words, count),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_sets_and_ranges() {
        let mut b = DataBitmap::new(3 * CHUNK_GRAINS + 5);
        b.set(1, true);
        b.set(1, true);
        b.set(CHUNK_GRAINS * 3 + 4, true);
        assert_eq!(b.count(), 2);
        b.set_range(10, CHUNK_GRAINS * 2 + 3, true);
        assert_eq!(b.count(), 1 + (CHUNK_GRAINS * 2 + 3 - 10) + 1);
        assert!(b.get(CHUNK_GRAINS + 7));
        b.set_range(0, 3 * CHUNK_GRAINS + 5, false);
        assert_eq!(b.count(), 0);
        b.set_range(0, 3 * CHUNK_GRAINS, true);
        b.resize(CHUNK_GRAINS + 1);
        assert_eq!(b.count(), CHUNK_GRAINS + 1);
    }

    #[test]
    fn copies_ranges_aligned_and_not() {
        let mut source = DataBitmap::new(4 * CHUNK_GRAINS);
        source.set_range(0, CHUNK_GRAINS, true);
        source.set(CHUNK_GRAINS + 3, true);
        let mut copy = DataBitmap::new(4 * CHUNK_GRAINS);
        copy.copy_from(&source, 0, 0, 4 * CHUNK_GRAINS);
        assert_eq!(copy.count(), source.count());
        assert!(copy.get(CHUNK_GRAINS + 3) && !copy.get(CHUNK_GRAINS + 4));
        let mut shifted = DataBitmap::new(4 * CHUNK_GRAINS);
        shifted.copy_from(&source, CHUNK_GRAINS, 7, 10);
        assert_eq!(shifted.count(), 1);
        assert!(shifted.get(10));
    }
}
