//! The live point mappings, stored a chunk of [`ROW_GRAINS`] adjacent grains
//! to a row: (volume id, chunk) → which grains of the chunk are mapped and
//! their [`MapValue`]s, in grain order.
//!
//! Why chunks and not a row a grain: a 1 MiB write replaces 256 mappings, and
//! taking 256 rows out of redb's tree and putting 256 back was the largest
//! part of such a write's metadata work (a scratch build that left mappings
//! out altogether made 1 MiB writes at queue depth 4 25–30% faster). A chunk a
//! row, the same write changes 16 rows, and a read of adjacent grains finds
//! them in one row: measured 1.056 × the throughput of one row a grain and
//! 0.93 × the daemon's CPU a MiB (bench/results/HISTORY.md). A small
//! write rewrites its chunk's row, at most `2 + 16 × 17` bytes where it wrote
//! 17; the tree's work per row is the larger part either way.
//!
//! Everything above this module still sees one mapping a grain: the functions
//! here read and change grains, and only they know the rows.

use redb::{ReadableTable, Table, TableDefinition};

use crate::ids::GrainIndex;
use crate::meta::schema::{kv_error, MapValue, MAPPINGS};
use crate::{EngineError, Result};

/// The table of one row a grain that [`MAPPINGS`] replaced: (volume id,
/// grain) → [`MapValue`]. Read once, to convert a data directory written
/// before (see [`convert_legacy`]).
const LEGACY_MAPPINGS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("mappings");

/// Adjacent grains a row holds (the presence bitmap is a `u16`).
pub const ROW_GRAINS: u64 = 16;
const CHUNK: usize = ROW_GRAINS as usize;
/// The presence bitmap before the values.
const HEADER_BYTES: usize = 2;
const _: () = assert!(
    CHUNK == HEADER_BYTES * 8,
    "a row's presence bitmap has a bit a grain"
);

/// The point mappings of one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Row {
    values: [Option<MapValue>; CHUNK],
}

impl Row {
    pub fn decode(bytes: &[u8]) -> Result<Row> {
        let corrupt = || EngineError::Corruption(format!("point row of {} bytes", bytes.len()));
        let (header, mut rest) = bytes.split_at_checked(HEADER_BYTES).ok_or_else(corrupt)?;
        let present = u16::from_le_bytes([header[0], header[1]]);
        if present == 0 || rest.len() != present.count_ones() as usize * MapValue::BYTES {
            return Err(corrupt());
        }
        let mut row = Row::default();
        for (i, slot) in row.values.iter_mut().enumerate() {
            if present & 1 << i != 0 {
                let (value, after) = rest.split_at(MapValue::BYTES);
                *slot = Some(MapValue::decode(value)?);
                rest = after;
            }
        }
        Ok(row)
    }

    /// The row's bytes (it holds at least one mapping).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        let present = self
            .values
            .iter()
            .enumerate()
            .filter(|(_, value)| value.is_some())
            .fold(0u16, |bits, (i, _)| bits | 1 << i);
        assert_ne!(present, 0, "an empty row is removed, not written");
        out.extend_from_slice(&present.to_le_bytes());
        for value in self.values.iter().flatten() {
            out.extend_from_slice(&value.encode());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }
}

/// The row key of (volume, grain) and the grain's place in the row.
fn row_of(volume: crate::ids::VolumeId, grain: GrainIndex) -> ((u64, u64), usize) {
    let grain = grain.get();
    (
        (volume.get(), grain / ROW_GRAINS),
        (grain % ROW_GRAINS) as usize,
    )
}

/// The first grain of row `chunk` (of any volume).
fn row_start(chunk: u64) -> GrainIndex {
    GrainIndex::new(chunk * ROW_GRAINS)
}

/// Point mappings in grain order, as (volume, grain, mapping), from the rows of
/// a range of the table, limited to grains `[first, end)` of every volume.
pub(crate) struct Points<'a> {
    rows: redb::Range<'a, (u64, u64), &'static [u8]>,
    first: GrainIndex,
    end: GrainIndex,
    /// The row being read: its volume, first grain, mappings and next place.
    row: Option<(u64, GrainIndex, Row, usize)>,
}

