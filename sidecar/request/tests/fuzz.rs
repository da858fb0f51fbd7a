//! Bad input, fuzzed: every parser of `hadar-request` (the `#HADAR` directive and comment
//! readers, the GPU-request reader, the config loader, the stored record, the plugin's notice
//! and the slurm.conf inventory) fed structured near-misses, truncated valid input, arbitrary
//! bytes (read lossily, as the plugin reads Slurm's C strings) and oversized input.
//!
//! Each property asserts: no panic; and every refusal is a clear error, one line, of bounded
//! length, naming where the problem is. Case counts are set explicitly per property (the
//! `CASES_*` constants) so the whole file runs in a few seconds under `cargo test`. Oversized
//! inputs (megabytes) are plain tests: they finish, which shows that parsing is linear.

use hadar_request::config::Config;
use hadar_request::directive::{self, Directives};
use hadar_request::gpu::{self, TresFields};
use hadar_request::inventory::{self, Inventory};
use hadar_request::{Notice, Record, decide};
use proptest::prelude::*;

/// Cases for each structured generator.
const CASES_STRUCTURED: u32 = 1500;
/// Cases for each arbitrary-bytes generator.
const CASES_BYTES: u32 = 1500;

/// The longest error message any parser may produce, whatever the input.
const MAX_ERROR_LEN: usize = 400;

/// Checks that `message` is a clear error: non-empty, one line, bounded, naming `place`.
fn assert_clear(message: &str, place: &str) -> Result<(), TestCaseError> {
    prop_assert!(!message.is_empty(), "empty error");
    prop_assert!(
        !message.contains(['\n', '\r']),
        "error spans lines: {message:?}"
    );
    prop_assert!(
        message.chars().count() <= MAX_ERROR_LEN,
        "error of {} chars: {:?}",
        message.chars().count(),
        message.chars().take(120).collect::<String>()
    );
    prop_assert!(
        !message.chars().any(|c| c.is_control()),
        "error carries control characters: {message:?}"
    );
    prop_assert!(
        message.contains(place),
        "error does not say where ({place}): {message}"
    );
    Ok(())
}

/// Bytes as the plugin sees them: lossily decoded, interior NULs impossible in a C string.
fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace('\0', "")
}

/// Directive words, mostly plausible, sometimes hostile.
fn directive_word() -> impl Strategy<Value = String> {
    prop_oneof![
        "(on|off|ON|Off)",
        "(type|steps|epochs|fork|gpu-types|throughput|TYPE|stepz)=[a-z0-9:.,/_\\-]{0,16}",
        "steps=[0-9]{1,25}",
        "throughput=([a-z0-9]{1,5}:[0-9.e+\\-]{0,8},?){0,4}",
        "gpu-types=([a-z0-9]{0,5},?){0,5}",
        "[^\\s]{1,20}",
        "\\$\\(touch /tmp/pwned\\);`id`",
    ]
}

/// A batch script made of `#HADAR`, `#SBATCH`, other comments and commands.
fn script() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        proptest::collection::vec(directive_word(), 0..5)
            .prop_map(|w| format!("#HADAR {}", w.join(" "))),
        "#HADAR[A-Z]?",
        "#SBATCH --gres=gpu:[0-9]",
        "# .{0,20}",
        "\\s{0,3}",
        "echo .{0,10}",
    ];
    proptest::collection::vec(line, 0..12).prop_map(|l| format!("#!/bin/sh\n{}\n", l.join("\n")))
}

/// A TRES field: GPU entries, other GRES, junk.
fn tres_field() -> impl Strategy<Value = String> {
    let entry = prop_oneof![
        "(gres:|gres/)?gpu(:[a-z0-9_.\\-]{0,8})?(:[0-9]{0,22})?",
        "gres:(mps|shard):[0-9]{1,3}",
        "[^,]{0,12}",
    ];
    proptest::collection::vec(entry, 0..5).prop_map(|e| e.join(","))
}

/// A config file: the three known tables with plausible and implausible keys and values.
fn config_text() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        "-?[0-9]{1,22}",
        "\"[a-z/.{}]{0,20}\"",
        "\\[(\"[a-z]{0,5}\",?){0,3}\\]",
        "(true|false|1.5e400|nan|inf)",
        "[^\\n]{0,10}",
    ];
    let key = "(managed_partitions|default_partition|slurm_conf|notify_timeout_ms|max_gpus_per_job|socket|round_seconds|bogus)";
    let line = prop_oneof![
        "\\[(slurm|plugin|sidecar|policy|x)\\]",
        (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        "#.{0,10}",
    ];
    proptest::collection::vec(line, 0..10).prop_map(|l| l.join("\n"))
}

