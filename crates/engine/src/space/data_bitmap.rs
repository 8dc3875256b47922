//! Which grains of a volume hold data: the source of `written_bytes` and the
//! `thin_provisioning` figure. Kept in memory (rebuilt from the mappings at open)
//! in 32 MiB chunks, and sparse: a chunk with no bit set costs nothing, runs of
//! chunks with every bit set cost one entry (so a range operation over a
//! petabyte costs a step and an entry, not one per chunk), and only chunks
//! partly set hold their bits. Memory follows what was written, never the
//! provisioned size (issue: a 1 PiB volume once took 1 GB here).

use std::collections::BTreeMap;

use crate::ids::GrainIndex;

const BITMAP_CHUNK_GRAINS: u64 = 8192;
const WORDS: usize = (BITMAP_CHUNK_GRAINS / 64) as usize;
const _: () = assert!(
    BITMAP_CHUNK_GRAINS.is_multiple_of(64),
    "a chunk is whole words"
);

/// The bits of a chunk neither empty nor full, with how many are set.
#[derive(Debug, Clone)]
struct Partial {
    words: Box<[u64; WORDS]>,
    set_count: u32,
}

#[derive(Debug, Clone, Default)]
pub struct DataBitmap {
    /// Runs of chunks with every bit set: first chunk → end chunk (exclusive).
    /// Disjoint and never adjacent (neighbours merge); only whole chunks.
    full_runs: BTreeMap<u64, u64>,
    /// Chunks with some bits set and some clear, never inside a full run.
    partial: BTreeMap<u64, Partial>,
    grains: u64,
    set_count: u64,
}

/// What [`DataBitmap::set_runs`] answers: the set runs found, and the grain
/// up to which they are the whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRuns {
    pub runs: Vec<(u64, u64)>,
    pub reached: GrainIndex,
}

