use super::*;
use csd_table::datagen::RowSource;
use datafusion::arrow::array::{
    BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int16Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray,
    TimestampNanosecondArray, UInt64Array,
};

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

fn rows_of(r: &RowImages) -> Vec<Vec<Value>> {
    let s = r.table_schema().clone();
    r.all_rows()
        .expect("rows")
        .iter()
        .map(|img| s.decode_row(img).expect("decode"))
        .collect()
}

#[test]
fn types_map_one_to_one_and_values_round_trip() {
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
        (
            "e",
            Arc::new(StringArray::from(vec![Some("x"), Some("hello  ")])),
        ),
        ("f", Arc::new(BooleanArray::from(vec![Some(true), None]))),
        ("g", Arc::new(Float32Array::from(vec![1.5, f32::NAN]))),
        (
            "h",
            Arc::new(TimestampMicrosecondArray::from(vec![1, -1]).with_timezone("UTC")),
        ),
        (
            "i",
            Arc::new(
                Decimal128Array::from(vec![i128::MAX / 10, -1])
                    .with_precision_and_scale(38, 4)
                    .expect("decimal"),
            ),
        ),
        (
            "j",
            Arc::new(BinaryArray::from(vec![&b"\0\xff"[..], &b""[..]])),
        ),
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
            ColumnType::Int16,
            ColumnType::Int64,
            ColumnType::Decimal { scale: 2 },
            ColumnType::Date,
            ColumnType::Varchar,
            ColumnType::Bool,
            ColumnType::Float32,
            ColumnType::Timestamp,
            ColumnType::Decimal128 {
                precision: 38,
                scale: 4
            },
            ColumnType::Varbinary,
        ]
    );
    // Only the column holding a NULL is nullable; the time zone is kept.
    assert!(s.columns()[5].nullable && !s.columns()[4].nullable);
    assert_eq!(s.columns()[7].tz.as_deref(), Some("UTC"));
    assert_eq!(rows.rows(), 2);
    let all = rows_of(&rows);
    assert_eq!(
        all[1],
        vec![
            Value::Int16(-2),
            Value::Int64(7),
            Value::Decimal(-5),
            Value::Date(9000),
            Value::Varchar("hello  ".into()),
            Value::Null,
            Value::Float32(f32::NAN.to_bits()),
            Value::Timestamp(-1),
            Value::Decimal128(-1),
            Value::Varbinary(Vec::new()),
        ]
    );
    // As a RowSource (streamed from the source again).
    let mut src = rows;
    let mut buf = Vec::new();
    assert_eq!(src.remaining_rows(), Some(2));
    assert!(src.next_row(&mut buf));
    assert!(src.next_row(&mut buf));
    assert_eq!(s.decode_row(&buf).expect("decode"), all[1]);
    assert!(!src.next_row(&mut buf));
}