fn record_text() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        "(gpus|gpus-per-node)=([a-z0-9]{1,5}:)?[0-9]{0,12}(,[a-z0-9]{1,4}:[0-9]{1,3}){0,3}",
        "(nodes|het)=[0-9\\-]{0,12}",
        directive_word(),
    ];
    (
        "(hadar:v1|hadar:v2|hadar|)",
        proptest::collection::vec(word, 0..8),
    )
        .prop_map(|(tag, w)| format!("{tag} {}", w.join(" ")))
}

/// A valid managed submission's script, to be truncated.
const VALID_SCRIPT: &str = "#!/bin/bash\n#SBATCH --gres=gpu:v100:2\n#HADAR type=resnet50 steps=1000 throughput=v100:12.5,k80:3\n#HADAR fork=yes gpu-types=v100,k80 # why\necho hi\n";
/// A valid record, to be truncated.
const VALID_RECORD: &str = "hadar:v1 gpus-per-node=v100:2,k80:1 nodes=2 het=0 type=resnet50 throughput=v100:12.5 steps=1000 fork=yes gpu-types=v100,k80";
/// A valid config, to be truncated.
const VALID_CONFIG: &str = "[slurm]\nmanaged_partitions = [\"gpu\", \"old\"]\ndefault_partition = \"gpu\"\n\n[plugin]\nnotify_timeout_ms = 5\nmax_gpus_per_job = 64\n\n[sidecar]\nsocket = \"/run/hadar/hadar.sock\"\n";

