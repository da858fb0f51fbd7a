//! Bad input, fuzzed: the trace reader (Gavel's `.trace`), the throughput reader (Gavel's
//! JSON), the jobs file (TOML and Gavel lines) and the cluster readers, fed structured
//! near-misses, truncated valid files, arbitrary bytes (read lossily, and as files, where
//! non-UTF-8 must be a read error naming the file) and oversized input.
//!
//! Each property asserts no panic and that every refusal is one line of bounded length that
//! starts with the input's name (`file:line: field ...`). Case counts are explicit (the
//! `CASES` constant) so the file runs in seconds under `cargo test`.

use hadar_formats::{
    JobsSyntax, ThroughputTable, embedded, parse_cluster_spec, parse_cluster_toml, parse_jobs,
    parse_trace,
};
use proptest::prelude::*;

/// Cases per property.
const CASES: u32 = 1000;
/// The longest error any reader may give.
const MAX_ERROR_LEN: usize = 500;

fn assert_clear(message: &str, origin: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        message.starts_with(origin),
        "error does not name the input: {message}"
    );
    prop_assert!(
        !message.contains(['\n', '\r']),
        "error spans lines: {message:?}"
    );
    prop_assert!(
        message.chars().count() <= MAX_ERROR_LEN,
        "error of {} chars",
        message.chars().count()
    );
    Ok(())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn cut(s: &str, at: usize) -> &str {
    let mut at = at % (s.len() + 1);
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}

fn check_trace(text: &str) -> Result<(), TestCaseError> {
    let table = embedded::throughputs().unwrap();
    let cluster = embedded::cluster().unwrap();
    match parse_trace(text, "fuzz.trace", &table, &cluster) {
        Ok(jobs) => {
            for j in &jobs {
                prop_assert!(j.total_steps.is_finite() && j.total_steps > 0.0);
                prop_assert!(j.arrival_s.is_finite() && j.arrival_s >= 0.0);
            }
        }
        Err(e) => assert_clear(&e.to_string(), "fuzz.trace")?,
    }
    Ok(())
}

fn check_throughputs(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = ThroughputTable::parse_gavel_json(text, "fuzz.json") {
        assert_clear(&e.to_string(), "fuzz.json")?;
    }
    Ok(())
}

fn check_jobs(text: &str) -> Result<(), TestCaseError> {
    let table = embedded::throughputs().unwrap();
    let cluster = embedded::cluster().unwrap();
    for syntax in [JobsSyntax::detect(None, text), JobsSyntax::Toml] {
        if let Err(e) = parse_jobs(text, "fuzz.jobs", syntax, &table, &cluster) {
            assert_clear(&e.to_string(), "fuzz.jobs")?;
        }
    }
    Ok(())
}

fn check_cluster(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = parse_cluster_toml(text, "fuzz.toml") {
        assert_clear(&e.to_string(), "fuzz.toml")?;
    }
    let _ = parse_cluster_spec(text, 4);
    Ok(())
}

/// A trace line: real job types and plausible or hostile numbers in the ten fields.
fn trace_line() -> impl Strategy<Value = String> {
    let job_type = prop_oneof![
        Just("ResNet-18 (batch size 32)".to_string()),
        Just("LM (batch size 80)".to_string()),
        "[A-Za-z0-9 ()\\-]{0,20}",
    ];
    let num = prop_oneof![
        "-?[0-9]{1,25}(\\.[0-9]{0,6})?",
        "(nan|inf|-inf|1e400|-0|0x10|)",
        "[^\\t\\n]{0,8}",
    ];
    (
        job_type,
        proptest::collection::vec(num, 7..=7),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(t, n, extra_tab)| {
            let mut line = format!(
                "{t}\tpython3 main.py\tdir\t--steps\t{}\t{}\t{}\t{}\t{}\t{}",
                n[0], n[1], n[2], n[3], n[4], n[5]
            );
            if extra_tab {
                line.push('\t');
                line.push_str(&n[6]);
            }
            line
        })
}

fn json_text() -> impl Strategy<Value = String> {
    let rate = prop_oneof![
        "-?[0-9]{1,6}(\\.[0-9]{1,3})?",
        "(null|true|\"x\"|\\[\\]|\\{\\}|1e999)"
    ];
    let entry = (
        "(\\('(A|ResNet-18 \\(batch size 32\\))', [0-9]{1,2}\\)|x)",
        rate.clone(),
        proptest::option::of(rate),
    )
        .prop_map(|(k, r, pair)| match pair {
            Some(p) => format!("\"{k}\": {{\"null\": {r}, \"('B', 1)\": [{p}, {p}]}}"),
            None => format!("\"{k}\": {{\"null\": {r}}}"),
        });
    proptest::collection::vec(
        (
            "(v100|k80|p100|V100|x_unconsolidated|)",
            proptest::collection::vec(entry, 0..4),
        ),
        0..4,
    )
    .prop_map(|types| {
        let body: Vec<String> = types
            .iter()
            .map(|(t, e)| format!("\"{t}\": {{{}}}", e.join(", ")))
            .collect();
        format!("{{{}}}", body.join(", "))
    })
}

