//! Human sizes and durations on the command line: `csd_sim::units`.

pub use csd_sim::units::{parse_duration_ns, parse_size};