/// Appends the runs of set bits of one partial chunk (its first grain is
/// `base`) to `out`, merging with a run in `out` that ends where one begins.
fn bit_runs(words: &[u64; WORDS], base: u64, out: &mut Vec<(u64, u64)>) {
    let mut bit = 0u64;
    while bit < BITMAP_CHUNK_GRAINS {
        let word = words[(bit / 64) as usize] >> (bit % 64);
        if word == 0 {
            bit = (bit / 64 + 1) * 64;
            continue;
        }
        let skip = u64::from(word.trailing_zeros());
        let start = bit + skip;
        let mut stop = start;
        while stop < BITMAP_CHUNK_GRAINS && words[(stop / 64) as usize] & (1 << (stop % 64)) != 0 {
            stop += 1;
        }
        match out.last_mut() {
            Some(last) if last.1 == base + start => last.1 = base + stop,
            _ => out.push((base + start, base + stop)),
        }
        bit = stop;
    }
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

    /// How many entries the bitmap keeps (full runs and partial chunks): what
    /// its memory grows with.
    pub fn stored_entries(&self) -> usize {
        self.full_runs.len() + self.partial.len()
    }

    /// Grows or shrinks; bits beyond a shrink are dropped.
    pub fn resize(&mut self, grains: u64) {
        if grains < self.grains {
            self.set_grains(grains, self.grains, false);
        }
        self.grains = grains;
        debug_assert!(self.check_invariants().is_ok());
    }

    pub fn get(&self, grain: GrainIndex) -> bool {
        let grain = grain.get();
        assert!(grain < self.grains);
        let chunk = grain / BITMAP_CHUNK_GRAINS;
        match self.partial.get(&chunk) {
            Some(partial) => {
                let bit = grain % BITMAP_CHUNK_GRAINS;
                partial.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0
            }
            None => self.is_full(chunk),
        }
    }

    pub fn set(&mut self, grain: GrainIndex, value: bool) {
        self.set_range(grain, grain + 1, value);
    }

    /// Sets or clears [start, end): the whole chunks inside in one step, the
    /// partial ones at either end bit by bit.
    pub fn set_range(&mut self, start: GrainIndex, end: GrainIndex, value: bool) {
        self.set_grains(start.get(), end.get(), value);
    }

    /// [`DataBitmap::set_range`] of grains as the bits' numbers.
    fn set_grains(&mut self, start: u64, end: u64, value: bool) {
        assert!(start <= end && end <= self.grains);
        let mut grain = start;
        // At most a head, a run of whole chunks and a tail.
        for _ in 0..3 {
            if grain >= end {
                break;
            }
            let chunk = grain / BITMAP_CHUNK_GRAINS;
            let chunk_start = chunk * BITMAP_CHUNK_GRAINS;
            if grain == chunk_start && end - grain >= BITMAP_CHUNK_GRAINS {
                let end_chunk = end / BITMAP_CHUNK_GRAINS;
                self.set_whole_chunks(chunk, end_chunk, value);
                grain = end_chunk * BITMAP_CHUNK_GRAINS;
            } else {
                let chunk_end = (chunk_start + BITMAP_CHUNK_GRAINS).min(end);
                self.set_bits(chunk, grain - chunk_start, chunk_end - chunk_start, value);
                grain = chunk_end;
            }
        }
        assert!(grain >= end, "a range is a head, whole chunks and a tail");
    }

    /// Copies `len_grains` bits of `source` starting at `source_start` to `start`: what a
    /// clone or range copy inherits. Costs a step per full run and per partial
    /// chunk of the source range, whatever the alignment: the range is cleared,
    /// then what is set in the source is set again here.
    pub fn copy_from(
        &mut self,
        source: &DataBitmap,
        source_start: GrainIndex,
        start: GrainIndex,
        len_grains: u64,
    ) {
        let (source_start, start) = (source_start.get(), start.get());
        let len = len_grains
            .min(self.grains.saturating_sub(start))
            .min(source.grains.saturating_sub(source_start));
        if len == 0 {
            return;
        }
        self.set_grains(start, start + len, false);
        let source_end = source_start + len;
        let shift = |grain: u64| grain - source_start + start;
        let first_chunk = source_start / BITMAP_CHUNK_GRAINS;
        let end_chunk = source_end.div_ceil(BITMAP_CHUNK_GRAINS);
        for (run_start, run_end) in source.full_runs_within(first_chunk, end_chunk) {
            let from = (run_start * BITMAP_CHUNK_GRAINS).max(source_start);
            let to = (run_end * BITMAP_CHUNK_GRAINS).min(source_end);
            self.set_grains(shift(from), shift(to), true);
        }
        let mut run_bits = Vec::with_capacity(WORDS + 1);
        for (&chunk, partial) in source.partial.range(first_chunk..end_chunk) {
            let chunk_start = chunk * BITMAP_CHUNK_GRAINS;
            let mut from = chunk_start.max(source_start);
            let to = (chunk_start + BITMAP_CHUNK_GRAINS).min(source_end);
            // A source chunk lands on at most two chunks here.
            while from < to {
                let run = (to - from).min(BITMAP_CHUNK_GRAINS - shift(from) % BITMAP_CHUNK_GRAINS);
                run_bits.clear();
                extract_bits(&partial.words, from - chunk_start, run, &mut run_bits);
                self.deposit_bits(shift(from), run, &run_bits);
                from += run;
            }
        }
    }

    /// The runs of set bits in [start, end), in order, as (first, end) grain
    /// pairs, merged across chunk borders: at most `max_runs` of them, the last
    /// one possibly cut short at where the answer stops (`reached`). Costs a
    /// step per full run and per partial chunk in the range, never one per
    /// grain of a full or empty chunk: how allocation bitmaps of a sparse
    /// terabyte cost what is written.
    pub fn set_runs(&self, start: GrainIndex, end: GrainIndex, max_runs: usize) -> SetRuns {
        assert!(max_runs > 0);
        let (start, end) = (start.get(), end.get().min(self.grains));
        let mut runs: Vec<(u64, u64)> = Vec::new();
        if start >= end {
            return SetRuns {
                runs,
                reached: GrainIndex::new(start.max(end)),
            };
        }
        let first_chunk = start / BITMAP_CHUNK_GRAINS;
        let end_chunk = end.div_ceil(BITMAP_CHUNK_GRAINS);
        // Full runs and partial chunks in grain order, as (first, end) pieces.
        let mut full = self
            .full_runs_within(first_chunk, end_chunk)
            .map(|(a, b)| (a * BITMAP_CHUNK_GRAINS, b * BITMAP_CHUNK_GRAINS))
            .peekable();
        let mut partial = self.partial.range(first_chunk..end_chunk).peekable();
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        // Where the scan stopped early, if it did: the answer is whole only up
        // to the last piece found.
        let mut cut = None;
        loop {
            let take_full = match (full.peek(), partial.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(&(f, _)), Some((&chunk, _))) => f < chunk * BITMAP_CHUNK_GRAINS,
            };
            if take_full {
                pieces.push(full.next().expect("peeked"));
            } else {
                let (&chunk, bits) = partial.next().expect("peeked");
                bit_runs(&bits.words, chunk * BITMAP_CHUNK_GRAINS, &mut pieces);
            }
            if pieces.len() > max_runs {
                cut = pieces.last().map(|&(_, b)| b.min(end));
                break;
            }
        }
        for (a, b) in pieces {
            let (a, b) = (a.max(start), b.min(end));
            if a >= b {
                continue;
            }
            match runs.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => runs.push((a, b)),
            }
        }
        let reached = if runs.len() > max_runs {
            runs.truncate(max_runs);
            runs.last().expect("max_runs > 0").1
        } else {
            cut.unwrap_or(end)
        };
        SetRuns {
            runs,
            reached: GrainIndex::new(reached),
        }
    }

    /// The first set bit at or after `from`, if any: a step per chunk that
    /// holds one, not per empty chunk passed.
    pub fn next_set(&self, from: GrainIndex) -> Option<GrainIndex> {
        let from = from.get();
        if from >= self.grains {
            return None;
        }
        let chunk = from / BITMAP_CHUNK_GRAINS;
        if self.is_full(chunk) {
            return Some(GrainIndex::new(from));
        }
        let in_partial = self.partial.get(&chunk).and_then(|bits| {
            let mut runs = Vec::new();
            bit_runs(&bits.words, chunk * BITMAP_CHUNK_GRAINS, &mut runs);
            runs.into_iter()
                .find(|&(_, b)| b > from)
                .map(|(a, _)| a.max(from))
        });
        if in_partial.is_some() {
            return in_partial.map(GrainIndex::new);
        }
        let next_full = self
            .full_runs
            .range(chunk + 1..)
            .next()
            .map(|(&start, _)| start * BITMAP_CHUNK_GRAINS);
        let next_partial = self.partial.range(chunk + 1..).next().map(|(&c, bits)| {
            let mut runs = Vec::new();
            bit_runs(&bits.words, c * BITMAP_CHUNK_GRAINS, &mut runs);
            runs.first().expect("a partial chunk has a set bit").0
        });
        match (next_full, next_partial) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(GrainIndex::new)
    }

    /// Whether every bit of `chunk` is set.
    fn is_full(&self, chunk: u64) -> bool {
        self.full_runs
            .range(..=chunk)
            .next_back()
            .is_some_and(|(_, &end)| chunk < end)
    }

    fn chunk_count(&self, chunk: u64) -> u64 {
        match self.partial.get(&chunk) {
            Some(partial) => u64::from(partial.set_count),
            None if self.is_full(chunk) => BITMAP_CHUNK_GRAINS,
            None => 0,
        }
    }

    /// The full runs overlapping chunks [first, end), clipped to them.
    fn full_runs_within(&self, first: u64, end: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let straddling = self
            .full_runs
            .range(..first)
            .next_back()
            .filter(|(_, &run_end)| run_end > first)
            .map(|(&start, &run_end)| (start, run_end));
        let inside = self
            .full_runs
            .range(first..end)
            .map(|(&start, &run_end)| (start, run_end));
        straddling
            .into_iter()
            .chain(inside)
            .map(move |(start, run_end)| (start.max(first), run_end.min(end)))
    }

    /// Takes chunks [first, end) out of the full runs (splitting the runs that
    /// straddle either end); answers how many were full.
    fn remove_full(&mut self, first: u64, end: u64) -> u64 {
        let overlapping: Vec<(u64, u64)> = self
            .full_runs
            .range(..end)
            .rev()
            .take_while(|(_, &run_end)| run_end > first)
            .map(|(&start, &run_end)| (start, run_end))
            .collect();
        let mut removed = 0;
        for (start, run_end) in overlapping {
            self.full_runs.remove(&start);
            if start < first {
                self.full_runs.insert(start, first);
            }
            if run_end > end {
                self.full_runs.insert(end, run_end);
            }
            removed += run_end.min(end) - start.max(first);
        }
        removed
    }

    /// Adds chunks [first, end), none of them full or partial, to the full
    /// runs, merging with a neighbour run that touches it.
    fn insert_full(&mut self, first: u64, end: u64) {
        assert!(first < end && end * BITMAP_CHUNK_GRAINS <= self.grains);
        let mut start = first;
        let mut run_end = end;
        if let Some((&left, &left_end)) = self.full_runs.range(..first).next_back() {
            assert!(left_end <= first, "chunks {first}..{end} are not full yet");
            if left_end == first {
                self.full_runs.remove(&left);
                start = left;
            }
        }
        if let Some(right_end) = self.full_runs.remove(&end) {
            run_end = right_end;
        }
        self.full_runs.insert(start, run_end);
    }

    /// Sets or clears every bit of chunks [first, end).
    fn set_whole_chunks(&mut self, first: u64, end: u64, value: bool) {
        let partial: Vec<u64> = self.partial.range(first..end).map(|(&c, _)| c).collect();
        let mut before = 0;
        for chunk in partial {
            before += u64::from(self.partial.remove(&chunk).expect("listed").set_count);
        }
        before += self.remove_full(first, end) * BITMAP_CHUNK_GRAINS;
        self.set_count -= before;
        if value {
            self.insert_full(first, end);
            self.set_count += (end - first) * BITMAP_CHUNK_GRAINS;
        }
    }

    /// Sets bits [start, start + len) — within one chunk — to `bits` (bit i of
    /// the run is bit i % 64 of word i / 64).
    fn deposit_bits(&mut self, start: u64, len: u64, bits: &[u64]) {
        let chunk = start / BITMAP_CHUNK_GRAINS;
        let offset = start % BITMAP_CHUNK_GRAINS;
        assert!(len > 0 && offset + len <= BITMAP_CHUNK_GRAINS);
        assert_eq!(bits.len() as u64, len.div_ceil(64));
        let mut words = self.take_words(chunk);
        for (i, &word) in bits.iter().enumerate() {
            let width = (len - 64 * i as u64).min(64);
            write_word(&mut words, offset + 64 * i as u64, width, word);
        }
        self.put_words(chunk, words);
    }

    /// Chunk `chunk` as words, taken out of the bitmap (its bits no longer
    /// counted) until `put_words` puts them back.
    fn take_words(&mut self, chunk: u64) -> Box<[u64; WORDS]> {
        if let Some(partial) = self.partial.remove(&chunk) {
            self.set_count -= u64::from(partial.set_count);
            return partial.words;
        }
        if self.remove_full(chunk, chunk + 1) == 1 {
            self.set_count -= BITMAP_CHUNK_GRAINS;
            return Box::new([u64::MAX; WORDS]);
        }
        Box::new([0u64; WORDS])
    }

    /// Puts chunk `chunk` back: nothing when empty, a full run when full.
    fn put_words(&mut self, chunk: u64, words: Box<[u64; WORDS]>) {
        let set_count: u32 = words.iter().map(|w| w.count_ones()).sum();
        self.set_count += u64::from(set_count);
        match u64::from(set_count) {
            0 => {}
            BITMAP_CHUNK_GRAINS => self.insert_full(chunk, chunk + 1),
            _ => {
                self.partial.insert(chunk, Partial { words, set_count });
            }
        }
    }

    fn set_bits(&mut self, chunk: u64, from: u64, to: u64, value: bool) {
        let already = if value { BITMAP_CHUNK_GRAINS } else { 0 };
        if self.chunk_count(chunk) == already {
            return;
        }
        let mut words = self.take_words(chunk);
        let mut bit = from;
        while bit < to {
            let width = (to - bit).min(64 - bit % 64);
            write_word(&mut words, bit, width, if value { u64::MAX } else { 0 });
            bit += width;
        }
        self.put_words(chunk, words);
    }

    /// Checks the bitmap's invariants (for tests and debug assertions).
    fn check_invariants(&self) -> Result<(), String> {
        let mut counted = 0;
        let mut previous_end = None;
        for (&start, &end) in &self.full_runs {
            if start >= end || end * BITMAP_CHUNK_GRAINS > self.grains {
                return Err(format!("run {start}..{end} of {} grains", self.grains));
            }
            if previous_end.is_some_and(|e| e >= start) {
                return Err(format!("run {start}..{end} touches the one before"));
            }
            previous_end = Some(end);
            counted += (end - start) * BITMAP_CHUNK_GRAINS;
        }
        for (&chunk, partial) in &self.partial {
            let ones: u32 = partial.words.iter().map(|w| w.count_ones()).sum();
            let count = u64::from(partial.set_count);
            if ones != partial.set_count || count == 0 || count >= BITMAP_CHUNK_GRAINS {
                return Err(format!(
                    "partial chunk {chunk}: {ones} bits, {count} counted"
                ));
            }
            if self.is_full(chunk) || chunk * BITMAP_CHUNK_GRAINS >= self.grains {
                return Err(format!("partial chunk {chunk} is full or beyond the end"));
            }
            counted += count;
        }
        if counted != self.set_count {
            return Err(format!("{counted} bits set, {} counted", self.set_count));
        }
        Ok(())
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
    #[test]
    fn set_runs_and_next_set_agree_with_the_bits() {
        let grains = 5 * BITMAP_CHUNK_GRAINS + 100;
        let mut bitmap = DataBitmap::new(grains);
        let g = GrainIndex::new;
        bitmap.set_range(g(3), g(70), true);
        bitmap.set_range(
            g(BITMAP_CHUNK_GRAINS - 2),
            g(3 * BITMAP_CHUNK_GRAINS + 1),
            true,
        );
        bitmap.set(g(4 * BITMAP_CHUNK_GRAINS + 7), true);
        bitmap.set_range(g(5 * BITMAP_CHUNK_GRAINS + 90), g(grains), true);
        let naive = |start: u64, end: u64| {
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for grain in start..end {
                if bitmap.get(g(grain)) {
                    match runs.last_mut() {
                        Some(last) if last.1 == grain => last.1 = grain + 1,
                        _ => runs.push((grain, grain + 1)),
                    }
                }
            }
            runs
        };
        for (start, end) in [
            (0, grains),
            (5, 69),
            (100, 2 * BITMAP_CHUNK_GRAINS),
            (71, 80),
        ] {
            let answer = bitmap.set_runs(g(start), g(end), 100);
            assert_eq!(answer.runs, naive(start, end), "{start}..{end}");
            assert_eq!(answer.reached, g(end));
        }
        let first_two = bitmap.set_runs(g(0), g(grains), 2);
        assert_eq!(first_two.runs, naive(0, first_two.reached.get()));
        assert_eq!(first_two.runs.len(), 2);
        assert!(first_two.reached.get() < grains);
        for from in [
            0,
            3,
            69,
            70,
            4000,
            3 * BITMAP_CHUNK_GRAINS + 1,
            4 * BITMAP_CHUNK_GRAINS + 8,
            grains - 1,
            grains,
        ] {
            let expected = (from..grains).find(|&x| bitmap.get(g(x)));
            assert_eq!(
                bitmap.next_set(g(from)).map(|x| x.get()),
                expected,
                "from {from}"
            );
        }
    }

    use super::*;

    fn at(grain: u64) -> GrainIndex {
        GrainIndex::new(grain)
    }

    #[test]
    fn counts_follow_sets_and_ranges() {
        let mut b = DataBitmap::new(3 * BITMAP_CHUNK_GRAINS + 5);
        b.set(at(1), true);
        b.set(at(1), true);
        b.set(at(BITMAP_CHUNK_GRAINS * 3 + 4), true);
        assert_eq!(b.count(), 2);
        b.set_range(at(10), at(BITMAP_CHUNK_GRAINS * 2 + 3), true);
        assert_eq!(b.count(), 1 + (BITMAP_CHUNK_GRAINS * 2 + 3 - 10) + 1);
        assert!(b.get(at(BITMAP_CHUNK_GRAINS + 7)));
        b.set_range(at(0), at(3 * BITMAP_CHUNK_GRAINS + 5), false);
        assert_eq!(b.count(), 0);
        b.set_range(at(0), at(3 * BITMAP_CHUNK_GRAINS), true);
        b.resize(BITMAP_CHUNK_GRAINS + 1);
        assert_eq!(b.count(), BITMAP_CHUNK_GRAINS + 1);
    }

    #[test]
    fn copies_ranges_aligned_and_not() {
        let mut source = DataBitmap::new(4 * BITMAP_CHUNK_GRAINS);
        source.set_range(at(0), at(BITMAP_CHUNK_GRAINS), true);
        source.set(at(BITMAP_CHUNK_GRAINS + 3), true);
        let mut copy = DataBitmap::new(4 * BITMAP_CHUNK_GRAINS);
        copy.copy_from(&source, at(0), at(0), 4 * BITMAP_CHUNK_GRAINS);
        assert_eq!(copy.count(), source.count());
        assert!(copy.get(at(BITMAP_CHUNK_GRAINS + 3)) && !copy.get(at(BITMAP_CHUNK_GRAINS + 4)));
        let mut shifted = DataBitmap::new(4 * BITMAP_CHUNK_GRAINS);
        shifted.copy_from(&source, at(BITMAP_CHUNK_GRAINS), at(7), 10);
        assert_eq!(shifted.count(), 1);
        assert!(shifted.get(at(10)));
    }

    /// Bit-by-bit reference for `copy_from`.
    fn copy_naive(dst: &mut DataBitmap, src: &DataBitmap, from: u64, to: u64, len: u64) {
        for i in 0..len {
            dst.set(at(to + i), src.get(at(from + i)));
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
            source.set_range(at(BITMAP_CHUNK_GRAINS), at(2 * BITMAP_CHUNK_GRAINS), true);
            for _ in 0..(next() % 3000) {
                let g = next() % grains;
                source.set(at(g), next() % 2 == 0);
            }
            let mut expected = DataBitmap::new(grains);
            if case % 2 == 0 {
                expected.set_range(at(0), at(grains), true);
            }
            for _ in 0..50 {
                let g = next() % grains;
                expected.set(at(g), next() % 2 == 0);
            }
            let mut got = expected.clone();
            let from = next() % grains;
            let to = next() % grains;
            let len = next() % (grains - from.max(to) + 1);
            copy_naive(&mut expected, &source, from, to, len);
            got.copy_from(&source, at(from), at(to), len);
            assert_eq!(
                got.count(),
                expected.count(),
                "case {case}: {from} -> {to} x {len}"
            );
            for g in 0..grains {
                assert_eq!(
                    got.get(at(g)),
                    expected.get(at(g)),
                    "case {case}: grain {g}"
                );
            }
            got.check_invariants().unwrap();
        }
    }

    #[test]
    fn ranges_within_a_chunk_set_exactly_their_bits() {
        let mut b = DataBitmap::new(BITMAP_CHUNK_GRAINS);
        b.set_range(at(3), at(200), true);
        b.set_range(at(64), at(128), false);
        assert_eq!(b.count(), 197 - 64);
        assert!(b.get(at(3)) && b.get(at(63)) && !b.get(at(64)));
        assert!(!b.get(at(127)) && b.get(at(128)) && b.get(at(199)));
        assert!(!b.get(at(2)) && !b.get(at(200)));
        b.set_range(at(0), at(BITMAP_CHUNK_GRAINS), true);
        assert!(b.is_full(0) && b.partial.is_empty());
        b.set_range(at(5), at(6), false);
        b.set_range(at(5), at(6), true);
        assert!(
            b.is_full(0) && b.partial.is_empty(),
            "a full chunk is kept as full"
        );
        b.check_invariants().unwrap();
    }

    /// Memory follows what is set, not the size: a petabyte bitmap set, copied,
    /// cut and cleared keeps a handful of entries, and neighbours merge.
    #[test]
    fn a_petabyte_costs_entries_by_what_is_set_not_by_size() {
        let grains = (1u64 << 50) / 4096;
        let mut b = DataBitmap::new(grains);
        assert_eq!(b.stored_entries(), 0);
        b.set_range(at(0), at(grains), true);
        assert_eq!((b.count(), b.stored_entries()), (grains, 1));
        b.set(at(grains / 2 + 3), false);
        assert_eq!((b.count(), b.stored_entries()), (grains - 1, 3));
        b.set(at(grains / 2 + 3), true);
        assert_eq!(b.stored_entries(), 1, "the split runs merge again");
        let mut copy = DataBitmap::new(grains);
        copy.copy_from(&b, at(5), at(0), grains - 5);
        assert_eq!(copy.count(), grains - 5);
        assert!(copy.stored_entries() <= 3, "{}", copy.stored_entries());
        copy.resize(grains / 3);
        assert_eq!(copy.count(), grains / 3);
        copy.set_range(at(0), at(grains / 3), false);
        assert_eq!((copy.count(), copy.stored_entries()), (0, 0));
        b.check_invariants().unwrap();
        copy.check_invariants().unwrap();
    }

    /// Runs that meet from either side merge into one, and a range that clears
    /// the middle of a run splits it.
    #[test]
    fn full_runs_merge_and_split() {
        let c = BITMAP_CHUNK_GRAINS;
        let mut b = DataBitmap::new(10 * c);
        b.set_range(at(0), at(2 * c), true);
        b.set_range(at(4 * c), at(6 * c), true);
        assert_eq!(b.full_runs.len(), 2);
        b.set_range(at(2 * c), at(4 * c), true);
        assert_eq!(b.full_runs.iter().collect::<Vec<_>>(), [(&0, &6)]);
        b.set_range(at(c + 1), at(5 * c - 1), false);
        assert_eq!(b.full_runs.iter().collect::<Vec<_>>(), [(&0, &1), (&5, &6)]);
        assert_eq!(b.partial.len(), 2);
        assert_eq!(b.count(), 2 * c + 2);
        b.check_invariants().unwrap();
    }
}
