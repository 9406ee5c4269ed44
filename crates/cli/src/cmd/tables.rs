//! `csd load` and `csd tables`: tables on the device (smart-ssd §4.1.1 data sets).

use crate::args::LayoutArg;
use crate::args::{ImageFile, JsonFlag, Seed};
use crate::{CliError, ConfigSource, image, report};
use clap::{Args, Subcommand};
use csd_device::NvmeDevice;
use csd_host::{Catalog, Client, TableInfo};
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec, TpchGenerator, TpchTable};
use csd_table::page::Layout;
use serde::Serialize;
use std::path::PathBuf;

/// What to load.
#[derive(Subcommand)]
pub(crate) enum LoadCmd {
    /// TPC-H tables (tpchgen, with the smart-ssd §4.1.1 transformations: 148-byte lineitem).
    ///
    /// Example: csd load tpch --sf 0.1 --layout pax --image dev.img
    Tpch(TpchArgs),
    /// SyntheticN: N int32 columns; `c1 < v` selects an exact, chosen fraction.
    ///
    /// Example: csd load synthetic --columns 64 --rows 1000000 --image dev.img
    Synthetic(SyntheticArgs),
    /// A CSV file: header and column types sniffed (booleans, integers, decimals kept
    /// exact, doubles, dates, timestamps, strings as VARCHAR; an empty field is NULL);
    /// a column of plain decimals with one number of fractional digits (`123.45000`,
    /// as pyarrow and pandas write a decimal column) is DECIMAL(p, s), other numbers
    /// with a point DOUBLE (--no-decimal: DOUBLE too); timestamps whose every value
    /// carries an offset (`Z`, `+05:30`, `-0500`) are TIMESTAMP with time zone UTC (the
    /// instants exact), without offsets TIMESTAMP, a mix of the two an error; a bad value
    /// is an error naming the row and column, and nothing is written.
    ///
    /// Example: csd load csv sales.csv --table sales --header --image dev.img
    Csv(CsvArgs),
    /// A Parquet file: integers, decimals, dates, strings (floats with --float-scale);
    /// an unsupported type is an error naming the column, and nothing is written.
    ///
    /// Example: csd load parquet lineitem.parquet --table lineitem --layout pax --image dev.img
    Parquet(ParquetArgs),
}

