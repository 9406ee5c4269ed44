//! A quoted empty CSV field (`""`) in a text column is an empty string, an unquoted
//! empty field a NULL (as DuckDB and PostgreSQL's `COPY` read them). Arrow's CSV reader
//! sees field bytes without their quotes and reads both as NULL, so the importer reads
//! the file through [`QuotedEmpty`]: a byte stream filter that replaces a field that is
//! exactly `""` in a text column with a quoted [`MARKER`], which [`restore`] turns back
//! into `""` in the decoded batches. Other columns, and the header line, pass unchanged
//! (a quoted empty number stays NULL).
//!
//! The marker starts with a NUL byte, which CSV text does not carry; a file whose text
//! holds the marker itself is refused by [`restore`] rather than misread (that cannot
//! be told apart from a replaced field after decoding, so the filter counts its own
//! replacements and [`restore`] checks the count).

use std::io::{BufRead, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::DataType;

/// What a quoted empty text field becomes on its way through Arrow's reader.
pub(crate) const MARKER: &str = "\u{0}csd:quoted-empty\u{0}";

/// Where the filter is in the CSV grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a field.
    FieldStart,
    /// Saw the opening quote of a field.
    Open,
    /// Saw `""` at the start of a field: empty, or an escaped quote follows.
    TwoQuotes,
    /// Inside a quoted field.
    Quoted,
    /// Saw a quote inside a quoted field: its end, or the first of an escaped pair.
    QuotedQuote,
    /// Inside an unquoted field.
    Unquoted,
}

/// The CSV byte stream with quoted empty text fields replaced by `"MARKER"`.
pub(crate) struct QuotedEmpty<R> {
    inner: R,
    delimiter: u8,
    /// Per column: whether it is text (its quoted empty fields are replaced).
    text: Vec<bool>,
    /// The first record is a header: passed unchanged.
    in_header: bool,
    state: State,
    field: usize,
    out: Vec<u8>,
    pos: usize,
    done: bool,
    /// Replacements made (shared with the caller, who checks [`restore`]'s count).
    replaced: Arc<AtomicU64>,
}

impl<R: BufRead> QuotedEmpty<R> {
    /// A filter over `inner` for columns whose text-ness `text` gives; `header`: the
    /// first record is the header line.
    pub(crate) fn new(
        inner: R,
        delimiter: u8,
        text: Vec<bool>,
        header: bool,
        replaced: Arc<AtomicU64>,
    ) -> Self {
        QuotedEmpty {
            inner,
            delimiter,
            text,
            in_header: header,
            state: State::FieldStart,
            field: 0,
            out: Vec::new(),
            pos: 0,
            done: false,
            replaced,
        }
    }

    /// The field just ended was exactly `""`: the marker in a text column.
    fn empty_field(&mut self) {
        if !self.in_header && self.text.get(self.field).copied().unwrap_or(false) {
            self.out.push(b'"');
            self.out.extend_from_slice(MARKER.as_bytes());
            self.out.push(b'"');
            self.replaced.fetch_add(1, Ordering::Relaxed);
        } else {
            self.out.extend_from_slice(b"\"\"");
        }
    }

    /// A byte outside quotes after a field: the delimiter, a line end, or more text.
    fn after_field(&mut self, b: u8) {
        self.out.push(b);
        if b == self.delimiter {
            self.field += 1;
            self.state = State::FieldStart;
        } else if b == b'\n' {
            self.field = 0;
            self.in_header = false;
            self.state = State::FieldStart;
        } else if b == b'\r' {
            // Part of `\r\n` (or a lone `\r`, which the reader treats as a line end):
            // a field does not start here with text.
            self.state = State::FieldStart;
        } else {
            self.state = State::Unquoted;
        }
    }

    fn step(&mut self, b: u8) {
        match self.state {
            State::FieldStart => {
                if b == b'"' {
                    self.state = State::Open;
                } else {
                    self.after_field(b);
                    if b != self.delimiter && b != b'\n' && b != b'\r' {
                        self.state = State::Unquoted;
                    }
                }
            }
            State::Open => {
                if b == b'"' {
                    self.state = State::TwoQuotes;
                } else {
                    self.out.push(b'"');
                    self.out.push(b);
                    self.state = State::Quoted;
                }
            }
            State::TwoQuotes => {
                if b == b'"' {
                    // `"""…`: a quoted field starting with an escaped quote.
                    self.out.extend_from_slice(b"\"\"\"");
                    self.state = State::Quoted;
                } else if b == self.delimiter || b == b'\n' || b == b'\r' {
                    self.empty_field();
                    self.after_field(b);
                } else {
                    // `""x`: not a valid field; passed through for the reader to judge.
                    self.out.extend_from_slice(b"\"\"");
                    self.out.push(b);
                    self.state = State::Unquoted;
                }
            }
            State::Quoted => {
                if b == b'"' {
                    self.state = State::QuotedQuote;
                } else {
                    self.out.push(b);
                }
            }
            State::QuotedQuote => {
                self.out.push(b'"');
                if b == b'"' {
                    self.out.push(b'"');
                    self.state = State::Quoted;
                } else {
                    self.after_field(b);
                }
            }
            State::Unquoted => {
                if b == self.delimiter || b == b'\n' || b == b'\r' {
                    self.after_field(b);
                } else {
                    self.out.push(b);
                }
            }
        }
    }

