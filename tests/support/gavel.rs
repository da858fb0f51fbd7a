//! Gavel's data in the repository, shared by the tests that play its traces.

use std::path::{Path, PathBuf};

/// `data/gavel/`: the throughput table, the traces and Gavel's own results.
pub fn gavel_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gavel")
}

/// Gavel's six traces, sorted by file name.
pub fn traces() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(gavel_data().join("traces"))
        .expect("data/gavel/traces")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "trace"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 6, "expected Gavel's six traces, found {}", v.len());
    v
}
