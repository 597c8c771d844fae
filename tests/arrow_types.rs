//! Every Arrow type is storable: a column of each, with NULLs, goes into a
//! table and comes back equal, also after the database is reopened, and in
//! the history view.

mod common;

use std::sync::Arc;

use common::{query, run, runtime};
use datafusion::arrow::array::{
    Array, ArrayRef, Decimal256Array, DictionaryArray, FixedSizeBinaryArray, FixedSizeListArray,
    Int32Array, IntervalDayTimeArray, IntervalMonthDayNanoArray, IntervalYearMonthArray,
    LargeListArray, ListArray, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
    TimestampNanosecondArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{
    i256, DataType, Field, Fields, Int32Type, Int64Type, IntervalDayTime, IntervalMonthDayNano,
    Schema,
};
use datafusion::arrow::ipc::writer::FileWriter;
use widesql::import::ImportOptions;
use widesql::{Db, FileFormat};

type TestResult = Result<(), common::BoxError>;

/// Four rows of every type the issue of nested and exotic types names;
/// row 2 is NULL in every column.
fn every_type() -> Result<RecordBatch, common::BoxError> {
    let ints = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None, Some(3)]),
        Some(vec![]),
        None,
        Some(vec![Some(-4)]),
    ]);
    let nested = ListArray::new(
        Arc::new(Field::new_list_field(
            DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
            true,
        )),
        OffsetBuffer::from_lengths([2, 0, 0, 1]),
        Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![Some(9)]),
        ])),
        Some(vec![true, true, false, true].into()),
    );
    let large = LargeListArray::new(
        Arc::new(Field::new_list_field(DataType::Utf8, true)),
        OffsetBuffer::from_lengths([1, 2, 0, 0]),
        Arc::new(StringArray::from(vec![Some("a"), Some("b"), None])),
        Some(vec![true, true, false, true].into()),
    );
    let fixed_list = FixedSizeListArray::new(
        Arc::new(Field::new_list_field(DataType::Int32, true)),
        2,
        Arc::new(Int32Array::from(vec![1, 2, 3, 4, 0, 0, 7, 8])),
        Some(vec![true, true, false, true].into()),
    );
    let point = StructArray::new(
        Fields::from(vec![
            Field::new("r", DataType::Utf8, true),
            Field::new("c", DataType::Float64, true),
        ]),
        vec![
            Arc::new(StringArray::from(vec![Some("x"), None, None, Some("z")])) as ArrayRef,
            Arc::new(datafusion::arrow::array::Float64Array::from(vec![
                Some(1.5),
                Some(2.5),
                None,
                None,
            ])),
        ],
        Some(vec![true, true, false, true].into()),
    );
    let binary = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
        vec![
            Some(b"abcd".to_vec()),
            Some(vec![0, 0, 0, 1]),
            None,
            Some(vec![255; 4]),
        ]
        .into_iter(),
        4,
    )?;
    let year_month = IntervalYearMonthArray::from(vec![Some(14), Some(-1), None, Some(0)]);
    let day_time = IntervalDayTimeArray::from(vec![
        Some(IntervalDayTime::new(3, 500)),
        Some(IntervalDayTime::new(-1, 0)),
        None,
        Some(IntervalDayTime::new(0, 1)),
    ]);
    let month_day_nano = IntervalMonthDayNanoArray::from(vec![
        Some(IntervalMonthDayNano::new(1, 2, 3_000_000_000)),
        Some(IntervalMonthDayNano::new(-1, 0, -1)),
        None,
        Some(IntervalMonthDayNano::new(0, 31, 0)),
    ]);
    let big = Decimal256Array::from(vec![
        Some(i256::from_i128(12_345)),
        Some(i256::from_i128(-1) * i256::from_i128(10_i128.pow(37))),
        None,
        Some(i256::MAX / i256::from_i128(1000)),
    ])
    .with_precision_and_scale(76, 2)?;
    let utc =
        TimestampNanosecondArray::from(vec![Some(1), Some(-1_000_000_001), None, Some(i64::MAX)])
            .with_timezone("UTC");
    let plus_two =
        TimestampMicrosecondArray::from(vec![Some(0), Some(1_700_000_000_000_000), None, Some(-5)])
            .with_timezone("+02:00");
    let dictionary: DictionaryArray<Int32Type> = vec![Some("red"), Some("red"), None, Some("blue")]
        .into_iter()
        .collect();
    let words: DictionaryArray<Int32Type> = vec!["x", "y", "x"].into_iter().collect();
    let dictionary_list = ListArray::new(
        Arc::new(Field::new_list_field(words.data_type().clone(), true)),
        OffsetBuffer::from_lengths([2, 0, 0, 1]),
        Arc::new(words),
        Some(vec![true, true, false, true].into()),
    );
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("ints", Arc::new(ints)),
        ("nested", Arc::new(nested)),
        ("large", Arc::new(large)),
        ("fixed_list", Arc::new(fixed_list)),
        ("point", Arc::new(point)),
        ("binary", Arc::new(binary)),
        ("year_month", Arc::new(year_month)),
        ("day_time", Arc::new(day_time)),
        ("month_day_nano", Arc::new(month_day_nano)),
        ("big", Arc::new(big)),
        ("utc", Arc::new(utc)),
        ("plus_two", Arc::new(plus_two)),
        ("dictionary", Arc::new(dictionary)),
        ("dictionary_list", Arc::new(dictionary_list)),
    ];
    let mut fields = vec![Field::new("_key", DataType::Utf8, false)];
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec!["r0", "r1", "r2", "r3"]))];
    for (name, array) in columns {
        fields.push(Field::new(name, array.data_type().clone(), true));
        arrays.push(array);
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The table's rows as one batch, in key order, its dictionary column cast
/// back to the dictionary type (a dictionary is stored as its values).
fn read_back(db: &Db, like: &RecordBatch) -> Result<RecordBatch, common::BoxError> {
    let batches = runtime().block_on(async {
        db.session()
            .sql("SELECT * FROM every_type ORDER BY _key")
            .await?
            .collect()
            .await
    })?;
    let read = concat_batches(&batches[0].schema(), &batches)?;
    let columns = like
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let column = read
                .column_by_name(f.name())
                .ok_or(format!("no column {}", f.name()))?;
            Ok(cast(column, f.data_type())?)
        })
        .collect::<Result<Vec<_>, common::BoxError>>()?;
    Ok(RecordBatch::try_new(like.schema(), columns)?)
}

