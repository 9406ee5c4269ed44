//! The index schemes of the FD+tree paper's evaluation (§3–§5): what a run measured and
//! what a statement of the paper is about. Serialized and printed as the paper names
//! them (`FD+FC`, `B+tree`, …).

use serde::{Deserialize, Serialize};

/// An index scheme of the FD+tree paper: the three FD+tree concurrency schemes, the
/// in-place B+tree baseline, and the two FD+FC variants of Figure 9 (stated by the paper,
/// not run here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scheme {
    /// FD+XM: a merge x-locks the tree (§3).
    #[serde(rename = "FD+XM")]
    FdXm,
    /// FD+DS: space-doubling merges beside lookups (§3).
    #[serde(rename = "FD+DS")]
    FdDs,
    /// FD+FC: full concurrency with a wavefront (§4).
    #[serde(rename = "FD+FC")]
    FdFc,
    /// FD+FC without memory sharing (Figure 9(a)).
    #[serde(rename = "FD+FC w/o MS")]
    FdFcWithoutMs,
    /// FD+FC moving entries tuple by tuple instead of block by block (Figure 9(b, c)).
    #[serde(rename = "FD+FC/TUP")]
    FdFcTup,
    /// The B+tree updated in place (the baseline).
    #[serde(rename = "B+tree")]
    BTree,
}

impl Scheme {
    /// Every scheme.
    pub const ALL: [Scheme; 6] = [
        Scheme::FdXm,
        Scheme::FdDs,
        Scheme::FdFc,
        Scheme::FdFcWithoutMs,
        Scheme::FdFcTup,
        Scheme::BTree,
    ];

    /// The paper's name (also the JSON form): `FD+XM`, `FD+DS`, `FD+FC`, `FD+FC w/o MS`,
    /// `FD+FC/TUP` or `B+tree`.
    pub fn label(self) -> &'static str {
        match self {
            Scheme::FdXm => "FD+XM",
            Scheme::FdDs => "FD+DS",
            Scheme::FdFc => "FD+FC",
            Scheme::FdFcWithoutMs => "FD+FC w/o MS",
            Scheme::FdFcTup => "FD+FC/TUP",
            Scheme::BTree => "B+tree",
        }
    }
}

/// Its name ([`Scheme::label`]), padded as the format asks.
impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_serialize_and_print_as_the_papers_names() {
        for s in Scheme::ALL {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.label())
            );
            assert_eq!(s.to_string(), s.label());
            let back: Scheme = serde_json::from_value(serde_json::json!(s.label())).unwrap();
            assert_eq!(back, s);
        }
        assert_eq!(
            serde_json::to_string(&[Scheme::FdFc, Scheme::BTree]).unwrap(),
            r#"["FD+FC","B+tree"]"#
        );
        assert_eq!(format!("[{:<7}]", Scheme::FdXm), "[FD+XM  ]");
        assert!(serde_json::from_value::<Scheme>(serde_json::json!("fd+fc")).is_err());
    }
}
