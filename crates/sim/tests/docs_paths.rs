//! No file of the repository cites a path outside it: the design notes and the papers'
//! references live in `docs/` (docs/architecture.md, docs/papers.md), and a clone of the
//! repository alone must be able to follow every citation.
//!
//! The test walks the repository's text files (build output and `.git` aside) and fails
//! on (a) the names of design notes and paper copies that live outside the repository,
//! and (b) a relative markdown link whose target does not exist inside the repository.

use std::path::{Component, Path, PathBuf};

/// The repository root: this crate lives in `crates/sim`.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Citations of places outside the repository. Built from pieces so that this file does
/// not match itself.
fn outside_citations() -> Vec<String> {
    let txt = ".txt";
    vec![
        ["DESIGN", ".md"].concat(),
        ["../", "shared"].concat(),
        ["shared", "/papers"].concat(),
        ["papers", "/"].concat(),
        ["batch-io-ssd-log-structuring", txt].concat(),
        ["in-storage-scan-processing", txt].concat(),
        ["smart-ssd-query-processing", txt].concat(),
        ["flixr-page-level-index-in-ftl", txt].concat(),
        ["fd-plus-tree-concurrency-control", txt].concat(),
    ]
}

const TEXT_EXTENSIONS: &[&str] = &["rs", "md", "toml", "py", "pyi", "sh", "txt", "yml", "yaml"];

/// Every text file below `dir`, skipping build output, VCS data and other hidden
/// folders (`.ci` aside, which holds the CI script).
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            let hidden = name.starts_with('.') && name != ".ci";
            if !hidden && name != "target" && name != "node_modules" && name != "__pycache__" {
                text_files(&path, out);
            }
        } else if kind.is_file() {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let in_ci = path.parent().and_then(Path::file_name) == Some(".ci".as_ref());
            if TEXT_EXTENSIONS.contains(&ext) || in_ci {
                out.push(path);
            }
        }
    }
}

/// The relative targets of markdown links `[text](target)` in `text` (URLs, anchors and
/// absolute paths aside), without their `#anchor`.
fn relative_links(text: &str) -> Vec<&str> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("").trim();
        let external = target.contains("://") || target.starts_with("mailto:");
        if !target.is_empty() && !external && !target.starts_with('/') && !target.contains(' ') {
            links.push(target);
        }
    }
    links
}

/// `path` with `.` and `..` resolved lexically (the target need not exist); `None` when
/// `..` climbs above the file system root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other),
        }
    }
    Some(out)
}

#[test]
fn no_file_cites_a_path_outside_the_repository() {
    let root = repo_root()
        .canonicalize()
        .expect("the repository root exists");
    let mut files = Vec::new();
    text_files(&root, &mut files);
    assert!(
        files.len() > 100,
        "walked only {} files below {}",
        files.len(),
        root.display()
    );
    let needles = outside_citations();
    let mut found = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (n, line) in text.lines().enumerate() {
            for needle in &needles {
                if line.contains(needle.as_str()) {
                    found.push(format!("{shown}:{}: cites `{needle}`", n + 1));
                }
            }
        }
        if file.extension().and_then(|e| e.to_str()) == Some("md") {
            let dir = file.parent().unwrap_or(&root);
            // Reports under bench/ link plots written beside them at run time; the
            // design notes and README must link files that exist.
            let must_exist = shown.starts_with("docs/") || shown == "README.md";
            for link in relative_links(&text) {
                match normalize(&dir.join(link)) {
                    Some(t) if t.starts_with(&root) => {
                        if must_exist && !t.exists() {
                            found.push(format!("{shown}: link `{link}` names no file"));
                        }
                    }
                    _ => found.push(format!("{shown}: link `{link}` leaves the repository")),
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/ (docs/architecture.md, docs/papers.md) instead of paths outside the \
         repository:\n{}",
        found.join("\n")
    );
}

#[test]
fn markdown_links_are_found_with_anchors_dropped_and_urls_ignored() {
    let text = "see [a](docs/a.md#x), [b](https://x.org/y), [c](#local) and [d](../e.md)";
    assert_eq!(relative_links(text), vec!["docs/a.md", "../e.md"]);
}

#[test]
fn a_link_that_climbs_out_of_the_repository_is_caught() {
    let root = Path::new("/repo");
    let inside = normalize(&root.join("docs").join("../crates/x.rs")).expect("resolves");
    assert!(inside.starts_with(root));
    let outside = normalize(
        &root
            .join("docs")
            .join(["../../", "elsewhere/notes.md"].concat()),
    )
    .expect("resolves");
    assert!(!outside.starts_with(root));
}

#[test]
fn the_papers_references_and_the_architecture_are_in_docs() {
    let docs = repo_root().join("docs");
    for name in ["architecture.md", "papers.md", "time-model.md"] {
        assert!(docs.join(name).is_file(), "docs/{name} is missing");
    }
}
