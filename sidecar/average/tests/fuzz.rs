//! Bad input, fuzzed: `hadar average`'s safetensors header reader, fed arbitrary bytes,
//! valid files cut at every length, headers with hostile lengths, non-UTF-8 and oversized
//! JSON, and hostile tensor names. (The header module's own tests add random bytes, mutated
//! files and well-formed JSON with hostile numbers.)
//!
//! Asserted: no panic; every refusal is one line of bounded length; whatever is accepted
//! describes tensors that tile the file's data exactly. Case counts are explicit (`CASES`).

use hadar_average::header::{MAX_HEADER_BYTES, parse_header};
use proptest::prelude::*;

/// Cases per property.
const CASES: u32 = 2000;
/// The longest error the reader may give.
const MAX_ERROR_LEN: usize = 400;

fn file(json: &[u8], data_len: usize) -> Vec<u8> {
    let mut v = (json.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(json);
    v.extend(std::iter::repeat_n(0u8, data_len));
    v
}

const VALID: &str = r#"{"__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"n":{"dtype":"I64","shape":[],"data_offsets":[32,40]}}"#;

fn check(bytes: &[u8], file_len: u64) -> Result<(), TestCaseError> {
    match parse_header(bytes, file_len) {
        Ok(h) => {
            let mut end = 0;
            for t in &h.tensors {
                prop_assert_eq!(t.begin, end);
                prop_assert!(t.end >= t.begin);
                end = t.end;
            }
            prop_assert_eq!(h.data_start() + end, file_len);
        }
        Err(e) => {
            let m = e.to_string();
            prop_assert!(!m.is_empty() && !m.contains(['\n', '\r']), "{:?}", m);
            prop_assert!(
                m.chars().count() <= MAX_ERROR_LEN,
                "error of {} chars",
                m.chars().count()
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A valid file cut anywhere (a copy killed mid-write), read with its true length or
    /// with the length the directory claimed before the cut.
    #[test]
    fn truncated_files(cut in 0usize..300) {
        let f = file(VALID.as_bytes(), 40);
        let cut = cut % (f.len() + 1);
        check(&f[..cut], cut as u64)?;
        check(&f[..cut], f.len() as u64)?;
    }

    /// Any declared header length, including huge ones and ones past the end of the file.
    #[test]
    fn hostile_header_lengths(len in prop_oneof![any::<u64>(), 0u64..400, Just(MAX_HEADER_BYTES), Just(MAX_HEADER_BYTES + 1)], tail in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut f = len.to_le_bytes().to_vec();
        f.extend(&tail);
        check(&f, f.len() as u64)?;
    }

    /// Arbitrary bytes as the header JSON (mostly not UTF-8), with a correct length.
    #[test]
    fn arbitrary_header_bytes(json in proptest::collection::vec(any::<u8>(), 0..400), data in 0usize..64) {
        let f = file(&json, data);
        check(&f, f.len() as u64)?;
    }

    /// Valid JSON with hostile names and dtypes: long, control characters, non-ASCII.
    #[test]
    fn hostile_names(name in "\\PC{0,300}", dtype in "[A-Z0-9\\x00-\\x1f]{0,300}") {
        let json = serde_json::json!({
            name.clone(): {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]},
        });
        let f = file(json.to_string().as_bytes(), 4);
        check(&f, f.len() as u64)?;
        let dup = format!(
            r#"{{"{n}":{{"dtype":"F32","shape":[1],"data_offsets":[0,4]}},"{n}":{{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}}}"#,
            n = name.replace(['"', '\\'], "")
        );
        let f = file(dup.as_bytes(), 8);
        check(&f, f.len() as u64)?;
    }
}

/// An oversized header: the declared length is refused before anything is read, and a
/// header at the limit full of tensors is parsed to the end.
#[test]
fn oversized_headers() {
    let mut f = (MAX_HEADER_BYTES + 1).to_le_bytes().to_vec();
    f.extend(b"{}");
    let e = parse_header(&f, u64::MAX).unwrap_err().to_string();
    assert!(e.contains("exceeds"), "{e}");
    // 50,000 one-byte tensors.
    let mut json = String::from("{");
    for i in 0..50_000u64 {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&format!(
            r#""t{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
            i + 1
        ));
    }
    json.push('}');
    assert!((json.len() as u64) < MAX_HEADER_BYTES);
    let f = file(json.as_bytes(), 50_000);
    let h = parse_header(&f, f.len() as u64).unwrap();
    assert_eq!(h.tensors.len(), 50_000);
}