fn truncate_at(s: &str, cut: usize) -> &str {
    let mut cut = cut % (s.len() + 1);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// Reads a script and, when it is refused, checks the error names a script line or the
/// comment.
fn check_directives(script: Option<&str>, comment: Option<&str>) -> Result<(), TestCaseError> {
    let mut d = Directives::default();
    let mut result = Ok(());
    if let Some(s) = script {
        result = directive::read_script(s, &mut d);
    }
    if result.is_ok()
        && let Some(c) = comment
    {
        result = directive::read_comment(c, &mut d);
    }
    if let Err(e) = result {
        let m = e.to_string();
        let place = if m.contains("--comment") {
            "--comment"
        } else if m.contains("#HADAR line") {
            "#HADAR line"
        } else {
            // steps= and epochs= both given names both keys instead of a place.
            "steps= and epochs="
        };
        assert_clear(&m, place)?;
    }
    Ok(())
}

fn check_gpus(fields: &TresFields<'_>) -> Result<(), TestCaseError> {
    match gpu::extract(fields, 1024) {
        Ok(got) => {
            if let Some(req) = got.request {
                prop_assert!(req.counts.iter().all(|c| c.count > 0));
                prop_assert!(req.total() <= 1024);
            }
        }
        Err(e) => {
            let m = e.to_string();
            assert_clear(&m, "--")?;
        }
    }
    Ok(())
}

fn check_config(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = Config::parse("fuzz.toml", text) {
        assert_clear(&e.to_string(), "fuzz.toml")?;
    }
    Ok(())
}

fn check_record(text: &str) -> Result<(), TestCaseError> {
    match Record::decode(text) {
        Ok(r) => {
            // Anything accepted is a faithful record: it reads back to itself.
            prop_assert_eq!(Record::decode(&r.encode()).unwrap(), r);
        }
        Err(e) => assert_clear(&e.to_string(), "record")?,
    }
    Ok(())
}

fn check_notice(line: &str) -> Result<(), TestCaseError> {
    match Notice::decode(line) {
        Ok(n) => prop_assert_eq!(Notice::decode(&n.encode()).unwrap(), n),
        Err(e) => {
            let m = e.to_string();
            prop_assert!(m.contains("notice") || m.contains("record"), "{m}");
            assert_clear(&m, "hadar")?;
        }
    }
    Ok(())
}

fn check_inventory(text: &str) -> Result<(), TestCaseError> {
    let mut include = |_: &str| Ok("NodeName=inc Gres=gpu:v100:1".to_string());
    if let Err(e) = Inventory::from_slurm_conf("fuzz.conf", text, &mut include) {
        assert_clear(&e.to_string(), "fuzz.conf")?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES_STRUCTURED))]

    #[test]
    fn directives_structured(s in script(), c in proptest::option::of(proptest::collection::vec(directive_word(), 0..5))) {
        let comment = c.map(|w| format!("hadar: {}", w.join(";")));
        check_directives(Some(&s), comment.as_deref())?;
    }

    #[test]
    fn directives_truncated(cut in any::<usize>()) {
        check_directives(Some(truncate_at(VALID_SCRIPT, cut)), Some(truncate_at("hadar: type=bert;steps=50", cut)))?;
    }

    #[test]
    fn gpu_request_structured(a in tres_field(), b in tres_field(), c in proptest::option::of(tres_field())) {
        check_gpus(&TresFields { per_job: Some(&a), per_node: Some(&b), ..Default::default() })?;
        check_gpus(&TresFields { per_node: Some(&a), per_task: c.as_deref(), ..Default::default() })?;
        check_gpus(&TresFields { per_job: Some(&b), ..Default::default() })?;
    }

    #[test]
    fn config_structured(t in config_text()) {
        check_config(&t)?;
    }

    #[test]
    fn config_truncated(cut in any::<usize>()) {
        check_config(truncate_at(VALID_CONFIG, cut))?;
    }

    #[test]
    fn record_structured(t in record_text()) {
        check_record(&t)?;
    }

    #[test]
    fn record_truncated(cut in any::<usize>()) {
        check_record(truncate_at(VALID_RECORD, cut))?;
    }

    #[test]
    fn notice_structured(uid in "(-?[0-9]{0,12}|x)", r in record_text(), newline in any::<bool>()) {
        let line = format!("hadar-notice v1 uid={uid} {r}{}", if newline { "\n" } else { "" });
        check_notice(&line)?;
    }

    #[test]
    fn notice_truncated(cut in any::<usize>()) {
        let line = format!("hadar-notice v1 uid=1000 {VALID_RECORD}\n");
        check_notice(truncate_at(&line, cut))?;
    }

    #[test]
    fn inventory_structured(lines in proptest::collection::vec(prop_oneof![
        "NodeName=[a-z]{1,3}(\\[[0-9]{1,2}(-[0-9]{1,3})?(,[0-9]{1,2})?\\])? Gres=(gpu(:[a-z0-9]{1,4})?(:[0-9]{0,12})?,?){0,3}",
        "PartitionName=[a-z]{1,4} Nodes=[a-z0-9\\[\\],\\-]{0,12}",
        "Include [a-z.]{0,8}",
        "[^\\n]{0,30}",
    ], 0..8)) {
        check_inventory(&lines.join("\n"))?;
    }

    #[test]
    fn whole_submission_structured(s in script(), a in tres_field(), partition in proptest::option::of("(gpu|old|cpu|[a-z,]{0,8})")) {
        let config = Config::parse("h.toml", VALID_CONFIG).unwrap();
        let inventory = Inventory::from_slurm_conf("s.conf", "NodeName=n[1-2] Gres=gpu:v100:4\nNodeName=n3 Gres=gpu:k80:4\n", &mut |_: &str| Err("no".into())).unwrap();
        let sub = hadar_request::Submission {
            partition: partition.as_deref(),
            comment: None,
            script: Some(&s),
            tres: TresFields { per_node: Some(&a), ..Default::default() },
            min_nodes: None,
            het_offset: None,
            interactive: false,
            ..Default::default()
        };
        match decide(&sub, &config, &inventory) {
            Ok(hadar_request::Decision::Managed(m)) => {
                // What the plugin records is a record the daemon reads back unchanged.
                prop_assert_eq!(Record::decode(&m.record.encode()).unwrap(), m.record);
            }
            Ok(_) => {}
            Err(e) => assert_clear(&e.to_string(), "")?,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES_BYTES))]

    #[test]
    fn directives_bytes(b in proptest::collection::vec(any::<u8>(), 0..400), c in proptest::collection::vec(any::<u8>(), 0..100)) {
        let script = format!("#HADAR {}", lossy(&b));
        let comment = format!("hadar:{}", lossy(&c));
        check_directives(Some(&script), Some(&comment))?;
        check_directives(Some(&lossy(&b)), Some(&lossy(&c)))?;
    }

    #[test]
    fn gpu_request_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let text = lossy(&b);
        let gpu_prefixed = format!("gres:gpu:{text}");
        check_gpus(&TresFields { per_node: Some(&text), ..Default::default() })?;
        check_gpus(&TresFields { per_job: Some(&gpu_prefixed), ..Default::default() })?;
    }

    #[test]
    fn config_bytes(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_config(&lossy(&b))?;
        // The loader reads files: non-UTF-8 bytes must be a clear read error naming the file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hadar.toml");
        std::fs::write(&path, &b).unwrap();
        if let Err(e) = Config::load(&path) {
            assert_clear(&e.to_string(), "hadar.toml")?;
        }
    }

    #[test]
    fn record_and_notice_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let text = lossy(&b);
        check_record(&text)?;
        check_record(&format!("hadar:v1 {text}"))?;
        check_notice(&text)?;
        check_notice(&format!("hadar-notice v1 uid=1 hadar:v1 {text}"))?;
    }

    #[test]
    fn inventory_and_hostlist_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let text = lossy(&b);
        check_inventory(&text)?;
        check_inventory(&format!("NodeName={text} Gres=gpu:1"))?;
        if let Ok(names) = inventory::expand_hostlist(&text, 1000) {
            prop_assert!(names.len() <= 1000);
        }
    }
}