impl Iterator for Points<'_> {
    type Item = Result<(u64, GrainIndex, MapValue)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((volume, base, row, next)) = &mut self.row {
                while *next < CHUNK {
                    let at = *next;
                    *next += 1;
                    let grain = *base + at as u64;
                    match row.values[at] {
                        Some(value) if grain >= self.first && grain < self.end => {
                            return Some(Ok((*volume, grain, value)));
                        }
                        _ => {}
                    }
                }
                self.row = None;
            }
            let (key, value) = match self.rows.next()? {
                Ok(item) => item,
                Err(error) => return Some(Err(kv_error(error))),
            };
            let (volume, chunk) = key.value();
            match Row::decode(value.value()) {
                Ok(row) => self.row = Some((volume, row_start(chunk), row, 0)),
                Err(error) => return Some(Err(error)),
            }
        }
    }
}

/// The point mappings of grains `[first, end)` of `volume`, in grain order.
pub(crate) fn range<'a>(
    table: &'a impl ReadableTable<(u64, u64), &'static [u8]>,
    volume: crate::ids::VolumeId,
    first: GrainIndex,
    end: GrainIndex,
) -> Result<Points<'a>> {
    let rows = if first >= end {
        table
            .range((volume.get(), 0)..(volume.get(), 0))
            .map_err(kv_error)?
    } else {
        let (from, _) = row_of(volume, first);
        let (to, _) = row_of(volume, end - 1);
        table.range(from..=to).map_err(kv_error)?
    };
    Ok(Points {
        rows,
        first,
        end,
        row: None,
    })
}

/// Every point mapping, in (volume, grain) order.
pub(crate) fn all<'a>(
    table: &'a impl ReadableTable<(u64, u64), &'static [u8]>,
) -> Result<Points<'a>> {
    Ok(Points {
        rows: table.iter().map_err(kv_error)?,
        first: GrainIndex::new(0),
        end: GrainIndex::MAX,
        row: None,
    })
}

/// Whether any grain of `[first, end)` of `volume` has a point mapping.
pub(crate) fn any_in(
    table: &impl ReadableTable<(u64, u64), &'static [u8]>,
    volume: crate::ids::VolumeId,
    first: GrainIndex,
    end: GrainIndex,
) -> Result<bool> {
    Ok(range(table, volume, first, end)?
        .next()
        .transpose()?
        .is_some())
}

/// Sets the point mapping of (volume, grain); returns the one it replaced.
pub(crate) fn set(
    table: &mut Table<(u64, u64), &'static [u8]>,
    volume: crate::ids::VolumeId,
    grain: GrainIndex,
    value: MapValue,
) -> Result<Option<MapValue>> {
    let (key, at) = row_of(volume, grain);
    let mut row = read_row(table, key)?.unwrap_or_default();
    let old = row.values[at].replace(value);
    write_row(table, key, &row)?;
    Ok(old)
}

