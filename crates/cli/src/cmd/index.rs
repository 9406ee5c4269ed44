//! `csd index create|list|drop`: FLIXR per-page indexes on catalog tables (flixr §4.2;
//! the work is `csd_host::index`). `CREATE INDEX` / `DROP INDEX` in `csd sql` and
//! `csd query` come here too: queries open an image read-only, so an index statement
//! reopens it read-write for the change and closes it cleanly after.

use crate::args::{ImageFile, JsonFlag};
use std::path::Path;

use clap::{Args, Subcommand, ValueEnum};
use csd_device::NvmeDevice;
use csd_host::index::{self, CreateIndex, DEFAULT_BUCKETS, IndexKindSpec};
use csd_host::{Catalog, Client};

use crate::{CliError, ConfigSource, image, report};
use serde::Serialize;

/// `csd index create --json`: the statement's message.
#[derive(Serialize)]
struct ResultFigure<'a> {
    result: &'a str,
}

/// One index of `csd index list --json`.
#[derive(Serialize)]
struct IndexFigures<'a> {
    index: &'a str,
    table: &'a str,
    column: &'a str,
    kind: IndexKind,
    pages: u64,
    flixr_table: u8,
}

/// An index's encoding in `csd index list`: `range`, or `bitmap (N buckets)` (a label with
/// the bucket count, so serialized as that text, the same as
/// [`csd_host::TableIndex::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexKind {
    /// Min/max per page.
    Range,
    /// Bucket bitmap per page.
    Bitmap {
        /// Buckets (split points + 1).
        buckets: usize,
    },
}

impl IndexKind {
    /// The kind of an index's encoding.
    fn of(e: &csd_device::IndexEncoding) -> IndexKind {
        match e {
            csd_device::IndexEncoding::Range => IndexKind::Range,
            csd_device::IndexEncoding::Bitmap { bounds } => IndexKind::Bitmap {
                buckets: bounds.len() + 1,
            },
        }
    }
}

impl std::fmt::Display for IndexKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexKind::Range => f.write_str("range"),
            IndexKind::Bitmap { buckets } => write!(f, "bitmap ({buckets} buckets)"),
        }
    }
}

impl Serialize for IndexKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `csd index list --json`.
#[derive(Serialize)]
struct IndexList<'a> {
    indexes: Vec<IndexFigures<'a>>,
}

/// `csd index ...`.
#[derive(Subcommand)]
pub(crate) enum IndexCmd {
    /// Create a FLIXR per-page index on a table's column: registers the table and the
    /// encoding with the device and rewrites the table through WRITE_IDX.
    ///
    /// Example: csd index create --image dev.img --table lineitem --column l_shipdate --kind range
    Create(CreateArgs),
    /// List the indexes of an image.
    ///
    /// Example: csd index list --image dev.img
    List(ListArgs),
    /// Drop an index (the table stays; scans read every page again).
    ///
    /// Example: csd index drop --image dev.img --name li_ship
    Drop(DropArgs),
}

/// The encoding of `--kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum KindArg {
    /// Min and max of the column per page.
    Range,
    /// One bit per value bucket per page.
    Bitmap,
}

/// `csd index create`.
#[derive(Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    image: ImageFile,
    /// Table.
    #[arg(long)]
    table: String,
    /// Column to index: a number, date, timestamp, float or string column (not BOOLEAN or
    /// DECIMAL(p > 18)); NULLs are left out of the entries.
    #[arg(long)]
    column: String,
    /// Encoding.
    #[arg(long, value_enum, default_value_t = KindArg::Range)]
    kind: KindArg,
    /// Bitmap buckets (equi-depth over a sample of the column).
    #[arg(long, default_value_t = DEFAULT_BUCKETS)]
    buckets: usize,
    /// Bitmap: reuse the split points of this bitmap index (for FLIXR joins).
    #[arg(long)]
    share: Option<String>,
    /// Index name (default: <table>_<column>).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    report: JsonFlag,
}

/// `csd index list`.
#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    image: ImageFile,
    #[command(flatten)]
    report: JsonFlag,
}

/// `csd index drop`.
#[derive(Args)]
pub(crate) struct DropArgs {
    #[command(flatten)]
    image: ImageFile,
    /// Index name.
    #[arg(long)]
    name: String,
}

/// Runs `f` on a read-write client over the image at `path`, then closes it cleanly.
pub(crate) fn with_rw<T>(
    path: &Path,
    quiet: bool,
    f: impl FnOnce(&mut Client) -> Result<T, CliError>,
) -> Result<T, CliError> {
    if !path.exists() {
        return Err(CliError::Usage(format!(
            "{} does not exist: create it with `csd device create` and load tables first",
            path.display()
        )));
    }
    let dev = image::open_rw(
        path,
        &ConfigSource::default(),
        &image::FtlArgs::default(),
        false,
        quiet,
    )?;
    let mut client = Client::new(NvmeDevice::from_block(dev))?;
    let out = f(&mut client);
    let mut dev = client.into_device().into_block();
    image::close(&mut dev)?;
    out
}