/// A file to load as one table.
#[derive(Args)]
pub(crate) struct FileArgs {
    /// The file.
    file: PathBuf,
    /// Name of the table (1 to 64 letters, digits or _); replaces a table of that name.
    #[arg(long)]
    table: String,
    /// Store floating-point columns as DECIMAL with this many digits after the point
    /// (rounded); without it they are FLOAT32 / FLOAT64, as in the file.
    #[arg(long)]
    float_scale: Option<u8>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub(crate) struct CsvArgs {
    #[command(flatten)]
    file: FileArgs,
    /// The first line names the columns (without --header or --no-header it is sniffed:
    /// a header when a field of it does not read as its column's type, as DuckDB does).
    #[arg(long, conflicts_with = "no_header")]
    header: bool,
    /// The first line is data (columns are named column_1, column_2, ...).
    #[arg(long)]
    no_header: bool,
    /// Field delimiter (one ASCII character; `\t` for a tab).
    #[arg(long, default_value = ",")]
    delimiter: String,
    /// Read columns of plain decimals (every value `[+-]digits.digits` with the same
    /// number of digits after the point, at most 38 digits) as DOUBLE, as DuckDB does,
    /// instead of DECIMAL(p, s) with the digits as written.
    #[arg(long)]
    no_decimal: bool,
}

#[derive(Args)]
pub(crate) struct ParquetArgs {
    #[command(flatten)]
    file: FileArgs,
}

/// Where tables go.
#[derive(Args)]
pub(crate) struct Target {
    /// Image file (created from --preset/--config if it does not exist).
    #[arg(long, required_unless_present = "array", conflicts_with = "array")]
    image: Option<PathBuf>,
    /// An array of devices (see `csd array create`): the table's pages are striped
    /// across its images and the array's manifest records where.
    #[arg(long)]
    array: Option<PathBuf>,
    /// Array: consecutive pages that go to one device (the stripe unit).
    #[arg(long, default_value_t = 1, requires = "array")]
    stripe_pages: u64,
    #[command(flatten)]
    src: ConfigSource,
    /// Page layout.
    #[arg(long, value_enum, default_value_t)]
    layout: LayoutArg,
    /// A new image: extension bytes per MAP entry for FLIXR per-page indexes (24 lets
    /// `csd index create` / `CREATE INDEX` add range or bitmap indexes later).
    #[arg(long)]
    ext_bytes: Option<u32>,
    #[command(flatten)]
    report: JsonFlag,
    /// The image's catalog area (its first 64 LBAs) holds data that is not a csd catalog
    /// (e.g. written through `csd serve`) or a damaged catalog: write a new, empty
    /// catalog over it and load anyway, which destroys that data and whatever lies where
    /// the tables go. Without it such a load is refused and nothing is written.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub(crate) struct TpchArgs {
    /// Scale factor.
    #[arg(long, default_value_t = 0.1)]
    sf: f64,
    /// Tables to load, comma-separated.
    #[arg(
        long,
        default_value = "lineitem,orders,part,customer,supplier,partsupp,nation,region"
    )]
    tables: String,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub(crate) struct SyntheticArgs {
    /// Columns: 4, 16 or 64 (Synthetic4/16/64).
    #[arg(long, default_value_t = 64)]
    columns: usize,
    /// Rows.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    #[command(flatten)]
    rng: Seed,
    /// Table name (default synthetic<N>).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// `csd tables --image PATH`.
#[derive(Args)]
pub(crate) struct TablesArgs {
    #[command(flatten)]
    image: ImageFile,
    #[command(flatten)]
    report: JsonFlag,
}

/// A device or an array, opened read-write for loading.
enum Dest {
    One(Box<Client>),
    Array(crate::cmd::array::ArrayLoad),
}

fn open_client(t: &Target) -> Result<Dest, CliError> {
    match (&t.image, &t.array) {
        (_, Some(dir)) => {
            if t.force {
                return Err(CliError::Usage(
                    "--force applies to a load into one image (--image), not into an array".into(),
                ));
            }
            if t.src.given() {
                return Err(CliError::Usage(
                    "--preset/--config/--set apply to `csd array create`, not to a load into an array"
                        .into(),
                ));
            }
            Ok(Dest::Array(crate::cmd::array::ArrayLoad::open(
                dir,
                t.stripe_pages,
                t.report.json,
            )?))
        }
        (Some(img), None) => {
            let ftl = image::FtlArgs {
                ext_bytes: t.ext_bytes,
                ..image::FtlArgs::default()
            };
            let dev = image::open_rw(img, &t.src, &ftl, true, t.report.json)?;
            let mut client = Box::new(Client::new(NvmeDevice::from_block(dev))?);
            if t.force {
                // Consent given: the catalog area goes to tables whatever it held.
                let taken = Catalog::take_over(client.as_mut());
                match taken {
                    Ok(Some(why)) => eprintln!(
                        "--force: wrote a new, empty catalog over the catalog area of {} (it held {why})",
                        img.display()
                    ),
                    Ok(None) => {}
                    Err(e) => {
                        close_client(Dest::One(client))?;
                        return Err(e.into());
                    }
                }
            }
            Ok(Dest::One(client))
        }
        (None, None) => Err(CliError::Usage("give --image PATH or --array DIR".into())),
    }
}

fn close_client(d: Dest) -> Result<(), CliError> {
    match d {
        Dest::One(c) => {
            let mut b = (*c).into_device().into_block();
            image::close(&mut b)
        }
        Dest::Array(a) => a.close(),
    }
}

/// Load one table into a device or an array.
fn load_into(
    dest: &mut Dest,
    name: &str,
    source: impl csd_table::datagen::RowSource,
    layout: Layout,
    total: Option<u64>,
    json: bool,
) -> Result<csd_host::LoadReport, CliError> {
    match dest {
        Dest::One(c) => load_one(c, name, source, layout, total, json),
        Dest::Array(a) => a.load(name, source, layout, total, json),
    }
}

fn bar(total: Option<u64>, what: &str, show: bool) -> Option<indicatif::ProgressBar> {
    show.then(|| {
        let pb = report::progress_bar(total, "rows");
        pb.set_message(format!("loading {what}"));
        pb
    })
}

/// One table load of `csd load --json`.
#[derive(Serialize)]
struct LoadFigures<'a> {
    table: &'a str,
    layout: Layout,
    rows: u64,
    pages: u64,
    bytes: u64,
    row_bytes: usize,
    wall_s: f64,
    modeled_s: f64,
    rows_per_wall_s: f64,
    load_mb_per_modeled_s: f64,
}

impl LoadFigures<'_> {
    fn of(r: &csd_host::LoadReport) -> LoadFigures<'_> {
        LoadFigures {
            table: &r.table.name,
            layout: r.table.layout,
            rows: r.table.rows,
            pages: r.table.pages,
            bytes: r.table.bytes(),
            row_bytes: r.table.schema.row_width(),
            wall_s: r.wall_s,
            modeled_s: r.modeled_s,
            rows_per_wall_s: r.table.rows as f64 / r.wall_s.max(1e-9),
            load_mb_per_modeled_s: r.table.bytes() as f64 / r.modeled_s.max(1e-12) / 1e6,
        }
    }
}