/// A megabyte of one word, in every user-facing field: parsing finishes and the error stays
/// one short line.
#[test]
fn oversized_inputs_give_short_errors() {
    let huge = "x".repeat(1 << 20);
    let mut d = Directives::default();
    let e = directive::read_script(&format!("#HADAR {huge}"), &mut d).unwrap_err();
    assert!(
        e.to_string().len() <= MAX_ERROR_LEN,
        "{}",
        e.to_string().len()
    );
    let mut d = Directives::default();
    let e = directive::read_comment(&format!("hadar: type={huge}!"), &mut d).unwrap_err();
    assert!(
        e.to_string().len() <= MAX_ERROR_LEN,
        "{}",
        e.to_string().len()
    );
    let e = gpu::extract(
        &TresFields {
            per_node: Some(&format!("gres:gpu:{huge}:1")),
            ..Default::default()
        },
        64,
    )
    .unwrap_err();
    assert!(
        e.to_string().len() <= MAX_ERROR_LEN,
        "{}",
        e.to_string().len()
    );
    let e = Record::decode(&format!("hadar:v1 gpus=1 {huge}")).unwrap_err();
    assert!(
        e.to_string().len() <= MAX_ERROR_LEN,
        "{}",
        e.to_string().len()
    );
    let e = Config::parse(
        "big.toml",
        &format!("[slurm]\ndefault_partition = {huge}\n"),
    )
    .unwrap_err();
    assert!(
        e.to_string().len() <= MAX_ERROR_LEN,
        "{}",
        e.to_string().len()
    );
    assert!(e.to_string().starts_with("big.toml"));
}

/// Many lines and many entries: a 100,000-line script, a 50,000-entry TRES field and a
/// 100,000-line slurm.conf are read to the end (the first two refused at their first bad
/// word, the conf within its node limit).
#[test]
fn long_inputs_are_read_in_linear_time() {
    let script: String = (0..100_000).map(|i| format!("# comment {i}\n")).collect();
    let mut d = Directives::default();
    directive::read_script(&(script.clone() + "#HADAR steps=5\n"), &mut d).unwrap();
    assert_eq!(d.job.steps, Some(5));
    let field: String = (0..50_000).map(|i| format!("gres:gpu:t{i}:1,")).collect();
    let got = gpu::extract(
        &TresFields {
            per_node: Some(&field),
            ..Default::default()
        },
        1 << 20,
    )
    .unwrap();
    assert_eq!(got.request.map(|r| r.counts.len()), Some(50_000));
    let conf: String = (0..100_000)
        .map(|i| format!("NodeName=n{i} Gres=gpu:1\n"))
        .collect();
    match Inventory::from_slurm_conf("big.conf", &conf, &mut |_: &str| Err("no".into())) {
        Ok(inv) => assert!(!inv.nodes.is_empty()),
        Err(e) => assert!(e.to_string().starts_with("big.conf:")),
    }
}
