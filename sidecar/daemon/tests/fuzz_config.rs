//! Bad input, fuzzed: the daemon's reader of `hadar.toml` (`DaemonConfig`: the shared
//! `[slurm]` and `[plugin]` tables plus `[sidecar]` and `[hadar]`), fed structured near-misses,
//! a valid file cut anywhere, arbitrary bytes (as text and as a file) and oversized values.
//!
//! Asserted: no panic; every refusal is one line of bounded length, without control
//! characters, that starts with the file's name; anything accepted has sane timings. Case
//! counts are explicit (`CASES`).

use hadar_daemon::DaemonConfig;
use proptest::prelude::*;

/// Cases per property.
const CASES: u32 = 1500;
/// The longest error the reader may give.
const MAX_ERROR_LEN: usize = 400;

const VALID: &str = "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\n\n[plugin]\nnotify_timeout_ms = 5\n\n[sidecar]\nsocket = \"/run/hadar/hadar.sock\"\nstate = \"/var/lib/hadar/state.db\"\nround_seconds = 30\npreempt_grace_seconds = 10\npreempt_signal = \"USR1\"\ndefault_steps = 1000\nthroughput_scale = 1.0\n\n[hadar]\nmax_nodes_per_job = 1\nwork_conservation = true\n";

fn check(text: &str) -> Result<(), TestCaseError> {
    match DaemonConfig::parse("fuzz.toml", text) {
        Ok(c) => {
            let s = &c.sidecar;
            prop_assert!(s.round_seconds.is_finite() && s.round_seconds > 0.0);
            prop_assert!(s.preempt_grace_seconds.is_finite() && s.preempt_grace_seconds >= 0.0);
            prop_assert!(s.command_timeout_seconds.is_finite() && s.command_timeout_seconds > 0.0);
        }
        Err(e) => {
            let m = e.to_string();
            prop_assert!(m.starts_with("fuzz.toml"), "{}", m);
            prop_assert!(!m.chars().any(|c| c.is_control()), "{:?}", m);
            prop_assert!(
                m.chars().count() <= MAX_ERROR_LEN,
                "error of {} chars",
                m.chars().count()
            );
        }
    }
    Ok(())
}

fn cut(s: &str, at: usize) -> &str {
    let mut at = at % (s.len() + 1);
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn structured(lines in proptest::collection::vec(prop_oneof![
        "\\[(slurm|plugin|sidecar|hadar|x)\\]",
        ("(round_seconds|preempt_grace_seconds|restart_seconds|command_timeout_seconds|default_steps|default_rate_per_gpu|throughput_scale|rate_learning_weight|max_nodes_per_job|notify_timeout_ms|work_conservation|preempt_signal|socket|state|bogus)",
         prop_oneof!["-?[0-9]{1,22}(\\.[0-9]{1,4})?", "(nan|inf|-inf|1e400|true|false)", "\"[A-Za-z0-9/._\\-]{0,16}\"", "[^\\n]{0,8}"])
            .prop_map(|(k, v)| format!("{k} = {v}")),
        "#.{0,10}",
    ], 0..12)) {
        check(&lines.join("\n"))?;
    }

    #[test]
    fn truncated(at in any::<usize>()) {
        check(cut(VALID, at))?;
    }

    #[test]
    fn arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        check(&String::from_utf8_lossy(&b))?;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hadar.toml");
        std::fs::write(&path, &b).unwrap();
        if let Err(e) = DaemonConfig::load(&path) {
            let m = e.to_string();
            prop_assert!(m.contains("hadar.toml"), "{}", m);
            prop_assert!(!m.chars().any(|c| c.is_control()), "{:?}", m);
            prop_assert!(m.chars().count() <= MAX_ERROR_LEN, "error of {} chars", m.chars().count());
        }
    }
}

/// A megabyte-long value gives a short error naming the file.
#[test]
fn oversized_values_give_short_errors() {
    let huge = "x".repeat(1 << 20);
    for text in [
        format!("[sidecar]\npreempt_signal = {huge}\n"),
        format!("[sidecar]\n{huge} = 1\n"),
        format!("[hadar]\nobjective = \"{huge}\"\n"),
    ] {
        let e = DaemonConfig::parse("big.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("big.toml"), "{}", &e[..80.min(e.len())]);
        assert!(e.chars().count() <= MAX_ERROR_LEN, "{}", e.len());
    }
}
