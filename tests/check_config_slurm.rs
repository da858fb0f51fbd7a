//! `hadar check-config` against a real Slurm test cluster (n1: 4 V100, n2: 4 P100, n3: 4 K80,
//! n4: 2 V100 + 2 K80; partitions gpu, old, cpu): a good file passes and lists every GPU
//! type with its rating; each broken file fails and names its problem at its line.
//! `harness = false`: arguments are name filters.

use hadar_slurm_testbed::{
    DEFAULT_HADAR_TOML, Options, Plugin, Scenario, Testbed, run_scenarios, scratch_on_this_port,
};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

const SCENARIOS: &[Scenario] = &[
    (
        "a_good_file_passes_and_rates_every_gpu_type",
        a_good_file_passes,
    ),
    (
        "an_unknown_partition_is_named_at_its_line",
        an_unknown_partition,
    ),
    (
        "a_socket_folder_others_can_write_is_named",
        an_open_socket_folder,
    ),
    (
        "a_gpu_types_entry_naming_no_known_model_is_named",
        a_bad_gpu_types_entry,
    ),
    (
        "missing_fork_runner_and_state_under_a_file_are_named",
        bad_paths_under_hadare,
    ),
    ("without_slurm_the_file_is_still_checked", without_slurm),
];

fn main() -> std::process::ExitCode {
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("check-config-testbed");
    let options = Options {
        scratch: scratch_on_this_port(&scratch),
        plugin: Plugin::None,
        hadar_toml: DEFAULT_HADAR_TOML.to_string(),
        time_zone: None,
        machine_config: false,
        accounting: false,
        nodes: hadar_slurm_testbed::nodes::default_nodes(),
    };
    run_scenarios(SCENARIOS, options, |_| {})
}

/// The good file: the test cluster's own configuration with the daemon's paths in scratch.
const GOOD: &str = r#"[slurm]
managed_partitions = ["gpu", "old"]
default_partition = "gpu"

[sidecar]
socket = "{scratch}/run/hadar.sock"
state = "{scratch}/state/hadar.db"
"#;

/// Runs `hadar check-config` on `text` (`{scratch}` replaced); its exit code, output and file.
fn check(bed: &Testbed, name: &str, text: &str) -> (Option<i32>, String, String) {
    check_against(bed, name, text, &bed.path("etc/slurm.conf"))
}

/// [`check`] with the Slurm configuration `slurm_conf`.
fn check_against(
    bed: &Testbed,
    name: &str,
    text: &str,
    slurm_conf: &std::path::Path,
) -> (Option<i32>, String, String) {
    let path = bed.path(&format!("etc/{name}.toml"));
    let text = text.replace("{scratch}", &bed.scratch().display().to_string());
    std::fs::write(&path, &text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["check-config", "--config"])
        .arg(&path)
        .env("SLURM_CONF", slurm_conf)
        .output()
        .expect("run hadar check-config");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    (out.status.code(), stdout, path.display().to_string())
}

/// The line (from 1) of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    1 + text
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle} not in the file"))
}

/// Asserts a failed check naming exactly the problems `(key, needle, words)`: at the line of
/// `needle` in `text`, for `key`, with `words` in the message.
fn assert_problems(bed: &Testbed, name: &str, text: &str, expected: &[(&str, &str, &str)]) {
    let (code, out, file) = check(bed, name, text);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("{} problem(s)", expected.len())),
        "{out}"
    );
    for (key, needle, words) in expected {
        let key = if key.is_empty() {
            String::new()
        } else {
            format!("{key}: ")
        };
        let head = format!("{file}:{}: problem: {key}", line_of(text, needle));
        let line = out
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no `{head}` in:\n{out}"));
        assert!(line.contains(words), "{line}");
    }
}