/// `csd load --json`: the loads and the command that reruns them.
#[derive(Serialize)]
struct Loads<'a> {
    loads: Vec<LoadFigures<'a>>,
    command: &'a str,
}

/// One table of `csd tables --json`.
#[derive(Serialize)]
struct TableFigures<'a> {
    table: &'a str,
    layout: Layout,
    rows: u64,
    pages: u64,
    page_bytes: u32,
    first_lba: u64,
    bytes: u64,
    /// `name type` per column.
    columns: Vec<String>,
}

impl TableFigures<'_> {
    fn of(t: &TableInfo) -> TableFigures<'_> {
        TableFigures {
            table: &t.name,
            layout: t.layout,
            rows: t.rows,
            pages: t.pages,
            page_bytes: t.page_bytes,
            first_lba: t.first_lba,
            bytes: t.bytes(),
            columns: t
                .schema
                .columns()
                .iter()
                .map(|c| format!("{} {}", c.name, c.ty))
                .collect(),
        }
    }
}

/// `csd tables --json`.
#[derive(Serialize)]
struct CatalogFigures<'a> {
    catalog_seq: u64,
    tables: Vec<TableFigures<'a>>,
}

fn report_loads(loads: &[csd_host::LoadReport], cmd: &str, json: bool) {
    if json {
        let loads = loads.iter().map(LoadFigures::of).collect();
        report::print_json(&Loads {
            loads,
            command: cmd,
        });
        return;
    }
    let mut t = report::table(&[
        "table",
        "layout",
        "rows",
        "row bytes",
        "pages",
        "size",
        "wall s",
        "rows/s (wall)",
        "modeled s",
        "MB/s (modeled)",
    ]);
    for r in loads {
        t.add_row(vec![
            r.table.name.clone(),
            r.table.layout.to_string(),
            r.table.rows.to_string(),
            r.table.schema.row_width().to_string(),
            r.table.pages.to_string(),
            report::bytes(r.table.bytes()),
            format!("{:.2}", r.wall_s),
            format!("{:.0}", r.table.rows as f64 / r.wall_s.max(1e-9)),
            format!("{:.3}", r.modeled_s),
            format!(
                "{:.0}",
                r.table.bytes() as f64 / r.modeled_s.max(1e-12) / 1e6
            ),
        ]);
    }
    println!("{t}");
    println!("reproduce: {cmd}");
}

/// Load one table with a progress bar (unless `json`).
pub(crate) fn load_one(
    client: &mut Client,
    name: &str,
    source: impl csd_table::datagen::RowSource,
    layout: Layout,
    total: Option<u64>,
    json: bool,
) -> Result<csd_host::LoadReport, CliError> {
    let pb = bar(total, name, !json);
    let r = Catalog::load(client, name, source, layout, &mut |n| {
        if let Some(pb) = &pb {
            pb.set_position(n);
        }
    })?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    if let Some(old) = &r.replaced {
        eprintln!(
            "replaced table `{}` ({} rows): table names ignore case, so `{name}` is the same table",
            old.name, old.rows
        );
    }
    Ok(r)
}

/// `csd load ...`.
pub(crate) fn load_cmd(c: &LoadCmd) -> Result<(), CliError> {
    match c {
        LoadCmd::Tpch(a) => load_tpch(a),
        LoadCmd::Synthetic(a) => load_synthetic(a),
        LoadCmd::Csv(a) => load_csv(a),
        LoadCmd::Parquet(a) => load_parquet(a),
    }
}

/// `csd load tpch`: the named TPC-H tables (every name checked before the image is
/// opened: a typo writes nothing).
fn load_tpch(a: &TpchArgs) -> Result<(), CliError> {
    let mut loads = Vec::new();
    // Every name is checked before the image is opened: a typo writes nothing.
    let mut wanted = Vec::new();
    for name in a.tables.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let table = TpchTable::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "unknown TPC-H table `{name}`; use {}",
                    TpchTable::ALL.map(|t| t.name()).join(", ")
                ))
            })?;
        wanted.push(table);
    }
    let mut client = open_client(&a.target)?;
    for table in wanted {
        let name = table.name();
        let g = TpchGenerator::new(table, a.sf).map_err(|e| CliError::Usage(e.to_string()))?;
        let total = table.row_count(a.sf, 1, 1);
        loads.push(load_into(
            &mut client,
            name,
            g,
            a.target.layout.layout(),
            total,
            a.target.report.json,
        )?);
    }
    close_client(client)?;
    let cmd = crate::reproduce::line();
    report_loads(&loads, &cmd, a.target.report.json);
    Ok(())
}

