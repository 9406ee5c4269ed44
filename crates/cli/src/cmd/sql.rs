//! `csd sql`: SQL over the tables of a device image, one query or an interactive shell
//! (issue 12). A query given on the command line runs exactly as `csd query` runs it
//! ([`crate::cmd::query::run_statement`]: DataFusion plans, device scans run the device program
//! with the scan paper's strategies, in-storage-scan-processing §4). Without a query,
//! `csd sql` is a shell: line editing and history ([`crate::lineedit`]; history
//! in `~/.csd_sql_history`), statements over several lines ending at `;`, `\d` (tables),
//! `\d NAME` (one table), `\f FORMAT`, `\o [FILE]`, `\q`; an error is printed and the
//! shell goes on. When standard input is not a terminal the shell reads its statements
//! from it without prompts (scripts and tests) and exits non-zero if one failed.
//!
//! Choices: `--format table` prints what `csd query` prints (result, scans, modeled
//! reports); `csv` and `json` print the rows only (Arrow's CSV writer, Arrow's JSON
//! writer as an array of objects), for other programs; `--json` keeps `csd query`'s one
//! object per statement. `--output FILE.csv|FILE.parquet` also writes each result to
//! the file (the last statement's result is what remains; `\o` switches files), and
//! never overwrites a device image or a file of another kind. The image is opened
//! read-only: nothing a session runs changes it.

use crate::cmd::query::{self, DbArgs, ImageSession, Ran, SqlOpts};
use crate::{CliError, report};
use clap::{Args, ValueEnum};
use csd_host::TableInfo;
use csd_sql::datafusion::arrow::array::RecordBatch;
use csd_sql::datafusion::arrow::datatypes::SchemaRef;
use csd_sql::schema::arrow_type;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum Format {
    /// A table, then the scans' modeled reports (as `csd query`).
    #[default]
    Table,
    /// CSV with a header row, rows only.
    Csv,
    /// A JSON array of objects, rows only.
    Json,
}

impl Format {
    fn parse(s: &str) -> Option<Format> {
        Format::from_str(s.trim(), true).ok()
    }
}

/// `csd sql --image PATH [QUERY]`.
#[derive(Args)]
pub(crate) struct SqlArgs {
    #[command(flatten)]
    db: DbArgs,
    /// A query to run (as `csd query` runs it); without one, an interactive shell.
    query: Option<String>,
    /// How results are printed: table (with the modeled reports), csv or json (rows only).
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Also write each result to this file: .csv or .parquet.
    #[arg(long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    opts: SqlOpts,
}

/// Where a result file goes and in which format.
#[derive(Debug, Clone, PartialEq)]
enum OutputFile {
    Csv(PathBuf),
    Parquet(PathBuf),
}

impl OutputFile {
    /// The output file `path` names, by its extension; refused over an image or a file
    /// csd does not write.
    fn new(path: &Path) -> Result<OutputFile, CliError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let out = match ext.as_str() {
            "csv" => OutputFile::Csv(path.to_path_buf()),
            "parquet" => OutputFile::Parquet(path.to_path_buf()),
            _ => {
                return Err(CliError::Usage(format!(
                    "--output {}: name a .csv or .parquet file",
                    path.display()
                )));
            }
        };
        crate::image::guard_output(path, &["csv", "parquet"], false)?;
        Ok(out)
    }

    fn path(&self) -> &Path {
        match self {
            OutputFile::Csv(p) | OutputFile::Parquet(p) => p,
        }
    }

    /// Writes `batches` (of `schema`) to the file, replacing it.
    fn write(&self, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<(), CliError> {
        let io = |e: std::io::Error| CliError::Io {
            path: self.path().to_path_buf(),
            source: e,
        };
        let other = |e: String| CliError::Io {
            path: self.path().to_path_buf(),
            source: std::io::Error::other(e),
        };
        let file = std::fs::File::create(self.path()).map_err(io)?;
        match self {
            OutputFile::Csv(_) => {
                let mut w = csd_sql::datafusion::arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(std::io::BufWriter::new(file));
                for b in batches {
                    w.write(b).map_err(|e| other(e.to_string()))?;
                }
                w.into_inner().flush().map_err(io)?;
            }
            OutputFile::Parquet(_) => {
                let mut w =
                    csd_sql::parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None)
                        .map_err(|e| other(e.to_string()))?;
                for b in batches {
                    w.write(b).map_err(|e| other(e.to_string()))?;
                }
                w.close().map_err(|e| other(e.to_string()))?;
            }
        }
        Ok(())
    }
}

