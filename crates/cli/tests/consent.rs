//! Nothing destructive without consent (issue 37's small reproducers), each run through
//! the `csd` binary on temporary `tiny` images:
//! * raw-mode writes on an image whose flash holds data are refused without `--force`;
//! * a load over a catalog area holding someone else's data is refused without `--force`;
//! * a read-write open never formats implicitly (an image with no FTL names `--format`);
//! * a refused `device create` leaves no file behind;
//! * a FIFO given as the image is refused at once (no hang);
//! * `device check` on an image another process holds says it is in use;
//! * a `--set` an existing image does not have is an error naming the key.

mod common;

use common::{csd, ok};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A run that must fail, with `needle` in its stderr; returns the stderr.
fn fails(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "expected a failure, got success:\nstdout: {}\nstderr: {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains(needle), "`{needle}` not in stderr:\n{err}");
    err
}

/// Create a `tiny` image at `img`.
fn create(img: &str) {
    ok(&csd(&[
        "device", "create", "--preset", "tiny", "--image", img,
    ]));
}

/// The image's SMART log as JSON.
fn smart(img: &str) -> serde_json::Value {
    let out = ok(&csd(&["device", "smart", "--image", img, "--json"]));
    serde_json::from_str(&out).expect("SMART JSON")
}

#[test]
fn raw_mode_writes_refuse_an_image_holding_an_ftl_unless_forced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("dev.img");
    let img = img.to_str().expect("utf-8");
    create(img);
    ok(&csd(&[
        "io", "--image", img, "--rw", "write", "--bs", "8k", "--ops", "200",
    ]));
    let before = std::fs::read(img).expect("image");
    let err = fails(
        &csd(&[
            "io", "--image", img, "--mode", "raw", "--rw", "write", "--bs", "8k", "--ops", "200",
        ]),
        "refusing raw-mode writes",
    );
    assert!(err.contains("--force") && err.contains("destroy"), "{err}");
    // Preconditioning writes too.
    fails(
        &csd(&[
            "io",
            "--image",
            img,
            "--mode",
            "raw",
            "--rw",
            "randread",
            "--precondition",
            "--bs",
            "8k",
            "--ops",
            "10",
        ]),
        "refusing raw-mode writes",
    );
    assert!(
        std::fs::read(img).expect("image") == before,
        "a refused run changed the image"
    );
    // Raw reads are fine, and leave the image as it was (opened read-only).
    let out = ok(&csd(&[
        "io", "--image", img, "--mode", "raw", "--rw", "randread", "--bs", "8k", "--ops", "100",
    ]));
    assert!(out.contains("opened read-only"), "{out}");
    assert!(
        std::fs::read(img).expect("image") == before,
        "a raw read changed the image"
    );
    ok(&csd(&["device", "check", "--image", img]));
    // --force is consent only where it means something.
    fails(
        &csd(&[
            "io", "--image", img, "--rw", "write", "--ops", "10", "--force",
        ]),
        "--force applies to raw-mode writes",
    );
    // With consent the raw writes run (and the FTL is gone).
    ok(&csd(&[
        "io", "--image", img, "--mode", "raw", "--rw", "write", "--bs", "8k", "--ops", "200",
        "--force",
    ]));
}

#[test]
fn a_load_over_client_data_in_the_catalog_area_is_refused_unless_forced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("dev.img");
    let img = img.to_str().expect("utf-8");
    create(img);
    // A client's data from LBA 0 on (as an NBD client writes a file system).
    ok(&csd(&[
        "io",
        "--image",
        img,
        "--rw",
        "write",
        "--bs",
        "4k",
        "--ops",
        "256",
        "--iodepth",
        "1",
    ]));
    let written = smart(img)["host_written_bytes"].clone();
    let load = |extra: &[&str]| {
        let mut args = vec![
            "load",
            "synthetic",
            "--columns",
            "4",
            "--rows",
            "2000",
            "--image",
            img,
        ];
        args.extend_from_slice(extra);
        csd(&args)
    };
    let err = fails(&load(&[]), "not a csd catalog");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        smart(img)["host_written_bytes"],
        written,
        "a refused load wrote to the device"
    );
    fails(&csd(&["tables", "--image", img]), "not a csd catalog");
    // With consent the area becomes a catalog and the table is there.
    let out = load(&["--force"]);
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("wrote a new, empty catalog"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tables = ok(&csd(&["tables", "--image", img]));
    assert!(tables.contains("synthetic4"), "{tables}");
    // A never-written catalog area is fine to initialize without consent.
    let fresh = dir.path().join("fresh.img");
    let fresh = fresh.to_str().expect("utf-8");
    create(fresh);
    ok(&csd(&[
        "load",
        "synthetic",
        "--columns",
        "4",
        "--rows",
        "2000",
        "--image",
        fresh,
    ]));
}

#[test]
fn a_read_write_open_never_formats_an_image_without_an_ftl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("raw.img");
    let img = path.to_str().expect("utf-8");
    // Media only, no FTL: what a creation that died before formatting leaves.
    let cfg = csd_sim::DeviceConfig::preset("tiny").expect("preset");
    drop(csd_nand::Nand::create_image(&path, cfg).expect("media"));
    let before = std::fs::read(&path).expect("image");
    for args in [
        vec!["io", "--image", img, "--rw", "randwrite", "--ops", "10"],
        vec![
            "load",
            "synthetic",
            "--columns",
            "4",
            "--rows",
            "100",
            "--image",
            img,
        ],
        vec!["io", "--image", img, "--rw", "randread", "--ops", "10"],
    ] {
        let err = fails(&csd(&args), "never formatted");
        assert!(err.contains("--format"), "{err}");
        assert!(
            std::fs::read(&path).expect("image") == before,
            "`csd {}` changed the image",
            args.join(" ")
        );
    }
    let out = csd(&["device", "check", "--image", img]);
    assert!(!out.status.success(), "an unformatted image checks as fine");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("never formatted"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // On request it is formatted, and then used.
    let out = csd(&[
        "io",
        "--image",
        img,
        "--format",
        "--rw",
        "randwrite",
        "--ops",
        "10",
    ]);
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("formatted the FTL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok(&csd(&[
        "io", "--image", img, "--rw", "randread", "--ops", "10",
    ]));
}

