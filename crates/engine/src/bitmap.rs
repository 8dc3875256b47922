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
}