/// Inserts the point mappings of grains `[first, first + values.len())` of
/// `volume`, which hold none (the caller removed them): the rows at the edges
/// of the run, if they hold other grains, are taken out and merged; then all
/// rows go in through one cursor, whose run of inserts redb applies a leaf at
/// a time rather than a descent each.
pub(crate) fn insert_run(
    table: &mut Table<(u64, u64), &'static [u8]>,
    volume: crate::ids::VolumeId,
    first: GrainIndex,
    values: &[MapValue],
) -> Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    let end = first + values.len() as u64;
    let survived = |grain: GrainIndex| {
        format!("volume {volume} grain {grain}: a mapping survived its removal")
    };
    let (first_key, _) = row_of(volume, first);
    let (last_key, _) = row_of(volume, end - 1);
    let mut rows: Vec<((u64, u64), Row)> =
        Vec::with_capacity((last_key.1 - first_key.1 + 1) as usize);
    for chunk in first_key.1..=last_key.1 {
        let base = row_start(chunk);
        let whole = first <= base && base + ROW_GRAINS <= end;
        let mut row = match whole {
            true => Row::default(),
            false => take_row(table, (volume.get(), chunk))?.unwrap_or_default(),
        };
        for grain in first.max(base).range_to(end.min(base + ROW_GRAINS)) {
            let slot = &mut row.values[(grain - base) as usize];
            if slot.is_some() {
                return Err(EngineError::Corruption(survived(grain)));
            }
            *slot = Some(values[(grain - first) as usize]);
        }
        rows.push(((volume.get(), chunk), row));
    }
    let mut buf = Vec::with_capacity(HEADER_BYTES + CHUNK * MapValue::BYTES);
    let mut cursor = table
        .lower_bound_mut(std::ops::Bound::Included(first_key))
        .map_err(kv_error)?;
    for (key, row) in &rows {
        row.encode(&mut buf);
        cursor.insert_before(*key, &buf[..]).map_err(|error| {
            crate::meta::schema::cursor_insert_error(error, || survived(row_start(key.1)))
        })?;
    }
    cursor.close().map_err(kv_error)
}

/// Removes the point mappings of `volume` in grains `[first, end)` that
/// `dies(mapping)` selects, the first `limit` of them in grain order; returns
/// them, in grain order. The rows holding them come out of the table in one
/// pass (cheaper than a removal each); what else they held goes back.
pub(crate) fn extract_in(
    table: &mut Table<(u64, u64), &'static [u8]>,
    volume: crate::ids::VolumeId,
    (first, end): (GrainIndex, GrainIndex),
    limit: usize,
    dies: impl Fn(&MapValue) -> bool,
) -> Result<Vec<(GrainIndex, MapValue)>> {
    let mut removed = Vec::new();
    if first >= end || limit == 0 {
        return Ok(removed);
    }
    let (from, _) = row_of(volume, first);
    let (to, _) = row_of(volume, end - 1);
    let in_range = |base: GrainIndex, i: usize| (first..end).contains(&(base + i as u64));
    let mut kept: Vec<((u64, u64), Row)> = Vec::new();
    {
        // A row that does not decode is taken out too, so that decoding it
        // below fails the transaction instead of leaving it unnoticed.
        let extract = table
            .extract_from_if(from..=to, |key, value| {
                Row::decode(value).map_or(true, |row| {
                    let base = row_start(key.1);
                    row.values
                        .iter()
                        .enumerate()
                        .any(|(i, slot)| in_range(base, i) && slot.is_some_and(|v| dies(&v)))
                })
            })
            .map_err(kv_error)?;
        for item in extract {
            let (key, value) = item.map_err(kv_error)?;
            let key = key.value();
            let base = row_start(key.1);
            let mut row = Row::decode(value.value())?;
            for (i, slot) in row.values.iter_mut().enumerate() {
                if !in_range(base, i) || removed.len() >= limit {
                    continue;
                }
                if let Some(value) = slot.filter(|value| dies(value)) {
                    removed.push((base + i as u64, value));
                    *slot = None;
                }
            }
            if !row.is_empty() {
                kept.push((key, row));
            }
            if removed.len() >= limit {
                break;
            }
        }
    }
    for (key, row) in kept {
        write_row(table, key, &row)?;
    }
    Ok(removed)
}

/// Takes row `key` out of the table, if it is there.
fn take_row(table: &mut Table<(u64, u64), &'static [u8]>, key: (u64, u64)) -> Result<Option<Row>> {
    match table.remove(key).map_err(kv_error)? {
        Some(value) => Ok(Some(Row::decode(value.value())?)),
        None => Ok(None),
    }
}

fn read_row(table: &Table<(u64, u64), &'static [u8]>, key: (u64, u64)) -> Result<Option<Row>> {
    match table.get(key).map_err(kv_error)? {
        Some(value) => Ok(Some(Row::decode(value.value())?)),
        None => Ok(None),
    }
}