#[test]
fn unsupported_types_name_the_column() {
    use datafusion::arrow::array::Time32SecondArray;
    let (schema, batches) = batch(vec![
        ("ok", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
        ("t", Arc::new(Time32SecondArray::from(vec![1, 2]))),
    ]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("time of day");
    assert!(
        matches!(&e, ImportError::UnsupportedType { column, .. } if column == "t"),
        "{e}"
    );
}

#[test]
fn floats_are_ieee_or_rounded_to_a_scale() {
    let (schema, batches) = batch(vec![(
        "f",
        Arc::new(Float64Array::from(vec![1.005, -2.5, 3.14259])) as ArrayRef,
    )]);
    let rows = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect("floats");
    assert_eq!(rows.table_schema().columns()[0].ty, ColumnType::Float64);
    assert_eq!(rows_of(&rows)[2][0], Value::Float64(3.14259f64.to_bits()));
    let opts = ImportOptions {
        float_scale: Some(3),
        ..ImportOptions::default()
    };
    let rows = to_rows("t", &schema, &batches, &opts, false, &path()).expect("rows");
    assert_eq!(
        rows.table_schema().columns()[0].ty,
        ColumnType::Decimal { scale: 3 }
    );
    let v = rows_of(&rows);
    assert_eq!(v[1][0], Value::Decimal(-2500));
    assert_eq!(v[2][0], Value::Decimal(3143));
    let nan = batch(vec![(
        "f",
        Arc::new(Float64Array::from(vec![f64::NAN])) as ArrayRef,
    )]);
    let e = to_rows("t", &nan.0, &nan.1, &opts, false, &path()).expect_err("NaN");
    assert!(matches!(e, ImportError::Value { row: 0, .. }), "{e}");
}

#[test]
fn values_that_do_not_fit_are_errors_with_row_and_column() {
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
    assert!(
        matches!(&e, ImportError::Value { row: 1, column, .. } if column == "u"),
        "{e}"
    );
    // A nanosecond timestamp that is not whole microseconds.
    let (schema, batches) = batch(vec![(
        "ts",
        Arc::new(TimestampNanosecondArray::from(vec![1000, 1001])) as ArrayRef,
    )]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("ns");
    assert!(
        matches!(&e, ImportError::Value { row: 1, column, .. } if column == "ts"),
        "{e}"
    );
    // A string too long for a row.
    let long = "x".repeat(70_000);
    let (schema, batches) = batch(vec![
        ("id", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
        ("s", Arc::new(StringArray::from(vec!["ok", long.as_str()]))),
    ]);
    let e = to_rows(
        "t",
        &schema,
        &batches,
        &ImportOptions::default(),
        false,
        &path(),
    )
    .expect_err("long");
    assert!(
        matches!(&e, ImportError::Value { row: 1, column, .. } if column == "s"),
        "{e}"
    );
}

#[test]
fn csv_header_is_sniffed_quoted_or_not_and_flags_override() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("x.csv");
    std::fs::write(
        &p,
        "\"id\",\"price\",\"name\",\"day\"\n1,12.5,ab ,2020-01-02\n2,0.125,\"a,b\",1970-01-01\n",
    )
    .expect("write");
    let rows = import_file(&p, "x", true, &ImportOptions::default()).expect("import");
    let s = rows.table_schema();
    let names: Vec<&str> = s.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id", "price", "name", "day"]);
    let types: Vec<ColumnType> = s.columns().iter().map(|c| c.ty).collect();
    assert_eq!(
        types,
        vec![
            ColumnType::Int64,
            ColumnType::Float64,
            ColumnType::Varchar,
            ColumnType::Date
        ]
    );
    assert_eq!(rows.rows(), 2);
    let v = rows_of(&rows);
    assert_eq!(v[0][2], Value::Varchar("ab ".into()), "trailing blank kept");
    assert_eq!(v[1][2], Value::Varchar("a,b".into()));
    assert_eq!(v[0][3], Value::Date(18263));

    // Without a header line: the first line is data.
    let q = dir.path().join("y.csv");
    std::fs::write(&q, "1,2020-01-02\n2,1970-01-01\n").expect("write");
    let rows = import_file(&q, "y", true, &ImportOptions::default()).expect("import");
    assert_eq!(rows.rows(), 2);
    assert_eq!(rows.table_schema().columns()[0].name, "column_1");
    // --header forces it.
    let forced = ImportOptions {
        header: Some(true),
        ..ImportOptions::default()
    };
    let rows = import_file(&q, "y", true, &forced).expect("import");
    assert_eq!(rows.rows(), 1);
    assert_eq!(rows.table_schema().columns()[0].name, "1");
    // --no-header on the quoted file: the header line is a data row of text columns.
    let data = ImportOptions {
        header: Some(false),
        ..ImportOptions::default()
    };
    let rows = import_file(&p, "x", true, &data).expect("import");
    assert_eq!(rows.rows(), 3);
    assert_eq!(rows.table_schema().columns()[0].ty, ColumnType::Varchar);

    // A missing file is an I/O error naming it.
    let e = import_file(
        &dir.path().join("none.csv"),
        "x",
        true,
        &ImportOptions::default(),
    )
    .expect_err("missing");
    assert!(e.to_string().contains("none.csv"), "{e}");
}

#[test]
fn a_bad_csv_field_is_an_error_naming_row_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("bad.csv");
    // Forced types: a column read as dates whose 3rd value is not one.
    std::fs::write(&p, "id,n\n1,5\n2,6\n3,7\n").expect("write");
    let rows = import_file(&p, "x", true, &ImportOptions::default()).expect("good");
    assert_eq!(rows.rows(), 3);
    let q = dir.path().join("ragged.csv");
    std::fs::write(&q, "id,n\n1,5\n2\n").expect("write");
    let e = import_file(&q, "x", true, &ImportOptions::default()).expect_err("ragged");
    assert!(e.to_string().contains("ragged.csv"), "{e}");
}

#[test]
fn a_quoted_empty_csv_string_is_empty_and_an_empty_field_null() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("e.csv");
    // Text column `s`: "" (empty string), nothing (NULL), "x", a quoted quote, and an
    // empty string as the file's last field; a quoted empty number stays NULL.
    std::fs::write(
        &p,
        "\"id\",\"s\",\"n\"\n1,\"\",5\n2,,\"\"\n3,\"x\",7\n4,\"\"\"\",8\n5,a\"b,9\n6,7,\"\"",
    )
    .expect("write");
    let rows = import_file(&p, "e", true, &ImportOptions::default()).expect("import");
    let s = rows.table_schema();
    assert_eq!(s.columns()[1].ty, ColumnType::Varchar);
    assert_eq!(s.columns()[2].ty, ColumnType::Int64);
    let v = rows_of(&rows);
    let col: Vec<Value> = v.iter().map(|r| r[1].clone()).collect();
    assert_eq!(
        col,
        [
            Value::Varchar(String::new()),
            Value::Null,
            Value::Varchar("x".into()),
            Value::Varchar("\"".into()),
            Value::Varchar("a\"b".into()),
            Value::Varchar("7".into()),
        ]
    );
    assert_eq!(v[1][2], Value::Null, "a quoted empty number is NULL");
    assert_eq!(v[5][2], Value::Null);
    // Text holding the filter's marker is refused, not misread.
    let q = dir.path().join("m.csv");
    std::fs::write(&q, format!("s,n\n\"{}\",1\n", crate::csv_empty::MARKER)).expect("write");
    let e = import_file(&q, "m", true, &ImportOptions::default()).expect_err("marker");
    assert!(e.to_string().contains("quoted empty"), "{e}");
}

#[test]
fn plain_decimal_literals_give_precision_and_scale() {
    assert_eq!(plain_decimal("123.45000"), Some((8, 5)));
    assert_eq!(plain_decimal("-0.00001"), Some((5, 5)));
    assert_eq!(plain_decimal("+007.50"), Some((3, 2)));
    assert_eq!(plain_decimal("0.0"), Some((1, 1)));
    for bad in [
        "1", "1.", ".5", "1e5", "1.5e3", "NaN", "inf", " 1.5", "1.5 ", "1,5", "--1.0", "1.2.3", "",
    ] {
        assert_eq!(plain_decimal(bad), None, "{bad:?}");
    }
    let d38 = format!("{}.{}", "9".repeat(33), "1".repeat(5));
    assert_eq!(plain_decimal(&d38), Some((38, 5)));
    assert_eq!(plain_decimal(&format!("9{d38}")), None, "39 digits");
    let scan = |vals: &[&str]| vals.iter().fold(DecimalScan::Unknown, |s, v| s.see(v));
    assert_eq!(
        scan(&["1.50", "", "-22.25", "0.00"]),
        DecimalScan::Decimal {
            precision: 4,
            scale: 2
        }
    );
    assert_eq!(
        scan(&["1.5", "2.25"]),
        DecimalScan::No,
        "fractional digits differ"
    );
    assert_eq!(
        scan(&["1.50", "3"]),
        DecimalScan::No,
        "an integer among them"
    );
    assert_eq!(scan(&["", ""]), DecimalScan::Unknown);
}

/// A decimal column as pyarrow and pandas write it (every value with the same
/// fractional digits) loads as DECIMAL(p, s) with the digits exactly; floats stay
/// DOUBLE; `csv_decimal: false` keeps DOUBLE.
#[test]
fn csv_decimal_columns_load_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("d.csv");
    let big = format!("{}.12345", "1234567890".repeat(3)); // 35 digits
    std::fs::write(
        &p,
        format!(
            "\"id\",\"dec30\",\"price\",\"f\",\"e\"\n\
             1,{big},12.50,1.5,1e3\n\
             2,-0.00001,-3.05,2.25,2.5\n\
             3,,0.00,3.0,\n\
             4,7.10000,,0.5,NaN\n"
        ),
    )
    .expect("write");
    let rows = import_file(&p, "d", true, &ImportOptions::default()).expect("import");
    let types: Vec<ColumnType> = rows.table_schema().columns().iter().map(|c| c.ty).collect();
    assert_eq!(
        types,
        vec![
            ColumnType::Int64,
            ColumnType::Decimal128 {
                precision: 35,
                scale: 5
            },
            ColumnType::Decimal { scale: 2 },
            ColumnType::Float64,
            ColumnType::Float64,
        ]
    );
    let v = rows_of(&rows);
    assert_eq!(
        v[0][1],
        Value::Decimal128(12_345_678_901_234_567_890_123_456_789_012_345)
    );
    assert_eq!(v[1][1], Value::Decimal128(-1));
    assert_eq!(v[2][1], Value::Null);
    assert_eq!(v[3][1], Value::Decimal128(710_000));
    assert_eq!(v[0][2], Value::Decimal(1250));
    assert_eq!(v[1][2], Value::Decimal(-305));
    assert_eq!(v[2][2], Value::Decimal(0));
    assert_eq!(v[3][2], Value::Null);
    let off = ImportOptions {
        csv_decimal: false,
        ..ImportOptions::default()
    };
    let rows = import_file(&p, "d", true, &off).expect("import");
    assert_eq!(rows.table_schema().columns()[1].ty, ColumnType::Float64);
    assert_eq!(rows.table_schema().columns()[2].ty, ColumnType::Float64);
}