/// `CREATE INDEX` on an image; the message.
pub(crate) fn create_on(path: &Path, req: &CreateIndex, quiet: bool) -> Result<String, CliError> {
    let r = with_rw(path, quiet, |c| Ok(index::create(c, req)?))?;
    Ok(format!(
        "created index {} on {}({}) as {}: {} pages rewritten through WRITE_IDX, {:.3} s modeled, {:.2} s wall",
        r.index.name,
        r.table.name,
        r.index.column,
        r.index.kind(),
        r.pages_rewritten,
        r.modeled_s,
        r.wall_s
    ))
}

/// `DROP INDEX` on an image; the message.
pub(crate) fn drop_on(path: &Path, name: &str, if_exists: bool) -> Result<String, CliError> {
    with_rw(path, true, |c| {
        if if_exists {
            let cat = Catalog::read(c)?;
            if !index::list(&cat)
                .iter()
                .any(|(_, i)| csd_host::same_name(&i.name, name))
            {
                return Ok(format!("no index {name}"));
            }
        }
        let (table, ix) = index::drop(c, name)?;
        Ok(format!(
            "dropped index {} on {table}({})",
            ix.name, ix.column
        ))
    })
}

/// `csd index ...`.
pub(crate) fn index_cmd(cmd: &IndexCmd) -> Result<(), CliError> {
    match cmd {
        IndexCmd::Create(a) => {
            let req = CreateIndex {
                name: a
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("{}_{}", a.table, a.column)),
                table: a.table.clone(),
                column: a.column.clone(),
                kind: match a.kind {
                    KindArg::Range => {
                        if a.share.is_some() {
                            return Err(CliError::Usage("--share applies to --kind bitmap".into()));
                        }
                        IndexKindSpec::Range
                    }
                    KindArg::Bitmap => IndexKindSpec::Bitmap {
                        buckets: a.buckets,
                        share: a.share.clone(),
                    },
                },
            };
            let msg = create_on(a.image.path(), &req, a.report.json)?;
            if a.report.json {
                report::print_json(&ResultFigure { result: &msg });
            } else {
                println!("{msg}");
            }
            Ok(())
        }
        IndexCmd::List(a) => {
            let dev = image::open_ro(a.image.path(), a.report.json)?;
            let mut client = Client::new(NvmeDevice::from_block(dev))?;
            let cat = Catalog::read(&mut client)?;
            let all = index::list(&cat);
            if a.report.json {
                let indexes = all
                    .iter()
                    .map(|(t, i)| IndexFigures {
                        index: &i.name,
                        table: &t.name,
                        column: &i.column,
                        kind: IndexKind::of(&i.encoding),
                        pages: t.pages,
                        flixr_table: i.flixr_table,
                    })
                    .collect();
                report::print_json(&IndexList { indexes });
            } else if all.is_empty() {
                println!(
                    "no indexes (create one with `csd index create` or CREATE INDEX in `csd sql`)"
                );
            } else {
                let mut tb = report::table(&["index", "table", "column", "kind", "pages"]);
                for (t, i) in all {
                    tb.add_row(vec![
                        i.name.clone(),
                        t.name.clone(),
                        i.column.clone(),
                        IndexKind::of(&i.encoding).to_string(),
                        t.pages.to_string(),
                    ]);
                }
                println!("{tb}");
            }
            Ok(())
        }
        IndexCmd::Drop(a) => {
            println!("{}", drop_on(a.image.path(), &a.name, false)?);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON kind is the text `csd_host::TableIndex::kind` gives, for both encodings.
    #[test]
    fn index_kind_serializes_as_the_catalog_label() {
        for encoding in [
            csd_device::IndexEncoding::Range,
            csd_device::IndexEncoding::Bitmap {
                bounds: vec![1, 5, 9],
            },
        ] {
            let i = csd_host::TableIndex {
                name: "i".into(),
                column: "c".into(),
                encoding: encoding.clone(),
                flixr_table: 1,
                secondary: Vec::new(),
            };
            let k = IndexKind::of(&encoding);
            assert_eq!(k.to_string(), i.kind());
            assert_eq!(
                serde_json::to_string(&k).expect("json"),
                format!("\"{}\"", i.kind())
            );
        }
        assert_eq!(
            serde_json::to_string(&IndexKind::Bitmap { buckets: 4 }).expect("json"),
            "\"bitmap (4 buckets)\""
        );
    }
}