#[test]
fn every_arrow_type_round_trips_through_a_table() -> TestResult {
    let dir = tempfile::tempdir()?;
    let batch = every_type()?;
    let file = dir.path().join("every_type.arrow");
    let mut writer = FileWriter::try_new(std::fs::File::create(&file)?, &batch.schema())?;
    writer.write(&batch)?;
    writer.finish()?;
    {
        let db = Db::open(dir.path().join("db"))?;
        let options = ImportOptions {
            format: Some(FileFormat::Arrow),
            create: true,
            ..ImportOptions::default()
        };
        runtime().block_on(db.session().import("every_type", &file, options, |_| {}))?;
        let back = read_back(&db, &batch)?;
        for (i, field) in batch.schema().fields().iter().enumerate() {
            assert_eq!(
                back.column(i).as_ref(),
                batch.column(i).as_ref(),
                "column {} ({})",
                field.name(),
                field.data_type()
            );
        }
        // The stored types are the file's, but for the dictionary.
        let described = query(&db, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'every_type' AND column_name IN ('big', 'utc', 'point')")?;
        let text = format!("{described:?}");
        assert!(text.contains("Decimal256(76, 2)"), "{text}");
        assert!(
            text.contains("Timestamp(ns, \\\"UTC\\\")")
                || text.contains("Timestamp(Nanosecond, Some(\\\"UTC\\\"))"),
            "{text}"
        );
        // A second version of a list cell shows in the history view.
        run(&db, "UPDATE every_type SET ints = [7, 8] WHERE _key = 'r0'")?;
        let history = query(
            &db,
            "SELECT ints FROM history('every_type') WHERE _key = 'r0'",
        )?;
        assert_eq!(history, vec![vec!["[[7, 8], [1, , 3]]".to_string()]]);
    }
    // The catalog keeps the Arrow types by name: a reopened database reads
    // every column the same.
    let db = Db::open(dir.path().join("db"))?;
    run(
        &db,
        "UPDATE every_type SET ints = [1, NULL, 3] WHERE _key = 'r0'",
    )?;
    let back = read_back(&db, &batch)?;
    assert_eq!(back, batch);
    Ok(())
}

#[test]
fn nested_types_work_from_sql() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(
        &db,
        "CREATE TABLE t (id INT PRIMARY KEY, tags VARCHAR[], pos STRUCT<x DOUBLE, y DOUBLE>,
                         price DECIMAL(50, 2), at TIMESTAMP WITH TIME ZONE);
         INSERT INTO t VALUES
           (1, ['a', 'b'], {x: 1.0, y: 2.0}, CAST('12345678901234567890123456789.25' AS DECIMAL(50, 2)), '2024-01-01T00:00:00Z'),
           (2, [], NULL, NULL, NULL),
           (3, NULL, {x: -1.5, y: NULL}, -0.01, '1969-12-31T23:59:59Z')",
    )?;
    let rows = query(
        &db,
        "SELECT id, array_length(tags), tags[1], pos['x'], price, at FROM t ORDER BY id",
    )?;
    assert_eq!(rows[0][1..4], ["2", "a", "1.0"].map(String::from));
    assert_eq!(rows[0][4], "12345678901234567890123456789.25");
    assert!(
        rows[0][5].starts_with("2024-01-01T00:00:00"),
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[1][1..5], ["0", "", "", ""].map(String::from));
    assert_eq!(rows[2][3..5], ["-1.5", "-0.01"].map(String::from));
    assert_eq!(
        query(&db, "SELECT id FROM t WHERE array_has(tags, 'b')")?,
        vec![vec!["1".to_string()]]
    );
    // A list cell is one IPC record-batch message, its schema in the
    // catalog: a few hundred bytes at most, not a whole stream.
    let sizes = query(
        &db,
        "SELECT length(encode(value, 'hex')) / 2 FROM cells('t') WHERE qualifier = 'tags' ORDER BY id",
    )?;
    let first: usize = sizes[0][0].parse()?;
    assert!((100..300).contains(&first), "{sizes:?}");
    // A nested value cannot be part of a row key.
    let err = run(&db, "CREATE TABLE bad (k INT[] PRIMARY KEY)")
        .err()
        .ok_or("a list row key was accepted")?;
    assert!(
        err.to_string().contains("cannot be part of a row key"),
        "{err}"
    );
    Ok(())
}

