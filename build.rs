//! Build script of the `hadar` binary: records the git revision it was built from, so
//! that `hadar --version` names the exact commit (as ripgrep does). A build outside a
//! git checkout (for example from a source tarball) simply omits the revision.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    let revision = Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    if let Some(rev) = revision {
        println!("cargo:rustc-env=HADAR_GIT_REVISION={rev}");
    }
}
