//! The scan paper's bandwidth figures from its own equation 1 over csd's presets (the
//! device configuration carries no bandwidth formula; what the simulation delivers is
//! checked in csd-device's tests/preset_bandwidth.rs).

use csd_model::scan::ScanParams;
use csd_sim::DeviceConfig;

fn params(preset: &str, sets: &[&str]) -> ScanParams {
    let text = DeviceConfig::preset_toml(preset).expect("preset");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    ScanParams::from_device(&DeviceConfig::from_toml_with_overrides(text, &sets).expect("config"))
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a / b - 1.0).abs() <= tol
}

#[test]
fn equation_1_gives_the_scan_papers_flash_bandwidths() {
    // §5.2.2: "inbound data stream from flash memory is at least 743 MB/s" (8 ch, 100 Mbps).
    let p = params("isp-ch8", &[]);
    assert!(
        close(p.flash_bytes_per_s(), 743.3e6, 0.005),
        "{}",
        p.flash_bytes_per_s()
    );
    // ...and SATA 3 Gb/s (375 MB/s) is the bound.
    assert!(close(p.seq_read_bytes_per_s(), 375e6, 0.005));
    // §5.2.3: "16 channels with 200 MHz flash chips amounts to 2,776 MB/s", above
    // DDR2-667's 2,664 MB/s, which becomes the bound.
    let p = params(
        "isp-ch16",
        &["channel.rate_mt_s=200", "host_link.bandwidth_mb_s=8000"],
    );
    assert!(
        close(p.flash_bytes_per_s(), 2776e6, 0.005),
        "{}",
        p.flash_bytes_per_s()
    );
    assert!(close(p.seq_read_bytes_per_s(), 2664e6, 0.005));
    // Table 4: hardware ISP at 16 ch x 400 Mbps processes 3.83e7 records/s of 128 B.
    let p = params("isp-ch16", &["channel.rate_mt_s=400"]);
    assert!(close(p.flash_bytes_per_s() / 128.0, 3.83e7, 0.005));
    // "SATA with 6 Gbps, is also easily saturated with a 16-channel architecture".
    let p = params("isp-ch16", &["host_link.bandwidth_mb_s=750"]);
    assert!(close(p.seq_read_bytes_per_s(), 750e6, 0.005));
}

#[test]
fn smart_ssd_internal_bandwidth_is_2_8x_the_host_link() {
    // Smart SSD paper Table 1 / §4.2: the internal sequential read is 2.8x what the host
    // sees over SAS, and the internal limit is the DRAM all channels share.
    let p = params("smart-ssd-sas", &[]);
    // The model's link has no per-command overhead (the simulation's has, and delivers
    // the 550 MB/s of 256 KiB reads): 562 MB/s of SAS payload.
    let host = p.seq_read_bytes_per_s();
    assert!(close(host, 550e6, 0.025), "{host}");
    let internal = p.flash_bytes_per_s().min(p.dram_bytes_per_s);
    assert!(close(internal / host, 2.8, 0.05), "{}", internal / host);
    assert!(close(internal, p.dram_bytes_per_s, 1e-9));
}
