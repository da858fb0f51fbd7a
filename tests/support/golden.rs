//! Golden files of CLI output under `tests/golden`, shared by the CLI tests.
//!
//! To regenerate them after an intended change, run the tests with `HADAR_UPDATE_GOLDEN=1`
//! and review the diff.

use std::path::PathBuf;

/// Compares `actual` with `tests/golden/NAME` (or writes it, under `HADAR_UPDATE_GOLDEN`).
pub fn check_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("HADAR_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(actual, expected, "output differs from {}", path.display());
}
