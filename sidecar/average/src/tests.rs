//! Tests of averaging whole files: weighting, every dtype's rounding, mismatch errors and
//! atomic output.

use super::*;
use crate::write::{TensorData, write_safetensors};
use half::{bf16, f16};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn put(dir: &Path, name: &str, tensors: &[(&str, Dtype, Vec<u64>, Vec<u8>)]) -> PathBuf {
    let path = dir.join(name);
    let mut meta = BTreeMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    let data: Vec<TensorData> = tensors
        .iter()
        .map(|(n, d, s, b)| TensorData {
            name: n,
            dtype: *d,
            shape: s.clone(),
            bytes: b,
        })
        .collect();
    write_safetensors(&path, Some(&meta), &data).unwrap();
    path
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn tensor_bytes(path: &Path, name: &str) -> Vec<u8> {
    let c = Checkpoint::open(path).unwrap();
    let t = c.header().tensor(name).unwrap().clone();
    c.data(&t).to_vec()
}

fn run(inputs: &[(PathBuf, f64)], out: &Path) -> Result<Summary, AverageError> {
    average_files(inputs, out, &AverageOptions::default())
}

#[test]
fn weights_follow_steps() {
    let d = tempfile::tempdir().unwrap();
    let a = put(
        d.path(),
        "a.safetensors",
        &[("w", Dtype::F32, vec![2, 2], f32s(&[1.0, 2.0, 3.0, 4.0]))],
    );
    let b = put(
        d.path(),
        "b.safetensors",
        &[("w", Dtype::F32, vec![2, 2], f32s(&[5.0, 6.0, 7.0, 8.0]))],
    );
    let out = d.path().join("m.safetensors");
    let s = run(&[(a, 1200.0), (b, 800.0)], &out).unwrap();
    assert_eq!(s.weights, vec![0.6, 0.4]);
    // 0.6 * 1 + 0.4 * 5 = 2.6, and so on, each rounded once to f32.
    assert_eq!(tensor_bytes(&out, "w"), f32s(&[2.6, 3.6, 4.6, 5.6]));
    assert_eq!(s.tensors, 1);
    assert_eq!(s.bytes_read, 32);
}

#[test]
fn three_copies_and_a_copy_without_steps() {
    let d = tempfile::tempdir().unwrap();
    let mk = |n: &str, v: f32| {
        put(
            d.path(),
            n,
            &[("w", Dtype::F64, vec![1], (v as f64).to_le_bytes().to_vec())],
        )
    };
    let (a, b, c) = (mk("a", 1.0), mk("b", 10.0), mk("c", 1000.0));
    let out = d.path().join("m");
    // Steps 3, 1, 0: weights 0.75, 0.25, 0 (the idle copy does not move the model).
    run(
        &[(a.clone(), 3.0), (b.clone(), 1.0), (c.clone(), 0.0)],
        &out,
    )
    .unwrap();
    assert_eq!(
        f64::from_le_bytes(tensor_bytes(&out, "w").try_into().unwrap()),
        0.75 + 2.5
    );
    // No steps anywhere: equal weights.
    run(&[(a, 0.0), (b, 0.0), (c, 0.0)], &out).unwrap();
    assert!(
        (f64::from_le_bytes(tensor_bytes(&out, "w").try_into().unwrap()) - 337.0).abs() < 1e-12
    );
}

#[test]
fn f16_and_bf16_round_ties_to_even() {
    let d = tempfile::tempdir().unwrap();
    let h = |v: &[f64]| {
        v.iter()
            .flat_map(|x| f16::from_f64(*x).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let b = |v: &[f64]| {
        v.iter()
            .flat_map(|x| bf16::from_f64(*x).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let u = 2f64.powi(-10); // f16 ulp at 1
    let v = 2f64.powi(-7); // bf16 ulp at 1
    let a_path = put(
        d.path(),
        "a",
        &[
            ("h", Dtype::F16, vec![3], h(&[1.0, 1.0 + u, 3.0])),
            ("b", Dtype::BF16, vec![3], b(&[1.0, 1.0 + v, 3.0])),
        ],
    );
    let b_path = put(
        d.path(),
        "b",
        &[
            ("h", Dtype::F16, vec![3], h(&[1.0 + u, 1.0 + 2.0 * u, 4.0])),
            ("b", Dtype::BF16, vec![3], b(&[1.0 + v, 1.0 + 2.0 * v, 4.0])),
        ],
    );
    let out = d.path().join("m");
    run(&[(a_path, 1.0), (b_path, 1.0)], &out).unwrap();
    // Means: 1 + u/2 (a tie: goes to 1.0, even mantissa), 1 + 1.5u (a tie: goes to 1 + 2u,
    // even), 3.5 (exact).
    assert_eq!(tensor_bytes(&out, "h"), h(&[1.0, 1.0 + 2.0 * u, 3.5]));
    assert_eq!(tensor_bytes(&out, "b"), b(&[1.0, 1.0 + 2.0 * v, 3.5]));
}

#[test]
fn f8_formats_average_and_round_ties_to_even() {
    let d = tempfile::tempdir().unwrap();
    // E4M3FN: 1.0 = 0x38, 1.125 = 0x39, 1.25 = 0x3a. E5M2: 1.0 = 0x3c, 1.25 = 0x3d, 1.5 = 0x3e.
    let a = put(
        d.path(),
        "a",
        &[
            ("e4", Dtype::F8E4M3, vec![2], vec![0x38, 0x39]),
            ("e5", Dtype::F8E5M2, vec![2], vec![0x3c, 0x3d]),
        ],
    );
    let b = put(
        d.path(),
        "b",
        &[
            ("e4", Dtype::F8E4M3, vec![2], vec![0x39, 0x3a]),
            ("e5", Dtype::F8E5M2, vec![2], vec![0x3d, 0x3e]),
        ],
    );
    let out = d.path().join("m");
    run(&[(a, 5.0), (b, 5.0)], &out).unwrap();
    // Means 1.0625 (tie -> 1.0), 1.1875 (tie -> 1.25); 1.125 (tie -> 1.0), 1.375 (tie -> 1.5).
    assert_eq!(tensor_bytes(&out, "e4"), vec![0x38, 0x3a]);
    assert_eq!(tensor_bytes(&out, "e5"), vec![0x3c, 0x3e]);
}

#[test]
fn complex_numbers_average_componentwise() {
    let d = tempfile::tempdir().unwrap();
    let a = put(
        d.path(),
        "a",
        &[("c", Dtype::C64, vec![1], f32s(&[1.0, -2.0]))],
    );
    let b = put(
        d.path(),
        "b",
        &[("c", Dtype::C64, vec![1], f32s(&[3.0, 6.0]))],
    );
    let out = d.path().join("m");
    run(&[(a, 1.0), (b, 3.0)], &out).unwrap();
    assert_eq!(tensor_bytes(&out, "c"), f32s(&[2.5, 4.0]));
}

#[test]
fn exact_dtypes_must_match_unless_first_is_asked_for() {
    let d = tempfile::tempdir().unwrap();
    let same = [
        (
            "idx",
            Dtype::I64,
            vec![2],
            [7i64, -1]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        ("mask", Dtype::Bool, vec![3], vec![1, 0, 1]),
        ("packed", Dtype::F4, vec![4], vec![0x12, 0x34]),
        ("scale", Dtype::F8E8M0, vec![1], vec![127]),
    ];
    let a = put(
        d.path(),
        "a",
        &[
            same[0].clone(),
            same[1].clone(),
            same[2].clone(),
            same[3].clone(),
            ("n", Dtype::I32, vec![], 10i32.to_le_bytes().to_vec()),
        ],
    );
    let b = put(
        d.path(),
        "b",
        &[
            same[0].clone(),
            same[1].clone(),
            same[2].clone(),
            same[3].clone(),
            ("n", Dtype::I32, vec![], 30i32.to_le_bytes().to_vec()),
        ],
    );
    let out = d.path().join("m");
    let err = run(&[(a.clone(), 1.0), (b.clone(), 1.0)], &out).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, AverageError::ExactTensorDiffers { ref tensor, byte: 0, .. } if tensor == "n"),
        "{msg}"
    );
    assert!(
        msg.contains(&a.display().to_string()) && msg.contains(&b.display().to_string()),
        "{msg}"
    );
    assert!(!out.exists());

    let opts = AverageOptions {
        integers: IntegerPolicy::First,
        ..AverageOptions::default()
    };
    let s = average_files(&[(b.clone(), 1.0), (a.clone(), 1.0)], &out, &opts).unwrap();
    assert_eq!(s.averaged, 0);
    assert_eq!(tensor_bytes(&out, "n"), 30i32.to_le_bytes().to_vec());
    for (name, _, _, bytes) in &same {
        assert_eq!(&tensor_bytes(&out, name), bytes, "{name}");
    }
}

#[test]
fn mismatched_tensors_are_refused_naming_tensor_and_files() {
    let d = tempfile::tempdir().unwrap();
    let a = put(
        d.path(),
        "a",
        &[
            ("w", Dtype::F32, vec![2], f32s(&[1.0, 2.0])),
            ("v", Dtype::F32, vec![1], f32s(&[1.0])),
        ],
    );
    let shape = put(
        d.path(),
        "shape",
        &[
            ("w", Dtype::F32, vec![1, 2], f32s(&[1.0, 2.0])),
            ("v", Dtype::F32, vec![1], f32s(&[1.0])),
        ],
    );
    let dtype = put(
        d.path(),
        "dtype",
        &[
            ("w", Dtype::I32, vec![2], vec![0; 8]),
            ("v", Dtype::F32, vec![1], f32s(&[1.0])),
        ],
    );
    let missing = put(
        d.path(),
        "missing",
        &[("w", Dtype::F32, vec![2], f32s(&[1.0, 2.0]))],
    );
    let extra = put(
        d.path(),
        "extra",
        &[
            ("w", Dtype::F32, vec![2], f32s(&[1.0, 2.0])),
            ("v", Dtype::F32, vec![1], f32s(&[1.0])),
            ("u", Dtype::F32, vec![1], f32s(&[1.0])),
        ],
    );
    let out = d.path().join("m");
    let cases: [(&PathBuf, &str, &str); 4] = [
        (&shape, "w", "shape"),
        (&dtype, "w", "F32"),
        (&missing, "v", "not in"),
        (&extra, "u", "not in"),
    ];
    for (other, tensor, word) in cases {
        let msg = run(&[(a.clone(), 1.0), (other.clone(), 1.0)], &out)
            .unwrap_err()
            .to_string();
        assert!(msg.contains(&format!("`{tensor}`")), "{msg}");
        assert!(msg.contains(word), "{msg}");
        assert!(
            msg.contains(&a.display().to_string()) && msg.contains(&other.display().to_string()),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
    }
}

#[test]
fn a_bad_input_leaves_the_output_untouched() {
    let d = tempfile::tempdir().unwrap();
    let a = put(
        d.path(),
        "a",
        &[("w", Dtype::F32, vec![2], f32s(&[1.0, 2.0]))],
    );
    let corrupt = d.path().join("corrupt");
    std::fs::write(&corrupt, b"\xff\xff\xff\xff\xff\xff\xff\x7fgarbage").unwrap();
    let exact_a = put(d.path(), "ea", &[("n", Dtype::I8, vec![1], vec![1])]);
    let exact_b = put(d.path(), "eb", &[("n", Dtype::I8, vec![1], vec![2])]);
    let out = d.path().join("m.safetensors");
    std::fs::write(&out, b"previous round").unwrap();
    let before: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();

    assert!(matches!(
        run(&[(a.clone(), 1.0), (corrupt, 1.0)], &out),
        Err(AverageError::Header { .. })
    ));
    assert!(matches!(
        run(&[(a.clone(), 1.0), (d.path().join("absent"), 1.0)], &out),
        Err(AverageError::Io { .. })
    ));
    // This one fails after the output has started: the temporary file must go away too.
    assert!(matches!(
        run(&[(exact_a, 1.0), (exact_b, 1.0)], &out),
        Err(AverageError::ExactTensorDiffers { .. })
    ));
    assert!(matches!(
        run(&[(a, f64::NAN)], &out),
        Err(AverageError::BadWeight { .. })
    ));

    assert_eq!(std::fs::read(&out).unwrap(), b"previous round");
    let after: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        before.len(),
        after.len(),
        "a temporary file was left behind: {after:?}"
    );
}

#[test]
fn the_output_keeps_the_first_header_and_metadata() {
    let d = tempfile::tempdir().unwrap();
    let a = put(
        d.path(),
        "a",
        &[
            ("x", Dtype::F32, vec![3], f32s(&[1.0, 2.0, 3.0])),
            ("y", Dtype::BF16, vec![0], vec![]),
        ],
    );
    let b = put(
        d.path(),
        "b",
        &[
            ("y", Dtype::BF16, vec![0], vec![]),
            ("x", Dtype::F32, vec![3], f32s(&[3.0, 2.0, 1.0])),
        ],
    );
    let out = d.path().join("m");
    run(&[(a.clone(), 1.0), (b, 1.0)], &out).unwrap();
    let ca = Checkpoint::open(&a).unwrap();
    let co = Checkpoint::open(&out).unwrap();
    assert_eq!(ca.header(), co.header());
    assert_eq!(co.header().metadata.as_ref().unwrap()["format"], "pt");
    assert_eq!(tensor_bytes(&out, "x"), f32s(&[2.0, 2.0, 2.0]));
}

fn pseudo_random(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0
        })
        .collect()
}

#[test]
fn identical_copies_come_back_unchanged_in_every_averaged_dtype() {
    let d = tempfile::tempdir().unwrap();
    let v = pseudo_random(7, 1000);
    let tensors = vec![
        (
            "f32",
            Dtype::F32,
            vec![1000],
            v.iter()
                .flat_map(|x| (*x as f32).to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        (
            "f16",
            Dtype::F16,
            vec![1000],
            v.iter()
                .flat_map(|x| f16::from_f64(*x).to_le_bytes())
                .collect(),
        ),
        (
            "bf16",
            Dtype::BF16,
            vec![1000],
            v.iter()
                .flat_map(|x| bf16::from_f64(*x).to_le_bytes())
                .collect(),
        ),
        (
            "e4",
            Dtype::F8E4M3,
            vec![256],
            (0..=255u8)
                .filter(|b| *b & 0x7f != 0x7f)
                .chain([0, 0])
                .collect(),
        ),
        (
            "e5",
            Dtype::F8E5M2,
            vec![256],
            (0..=255u8)
                .map(|b| if b & 0x7c == 0x7c { 0 } else { b })
                .collect(),
        ),
    ];
    let a = put(d.path(), "a", &tensors);
    let b = put(d.path(), "b", &tensors);
    let c = put(d.path(), "c", &tensors);
    let out = d.path().join("m");
    run(&[(a, 3.0), (b, 5.0), (c, 11.0)], &out).unwrap();
    for (name, _, _, bytes) in &tensors {
        assert_eq!(&tensor_bytes(&out, name), bytes, "{name}");
    }
}

#[test]
fn chunking_does_not_change_the_result() {
    let d = tempfile::tempdir().unwrap();
    let va = pseudo_random(1, 1001);
    let vb = pseudo_random(2, 1001);
    let enc = |v: &[f64]| {
        v.iter()
            .flat_map(|x| bf16::from_f64(*x).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let a = put(
        d.path(),
        "a",
        &[("t", Dtype::BF16, vec![7, 11, 13], enc(&va))],
    );
    let b = put(
        d.path(),
        "b",
        &[("t", Dtype::BF16, vec![7, 11, 13], enc(&vb))],
    );
    let (o1, o2) = (d.path().join("o1"), d.path().join("o2"));
    run(&[(a.clone(), 2.0), (b.clone(), 1.0)], &o1).unwrap();
    average_files(
        &[(a, 2.0), (b, 1.0)],
        &o2,
        &AverageOptions {
            chunk_scalars: 3,
            ..AverageOptions::default()
        },
    )
    .unwrap();
    assert_eq!(std::fs::read(&o1).unwrap(), std::fs::read(&o2).unwrap());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn f32_average_is_the_rounded_weighted_mean(
        pairs in prop::collection::vec((-1e6f32..1e6, -1e6f32..1e6), 1..50),
        sa in 0u32..5000,
        sb in 1u32..5000,
    ) {
        let d = tempfile::tempdir().unwrap();
        let xa: Vec<f32> = pairs.iter().map(|p| p.0).collect();
        let xb: Vec<f32> = pairs.iter().map(|p| p.1).collect();
        let n = xa.len() as u64;
        let a = put(d.path(), "a", &[("t", Dtype::F32, vec![n], f32s(&xa))]);
        let b = put(d.path(), "b", &[("t", Dtype::F32, vec![n], f32s(&xb))]);
        let out = d.path().join("m");
        run(&[(a, sa as f64), (b, sb as f64)], &out).unwrap();
        let (wa, wb) = (sa as f64 / (sa + sb) as f64, sb as f64 / (sa + sb) as f64);
        let want: Vec<f32> = xa.iter().zip(&xb).map(|(x, y)| (wa * *x as f64 + wb * *y as f64) as f32).collect();
        prop_assert_eq!(tensor_bytes(&out, "t"), f32s(&want));
    }
}

/// The outer optimizer's tests: handmade tensors in F32, F16 and BF16 with an I64 counter;
/// expected values are computed here from the formula in f64 and rounded once.
mod outer_step {
    use super::*;
    use crate::dtype::{bf16_from_f64, f16_from_f64};
    use crate::outer::{OuterFiles, OuterOptimizer};

    const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::BF16];

    /// Values rounded to `dtype` (the handmade inputs must be representable).
    fn enc(dtype: Dtype, v: &[f64]) -> Vec<u8> {
        v.iter()
            .flat_map(|x| match dtype {
                Dtype::F32 => (*x as f32).to_le_bytes().to_vec(),
                Dtype::F16 => f16_from_f64(*x).to_le_bytes().to_vec(),
                Dtype::BF16 => bf16_from_f64(*x).to_le_bytes().to_vec(),
                _ => unreachable!(),
            })
            .collect()
    }

    fn dec(dtype: Dtype, b: &[u8]) -> Vec<f64> {
        match dtype {
            Dtype::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            Dtype::F16 => b
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes(c.try_into().unwrap()).to_f64())
                .collect(),
            Dtype::BF16 => b
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes(c.try_into().unwrap()).to_f64())
                .collect(),
            _ => unreachable!(),
        }
    }

    /// A model with one float tensor `w` of `dtype` and an I64 step counter `n`.
    fn model(dir: &Path, name: &str, dtype: Dtype, w: &[f64], n: i64) -> PathBuf {
        put(
            dir,
            name,
            &[
                ("w", dtype, vec![2, 2], enc(dtype, w)),
                ("n", Dtype::I64, vec![], n.to_le_bytes().to_vec()),
            ],
        )
    }

    fn values(dtype: Dtype, path: &Path) -> Vec<f64> {
        dec(dtype, &tensor_bytes(path, "w"))
    }

    /// Steps 120, 80, 40: weights 1/2, 1/3, 1/6, as three copies of three speeds.
    fn copies(dir: &Path, dtype: Dtype, round: u32) -> Vec<(PathBuf, f64)> {
        let r = round as f64;
        [
            ([1.5, -2.25, 0.375, 3.0], 120.0),
            ([1.25, -1.5, 0.5, 2.5], 80.0),
            ([0.75, -2.0, 0.625, 3.25], 40.0),
        ]
        .iter()
        .enumerate()
        .map(|(k, (w, steps))| {
            let w: Vec<f64> = w.iter().map(|x| x + 0.125 * r).collect();
            (model(dir, &format!("r{round}-c{k}"), dtype, &w, 7), *steps)
        })
        .collect()
    }

    /// The copies' mean as `average` computes it: weights normalised, summed from -0.0.
    fn mean(dtype: Dtype, inputs: &[(PathBuf, f64)]) -> Vec<f64> {
        let total: f64 = inputs.iter().map(|(_, s)| s).sum();
        let mut m = vec![-0.0; 4];
        for (p, s) in inputs {
            for (a, x) in m.iter_mut().zip(values(dtype, p)) {
                *a += (s / total) * x;
            }
        }
        m
    }

    fn round_to(dtype: Dtype, v: &[f64]) -> Vec<f64> {
        dec(dtype, &enc(dtype, v))
    }

    fn step(
        inputs: &[(PathBuf, f64)],
        out: &Path,
        opt: OuterOptimizer,
        files: &OuterFiles,
    ) -> Result<Summary, AverageError> {
        consolidate(inputs, out, &AverageOptions::default(), Some((&opt, files)))
    }

    fn files(start: &Path, from: Option<&Path>, to: Option<&Path>) -> OuterFiles {
        OuterFiles {
            start: start.to_path_buf(),
            momentum_from: from.map(Path::to_path_buf),
            momentum_out: to.map(Path::to_path_buf),
        }
    }

    const START: [f64; 4] = [1.0, -2.0, 0.5, 3.0];

    #[test]
    fn lr_1_mu_0_equals_the_plain_mean_bit_for_bit() {
        for dtype in DTYPES {
            let d = tempfile::tempdir().unwrap();
            let s = model(d.path(), "s", dtype, &START, 7);
            let inputs = copies(d.path(), dtype, 0);
            let (plain, outer) = (d.path().join("plain"), d.path().join("outer"));
            run(&inputs, &plain).unwrap();
            let v = d.path().join("v");
            step(
                &inputs,
                &outer,
                OuterOptimizer::MEAN,
                &files(&s, None, Some(&v)),
            )
            .unwrap();
            assert_eq!(
                std::fs::read(&plain).unwrap(),
                std::fs::read(&outer).unwrap(),
                "{dtype}"
            );
            // Without a state file too (momentum 0 keeps none).
            step(
                &inputs,
                &outer,
                OuterOptimizer::MEAN,
                &files(&s, None, None),
            )
            .unwrap();
            assert_eq!(
                std::fs::read(&plain).unwrap(),
                std::fs::read(&outer).unwrap()
            );
        }
    }

    #[test]
    fn lr_0_7_mu_0_moves_seven_tenths_of_the_way_to_the_mean() {
        for dtype in DTYPES {
            let d = tempfile::tempdir().unwrap();
            let s = model(d.path(), "s", dtype, &START, 7);
            let inputs = copies(d.path(), dtype, 0);
            let out = d.path().join("m");
            let opt = OuterOptimizer {
                lr: 0.7,
                momentum: 0.0,
            };
            step(&inputs, &out, opt, &files(&s, None, None)).unwrap();
            let expected: Vec<f64> = mean(dtype, &inputs)
                .iter()
                .zip(START)
                .map(|(m, s)| s + 0.7 * (m - s))
                .collect();
            assert_eq!(values(dtype, &out), round_to(dtype, &expected), "{dtype}");
            // And it is not the mean: the test would pass for a no-op otherwise.
            assert_ne!(values(dtype, &out), round_to(dtype, &mean(dtype, &inputs)));
            // Integer tensors are carried over as in plain averaging.
            assert_eq!(tensor_bytes(&out, "n"), 7i64.to_le_bytes());
        }
    }

    #[test]
    fn two_rounds_with_momentum_0_9_follow_the_formula() {
        for dtype in DTYPES {
            let d = tempfile::tempdir().unwrap();
            let opt = OuterOptimizer {
                lr: 0.7,
                momentum: 0.9,
            };
            let s0 = model(d.path(), "s0", dtype, &START, 7);
            let r0 = copies(d.path(), dtype, 0);
            let (m0, v0) = (d.path().join("m0"), d.path().join("v0"));
            step(&r0, &m0, opt, &files(&s0, None, Some(&v0))).unwrap();
            // Round 0: velocity = delta (zero before), M = S + LR (MU delta + delta).
            let delta0: Vec<f64> = mean(dtype, &r0)
                .iter()
                .zip(START)
                .map(|(m, s)| m - s)
                .collect();
            let expect_m0: Vec<f64> = START
                .iter()
                .zip(&delta0)
                .map(|(s, dl)| s + 0.7 * (0.9 * dl + dl))
                .collect();
            assert_eq!(
                values(dtype, &m0),
                round_to(dtype, &expect_m0),
                "{dtype} round 0"
            );
            // The velocity is kept in F32, one tensor per float tensor, none for integers.
            let vc = Checkpoint::open(&v0).unwrap();
            assert_eq!(vc.header().tensors.len(), 1);
            assert_eq!(vc.header().tensor("w").unwrap().dtype, Dtype::F32);
            let stored_v0 = dec(Dtype::F32, &tensor_bytes(&v0, "w"));
            assert_eq!(stored_v0, round_to(Dtype::F32, &delta0));

            // Round 1 starts from M0 and reads round 0's velocity.
            let r1 = copies(d.path(), dtype, 1);
            let (m1, v1) = (d.path().join("m1"), d.path().join("v1"));
            step(&r1, &m1, opt, &files(&m0, Some(&v0), Some(&v1))).unwrap();
            let s1 = values(dtype, &m0);
            let delta1: Vec<f64> = mean(dtype, &r1)
                .iter()
                .zip(&s1)
                .map(|(m, s)| m - s)
                .collect();
            let vel1: Vec<f64> = stored_v0
                .iter()
                .zip(&delta1)
                .map(|(v, dl)| 0.9 * v + dl)
                .collect();
            let expect_m1: Vec<f64> = s1
                .iter()
                .zip(&vel1)
                .zip(&delta1)
                .map(|((s, v), dl)| s + 0.7 * (0.9 * v + dl))
                .collect();
            assert_eq!(
                values(dtype, &m1),
                round_to(dtype, &expect_m1),
                "{dtype} round 1"
            );
            assert_eq!(
                dec(Dtype::F32, &tensor_bytes(&v1, "w")),
                round_to(Dtype::F32, &vel1)
            );
            // Momentum made a difference: without it round 1 lands elsewhere.
            let no_mom = d.path().join("nm");
            step(
                &r1,
                &no_mom,
                opt,
                &files(&m0, None, Some(&d.path().join("nv"))),
            )
            .unwrap();
            assert_ne!(values(dtype, &m1), values(dtype, &no_mom));

            // Repeating round 1 (as after a crash) reads the same state and gives the same
            // files: the momentum is applied once.
            let (m1_bytes, v1_bytes) = (std::fs::read(&m1).unwrap(), std::fs::read(&v1).unwrap());
            step(&r1, &m1, opt, &files(&m0, Some(&v0), Some(&v1))).unwrap();
            assert_eq!(std::fs::read(&m1).unwrap(), m1_bytes);
            assert_eq!(std::fs::read(&v1).unwrap(), v1_bytes);
        }
    }

    /// `e`'s message, checked to be one line.
    fn one_line(e: AverageError) -> String {
        let m = e.to_string();
        assert!(!m.contains('\n'), "{m}");
        m
    }

    #[test]
    fn bad_outer_inputs_are_refused_naming_what_and_where() {
        let d = tempfile::tempdir().unwrap();
        let inputs = copies(d.path(), Dtype::F32, 0);
        let out = d.path().join("m");
        let opt = OuterOptimizer {
            lr: 0.7,
            momentum: 0.9,
        };
        // A start of another shape.
        let odd = put(
            d.path(),
            "odd",
            &[
                ("w", Dtype::F32, vec![4], f32s(&[1.0, 2.0, 3.0, 4.0])),
                ("n", Dtype::I64, vec![], 7i64.to_le_bytes().to_vec()),
            ],
        );
        let m = one_line(
            step(
                &inputs,
                &out,
                opt,
                &files(&odd, None, Some(&d.path().join("v"))),
            )
            .unwrap_err(),
        );
        assert!(
            m.contains("`w`") && m.contains("shape") && m.contains(&odd.display().to_string()),
            "{m}"
        );
        // A momentum file of another model (another tensor), or not a momentum file at all.
        let s = model(d.path(), "s", Dtype::F32, &START, 7);
        let v = d.path().join("v");
        step(&inputs, &out, opt, &files(&s, None, Some(&v))).unwrap();
        let other_model = put(
            d.path(),
            "om",
            &[
                ("u", Dtype::F32, vec![2, 2], f32s(&[1.0; 4])),
                ("n", Dtype::I64, vec![], 7i64.to_le_bytes().to_vec()),
            ],
        );
        let ov = d.path().join("ov");
        step(
            &[(other_model.clone(), 1.0)],
            &d.path().join("om-out"),
            opt,
            &files(&other_model, None, Some(&ov)),
        )
        .unwrap();
        let m = one_line(
            step(
                &inputs,
                &out,
                opt,
                &files(&s, Some(&ov), Some(&d.path().join("v2"))),
            )
            .unwrap_err(),
        );
        assert!(
            m.contains(&ov.display().to_string())
                && m.contains("`w`")
                && m.contains("another model"),
            "{m}"
        );
        let m = one_line(
            step(
                &inputs,
                &out,
                opt,
                &files(&s, Some(&s), Some(&d.path().join("v2"))),
            )
            .unwrap_err(),
        );
        assert!(
            m.contains("not a momentum-state file") && m.contains(&s.display().to_string()),
            "{m}"
        );
        // Momentum with nowhere to keep it, and parameters out of range.
        let m = one_line(step(&inputs, &out, opt, &files(&s, None, None)).unwrap_err());
        assert!(m.contains("--momentum-state"), "{m}");
        let m = one_line(
            step(
                &inputs,
                &out,
                OuterOptimizer {
                    lr: -1.0,
                    momentum: 0.0,
                },
                &files(&s, None, None),
            )
            .unwrap_err(),
        );
        assert!(m.contains("outer learning rate -1"), "{m}");
        // Nothing was written by the refused calls.
        assert!(!d.path().join("v2").exists());
    }
}