/// Rows of `batches` as CSV with a header (Arrow's writer) on `out`.
fn write_csv(out: &mut dyn Write, batches: &[RecordBatch]) -> Result<(), String> {
    let mut w = csd_sql::datafusion::arrow::csv::WriterBuilder::new()
        .with_header(true)
        .build(out);
    for b in batches {
        w.write(b).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Rows of `batches` as a JSON array of objects (Arrow's writer) on `out`.
fn write_json(out: &mut dyn Write, batches: &[RecordBatch]) -> Result<(), String> {
    let mut w = csd_sql::datafusion::arrow::json::ArrayWriter::new(out);
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    w.write_batches(&refs).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    let out = w.into_inner();
    // An empty result is `[]` too.
    if batches.iter().all(|b| b.num_rows() == 0) {
        out.write_all(b"[]").map_err(|e| e.to_string())?;
    }
    out.write_all(b"\n").map_err(|e| e.to_string())
}

/// The state of one `csd sql` run: the session and how results go out.
struct Shell {
    image: ImageSession,
    opts: SqlOpts,
    format: Format,
    output: Option<OutputFile>,
    /// `--image PATH` or `--array DIR`, for the shell's greeting.
    source: String,
    /// The statement came with the command line (which its `reproduce:` line holds),
    /// rather than typed into the shell.
    on_command_line: bool,
}

impl Shell {
    /// Runs one SQL statement and prints / writes its result.
    fn statement(&mut self, sql: &str) -> Result<(), CliError> {
        let ran = query::run_statement(&mut self.image, sql, &self.opts)?;
        self.emit(sql, &ran)
    }

    fn emit(&self, sql: &str, ran: &Ran) -> Result<(), CliError> {
        let Some(answer) = ran.answer() else {
            return Ok(());
        };
        let stdout = std::io::stdout();
        if self.opts.report.json {
            // A statement typed into the shell reruns as the shell's command line plus
            // the statement.
            let cmd = if self.on_command_line {
                crate::reproduce::line()
            } else {
                format!(
                    "{} {}",
                    crate::reproduce::line(),
                    crate::reproduce::quote(sql)
                )
            };
            println!("{}", query::ran_json(ran, &self.image.cfg, &cmd));
        } else {
            match self.format {
                Format::Table => query::print_ran(ran, &self.image.cfg, &self.opts),
                Format::Csv => write_csv(&mut stdout.lock(), &answer.batches)
                    .map_err(|e| CliError::Usage(format!("writing CSV: {e}")))?,
                Format::Json => write_json(&mut stdout.lock(), &answer.batches)
                    .map_err(|e| CliError::Usage(format!("writing JSON: {e}")))?,
            }
        }
        if let Some(out) = &self.output {
            out.write(&answer.schema, &answer.batches)?;
            if self.format == Format::Table && !self.opts.report.json {
                println!("wrote {} rows to {}", ran.rows.len(), out.path().display());
            } else {
                eprintln!("wrote {} rows to {}", ran.rows.len(), out.path().display());
            }
        }
        Ok(())
    }

    /// Runs a backslash command; `Ok(false)` to quit.
    fn meta(&mut self, line: &str) -> Result<bool, CliError> {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let arg = words.next();
        match (cmd, arg) {
            ("\\q", _) => return Ok(false),
            ("\\d", None) => list_tables(&self.image.catalog()),
            ("\\d", Some(name)) => describe_table(&self.image, name)?,
            ("\\f", Some(f)) => {
                self.format = Format::parse(f)
                    .ok_or_else(|| CliError::Usage(format!("\\f {f}: use table, csv or json")))?;
            }
            ("\\f", None) => println!("format: {:?}", self.format),
            ("\\o", Some(f)) => {
                let out = OutputFile::new(Path::new(f))?;
                println!("results also go to {}", out.path().display());
                self.output = Some(out);
            }
            ("\\o", None) => {
                self.output = None;
                println!("results go to the terminal only");
            }
            ("\\?" | "\\h", _) => print_help(),
            _ => {
                return Err(CliError::Usage(format!(
                    "unknown command `{line}`; \\? lists the commands"
                )));
            }
        }
        Ok(true)
    }
}

fn print_help() {
    println!(
        "statements end at `;` and may span lines; q1 … q22 stand for the TPC-H queries\n\
         \\d          list the tables (name, layout, rows, columns)\n\
         \\d NAME     describe one table\n\
         \\f FORMAT   print results as table, csv or json\n\
         \\o FILE     also write each result to FILE (.csv or .parquet); \\o alone stops\n\
         \\q          quit"
    );
}

/// `\d`: every table with its layout, rows and columns.
fn list_tables(catalog: &[TableInfo]) {
    let mut t = report::table(&["table", "layout", "rows", "columns", "pages", "size"]);
    for x in catalog {
        t.add_row(vec![
            x.name.clone(),
            x.layout.to_string(),
            x.rows.to_string(),
            x.schema.columns().len().to_string(),
            x.pages.to_string(),
            report::bytes(x.bytes()),
        ]);
    }
    println!("{t}");
    println!("({} tables)", catalog.len());
}

/// `\d NAME`: one table's columns with their stored and SQL types.
fn describe_table(session: &ImageSession, name: &str) -> Result<(), CliError> {
    let name = name.trim_end_matches(';');
    let catalog = session.catalog();
    let Some(info) = catalog.iter().find(|t| csd_host::same_name(&t.name, name)) else {
        return Err(CliError::Usage(format!(
            "no table `{name}`; tables: {}",
            session.tables().join(", ")
        )));
    };
    println!(
        "table {} ({}): {} rows, {} pages of {}, {} bytes per row",
        info.name,
        info.layout,
        info.rows,
        info.pages,
        report::bytes(info.page_bytes as u64),
        info.schema.row_width()
    );
    // The distinct values and bounds the load measured (the planner's estimates), if it
    // did.
    let header = [
        "column",
        "stored as",
        "SQL type",
        "distinct (est.)",
        "least",
        "greatest",
    ];
    let mut t = report::table(&header);
    for (i, c) in info.schema.columns().iter().enumerate() {
        let distinct = info
            .distinct
            .as_ref()
            .and_then(|d| d.get(i))
            .map_or_else(|| "-".to_string(), u64::to_string);
        let bounds = info.bounds.as_ref().and_then(|b| *b.get(i)?);
        let shown = |v: i64| stored_value(c.ty, v);
        t.add_row(vec![
            c.name.clone(),
            c.ty.to_string(),
            arrow_type(c.ty).to_string(),
            distinct,
            bounds.map_or_else(|| "-".to_string(), |(lo, _)| shown(lo)),
            bounds.map_or_else(|| "-".to_string(), |(_, hi)| shown(hi)),
        ]);
    }
    println!("{t}");
    Ok(())
}

/// A numeric column's stored integer as SQL shows it: a date as `YYYY-MM-DD`, a decimal
/// with its scale's digits after the point; other integers (and timestamps, in
/// microseconds) as they are.
fn stored_value(ty: csd_table::ColumnType, v: i64) -> String {
    match ty {
        csd_table::ColumnType::Date => {
            i32::try_from(v).map_or_else(|_| v.to_string(), csd_table::date::format_date)
        }
        csd_table::ColumnType::Decimal { scale } if scale > 0 => {
            let unit = 10i128.pow(u32::from(scale));
            let (sign, a) = (if v < 0 { "-" } else { "" }, i128::from(v).abs());
            format!(
                "{sign}{}.{:0w$}",
                a / unit,
                a % unit,
                w = usize::from(scale)
            )
        }
        _ => v.to_string(),
    }
}

/// Splits input lines into statements: a statement ends at a `;` outside quotes and
/// comments; backslash commands are whole lines given between statements.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    buf: String,
}

/// One unit of shell input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    /// A SQL statement (without its `;`).
    Sql(String),
    /// A backslash command line.
    Meta(String),
}

impl Splitter {
    /// True while a statement is incomplete (the prompt shows `...>`).
    pub(crate) fn pending(&self) -> bool {
        !self.buf.trim().is_empty()
    }

    /// Feeds one line; returns what it completed.
    pub(crate) fn line(&mut self, line: &str) -> Vec<Input> {
        let mut out = Vec::new();
        if !self.pending() && line.trim_start().starts_with('\\') {
            self.buf.clear();
            out.push(Input::Meta(line.trim().to_string()));
            return out;
        }
        if !self.buf.is_empty() {
            self.buf.push('\n');
        }
        self.buf.push_str(line);
        // Scan the buffer for `;` outside '...' , "..." and -- comments.
        while let Some(end) = statement_end(&self.buf) {
            let stmt = self.buf[..end].trim().to_string();
            self.buf = self.buf[end + 1..].to_string();
            if !stmt.is_empty() && !only_comments(&stmt) {
                out.push(Input::Sql(stmt));
            }
        }
        if only_comments(&self.buf) {
            self.buf.clear();
        }
        out
    }

    /// The incomplete statement at the end of input, if any.
    pub(crate) fn finish(&mut self) -> Option<Input> {
        let s = std::mem::take(&mut self.buf);
        let s = s.trim();
        (!s.is_empty() && !only_comments(s)).then(|| Input::Sql(s.to_string()))
    }
}

/// Byte offset of the first `;` that ends a statement in `s`.
fn statement_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut quote: Option<u8> = None;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    // A comment runs to the end of its line.
                    match s[i..].find('\n') {
                        Some(n) => i += n,
                        None => return None,
                    }
                }
                b';' => return Some(i),
                _ => {}
            },
        }
        i += 1;
    }
    None
}