    /// At the end of the input: a pending `""` ends the last field.
    fn finish(&mut self) {
        match self.state {
            State::TwoQuotes => self.empty_field(),
            State::Open | State::QuotedQuote => self.out.push(b'"'),
            _ => {}
        }
        self.state = State::FieldStart;
    }
}

impl<R: BufRead> Read for QuotedEmpty<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos >= self.out.len() {
            if self.done {
                return Ok(0);
            }
            self.out.clear();
            self.pos = 0;
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                self.finish();
                self.done = true;
                continue;
            }
            let n = chunk.len();
            let bytes = chunk.to_vec();
            self.inner.consume(n);
            self.out.reserve(n + 16);
            for b in bytes {
                self.step(b);
            }
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// `batch` with every [`MARKER`] in its text columns turned into an empty string;
/// returns the batch and the markers found.
pub(crate) fn restore(batch: RecordBatch) -> Result<(RecordBatch, u64), String> {
    let mut found = 0u64;
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    let mut changed = false;
    for col in batch.columns() {
        if col.data_type() != &DataType::Utf8 {
            cols.push(col.clone());
            continue;
        }
        let Some(s) = col.as_any().downcast_ref::<StringArray>() else {
            cols.push(col.clone());
            continue;
        };
        let here = s.iter().filter(|v| *v == Some(MARKER)).count() as u64;
        if here == 0 {
            cols.push(col.clone());
            continue;
        }
        found += here;
        changed = true;
        let fixed: StringArray = s
            .iter()
            .map(|v| if v == Some(MARKER) { Some("") } else { v })
            .collect();
        cols.push(Arc::new(fixed));
    }
    if !changed {
        return Ok((batch, 0));
    }
    let b = RecordBatch::try_new(batch.schema(), cols).map_err(|e| e.to_string())?;
    Ok((b, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(text: &str, cols: Vec<bool>, header: bool) -> (String, u64) {
        let n = Arc::new(AtomicU64::new(0));
        let mut f = QuotedEmpty::new(text.as_bytes(), b',', cols, header, n.clone());
        let mut out = String::new();
        f.read_to_string(&mut out).expect("read");
        (out.replace(MARKER, "M"), n.load(Ordering::Relaxed))
    }

    #[test]
    fn only_quoted_empty_text_fields_are_marked() {
        let (o, n) = filter(
            "\"a\",\"b\",\"c\"\n\"\",,\"\"\n\"x\"\"\",\"\"\"\",5\r\n\"\",\"\",\"\"",
            vec![true, false, true],
            true,
        );
        assert_eq!(
            o,
            "\"a\",\"b\",\"c\"\n\"M\",,\"M\"\n\"x\"\"\",\"\"\"\",5\r\n\"M\",\"\",\"M\""
        );
        assert_eq!(n, 4);
    }

    #[test]
    fn quoted_fields_with_delimiters_newlines_and_quotes_pass_unchanged() {
        let text = "\"a,b\",\"line\nbreak\",\"\"\"\"\"\"\nplain,x\"y,\"\"\"q\"\"\"\n";
        let (o, n) = filter(text, vec![true, true, true], false);
        assert_eq!(o, text);
        assert_eq!(n, 0);
    }

    #[test]
    fn small_reads_see_the_same_stream() {
        let text = "\"\",\"\"\n\"\"";
        let n = Arc::new(AtomicU64::new(0));
        let inner = std::io::BufReader::with_capacity(1, text.as_bytes());
        let mut f = QuotedEmpty::new(inner, b',', vec![true, true], false, n.clone());
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        while f.read(&mut b).expect("read") == 1 {
            out.push(b[0]);
        }
        let out = String::from_utf8(out).expect("utf8").replace(MARKER, "M");
        assert_eq!(out, "\"M\",\"M\"\n\"M\"");
        assert_eq!(n.load(Ordering::Relaxed), 3);
    }
}
