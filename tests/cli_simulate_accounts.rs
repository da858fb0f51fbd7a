//! `hadar simulate --accounts`: fair-share from an accounts file weighs the trace's jobs as
//! the daemon's multifactor priority would (issue #14), and a bad file is one clear line.

#[path = "support/cli.rs"]
mod cli;

use cli::hadar;
use serde_json::Value;

const ACCOUNTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/site/fairshare-accounts.toml"
);

/// The `light` account's mean JCT (s) under hadar on the embedded trace at `strength`.
fn light_jct(strength: &str) -> f64 {
    let (out, err, code) = hadar(&[
        "simulate",
        "--policy",
        "hadar",
        "--accounts",
        ACCOUNTS,
        "--priority-strength",
        strength,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let a = &v["results"][0]["accounts"];
    assert_eq!(a["light"]["jobs"], 20, "{a}");
    assert_eq!(a["heavy"]["jobs"], 20, "{a}");
    a["light"]["mean_jct_s"].as_f64().unwrap()
}

#[test]
fn the_under_served_account_finishes_sooner_with_its_fair_share() {
    // Strength 0 gives every job weight 1: the same plan as without the file.
    let without = light_jct("0");
    let with = light_jct("1");
    assert!(
        with < without * 0.95,
        "light account's mean JCT {with:.0} s with fair-share, {without:.0} s without"
    );
}

#[test]
fn a_bad_accounts_file_is_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(ACCOUNTS)
        .unwrap()
        .replace("usage_gpu_hours = 5000", "usage_gpu_hours = -3");
    std::fs::write(&path, text).unwrap();
    let (_, err, code) = hadar(&[
        "simulate",
        "--policy",
        "hadar",
        "--accounts",
        path.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    let err = err.trim();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml") && err.contains("account[1].usage_gpu_hours"),
        "{err}"
    );
}