/// True when `s` holds only blanks and `--` comments.
fn only_comments(s: &str) -> bool {
    s.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with("--")
    })
}

/// `csd sql`.
pub(crate) fn sql_cmd(a: &SqlArgs) -> Result<(), CliError> {
    let output = a.output.as_deref().map(OutputFile::new).transpose()?;
    let quiet = a.opts.report.json || a.format != Format::Table;
    // A shell or a file of statements: later scans find the pages earlier ones read.
    let image = ImageSession::open_for(&a.db, &a.opts, quiet, a.query.is_none())?;
    let mut shell = Shell {
        image,
        opts: a.opts.clone(),
        format: a.format,
        output,
        source: a.db.describe(),
        on_command_line: a.query.is_some(),
    };
    if let Some(q) = &a.query {
        shell.statement(q)?;
        if a.format == Format::Table && !a.opts.report.json {
            println!("reproduce: {}", crate::reproduce::line());
        }
        return Ok(());
    }
    if std::io::stdin().is_terminal() {
        interactive(&mut shell)
    } else {
        batch(&mut shell, std::io::stdin().lock())
    }
}

/// Runs one unit of input; `Ok(false)` to quit. Errors are printed, not returned.
fn step(shell: &mut Shell, input: Input, failed: &mut usize) -> bool {
    let r = match input {
        Input::Meta(m) => shell.meta(&m),
        Input::Sql(s) => shell.statement(&s).map(|()| true),
    };
    match r {
        Ok(go_on) => go_on,
        Err(e) => {
            eprintln!("error: {e}");
            *failed += 1;
            true
        }
    }
}

