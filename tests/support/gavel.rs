//! Gavel's data in the repository, shared by the tests that play its traces.

use std::path::{Path, PathBuf};

/// `data/gavel/`: the throughput table, the traces and Gavel's own results.
pub fn gavel_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gavel")
}

/// Gavel's six traces, sorted by file name.
pub fn traces() -> Vec<PathBuf> {
    traces_in(&gavel_data().join("traces"), 6)
}

/// The `.trace` files of `dir`, sorted by file name; there must be `expected` of them.
pub fn traces_in(dir: &Path, expected: usize) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "trace"))
        .collect();
    v.sort();
    assert_eq!(
        v.len(),
        expected,
        "expected {expected} traces in {}, found {}",
        dir.display(),
        v.len()
    );
    v
}