#[test]
fn struct_fields_with_any_name_are_stored_and_the_catalog_stays_readable() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let db = Db::open(dir.path().join("db"))?;
        run(
            &db,
            "CREATE TABLE keep (_key VARCHAR PRIMARY KEY, v INT);
             INSERT INTO keep VALUES ('precious', 42);
             CREATE TABLE odd (_key VARCHAR PRIMARY KEY, e STRUCT<\"\" VARCHAR>,
                 s STRUCT<\"a\\b\" INT, \"line\nbreak\" INT>);
             INSERT INTO odd (_key, s) VALUES ('k', named_struct('a\\b', 1, 'line\nbreak', 2))",
        )?;
        // A JSON object with an empty key, as an export of MAP {'': 'x'}
        // writes it, becomes a struct field named "".
        let path = dir.path().join("empty_key.ndjson");
        std::fs::write(&path, "{\"_key\":\"a\",\"m\":{\"\":\"x\"}}\n")?;
        let options = ImportOptions {
            create: true,
            ..Default::default()
        };
        runtime().block_on(db.session().import("imported", &path, options, |_| {}))?;
    }
    // Reopened: every table reads, the odd names included.
    let db = Db::open(dir.path().join("db"))?;
    assert_eq!(
        query(&db, "SELECT v FROM keep")?,
        vec![vec!["42".to_string()]]
    );
    let odd = query(
        &db,
        "SELECT e IS NULL, s['a\\b'], s['line\nbreak'] FROM odd",
    )?;
    assert_eq!(odd, vec![vec!["true".to_string(), "1".into(), "2".into()]]);
    // (DataFusion's field access refuses the name "", so the value is read
    // whole.)
    let imported = query(&db, "SELECT m FROM imported")?;
    assert_eq!(imported, vec![vec!["{: x}".to_string()]]);
    run(&db, "DROP TABLE odd")?;

    // A dictionary inside such a type (the embedded API takes any Arrow
    // type) is stored too.
    use widesql::{ArrowType, ColumnSpec, FamilySpec, TableSpec, ValueType};
    let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let odd_dictionary =
        ValueType::Arrow(ArrowType(DataType::Struct(Fields::from(vec![Field::new(
            "", dictionary, true,
        )]))));
    let spec = TableSpec::new().with_family(
        FamilySpec::new("f").with_column(ColumnSpec::new("s", odd_dictionary.clone())),
    );
    db.default_dataset()?.create_table("dictionary", spec)?;
    drop(db);
    let db = Db::open(dir.path().join("db"))?;
    let stored = db.default_dataset()?.open_table("dictionary")?.spec()?;
    let column = stored.families[0].column("s").ok_or("no column s")?;
    assert_eq!(column.value_type, odd_dictionary);
    Ok(())
}
