//! Arrow data across the C data interface (the Arrow C stream interface), both ways.
//!
//! A result leaves as an `ArrowArrayStream` whose address pyarrow's
//! `RecordBatchReader._import_from_c` takes over: pyarrow then owns the stream and reads
//! the batches' buffers where DataFusion left them (each buffer is reference counted and
//! released through the stream's release callbacks). Nothing is copied, row by row or
//! otherwise. A pyarrow table comes in the same way, through its reader's
//! `_export_to_c` into a stream this side owns.
//!
//! Choice: arrow's `ffi` module rather than its `pyarrow` feature: the latter makes arrow
//! depend on pyo3, which would tie DataFusion's build to the Python build environment
//! and compile it again for the extension (see Cargo.toml).

use crate::error::Error;
use arrow::datatypes::SchemaRef;
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow::record_batch::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use pyo3::prelude::*;

/// Hands `batches` to pyarrow as a `pyarrow.Table`, without copying their buffers.
pub fn to_pyarrow<'py>(
    py: Python<'py>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> PyResult<Bound<'py, PyAny>> {
    let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    let mut stream = FFI_ArrowArrayStream::new(Box::new(reader));
    let addr = &raw mut stream as usize;
    let reader = py
        .import("pyarrow")?
        .getattr("RecordBatchReader")?
        .call_method1("_import_from_c", (addr,))?;
    // pyarrow moved the stream out (its release callback is now null), so dropping
    // `stream` here releases nothing twice.
    let table = reader.call_method0("read_all");
    drop(stream);
    table
}

/// Reads a pyarrow `Table`, `RecordBatch` or `RecordBatchReader` (or a pandas
/// `DataFrame`, converted by pyarrow) through the C stream
/// interface: its schema and batches (the buffers are pyarrow's, shared, not copied).
pub fn from_pyarrow(obj: &Bound<'_, PyAny>) -> PyResult<(SchemaRef, Vec<RecordBatch>)> {
    let py = obj.py();
    let pa = py.import("pyarrow")?;
    let is_pandas = obj
        .get_type()
        .module()
        .is_ok_and(|m| m.to_string().starts_with("pandas"))
        && obj.get_type().name().is_ok_and(|n| n == "DataFrame");
    let reader = if is_pandas {
        // A pandas DataFrame becomes a pyarrow Table first (without its index).
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("preserve_index", false)?;
        pa.getattr("Table")?
            .call_method("from_pandas", (obj,), Some(&kw))?
            .call_method0("to_reader")?
    } else if obj.is_instance(&pa.getattr("RecordBatchReader")?)? {
        obj.clone()
    } else if obj.is_instance(&pa.getattr("Table")?)? {
        obj.call_method0("to_reader")?
    } else if obj.is_instance(&pa.getattr("RecordBatch")?)? {
        pa.getattr("Table")?
            .call_method1("from_batches", (vec![obj.clone()],))?
            .call_method0("to_reader")?
    } else {
        return Err(PyErr::from(Error::Invalid(format!(
            "expected a pyarrow Table, RecordBatch or RecordBatchReader (or a pandas \
             DataFrame, a Parquet or CSV path), got {}",
            obj.get_type().name()?
        ))));
    };
    let mut stream = FFI_ArrowArrayStream::empty();
    reader.call_method1("_export_to_c", (&raw mut stream as usize,))?;
    let reader = ArrowArrayStreamReader::try_new(stream).map_err(Error::from)?;
    let schema = reader.schema();
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(Error::from)?;
    Ok((schema, batches))
}

/// The Arrow schema and batches of a result, for the pyclasses that keep them.
pub fn rows_of(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    /// A stream exported and imported on the Rust side keeps the very buffers: the
    /// C stream interface moves ownership, it does not copy.
    #[test]
    fn stream_round_trip_shares_buffers() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1_000_000));
        let batch = RecordBatch::try_new(schema.clone(), vec![col.clone()]).unwrap();
        let before = col.to_data().buffers()[0].as_ptr();
        let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        let back: Vec<RecordBatch> = ArrowArrayStreamReader::try_new(stream)
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(rows_of(&back), 1_000_000);
        let after = back[0].column(0).to_data().buffers()[0].as_ptr();
        assert_eq!(before, after, "the buffer crossed without a copy");
    }
}