/// `csd load synthetic`: one SyntheticN table (smart-ssd §4.1.1).
fn load_synthetic(a: &SyntheticArgs) -> Result<(), CliError> {
    let mut loads = Vec::new();
    let spec = SyntheticSpec::new(a.columns, a.rows, a.rng.seed)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| format!("synthetic{}", a.columns));
    let mut client = open_client(&a.target)?;
    let g = SyntheticGenerator::new(spec).map_err(|e| CliError::Usage(e.to_string()))?;
    loads.push(load_into(
        &mut client,
        &name,
        g,
        a.target.layout.layout(),
        Some(a.rows),
        a.target.report.json,
    )?);
    close_client(client)?;
    let cmd = crate::reproduce::line();
    report_loads(&loads, &cmd, a.target.report.json);
    Ok(())
}

/// `csd load csv`: a CSV file as a table.
fn load_csv(a: &CsvArgs) -> Result<(), CliError> {
    let loads = vec![load_file(&a.file, Some(a))?];
    let cmd = crate::reproduce::line();
    report_loads(&loads, &cmd, a.file.target.report.json);
    Ok(())
}

/// `csd load parquet`: a Parquet file as a table.
fn load_parquet(a: &ParquetArgs) -> Result<(), CliError> {
    let loads = vec![load_file(&a.file, None)?];
    let cmd = crate::reproduce::line();
    report_loads(&loads, &cmd, a.file.target.report.json);
    Ok(())
}

/// The delimiter byte of `--delimiter`.
fn delimiter(s: &str) -> Result<u8, CliError> {
    match s {
        "\\t" | "\t" | "tab" => Ok(b'\t'),
        _ if s.len() == 1 && s.is_ascii() => Ok(s.as_bytes()[0]),
        _ => Err(CliError::Usage(format!(
            "--delimiter `{s}`: give one ASCII character (or \\t for a tab)"
        ))),
    }
}

/// `csd load csv|parquet`: the file is read, typed and converted before the image is
/// opened, so a missing file, a bad type or a bad value leaves the image untouched.
fn load_file(f: &FileArgs, csv: Option<&CsvArgs>) -> Result<csd_host::LoadReport, CliError> {
    csd_host::check_table_name(&f.table)?;
    let mut opts = csd_sql::import::ImportOptions {
        float_scale: f.float_scale,
        ..Default::default()
    };
    if let Some(c) = csv {
        opts.header = match (c.header, c.no_header) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        opts.delimiter = delimiter(&c.delimiter)?;
        opts.csv_decimal = !c.no_decimal;
    }
    let wall = std::time::Instant::now();
    let pb = bar(None, &f.file.display().to_string(), !f.target.report.json);
    if let Some(pb) = &pb {
        pb.set_message(format!("reading {}", f.file.display()));
    }
    let rows = csd_sql::import::import_file(&f.file, &f.table, csv.is_some(), &opts)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    if !f.target.report.json {
        eprintln!(
            "read {} rows of {} columns ({} bytes per row) from {} in {:.2} s",
            rows.rows(),
            rows.table_schema().columns().len(),
            rows.table_schema().row_width(),
            f.file.display(),
            wall.elapsed().as_secs_f64()
        );
    }
    let total = Some(rows.rows());
    let mut client = open_client(&f.target)?;
    let r = load_into(
        &mut client,
        &f.table,
        rows,
        f.target.layout.layout(),
        total,
        f.target.report.json,
    );
    close_client(client)?;
    r
}

/// `csd tables --image PATH`.
pub(crate) fn tables_cmd(a: &TablesArgs) -> Result<(), CliError> {
    // Read-only: listing tables never changes the image.
    let dev = image::open_ro(a.image.path(), a.report.json)?;
    let mut client = Client::new(NvmeDevice::from_block(dev))?;
    let cat = Catalog::read(&mut client)?;
    if a.report.json {
        let tables = cat.tables.iter().map(TableFigures::of).collect();
        report::print_json(&CatalogFigures {
            catalog_seq: cat.seq,
            tables,
        });
    } else {
        let mut t = report::table(&[
            "table",
            "layout",
            "rows",
            "pages",
            "page",
            "size",
            "first LBA",
            "columns",
        ]);
        for x in &cat.tables {
            t.add_row(vec![
                x.name.clone(),
                x.layout.to_string(),
                x.rows.to_string(),
                x.pages.to_string(),
                report::bytes(x.page_bytes as u64),
                report::bytes(x.bytes()),
                x.first_lba.to_string(),
                x.schema.columns().len().to_string(),
            ]);
        }
        println!("{t}");
        println!("catalog version {}", cat.seq);
    }
    close_client(Dest::One(Box::new(client)))
}