fn jobs_toml() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        "-?[0-9]{1,22}(\\.[0-9]{1,3})?",
        "\"[A-Za-z0-9 ()\\-]{0,24}\"",
        Just("\"ResNet-18 (batch size 32)\"".to_string()),
        "(true|nan|inf|\\[\\])",
    ];
    let key = "(type|job_type|arrival|arrival_s|workers|gpus|steps|total_steps|weight|bogus)";
    let line = prop_oneof![
        Just("[[job]]".to_string()),
        Just("[[jobs]]".to_string()),
        (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        "[^\\n]{0,12}",
    ];
    proptest::collection::vec(line, 0..10).prop_map(|l| l.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn trace_structured(lines in proptest::collection::vec(prop_oneof![trace_line(), "#.{0,10}", "\\s{0,3}"], 0..6)) {
        check_trace(&lines.join("\n"))?;
    }

    #[test]
    fn trace_truncated(at in any::<usize>()) {
        let text = embedded::TRACE.lines().take(5).collect::<Vec<_>>().join("\n");
        check_trace(cut(&text, at))?;
    }

    #[test]
    fn trace_bytes(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_trace(&lossy(&b))?;
        let with_tabs: Vec<u8> = b.iter().map(|x| if x % 7 == 0 { b'\t' } else { *x }).collect();
        check_trace(&lossy(&with_tabs))?;
    }

    #[test]
    fn throughputs_structured(t in json_text()) {
        check_throughputs(&t)?;
    }

    #[test]
    fn throughputs_truncated(at in any::<usize>()) {
        let text = &embedded::THROUGHPUTS_JSON[..4000.min(embedded::THROUGHPUTS_JSON.len())];
        check_throughputs(cut(text, at))?;
        check_throughputs(cut(embedded::THROUGHPUTS_JSON, at))?;
    }

    #[test]
    fn throughputs_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_throughputs(&lossy(&b))?;
        check_throughputs(&format!("{{\"v100\": {{{}}}}}", lossy(&b)))?;
    }

    #[test]
    fn jobs_structured(t in jobs_toml()) {
        check_jobs(&t)?;
    }

    #[test]
    fn jobs_and_cluster_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_jobs(&lossy(&b))?;
        check_cluster(&lossy(&b))?;
    }

    #[test]
    fn cluster_structured(t in "(\\[\\[node\\]\\]\n|name = \"[a-z0-9]{0,5}\"\n|gpus = \\{ ?([a-z0-9]{1,4} = -?[0-9]{1,12},? ?){0,3}\\}\n|[a-z]{1,6} = [0-9a-z\"]{0,6}\n){0,8}") {
        check_cluster(&t)?;
    }

    /// Files: non-UTF-8 bytes are a read error naming the file.
    #[test]
    fn files_of_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.trace");
        std::fs::write(&path, &b).unwrap();
        let table = embedded::throughputs().unwrap();
        let cluster = embedded::cluster().unwrap();
        let shown = path.display().to_string();
        if let Err(e) = hadar_formats::load_trace(&path, &table, &cluster) {
            assert_clear(&e.to_string(), &shown)?;
        }
        if let Err(e) = ThroughputTable::load(&path) {
            assert_clear(&e.to_string(), &shown)?;
        }
    }
}

/// Oversized input: a megabyte-long field or key gives a short error, and a long trace or
/// table is read to the end.
#[test]
fn oversized_inputs_give_short_errors_and_long_ones_are_read() {
    let table = embedded::throughputs().unwrap();
    let cluster = embedded::cluster().unwrap();
    let huge = "x".repeat(1 << 20);
    let line = format!("{huge}\tc\tw\ts\t1\t100\t1\t1\t-1\t0");
    let e = parse_trace(&line, "big.trace", &table, &cluster)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("big.trace:1"), "{}", &e[..80]);
    assert!(e.len() <= MAX_ERROR_LEN, "{}", e.len());
    let line = format!("ResNet-18 (batch size 32)\tc\tw\ts\t{huge}\t100\t1\t1\t-1\t0");
    let e = parse_trace(&line, "big.trace", &table, &cluster)
        .unwrap_err()
        .to_string();
    assert!(e.len() <= MAX_ERROR_LEN, "{}", e.len());
    let json = format!("{{\"v100\": {{\"{huge}\": {{\"null\": 1.0}}}}}}");
    let e = ThroughputTable::parse_gavel_json(&json, "big.json")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("big.json"), "{}", &e[..80]);
    assert!(e.len() <= MAX_ERROR_LEN, "{}", e.len());
    // 20,000 jobs: read to the end.
    let one = embedded::TRACE.lines().next().unwrap();
    let many = vec![one; 20_000].join("\n");
    let jobs = parse_trace(&many, "long.trace", &table, &cluster).unwrap();
    assert_eq!(jobs.len(), 20_000);
}
