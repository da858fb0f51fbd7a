//! The hadar_fork Python helper's own tests (`wrappers/python/tests`, pytest), run as part of
//! the suite: the fork environment, the plain loop, the Lightning callback with a real
//! `lightning.Trainer` and a stand-in one, and one copy on two processes through
//! `torchrun --standalone`.
//!
//! Needs python3 with the packages of wrappers/examples/requirements.txt (torch, lightning,
//! pytest, safetensors, scikit-learn), which `tests/install-deps` installs.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_python_helper_passes_its_pytest_suite() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("wrappers/python");
    let o = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&python)
        .env("PYTHONPATH", python.join("src"))
        .output()
        .expect("run python3 -m pytest");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "pytest failed:\n{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A run that collected nothing would also exit 0 on some pytest versions' options.
    let passed = out
        .lines()
        .rev()
        .find_map(|l| {
            l.split(" passed")
                .next()?
                .trim()
                .rsplit(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(
        passed >= 10,
        "too few helper tests passed ({passed}):\n{out}"
    );
}
