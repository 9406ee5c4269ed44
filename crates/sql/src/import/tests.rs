use super::*;
use csd_table::schema::Value;
use datafusion::arrow::array::{BooleanArray, Float64Array, Int16Array, UInt64Array};

fn batch(cols: Vec<(&str, ArrayRef)>) -> (SchemaRef, Vec<RecordBatch>) {
    let schema = Arc::new(ArrowSchema::new(
        cols.iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let b = RecordBatch::try_new(schema.clone(), cols.into_iter().map(|(_, a)| a).collect())
        .expect("batch");
    (schema, vec![b])
}

fn path() -> PathBuf {
    PathBuf::from("t.parquet")
}

#[test]
fn types_map_to_device_columns_and_values_round_trip() {
    let (schema, batches) = batch(vec![
        ("a", Arc::new(Int16Array::from(vec![1, -2])) as ArrayRef),
        ("b", Arc::new(Int64Array::from(vec![1 << 40, 7]))),
        (
            "c",
            Arc::new(
                Decimal128Array::from(vec![1234, -5])
                    .with_precision_and_scale(10, 2)
                    .expect("decimal"),
            ),
        ),
        ("d", Arc::new(Date32Array::from(vec![0, 9000]))),
        ("e", Arc::new(StringArray::from(vec!["x", "hello  "]))),
    ]);
    let rows = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect("rows");
    let s = rows.table_schema().clone();
    let types: Vec<ColumnType> = s.columns().iter().map(|c| c.ty).collect();
    assert_eq!(
        types,
        vec![
            ColumnType::Int32,
            ColumnType::Int64,
            ColumnType::Decimal { scale: 2 },
            ColumnType::Date,
            ColumnType::Char(5),
        ]
    );
    assert_eq!(rows.rows(), 2);
    let r1 = s.decode_row(rows.row(1).expect("row 1")).expect("decode");
    assert_eq!(
        r1,
        vec![
            Value::Int32(-2),
            Value::Int64(7),
            Value::Decimal(-5),
            Value::Date(9000),
            Value::Char(b"hello".to_vec()),
        ]
    );
    // As a RowSource.
    let mut src = rows.clone();
    let mut buf = Vec::new();
    assert_eq!(src.remaining_rows(), Some(2));
    assert!(src.next_row(&mut buf));
    assert!(src.next_row(&mut buf));
    assert_eq!(buf, rows.row(1).expect("row").to_vec());
    assert!(!src.next_row(&mut buf));
}

#[test]
fn unsupported_types_and_nulls_name_the_column() {
    let (schema, batches) = batch(vec![
        ("ok", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
        ("flag", Arc::new(BooleanArray::from(vec![true, false]))),
    ]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("boolean");
    assert!(
        matches!(&e, ImportError::UnsupportedType { column, .. } if column == "flag"),
        "{e}"
    );
    assert!(e.to_string().contains("`flag`"), "{e}");

    let (schema, batches) = batch(vec![(
        "n",
        Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
    )]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("null");
    assert!(
        matches!(&e, ImportError::Null { column, row: 1 } if column == "n"),
        "{e}"
    );
}

#[test]
fn floats_need_a_scale_and_are_rounded_to_it() {
    let (schema, batches) = batch(vec![(
        "f",
        Arc::new(Float64Array::from(vec![1.005, -2.5, 3.14259])) as ArrayRef,
    )]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("float");
    assert!(e.to_string().contains("--float-scale"), "{e}");
    let opts = ImportOptions {
        float_scale: Some(3),
        ..ImportOptions::default()
    };
    let rows = to_rows("t", &schema, &batches, &opts, false, &path()).expect("rows");
    let s = rows.table_schema();
    assert_eq!(s.columns()[0].ty, ColumnType::Decimal { scale: 3 });
    let v: Vec<Value> = (0..3)
        .map(|i| s.value(rows.row(i).expect("row"), 0).expect("value"))
        .collect();
    assert_eq!(v[1], Value::Decimal(-2500));
    assert_eq!(v[2], Value::Decimal(3143));
    let nan = batch(vec![(
        "f",
        Arc::new(Float64Array::from(vec![f64::NAN])) as ArrayRef,
    )]);
    let e = to_rows("t", &nan.0, &nan.1, &opts, false, &path()).expect_err("NaN");
    assert!(matches!(e, ImportError::Value { row: 0, .. }), "{e}");
}

#[test]
fn values_out_of_range_are_errors_with_the_row() {
    let (schema, batches) = batch(vec![(
        "u",
        Arc::new(UInt64Array::from(vec![1, u64::MAX])) as ArrayRef,
    )]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("u64");
    assert!(matches!(&e, ImportError::Value { row: 1, .. }), "{e}");
    let (schema, batches) = batch(vec![(
        "d",
        Arc::new(
            Decimal128Array::from(vec![1, i128::from(i64::MAX) * 10])
                .with_precision_and_scale(38, 0)
                .expect("decimal"),
        ) as ArrayRef,
    )]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("i64");
    assert!(matches!(&e, ImportError::Value { row: 1, .. }), "{e}");
}

#[test]
fn csv_floats_become_exact_decimals_and_empty_strings_stay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("x.csv");
    std::fs::write(
        &p,
        "id;price;name;day\n1;12.5;ab;2020-01-02\n2;0.125;;1970-01-01\n",
    )
    .expect("write");
    let opts = ImportOptions {
        delimiter: b';',
        ..ImportOptions::default()
    };
    let rows = import_file(&p, "x", true, &opts).expect("import");
    let s = rows.table_schema();
    let types: Vec<ColumnType> = s.columns().iter().map(|c| c.ty).collect();
    assert_eq!(
        types,
        vec![
            ColumnType::Int64,
            ColumnType::Decimal { scale: 3 },
            ColumnType::Char(2),
            ColumnType::Date
        ]
    );
    let r0 = s.decode_row(rows.row(0).expect("row")).expect("decode");
    assert_eq!(r0[1], Value::Decimal(12500));
    assert_eq!(r0[3], Value::Date(18263));
    let r1 = s.decode_row(rows.row(1).expect("row")).expect("decode");
    assert_eq!(r1[2], Value::Char(b"  ".to_vec()));
    // A missing file is an I/O error naming it.
    let e = import_file(&dir.path().join("none.csv"), "x", true, &opts).expect_err("missing");
    assert!(e.to_string().contains("none.csv"), "{e}");
}
