//! The chunk format's unit tests.

use std::sync::Arc;

use crate::keys::KeyError;
use crate::storage::WriteBatch;
use crate::table::layout::Layout;

use super::codec::*;
use super::cursor::*;
use super::rewrite::*;
use super::*;
use crate::table::varint::*;

/// `cells` (key suffix, value) sorted and deduplicated by suffix, and
/// the chunk encoding them as cells of one row.
fn chunk_of(cells: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Vec<u8> {
    let row = b"row\x00\x01".to_vec();
    cells.sort();
    cells.dedup_by(|a, b| a.0 == b.0);
    let keys: Vec<Vec<u8>> = cells
        .iter()
        .map(|(s, _)| [row.clone(), s.clone()].concat())
        .collect();
    encode_chunk(
        row.len(),
        keys.iter()
            .zip(cells.iter())
            .map(|(k, (_, v))| (k.as_slice(), v.as_slice())),
    )
}

#[test]
fn varints_round_trip() {
    for n in [0, 1, 127, 128, 300, 16_383, 16_384, usize::MAX] {
        let mut out = Vec::new();
        put_varint(&mut out, n);
        let mut at = 0;
        assert_eq!(take_varint(&out, &mut at), Ok(n));
        assert_eq!(at, out.len());
    }
    assert!(take_varint(&[0x80], &mut 0).is_err());
    assert!(take_varint(&[0xFF; 11], &mut 0).is_err());
}

proptest::proptest! {
    /// Whatever the bytes, reading a chunk ends in cells or an error.
    #[test]
    fn any_bytes_read_as_cells_or_an_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        let mut reader = ChunkReader::new(&bytes);
        for _ in 0..=bytes.len() {
            match reader.next_cell() {
                Ok(Some((_, value))) => proptest::prop_assert!(value.end <= bytes.len()),
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// Cells written in key order read back as written.
    #[test]
    fn cells_round_trip(mut cells in proptest::collection::vec(
        (proptest::collection::vec(0u8..4, 1..12), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)),
        0..30,
    )) {
        let chunk = chunk_of(&mut cells);
        let mut reader = ChunkReader::new(&chunk);
        let mut read = Vec::new();
        while let Some((suffix, value)) = reader.next_cell().map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))? {
            read.push((suffix.to_vec(), chunk[value].to_vec()));
        }
        proptest::prop_assert_eq!(read, cells);
    }

    /// Skipping the rest of each family after its first cell reads the
    /// first cell of each family (key suffixes' first two bytes), keys
    /// and values intact.
    #[test]
    fn skipping_families_reads_the_first_cell_of_each(mut cells in proptest::collection::vec(
        (proptest::collection::vec(0u8..3, 2..10), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20)),
        0..40,
    )) {
        let chunk = chunk_of(&mut cells);
        let mut expected = cells.clone();
        expected.dedup_by(|a, b| a.0[..2] == b.0[..2]);
        let mut reader = ChunkReader::new(&chunk);
        let mut read = Vec::new();
        let fail = |e: KeyError| proptest::test_runner::TestCaseError::fail(e.to_string());
        while let Some((suffix, value)) = reader.next_cell().map_err(fail)? {
            read.push((suffix.to_vec(), chunk[value].to_vec()));
            reader.skip_family().map_err(fail)?;
        }
        proptest::prop_assert_eq!(read, expected);
    }
}

#[test]
fn versions_of_one_column_share_their_key() {
    let row = b"row\x00\x01".to_vec();
    let key = |ts: u8| {
        [
            row.clone(),
            b"\x00\x01q\x00\x01".to_vec(),
            vec![0xFF; 7],
            vec![ts],
        ]
        .concat()
    };
    let cells: Vec<(Vec<u8>, Vec<u8>)> = (0..10).map(|ts| (key(ts), vec![ts])).collect();
    let chunk = encode_chunk(
        row.len(),
        cells.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
    );
    // The first cell is whole: two lengths, a 13-byte suffix (family,
    // qualifier, timestamp), a length and the value. Each other one
    // shares 12 bytes of its suffix and costs 5.
    assert_eq!(chunk.len(), 17 + 9 * 5);
}