#[test]
fn a_refused_device_create_leaves_no_file_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let img = path.to_str().expect("utf-8");
    let err = fails(
        &csd(&[
            "device", "create", "--preset", "tiny", "--op", "0.0001", "--image", img,
        ]),
        "",
    );
    assert!(
        !path.exists(),
        "the refused create left {img} behind ({err})"
    );
    // A retry with a config that works is not met by "File exists".
    create(img);
    assert!(path.exists());
    // An existing file is never removed by a create that fails on it.
    let out = csd(&["device", "create", "--preset", "tiny", "--image", img]);
    assert!(!out.status.success());
    ok(&csd(&["device", "check", "--quick", "--image", img]));
}

/// Run `csd args` with a deadline; a run still going then is killed and the test fails.
fn csd_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_csd"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run csd");
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`csd {}` hung", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn a_fifo_as_the_image_is_refused_without_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.img");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let img = fifo.to_str().expect("utf-8");
    let limit = Duration::from_secs(20);
    for args in [
        vec!["device", "info", "--image", img],
        vec!["device", "smart", "--image", img],
        vec!["tables", "--image", img],
        vec!["query", "--image", img, "SELECT 1"],
        vec!["io", "--image", img, "--rw", "randread", "--ops", "10"],
        vec![
            "io", "--image", img, "--mode", "raw", "--rw", "randread", "--ops", "10",
        ],
    ] {
        let out = csd_within(&args, limit);
        let err = fails(&out, "FIFO");
        assert!(err.contains("not a regular file"), "{err}");
    }
    let out = csd_within(&["device", "check", "--image", img], limit);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FIFO"), "{text}");
    assert!(
        !text.contains("format it"),
        "check advises formatting a FIFO:\n{text}"
    );
}

/// Hold the image's lock as a running `csd serve` would.
fn hold_lock(img: &Path) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .expect("open image");
    f.try_lock().expect("lock the image");
    f
}

#[test]
fn device_check_on_an_image_in_use_says_so_and_never_advises_formatting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let img = path.to_str().expect("utf-8");
    create(img);
    let lock = hold_lock(&path);
    let out = csd(&["device", "check", "--image", img]);
    assert!(!out.status.success(), "a check of an image in use passed");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("in use") && err.contains("in use"),
        "{text}\n{err}"
    );
    assert!(
        !text.contains("format"),
        "check advises formatting an image in use:\n{text}"
    );
    let out = csd(&["device", "check", "--image", img, "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).expect("JSON");
    assert_eq!(v["in_use"], true, "{v}");
    drop(lock);
    ok(&csd(&["device", "check", "--image", img]));
}

#[test]
fn a_set_an_existing_image_does_not_have_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let img = path.to_str().expect("utf-8");
    create(img);
    let before = std::fs::read(&path).expect("image");
    for args in [
        vec![
            "io",
            "--image",
            img,
            "--set",
            "channel.rate_mt_s=400",
            "--rw",
            "randread",
            "--ops",
            "10",
        ],
        vec![
            "io",
            "--image",
            img,
            "--preset",
            "tiny",
            "--set",
            "channel.rate_mt_s=400",
            "--mode",
            "raw",
            "--rw",
            "randread",
            "--ops",
            "10",
        ],
        vec![
            "load",
            "synthetic",
            "--columns",
            "4",
            "--rows",
            "100",
            "--image",
            img,
            "--set",
            "channel.rate_mt_s=400",
        ],
    ] {
        let err = fails(&csd(&args), "channel.rate_mt_s");
        assert!(
            err.contains("--set cannot change it") && err.contains("400") && err.contains("200"),
            "{err}"
        );
        assert!(
            std::fs::read(&path).expect("image") == before,
            "`csd {}` changed the image",
            args.join(" ")
        );
    }
    // Restating the image's own value is fine, with or without the preset.
    ok(&csd(&[
        "io",
        "--image",
        img,
        "--set",
        "channel.rate_mt_s=200",
        "--rw",
        "randread",
        "--ops",
        "10",
    ]));
    ok(&csd(&[
        "io",
        "--image",
        img,
        "--preset",
        "tiny",
        "--set",
        "channel.rate_mt_s=200",
        "--rw",
        "randread",
        "--ops",
        "10",
    ]));
    // A whole preset that differs outside the geometry: the image's config is used,
    // and a warning names the fields.
    let other = dir.path().join("fast.img");
    let other = other.to_str().expect("utf-8");
    ok(&csd(&[
        "device",
        "create",
        "--preset",
        "tiny",
        "--set",
        "channel.rate_mt_s=400",
        "--image",
        other,
    ]));
    let out = csd(&[
        "io", "--image", other, "--preset", "tiny", "--rw", "randread", "--ops", "10",
    ]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning") && err.contains("channel.rate_mt_s"),
        "{err}"
    );
}