/// Statements from a non-terminal input, no prompts; an error if any statement failed.
fn batch(shell: &mut Shell, input: impl BufRead) -> Result<(), CliError> {
    let mut split = Splitter::default();
    let mut failed = 0;
    for line in input.lines() {
        let line = line.map_err(|e| CliError::Io {
            path: PathBuf::from("<stdin>"),
            source: e,
        })?;
        for i in split.line(&line) {
            if !step(shell, i, &mut failed) {
                return done(failed);
            }
        }
    }
    if let Some(i) = split.finish() {
        step(shell, i, &mut failed);
    }
    done(failed)
}

fn done(failed: usize) -> Result<(), CliError> {
    if failed == 0 {
        Ok(())
    } else {
        Err(CliError::Usage(format!("{failed} statement(s) failed")))
    }
}

/// The interactive shell: [`crate::lineedit`] (line editing, history in
/// `~/.csd_sql_history`).
fn interactive(shell: &mut Shell) -> Result<(), CliError> {
    use crate::lineedit::{Editor, ReadError};
    let mut ed = Editor::new(crate::lineedit::history_path());
    println!(
        "csd sql on {} ({}, {} tables); statements end at `;`, \\? for help, \\q to quit",
        shell.source,
        shell.image.cfg.name,
        shell.image.tables().len()
    );
    let mut split = Splitter::default();
    let mut failed = 0;
    loop {
        let prompt = if split.pending() { "csd...> " } else { "csd> " };
        match ed.read_line(prompt) {
            Ok(line) => {
                ed.add_history(&line);
                let mut quit = false;
                for i in split.line(&line) {
                    if !step(shell, i, &mut failed) {
                        quit = true;
                        break;
                    }
                }
                if quit {
                    break;
                }
            }
            // Ctrl-C drops the statement being typed.
            Err(ReadError::Interrupted) => split = Splitter::default(),
            Err(ReadError::Eof) => break,
            Err(ReadError::Io(e)) => {
                eprintln!("error: reading the terminal: {e}");
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_values_show_as_sql_writes_them() {
        use csd_table::ColumnType;
        assert_eq!(stored_value(ColumnType::Date, 9_374), "1995-09-01");
        let money = ColumnType::Decimal { scale: 2 };
        assert_eq!(stored_value(money, 105_000), "1050.00");
        assert_eq!(stored_value(money, -5), "-0.05");
        assert_eq!(stored_value(money, i64::MIN), "-92233720368547758.08");
        assert_eq!(stored_value(ColumnType::Int32, -7), "-7");
    }

    fn sqls(v: Vec<Input>) -> Vec<String> {
        v.into_iter()
            .map(|i| match i {
                Input::Sql(s) => s,
                Input::Meta(m) => format!("META {m}"),
            })
            .collect()
    }

    #[test]
    fn statements_end_at_semicolons_outside_quotes_and_comments() {
        let mut s = Splitter::default();
        assert!(s.line("SELECT 1,").is_empty());
        assert!(s.pending());
        assert_eq!(sqls(s.line("  2;")), vec!["SELECT 1,\n  2"]);
        assert!(!s.pending());
        assert_eq!(
            sqls(s.line("SELECT ';' AS x; SELECT 2;")),
            vec!["SELECT ';' AS x", "SELECT 2"]
        );
        assert!(s.line("SELECT 3 -- a; comment").is_empty());
        assert_eq!(sqls(s.line(";")), vec!["SELECT 3 -- a; comment"]);
        assert!(s.line("-- only a comment;").is_empty());
        assert!(!s.pending());
    }

    #[test]
    fn backslash_commands_are_whole_lines_between_statements() {
        let mut s = Splitter::default();
        assert_eq!(sqls(s.line("  \\d lineitem")), vec!["META \\d lineitem"]);
        assert!(s.line("SELECT").is_empty());
        // Inside a statement a backslash is part of it.
        assert!(s.line("\\d").is_empty());
        assert_eq!(s.finish(), Some(Input::Sql("SELECT\n\\d".into())));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn formats_parse_case_insensitively() {
        assert_eq!(Format::parse("CSV"), Some(Format::Csv));
        assert_eq!(Format::parse("json"), Some(Format::Json));
        assert_eq!(Format::parse("xml"), None);
    }
}