fn a_good_file_passes(bed: &mut Testbed) {
    let (code, out, _) = check(bed, "good", GOOD);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("0 problem(s), 0 warning(s)"), "{out}");
    // Every type of the cluster, its GPUs and nodes counted from the harness's own layout.
    for ty in ["v100", "p100", "k80"] {
        let (gpus, nodes) = hadar_slurm_testbed::NODES
            .iter()
            .flat_map(|(_, g)| g.iter())
            .filter(|(t, _)| *t == ty)
            .fold((0, 0), |(g, n), (_, c)| (g + c, n + 1));
        let row = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(ty))
            .unwrap_or_else(|| panic!("{ty} not listed:\n{out}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        let (gpus, nodes) = (gpus.to_string(), nodes.to_string());
        assert_eq!(cells[1..3], [gpus.as_str(), nodes.as_str()], "{row}");
        assert!(
            row.ends_with(&format!("measured: Gavel's table, column {ty}")),
            "{row}"
        );
    }
}

fn an_unknown_partition(bed: &mut Testbed) {
    let text = GOOD.replace(
        "managed_partitions = [\"gpu\", \"old\"]",
        "managed_partitions = [\n  \"gpu\",\n  \"gpux\",\n]",
    );
    assert_problems(
        bed,
        "partition",
        &text,
        &[(
            "slurm.managed_partitions",
            "\"gpux\"",
            "partition \"gpux\" has no node",
        )],
    );
}

fn an_open_socket_folder(bed: &mut Testbed) {
    let open = bed.path("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let text = GOOD.replace("{scratch}/run/hadar.sock", "{scratch}/open/hadar.sock");
    assert_problems(
        bed,
        "socket",
        &text,
        &[(
            "sidecar.socket",
            "socket =",
            "writable by other users (mode 777)",
        )],
    );
}

fn a_bad_gpu_types_entry(bed: &mut Testbed) {
    let text = format!("{GOOD}\n[gpu_types]\nk80 = \"k800\"\n");
    let words = format!(
        "gpu_types.k80 (line {}): model \"k800\" is not a GPU hadar knows",
        line_of(&text, "k80 =")
    );
    assert_problems(bed, "gpu-types", &text, &[("", "k80 =", &words)]);
}

fn bad_paths_under_hadare(bed: &mut Testbed) {
    let text = GOOD.replace(
        "{scratch}/state/hadar.db",
        "{scratch}/etc/slurm.conf/hadar.db",
    ) + "policy = \"hadare\"\nround_seconds = 60\n\n[fork]\nrunner = \"{scratch}/no/hadar-fork-run\"\nspool = \"{scratch}/spool/fork\"\n";
    // A spool only its owner can write: copy jobs could not make their users' folders.
    let spool = bed.path("spool/fork");
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_problems(
        bed,
        "hadare",
        &text,
        &[
            ("sidecar.state", "state =", "slurm.conf is not a directory"),
            (
                "fork.runner",
                "runner =",
                "is not an executable file on this machine",
            ),
            (
                "fork.spool",
                "spool =",
                "has mode 755: copy jobs make each job's folder there",
            ),
        ],
    );
}

/// Slurm not answering (here: no slurm.conf where SLURM_CONF points): the file's own problems
/// are still named at their lines, with one problem saying what could not be checked.
fn without_slurm(bed: &mut Testbed) {
    let text = GOOD.replace(
        "state = \"{scratch}/state/hadar.db\"",
        "state = \"{scratch}/etc/slurm.conf/hadar.db\"\ncommand_timeout_seconds = 3",
    );
    let (code, out, file) =
        check_against(bed, "no-slurm", &text, &bed.path("etc/no-such-slurm.conf"));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("without the live cluster"), "{out}");
    let state = format!(
        "{file}:{}: problem: sidecar.state: ",
        line_of(&text, "state =")
    );
    assert!(out.lines().any(|l| l.starts_with(&state)), "{out}");
    assert!(
        out.contains("problem: cannot read the live cluster")
            && out.contains("partitions and GPU types were not checked"),
        "{out}"
    );
    assert!(out.contains("2 problem(s)"), "{out}");
}