/// Chunks a write leaves full keep their keys and are not merged;
/// one left small joins the one before it; an empty one goes; one
/// past the split size is split, each piece after the first under
/// its first cell's key.
#[test]
fn pieces_keep_full_chunks_and_merge_small_ones() {
    let row = b"row\x00\x01".to_vec();
    let key = |q: u8| [row.clone(), vec![0, 1, q]].concat();
    let keys: Vec<Vec<u8>> = (0..8).map(key).collect();
    // Cells of 1,279 encoded bytes: two do not fit one chunk with a third.
    let value = vec![7u8; CHUNK_TARGET_BYTES - 10];
    let small = vec![7u8; 10];
    fn segment<'a>(row: &[u8], keys: &'a [Vec<u8>], cells: &[(usize, &'a Vec<u8>)]) -> Piece<'a> {
        let cells: Vec<BorrowedCell<'a>> = cells
            .iter()
            .map(|(q, v)| (keys[*q].as_slice(), v.as_slice()))
            .collect();
        let first = cells.first().map_or(row.to_vec(), |(k, _)| k.to_vec());
        let len = encoded_size(row.len(), cells.iter().copied());
        (first, cells, len)
    }
    let keys_of = |pieces: &[Piece<'_>]| -> Vec<Vec<u8>> {
        pieces.iter().map(|(k, _, _)| k.clone()).collect()
    };
    // Two chunks of about the target size stay two.
    let full = pieces_of(
        vec![
            segment(&row, &keys, &[(0, &value)]),
            segment(&row, &keys, &[(1, &value)]),
        ],
        row.len(),
    );
    assert_eq!(keys_of(&full), vec![keys[0].clone(), keys[1].clone()]);
    // A small one after a full one joins it; an empty one goes.
    let merged = pieces_of(
        vec![
            segment(&row, &keys, &[(0, &value)]),
            segment(&row, &keys, &[]),
            segment(&row, &keys, &[(2, &small), (3, &small)]),
        ],
        row.len(),
    );
    assert_eq!(keys_of(&merged), vec![keys[0].clone()]);
    assert_eq!(merged[0].1.len(), 3);
    // Past the split size: pieces of about the target, a small last
    // one joining the one before it.
    let wide = pieces_of(
        vec![segment(
            &row,
            &keys,
            &[(4, &value), (5, &value), (6, &small)],
        )],
        row.len(),
    );
    assert_eq!(keys_of(&wide), vec![keys[4].clone(), keys[5].clone()]);
    assert_eq!(wide[1].1.len(), 2);
    assert!(wide.iter().all(|(_, _, len)| *len <= CHUNK_SPLIT_BYTES));
}

/// Adding a cell after a large value splits it off into a chunk of
/// its own without rewriting the value's parts; the row reads back
/// whole.
/// Storage in memory and the layout of a table with one family, `f`.
fn table_in_memory() -> (crate::storage::Storage, Arc<Layout>) {
    table_in_memory_with(&["f"])
}

/// Storage in memory and the layout of a table with the given families,
/// in one locality group.
fn table_in_memory_with(families: &[&str]) -> (crate::storage::Storage, Arc<Layout>) {
    use crate::ids::TableId;
    use crate::storage::{MemoryBackend, Storage};
    use crate::table::layout::Placement;
    use crate::table::spec::{FamilySpec, TableSpec};

    let storage = Storage::with_backend(
        Arc::new(MemoryBackend::new()),
        "mem".as_ref(),
        crate::storage::DEFAULT_STALL_LIMIT,
    )
    .expect("storage");
    let spec = families
        .iter()
        .zip(1..)
        .fold(TableSpec::new(), |spec, (name, id)| {
            spec.with_family(FamilySpec {
                id,
                ..FamilySpec::new(*name)
            })
        });
    let layout = Layout::new(
        &storage,
        TableId::generate(),
        "t".into(),
        spec,
        &Placement::OwnTree,
        false,
    )
    .expect("layout");
    (storage, Arc::new(layout))
}

/// A family kept only to show that its row exists is passed over after
/// its first cell, and the chunk still counts as pruned; a chunk holding
/// nothing else yields that family's cells, every one of them.
#[test]
fn a_family_kept_for_presence_is_passed_over_but_shows_its_row() {
    use crate::keys::CellKey;
    use crate::table::KeptCells;

    let (_storage, layout) = table_in_memory_with(&["f", "g"]);
    let f = layout.family("f").expect("family f").id;
    let g = layout.family("g").expect("family g").id;
    let chunk = |cells: &[(u16, &str)]| {
        let keys: Vec<Vec<u8>> = cells
            .iter()
            .map(|(family, q)| CellKey::encode(&[], b"row", *family, q.as_bytes(), 7))
            .collect::<Result<_, _>>()
            .expect("keys");
        let row_len = layout.row_len(&keys[0]).expect("row");
        let bytes = encode_chunk(row_len, keys.iter().map(|k| (k.as_slice(), &b"v"[..])));
        (keys[0][..row_len].to_vec(), Bytes::from(bytes))
    };
    let keep = KeptCells::columns(
        [(f, Some(vec![b"b".to_vec()])), (g, Some(Vec::new()))],
        true,
    );
    let decoded = |(key, bytes): &(Vec<u8>, Bytes), keep: &KeptCells| {
        let (mut out, mut buffers) = (Vec::new(), DecodeBuffers::default());
        let (row_len, keep) = (key.len(), Some(keep));
        let pruned = decode(
            &layout,
            key,
            row_len,
            bytes,
            keep,
            false,
            &mut out,
            &mut buffers,
        )
        .expect("decode");
        let qualifiers: Vec<(u16, Vec<u8>)> = out
            .iter()
            .map(|(k, _)| {
                let cell = layout.decode_column(k, key.len()).expect("cell");
                (cell.family, cell.qualifier.to_vec())
            })
            .collect();
        (qualifiers, pruned)
    };
    let both = chunk(&[(f, "a"), (f, "b"), (g, "x"), (g, "y"), (g, "z")]);
    assert_eq!(decoded(&both, &keep), (vec![(f, b"b".to_vec())], true));
    let only_g = chunk(&[(g, "x"), (g, "y"), (g, "z")]);
    let all_g = ["x", "y", "z"].map(|q| (g, q.as_bytes().to_vec())).to_vec();
    assert_eq!(decoded(&only_g, &keep), (all_g, false));
    // Nothing kept: the chunk is read whole.
    let f_and_g = chunk(&[(f, "a"), (g, "x"), (g, "y")]);
    let all = vec![(f, b"a".to_vec()), (g, b"x".to_vec()), (g, b"y".to_vec())];
    assert_eq!(decoded(&f_and_g, &keep), (all, false));
    // The family passed over comes first: the kept cell after it is found.
    let keep_g = KeptCells::columns(
        [(f, Some(Vec::new())), (g, Some(vec![b"y".to_vec()]))],
        true,
    );
    let g_kept = chunk(&[(f, "a"), (f, "b"), (g, "x"), (g, "y")]);
    assert_eq!(decoded(&g_kept, &keep_g), (vec![(g, b"y".to_vec())], true));
}

/// Chunks read ahead share one buffer per batch; a value the cursor hands
/// out is a copy, so that keeping it never keeps the batch.
#[test]
fn values_read_ahead_are_copied_out_of_their_batch() {
    use crate::keys::CellKey;
    use crate::storage::Durability;

    let (storage, layout) = table_in_memory();
    let tree = &layout.groups[0].tree;
    let family = layout.family("f").expect("family f").id;
    let mut batch = WriteBatch::with_durability(Durability::Eventual);
    let mut chunk_len = None;
    for row in 0..2_000 {
        let row = format!("row{row:05}");
        let key = CellKey::encode(&[], row.as_bytes(), family, b"q", 1).expect("key");
        let row_len = layout.row_len(&key).expect("row");
        let value = vec![b'v'; 101];
        let chunk = encode_chunk(row_len, [(key.as_slice(), value.as_slice())]);
        // Every chunk is as long, an odd length: no two values in
        // allocations of their own (aligned) lie one chunk apart.
        assert_eq!(*chunk_len.get_or_insert(chunk.len()), chunk.len());
        batch.put(tree, key[..row_len].to_vec(), chunk);
    }
    let chunk_len = chunk_len.expect("chunks");
    assert_eq!(chunk_len % 2, 1, "chunks of {chunk_len} bytes");
    storage.apply(batch).expect("apply");

    let mut cursor = CellCursor::open(&layout, tree, Vec::new(), None, false).expect("cursor");
    cursor.read_ahead_after(0);
    let mut values = Vec::new();
    while let Some((_, value)) = cursor.head.take() {
        values.push(value);
        cursor.advance().expect("advance");
    }
    assert_eq!(values.len(), 2_000);
    let apart = |pair: &[crate::storage::Bytes]| {
        (pair[1].as_ptr() as usize).wrapping_sub(pair[0].as_ptr() as usize)
    };
    assert!(
        values[1..].windows(2).all(|pair| apart(pair) != chunk_len),
        "values read ahead share their batch's buffer"
    );
}

#[test]
fn a_large_value_is_not_rewritten_when_a_cell_is_added_after_it() {
    use crate::keys::CellKey;
    use crate::storage::Durability;

    let (storage, layout) = table_in_memory();
    let tree = &layout.groups[0].tree;
    let family = layout.family("f").expect("family f").id;
    let key = |q: &str| CellKey::encode(&[], b"r", family, q.as_bytes(), 1).expect("key");
    let row_part = key("a")[..layout.row_len(&key("a")).expect("row")].to_vec();
    let large = vec![9u8; 100_000];
    // Writes `cells` to the row and returns the bytes the write put.
    let write = |cells: &[(&str, &[u8])], stored: bool| -> usize {
        let keys: Vec<Vec<u8>> = cells.iter().map(|(q, _)| key(q)).collect();
        let changes: CellChanges<'_> = keys
            .iter()
            .zip(cells)
            .map(|(k, (_, v))| (k.as_slice(), Some(*v)))
            .collect();
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        write_changes(&layout, tree, &row_part, &changes, stored, &mut batch).expect("write");
        let bytes = batch.bytes();
        storage.apply(batch).expect("apply");
        bytes
    };
    let loaded = write(&[("a", b"first"), ("b", &large)], false);
    assert!(loaded > large.len(), "the load wrote {loaded} bytes");
    let added = write(&[("c", b"after")], true);
    assert!(added < 1_000, "adding a small cell wrote {added} bytes");
    let cells = cells_with_prefix(&layout, tree, &row_part).expect("read");
    let read: Vec<(Vec<u8>, Vec<u8>)> = cells
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    let want = vec![
        (key("a"), b"first".to_vec()),
        (key("b"), large.clone()),
        (key("c"), b"after".to_vec()),
    ];
    assert!(read == want, "the row reads back differently");
}