/// Writes `row`, or removes it when it holds no mapping.
fn write_row(
    table: &mut Table<(u64, u64), &'static [u8]>,
    key: (u64, u64),
    row: &Row,
) -> Result<()> {
    if row.is_empty() {
        table.remove(key).map_err(kv_error)?;
        return Ok(());
    }
    let mut buf = Vec::with_capacity(HEADER_BYTES + CHUNK * MapValue::BYTES);
    row.encode(&mut buf);
    table.insert(key, &buf[..]).map_err(kv_error)?;
    Ok(())
}

/// Converts a data directory's mappings of one row a grain (written before
/// [`MAPPINGS`]) into rows, in `txn`, and drops the old table. Returns the
/// mappings converted (0 when there was no old table).
pub(crate) fn convert_legacy(txn: &redb::WriteTransaction) -> Result<u64> {
    use redb::TableHandle;
    let legacy = txn
        .list_tables()
        .map_err(kv_error)?
        .any(|handle| handle.name() == LEGACY_MAPPINGS.name());
    if !legacy {
        return Ok(0);
    }
    let mut converted = 0u64;
    {
        let old = txn.open_table(LEGACY_MAPPINGS).map_err(kv_error)?;
        let mut rows = txn.open_table(MAPPINGS).map_err(kv_error)?;
        let mut current: Option<((u64, u64), Row)> = None;
        for item in old.iter().map_err(kv_error)? {
            let (key, value) = item.map_err(kv_error)?;
            let (volume, grain) = key.value();
            let value = MapValue::decode(value.value())?;
            let (row_key, at) = row_of(crate::ids::VolumeId::new(volume), GrainIndex::new(grain));
            if current.as_ref().is_some_and(|(k, _)| *k != row_key) {
                let (k, row) = current.take().expect("a row");
                write_row(&mut rows, k, &row)?;
            }
            let (_, row) = current.get_or_insert_with(|| (row_key, Row::default()));
            row.values[at] = Some(value);
            converted += 1;
        }
        if let Some((k, row)) = current {
            write_row(&mut rows, k, &row)?;
        }
    }
    txn.delete_table(LEGACY_MAPPINGS).map_err(kv_error)?;
    Ok(converted)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // bare databases, no engine: no read views to mark stale
mod tests {
    use super::*;
    use crate::meta::schema::GrainTarget;
    use redb::ReadableTableMetadata;

    fn value(seq: u64, id: u64) -> MapValue {
        MapValue {
            seq: crate::ids::SnapshotSeq::new(seq),
            target: GrainTarget::Block(crate::ids::BlockId::new(id)),
        }
    }

    fn with_table(f: impl FnOnce(&mut Table<(u64, u64), &'static [u8]>)) {
        let dir = crate::testing::test_data::data_dir("points");
        let db = redb::Database::create(dir.path().join("meta.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(MAPPINGS).unwrap();
            f(&mut table);
        }
        txn.commit().unwrap();
    }

    fn g(grain: u64) -> GrainIndex {
        GrainIndex::new(grain)
    }

    /// The mappings of grains `[first, end)`, with the grains as integers.
    fn grains(
        table: &Table<(u64, u64), &'static [u8]>,
        volume: crate::ids::VolumeId,
        first: u64,
        end: u64,
    ) -> Vec<(u64, MapValue)> {
        range(table, volume, g(first), g(end))
            .unwrap()
            .map(|item| {
                let (v, grain, value) = item.unwrap();
                assert_eq!(v, volume.get());
                (grain.get(), value)
            })
            .collect()
    }

    /// [`extract_in`] of grains `[first, end)`, with the grains as integers.
    fn extract(
        table: &mut Table<(u64, u64), &'static [u8]>,
        volume: crate::ids::VolumeId,
        (first, end): (u64, u64),
        limit: usize,
        dies: impl Fn(&MapValue) -> bool,
    ) -> Vec<(u64, MapValue)> {
        extract_in(table, volume, (g(first), g(end)), limit, dies)
            .unwrap()
            .into_iter()
            .map(|(grain, value)| (grain.get(), value))
            .collect()
    }

    #[test]
    fn a_row_encodes_and_decodes_and_refuses_bad_bytes() {
        let mut row = Row::default();
        row.values[0] = Some(value(1, 2));
        row.values[15] = Some(MapValue {
            seq: crate::ids::SnapshotSeq::new(3),
            target: GrainTarget::Pattern(u64::MAX),
        });
        let mut bytes = Vec::new();
        row.encode(&mut bytes);
        assert_eq!(bytes.len(), HEADER_BYTES + 2 * MapValue::BYTES);
        assert_eq!(Row::decode(&bytes).unwrap(), row);
        assert!(Row::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(
            Row::decode(&[0, 0]).is_err(),
            "an empty row is never stored"
        );
        assert!(Row::decode(&[1]).is_err());
    }

    /// Runs across row edges, single sets, and extractions with a limit and a
    /// selection read back exactly as a table of one row a grain would.
    #[test]
    fn grains_behave_as_one_mapping_each() {
        with_table(|table| {
            let mut model = std::collections::BTreeMap::new();
            let run: Vec<_> = (5..40).map(|g| value(1, 100 + g)).collect();
            insert_run(table, crate::ids::VolumeId::new(7), g(5), &run).unwrap();
            for (i, v) in run.iter().enumerate() {
                model.insert(5 + i as u64, *v);
            }
            insert_run(table, crate::ids::VolumeId::new(8), g(0), &[value(1, 1)]).unwrap();
            assert_eq!(
                set(table, crate::ids::VolumeId::new(7), g(3), value(2, 3)).unwrap(),
                None
            );
            model.insert(3, value(2, 3));
            assert_eq!(
                set(table, crate::ids::VolumeId::new(7), g(20), value(2, 20)).unwrap(),
                Some(value(1, 120))
            );
            model.insert(20, value(2, 20));
            let expect = |model: &std::collections::BTreeMap<u64, MapValue>, a: u64, b: u64| {
                model.range(a..b).map(|(g, v)| (*g, *v)).collect::<Vec<_>>()
            };
            assert_eq!(
                grains(table, crate::ids::VolumeId::new(7), 0, 64),
                expect(&model, 0, 64)
            );
            assert_eq!(
                grains(table, crate::ids::VolumeId::new(7), 6, 17),
                expect(&model, 6, 17)
            );
            assert!(any_in(table, crate::ids::VolumeId::new(7), g(39), g(40)).unwrap());
            assert!(!any_in(table, crate::ids::VolumeId::new(7), g(40), g(64)).unwrap());
            assert!(!any_in(table, crate::ids::VolumeId::new(7), g(4), g(5)).unwrap());
            assert!(
                !any_in(table, crate::ids::VolumeId::new(7), g(20), g(20)).unwrap(),
                "an empty range"
            );
            assert_eq!(grains(table, crate::ids::VolumeId::new(7), 30, 10), vec![]);

            // Seq 1 only, at most 10, from grain 10 on.
            let removed = extract(table, crate::ids::VolumeId::new(7), (10, 64), 10, |v| {
                v.seq.get() == 1
            });
            let wanted: Vec<_> = expect(&model, 10, 64)
                .into_iter()
                .filter(|(_, v)| v.seq.get() == 1)
                .take(10)
                .collect();
            assert_eq!(removed, wanted);
            for (g, _) in &removed {
                model.remove(g);
            }
            assert_eq!(
                grains(table, crate::ids::VolumeId::new(7), 0, 64),
                expect(&model, 0, 64)
            );
            // The rest, whole rows too: their rows go.
            let removed = extract(
                table,
                crate::ids::VolumeId::new(7),
                (0, 64),
                usize::MAX,
                |_| true,
            );
            assert_eq!(removed, expect(&model, 0, 64));
            assert_eq!(
                grains(table, crate::ids::VolumeId::new(7), 0, u64::MAX),
                vec![]
            );
            assert_eq!(table.len().unwrap(), 1, "only volume 8's row is left");
            // A run over a grain still mapped is refused.
            let err =
                insert_run(table, crate::ids::VolumeId::new(8), g(0), &[value(3, 3)]).unwrap_err();
            assert!(matches!(err, EngineError::Corruption(_)));
        });
    }

    #[test]
    fn a_legacy_table_is_converted_once() {
        let dir = crate::testing::test_data::data_dir("points-legacy");
        let db = redb::Database::create(dir.path().join("meta.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut old = txn.open_table(LEGACY_MAPPINGS).unwrap();
            for grain in [0u64, 1, 15, 16, 40] {
                old.insert((3, grain), &value(grain, grain + 1).encode()[..])
                    .unwrap();
            }
            old.insert((4, 2), &value(9, 9).encode()[..]).unwrap();
        }
        assert_eq!(convert_legacy(&txn).unwrap(), 6);
        txn.commit().unwrap();
        let txn = db.begin_write().unwrap();
        assert_eq!(convert_legacy(&txn).unwrap(), 0, "nothing left to convert");
        {
            let table = txn.open_table(MAPPINGS).unwrap();
            let got: Vec<_> = all(&table).unwrap().map(|item| item.unwrap()).collect();
            let mut want: Vec<_> = [0u64, 1, 15, 16, 40]
                .iter()
                .map(|&grain| (3, g(grain), value(grain, grain + 1)))
                .collect();
            want.push((4, g(2), value(9, 9)));
            assert_eq!(got, want);
            assert_eq!(
                table.len().unwrap(),
                4,
                "rows 0, 1 and 2 of volume 3, row 0 of volume 4"
            );
        }
        txn.commit().unwrap();
    }

    proptest::proptest! {
        /// Any mix of runs (over removed ranges, as writes do), single sets
        /// and limited, selective extractions reads back, range by range, as
        /// a map of one mapping a grain does.
        #[test]
        fn rows_agree_with_a_map_of_grains_after_any_edits(
            ops in proptest::collection::vec(
                (0u8..3, 0u64..3, 0u64..80, 1u64..40, 0usize..50, 0u64..4),
                1..60,
            )
        ) {
            with_table(|table| {
                let mut model = std::collections::BTreeMap::<(u64, u64), MapValue>::new();
                for (n, (op, volume, first, len, limit, seq_mod)) in ops.into_iter().enumerate() {
                    let seq = n as u64;
                    let end = first + len;
                    match op {
                        0 => {
                            extract(table, crate::ids::VolumeId::new(volume), (first, end), usize::MAX, |_| true);
                            let values: Vec<_> = (first..end).map(|g| value(seq, g * 7 + seq)).collect();
                            insert_run(table, crate::ids::VolumeId::new(volume), g(first), &values).unwrap();
                            for (g, v) in (first..end).zip(values) {
                                model.insert((volume, g), v);
                            }
                        }
                        1 => {
                            let v = value(seq, first + 1000);
                            let old = set(table, crate::ids::VolumeId::new(volume), g(first), v).unwrap();
                            assert_eq!(old, model.insert((volume, first), v));
                        }
                        _ => {
                            let dies = |v: &MapValue| v.seq.get() % 4 != seq_mod;
                            let got = extract(table, crate::ids::VolumeId::new(volume), (first, end), limit, dies);
                            let want: Vec<_> = model
                                .range((volume, first)..(volume, end))
                                .filter(|(_, v)| dies(v))
                                .take(limit)
                                .map(|(&(_, g), &v)| (g, v))
                                .collect();
                            assert_eq!(got, want);
                            for (g, _) in want {
                                model.remove(&(volume, g));
                            }
                        }
                    }
                    for volume in 0..3 {
                        let want: Vec<_> = model
                            .range((volume, 0)..(volume, u64::MAX))
                            .map(|(&(_, g), &v)| (g, v))
                            .collect();
                        assert_eq!(grains(table, crate::ids::VolumeId::new(volume), 0, u64::MAX), want);
                    }
                }
                let everything: Vec<_> = all(table).unwrap().map(|item| item.unwrap()).collect();
                let want: Vec<_> = model.iter().map(|(&(vol, grain), &v)| (vol, g(grain), v)).collect();
                assert_eq!(everything, want);
            });
        }
    }
}