/// Timestamps with offsets (`Z` as pyarrow writes a UTC column, `-0500` as it writes
/// another zone's, `+05:30`) load as TIMESTAMP with time zone UTC, each the instant it
/// names; without offsets a TIMESTAMP without zone; a column mixing them is an error
/// naming the column and both rows, and nothing is typed.
#[test]
fn csv_timestamps_with_offsets_are_utc_instants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("ts.csv");
    std::fs::write(
        &p,
        "\"id\",\"utc\",\"ny\",\"ist\",\"local\"\n\
         1,1970-01-01 00:00:00.000000Z,1969-12-31 19:00:00.000000-0500,\
         1970-01-01T05:30:00+05:30,1970-01-01 00:00:00\n\
         2,,2023-11-14 17:13:20.123456-0500,2023-11-15T03:43:20.123456+05:30,\n\
         3,2023-11-14 22:13:20.123456Z,,,2023-11-14 22:13:20.123456\n",
    )
    .expect("write");
    let rows = import_file(&p, "t", true, &ImportOptions::default()).expect("import");
    let cols = rows.table_schema().columns();
    for c in &cols[1..4] {
        assert_eq!(c.ty, ColumnType::Timestamp, "{}", c.name);
        assert_eq!(c.tz.as_deref(), Some(CSV_TIME_ZONE), "{}", c.name);
    }
    assert_eq!(cols[4].ty, ColumnType::Timestamp);
    assert_eq!(cols[4].tz, None, "no offsets: no zone");
    let v = rows_of(&rows);
    let t = 1_700_000_000_123_456i64;
    assert_eq!(v[0][1..5], vec![Value::Timestamp(0); 4]);
    assert_eq!(
        v[1][1..5],
        [
            Value::Null,
            Value::Timestamp(t),
            Value::Timestamp(t),
            Value::Null
        ]
    );
    assert_eq!(
        v[2][1..5],
        [
            Value::Timestamp(t),
            Value::Null,
            Value::Null,
            Value::Timestamp(t)
        ]
    );

    let mixed = dir.path().join("mixed.csv");
    std::fs::write(
        &mixed,
        "id,ts\n1,2020-01-01 00:00:00Z\n2,\n3,2020-01-02 00:00:00\n",
    )
    .expect("write");
    let e = import_file(&mixed, "m", true, &ImportOptions::default()).expect_err("mixed");
    let text = e.to_string();
    assert!(
        matches!(&e, ImportError::Value { column, row: 2, .. } if column == "ts"),
        "{text}"
    );
    assert!(text.contains("row 0") && text.contains("offset"), "{text}");
}

#[test]
fn zone_designators_are_found_after_the_time() {
    for z in [
        "2020-01-01 00:00:00Z",
        "2020-01-01T00:00:00.5+01:00",
        "2020-01-01 00:00:00.000000-0500",
        "2020-01-01 00:00:00+01",
    ] {
        assert!(carries_zone(z), "{z}");
    }
    for n in [
        "2020-01-01",
        "2020-01-01 00:00:00",
        "2020-01-01T00:00:00.123456789",
    ] {
        assert!(!carries_zone(n), "{n}");
    }
}
