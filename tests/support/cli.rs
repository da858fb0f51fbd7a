//! Running the `hadar` binary from the CLI tests. Included by each with `#[path]`.

use std::process::Command;

/// Runs `hadar ARGS`: its standard output, standard error and exit code.
pub fn hadar(args: &[&str]) -> (String, String, i32) {
    let o = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .output()
        .expect("run hadar");
    (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
        o.status.code().unwrap(),
    )
}
