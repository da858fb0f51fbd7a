//! The element types a safetensors file may declare, their sizes, and how each is averaged:
//! floating-point types are decoded to f64, combined, and rounded back once to the nearest
//! representable value (ties to even); integer, boolean, exponent-only and packed sub-byte
//! types are carried over exactly (see [`Treatment`]).

use half::{bf16, f16};

/// A safetensors dtype, named as the format spells it in the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// Boolean, one byte.
    Bool,
    /// 4-bit float E2M1 (packed two per byte).
    F4,
    /// 6-bit float E2M3 (packed).
    F6E2M3,
    /// 6-bit float E3M2 (packed).
    F6E3M2,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// 8-bit float, 5 exponent and 2 mantissa bits, with infinities (as f16's top byte).
    F8E5M2,
    /// 8-bit float, 4 exponent and 3 mantissa bits, finite only (`float8_e4m3fn`).
    F8E4M3,
    /// 8-bit exponent-only scale, 2^(e - 127) (microscaling block scales).
    F8E8M0,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE single precision.
    F32,
    /// Complex of two f32 (real, imaginary).
    C64,
    /// IEEE double precision.
    F64,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
}

/// How a dtype's tensors are consolidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Weighted mean of the values, rounded once back to the dtype.
    Averaged,
    /// Carried over exactly: integers, booleans, exponent-only scales and packed sub-byte
    /// floats have no meaningful weighted mean (a mean of two indices or two flags is
    /// neither), so they follow [`crate::IntegerPolicy`].
    Exact,
}

/// Every dtype, for iteration in tests and documentation.
pub const ALL_DTYPES: [Dtype; 20] = [
    Dtype::Bool,
    Dtype::F4,
    Dtype::F6E2M3,
    Dtype::F6E3M2,
    Dtype::U8,
    Dtype::I8,
    Dtype::F8E5M2,
    Dtype::F8E4M3,
    Dtype::F8E8M0,
    Dtype::I16,
    Dtype::U16,
    Dtype::F16,
    Dtype::BF16,
    Dtype::I32,
    Dtype::U32,
    Dtype::F32,
    Dtype::C64,
    Dtype::F64,
    Dtype::I64,
    Dtype::U64,
];

impl Dtype {
    /// Parses the header's spelling (`"F32"`, `"BF16"`, `"F8_E4M3"`, ...).
    pub fn parse(s: &str) -> Option<Dtype> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == s)
    }

    /// The header's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6E2M3 => "F6_E2M3",
            Dtype::F6E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::F8E8M0 => "F8_E8M0",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    /// Bits per element (sub-byte types are packed, so sizes are computed in bits).
    pub fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6E2M3 | Dtype::F6E3M2 => 6,
            Dtype::Bool | Dtype::U8 | Dtype::I8 | Dtype::F8E5M2 | Dtype::F8E4M3 | Dtype::F8E8M0 => {
                8
            }
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// How tensors of this dtype are consolidated.
    pub fn treatment(self) -> Treatment {
        match self {
            Dtype::F8E5M2
            | Dtype::F8E4M3
            | Dtype::F16
            | Dtype::BF16
            | Dtype::F32
            | Dtype::C64
            | Dtype::F64 => Treatment::Averaged,
            _ => Treatment::Exact,
        }
    }

    /// For averaged dtypes: bytes per scalar component (a C64 element is two f32 scalars).
    pub(crate) fn scalar_bytes(self) -> usize {
        match self {
            Dtype::F8E5M2 | Dtype::F8E4M3 => 1,
            Dtype::F16 | Dtype::BF16 => 2,
            Dtype::F32 | Dtype::C64 => 4,
            _ => 8,
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An 8-bit float layout with IEEE-style subnormals: mantissa bits and exponent bias.
#[derive(Clone, Copy, Debug)]
struct MiniFloat {
    mantissa_bits: u32,
    exponent_bits: u32,
    bias: i32,
    /// E5M2 reserves the top exponent for infinities and NaNs (IEEE); E4M3FN has no
    /// infinities and only the all-ones pattern is NaN.
    ieee_top: bool,
}

const E5M2: MiniFloat = MiniFloat {
    mantissa_bits: 2,
    exponent_bits: 5,
    bias: 15,
    ieee_top: true,
};
const E4M3FN: MiniFloat = MiniFloat {
    mantissa_bits: 3,
    exponent_bits: 4,
    bias: 7,
    ieee_top: false,
};

impl MiniFloat {
    fn decode(self, byte: u8) -> f64 {
        let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp_field = ((byte as u32) >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1);
        let mant = (byte as u32) & ((1 << self.mantissa_bits) - 1);
        let top = (1u32 << self.exponent_bits) - 1;
        if self.ieee_top && exp_field == top {
            return if mant == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        if !self.ieee_top && exp_field == top && mant == (1 << self.mantissa_bits) - 1 {
            return f64::NAN;
        }
        let m = mant as f64 / (1u32 << self.mantissa_bits) as f64;
        if exp_field == 0 {
            sign * m * 2f64.powi(1 - self.bias)
        } else {
            sign * (1.0 + m) * 2f64.powi(exp_field as i32 - self.bias)
        }
    }

    /// Rounds to the nearest representable value, ties to even; beyond the largest finite
    /// value gives infinity (E5M2) or NaN (E4M3FN, as PyTorch's cast does).
    fn encode(self, x: f64) -> u8 {
        let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
        let top = (1u32 << self.exponent_bits) - 1;
        let nan: u8 = if self.ieee_top {
            ((top << self.mantissa_bits) | (1 << (self.mantissa_bits - 1))) as u8
        } else {
            0x7f
        };
        let inf: u8 = if self.ieee_top {
            sign | (top << self.mantissa_bits) as u8
        } else {
            0x7f | sign
        };
        if x.is_nan() {
            return nan;
        }
        if x.is_infinite() {
            return inf;
        }
        let a = x.abs();
        if a == 0.0 {
            return sign;
        }
        let min_normal_exp = 1 - self.bias;
        let exp = f64_exponent(a).max(min_normal_exp);
        let ulp = 2f64.powi(exp - self.mantissa_bits as i32);
        // Exact: dividing and multiplying by a power of two loses nothing.
        let q = (a / ulp).round_ties_even() * ulp;
        if q == 0.0 {
            return sign;
        }
        let qe = f64_exponent(q);
        let (exp_field, mant) = if qe < min_normal_exp {
            (
                0u32,
                (q / 2f64.powi(min_normal_exp - self.mantissa_bits as i32)) as u32,
            )
        } else {
            let field = (qe + self.bias) as u32;
            let mant = ((q / 2f64.powi(qe) - 1.0) * (1u32 << self.mantissa_bits) as f64) as u32;
            (field, mant)
        };
        let max_field = if self.ieee_top { top - 1 } else { top };
        let overflow = exp_field > max_field
            || (!self.ieee_top && exp_field == top && mant == (1 << self.mantissa_bits) - 1);
        if overflow {
            return inf;
        }
        sign | ((exp_field << self.mantissa_bits) | mant) as u8
    }
}

/// floor(log2(a)) for a positive normal f64 (subnormal f64 inputs are far below every
/// 8-bit format's smallest value and are treated as 2^-1023).
fn f64_exponent(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// Decoding tables for the 8-bit floats, built once per averaging call.
pub(crate) struct Codec {
    e5m2: [f64; 256],
    e4m3: [f64; 256],
    /// Every f16 bit pattern's value: a table lookup beats converting element by element.
    f16: Vec<f32>,
}

impl Codec {
    pub(crate) fn new() -> Self {
        let mut e5m2 = [0.0; 256];
        let mut e4m3 = [0.0; 256];
        for b in 0..=255u8 {
            e5m2[b as usize] = E5M2.decode(b);
            e4m3[b as usize] = E4M3FN.decode(b);
        }
        let f16 = (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect();
        Codec { e5m2, e4m3, f16 }
    }

    /// Adds `weight * value` of every scalar in `bytes` (little-endian `dtype` scalars) to
    /// `acc`, one accumulator per scalar.
    pub(crate) fn accumulate(&self, dtype: Dtype, bytes: &[u8], weight: f64, acc: &mut [f64]) {
        match dtype {
            Dtype::F32 | Dtype::C64 => {
                for (a, c) in acc.iter_mut().zip(bytes.chunks_exact(4)) {
                    *a += weight * f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64;
                }
            }
            Dtype::F64 => {
                for (a, c) in acc.iter_mut().zip(bytes.chunks_exact(8)) {
                    *a += weight
                        * f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                }
            }
            Dtype::F16 => {
                for (a, c) in acc.iter_mut().zip(bytes.chunks_exact(2)) {
                    *a += weight * self.f16[u16::from_le_bytes([c[0], c[1]]) as usize] as f64;
                }
            }
            Dtype::BF16 => {
                for (a, c) in acc.iter_mut().zip(bytes.chunks_exact(2)) {
                    // bf16 is the top half of an f32: widening is a shift, exact for every value.
                    *a += weight
                        * f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) as f64;
                }
            }
            Dtype::F8E5M2 => {
                for (a, b) in acc.iter_mut().zip(bytes) {
                    *a += weight * self.e5m2[*b as usize];
                }
            }
            Dtype::F8E4M3 => {
                for (a, b) in acc.iter_mut().zip(bytes) {
                    *a += weight * self.e4m3[*b as usize];
                }
            }
            _ => unreachable_exact(dtype),
        }
    }

    /// Rounds each accumulator back to `dtype` (ties to even) and appends its bytes.
    pub(crate) fn encode(&self, dtype: Dtype, acc: &[f64], out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + acc.len() * dtype.scalar_bytes(), 0);
        let dst = &mut out[start..];
        match dtype {
            Dtype::F32 | Dtype::C64 => {
                for (d, a) in dst.chunks_exact_mut(4).zip(acc) {
                    d.copy_from_slice(&(*a as f32).to_le_bytes());
                }
            }
            Dtype::F64 => {
                for (d, a) in dst.chunks_exact_mut(8).zip(acc) {
                    d.copy_from_slice(&a.to_le_bytes());
                }
            }
            Dtype::F16 => {
                for (d, a) in dst.chunks_exact_mut(2).zip(acc) {
                    d.copy_from_slice(&f16_from_f64(*a).to_le_bytes());
                }
            }
            Dtype::BF16 => {
                for (d, a) in dst.chunks_exact_mut(2).zip(acc) {
                    d.copy_from_slice(&bf16_from_f64(*a).to_le_bytes());
                }
            }
            Dtype::F8E5M2 => dst
                .iter_mut()
                .zip(acc)
                .for_each(|(d, a)| *d = E5M2.encode(*a)),
            Dtype::F8E4M3 => dst
                .iter_mut()
                .zip(acc)
                .for_each(|(d, a)| *d = E4M3FN.encode(*a)),
            _ => unreachable_exact(dtype),
        }
    }
}

/// Exact dtypes never reach the float codec; the caller dispatches on [`Dtype::treatment`].
/// Reaching here is a bug in this crate, not bad input, and the call is a no-op.
fn unreachable_exact(dtype: Dtype) {
    debug_assert!(false, "{dtype} is not an averaged dtype");
}

/// Rounds a finite, non-zero |x| to the nearest value of a binary format with
/// `mantissa_bits` stored mantissa bits and smallest normal exponent `min_normal_exp`
/// (subnormals included), ties to even; no overflow handling.
fn round_to_grid(a: f64, mantissa_bits: i32, min_normal_exp: i32) -> f64 {
    let exp = f64_exponent(a).max(min_normal_exp);
    let ulp = 2f64.powi(exp - mantissa_bits);
    // Exact: scaling by a power of two loses nothing, and the rounded quotient is an integer.
    (a / ulp).round_ties_even() * ulp
}

/// f64 to bfloat16 with a single rounding (ties to even). Going through f32 first would
/// round twice, which for values just off a bf16 tie can pick the wrong neighbour.
pub(crate) fn bf16_from_f64(x: f64) -> bf16 {
    match round_bits(x, 7, 127) {
        Some(b) => bf16::from_bits(b),
        None => bf16_from_f64_general(x),
    }
}

/// f64 to IEEE half with a single rounding (ties to even). The `half` crate's own
/// conversion goes through f32 on x86 (F16C), which rounds twice.
pub(crate) fn f16_from_f64(x: f64) -> f16 {
    match round_bits(x, 10, 15) {
        Some(b) => f16::from_bits(b),
        None => f16_from_f64_general(x),
    }
}

/// The fast path of rounding an f64 to a 16-bit binary format with `mantissa_bits` and
/// exponent `bias`, for results in the format's normal range: round the f64's bits at the
/// target's last mantissa bit (ties to even), then rebias the exponent. A carry out of the
/// top mantissa bit moves to the next binade, and past the largest finite value lands
/// exactly on the infinity pattern. `None` for zeros, subnormals, NaN and huge values.
#[inline]
fn round_bits(x: f64, mantissa_bits: u32, bias: i32) -> Option<u16> {
    let bits = x.to_bits();
    let abs = bits & 0x7fff_ffff_ffff_ffff;
    let exp = (abs >> 52) as i32 - 1023;
    if exp < 1 - bias || exp > bias {
        return None;
    }
    let sign = ((bits >> 48) & 0x8000) as u16;
    let shift = 52 - mantissa_bits;
    let rounded = abs + ((1u64 << (shift - 1)) - 1) + ((abs >> shift) & 1);
    let rebias = ((1023 - bias) as u64) << mantissa_bits;
    Some(sign | ((rounded >> shift) - rebias) as u16)
}

/// [`bf16_from_f64`] for every input, by scaling to the target grid (slower).
fn bf16_from_f64_general(x: f64) -> bf16 {
    if x.is_nan() {
        return bf16::NAN;
    }
    let sign = ((x.to_bits() >> 48) & 0x8000) as u16;
    let a = x.abs();
    // At or beyond the largest bf16 plus half an ulp: infinity.
    if a >= bf16::MAX.to_f64() + 2f64.powi(127 - 8) {
        return bf16::from_bits(sign | 0x7f80);
    }
    if a == 0.0 {
        return bf16::from_bits(sign);
    }
    // The rounded value is exactly representable in bf16, hence in f32: these are exact.
    let q = round_to_grid(a, 7, -126) as f32;
    bf16::from_bits(sign | (q.to_bits() >> 16) as u16)
}

/// [`f16_from_f64`] for every input, by scaling to the target grid (slower).
fn f16_from_f64_general(x: f64) -> f16 {
    if x.is_nan() {
        return f16::NAN;
    }
    let sign = ((x.to_bits() >> 48) & 0x8000) as u16;
    let a = x.abs();
    if a >= f16::MAX.to_f64() + 2f64.powi(15 - 11) {
        return f16::from_bits(sign | 0x7c00);
    }
    if a == 0.0 {
        return f16::from_bits(sign);
    }
    // Exactly representable in f16, so converting it (via f32 or not) is exact.
    let q = round_to_grid(a, 10, -14);
    f16::from_bits(sign | f16::from_f64(q).to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(Dtype::parse(d.name()), Some(d));
        }
        assert_eq!(Dtype::parse("f32"), None);
        assert_eq!(Dtype::parse("F128"), None);
    }

    #[test]
    fn f16_double_rounding_is_avoided() {
        // 1 + 2^-11 + 2^-40 is just above the midpoint of 1 and 1 + 2^-10: the nearest f16
        // is 1 + 2^-10. Through f32 it first becomes exactly the midpoint 1 + 2^-11, which
        // then rounds to even, 1.0.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f16_from_f64(x).to_f64(), 1.0 + 2f64.powi(-10));
        assert_eq!(f16::from_f32(x as f32).to_f64(), 1.0);
        let y = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(bf16_from_f64(y).to_f64(), 1.0 + 2f64.powi(-7));
        assert_eq!(f16_from_f64(1e6).to_bits(), 0x7c00);
        assert_eq!(f16_from_f64(-65519.0).to_bits(), 0xfbff);
        assert_eq!(f16_from_f64(-65520.0).to_bits(), 0xfc00);
        assert_eq!(bf16_from_f64(-0.0).to_bits(), 0x8000);
    }

    #[test]
    fn sixteen_bit_decoding_matches_half_for_every_pattern() {
        let codec = Codec::new();
        for b in 0..=u16::MAX {
            let mut acc = [0.0f64; 1];
            codec.accumulate(Dtype::F16, &b.to_le_bytes(), 1.0, &mut acc);
            let want = f16::from_bits(b).to_f64();
            assert!(
                acc[0] == want || (acc[0].is_nan() && want.is_nan()),
                "f16 {b:#06x}"
            );
            let mut acc = [0.0f64; 1];
            codec.accumulate(Dtype::BF16, &b.to_le_bytes(), 1.0, &mut acc);
            let want = bf16::from_bits(b).to_f64();
            assert!(
                acc[0] == want || (acc[0].is_nan() && want.is_nan()),
                "bf16 {b:#06x}"
            );
        }
    }

    #[test]
    fn e5m2_matches_the_top_byte_of_f16() {
        // E5M2 is f16 with the low 8 mantissa bits cut: every E5M2 byte decodes to the f16
        // whose top byte it is.
        for b in 0..=255u8 {
            let via_f16 = f16::from_bits((b as u16) << 8).to_f64();
            let direct = E5M2.decode(b);
            assert!(
                direct == via_f16 || (direct.is_nan() && via_f16.is_nan()),
                "byte {b:#04x}"
            );
        }
    }

    #[test]
    fn e4m3fn_known_values() {
        assert_eq!(E4M3FN.decode(0x7e), 448.0);
        assert!(E4M3FN.decode(0x7f).is_nan());
        assert_eq!(E4M3FN.decode(0x01), 2f64.powi(-9));
        assert_eq!(E4M3FN.decode(0x38), 1.0);
        assert_eq!(E4M3FN.encode(1.0), 0x38);
        // 1 + 1/16 lies halfway between 1 and 1.125: ties go to the even mantissa (1.0).
        assert_eq!(E4M3FN.encode(1.0625), 0x38);
        // 1.125 + 1/16 is halfway between 1.125 (odd) and 1.25 (even).
        assert_eq!(E4M3FN.encode(1.1875), 0x3a);
        assert_eq!(E4M3FN.encode(1e6), 0x7f);
        assert_eq!(E5M2.encode(1e6), 0x7c);
        assert_eq!(E5M2.encode(-1e6), 0xfc);
    }

    #[test]
    fn every_8bit_value_encodes_to_itself() {
        for f in [E5M2, E4M3FN] {
            for b in 0..=255u8 {
                let v = f.decode(b);
                if v.is_nan() {
                    continue;
                }
                assert_eq!(f.encode(v), b, "{f:?} byte {b:#04x} value {v}");
            }
        }
    }

    proptest! {
        #[test]
        fn e5m2_rounding_agrees_with_f16_rounding_to_its_grid(x in -60000.0f64..60000.0) {
            // Rounding straight to E5M2 must give the E5M2 value nearest to x.
            let got = E5M2.decode(E5M2.encode(x));
            let mut best = f64::INFINITY;
            for b in 0..=255u8 {
                let v = E5M2.decode(b);
                if v.is_finite() { best = best.min((v - x).abs()); }
            }
            prop_assert_eq!((got - x).abs(), best);
        }

        #[test]
        fn bf16_single_rounding_is_nearest(x in -1e30f64..1e30) {
            let got = bf16_from_f64(x).to_f64();
            let b = bf16_from_f64(x).to_bits();
            // Neighbours one ulp either side are no closer.
            for n in [b.wrapping_add(1), b.wrapping_sub(1)] {
                let v = bf16::from_bits(n).to_f64();
                if v.is_finite() { prop_assert!((v - x).abs() >= (got - x).abs()); }
            }
        }

        #[test]
        fn f16_single_rounding_is_nearest(x in -65504.0f64..65504.0) {
            let b = f16_from_f64(x).to_bits();
            let got = f16::from_bits(b).to_f64();
            for n in [b.wrapping_add(1), b.wrapping_sub(1)] {
                let v = f16::from_bits(n).to_f64();
                if v.is_finite() { prop_assert!((v - x).abs() >= (got - x).abs()); }
            }
        }

        #[test]
        fn the_fast_paths_agree_with_the_general_rounding(bits in any::<u64>(), scale in -30i32..30) {
            // Random bit patterns cover every binade; scaled ones land mostly in range.
            let x = f64::from_bits(bits);
            let y = (f64::from_bits(bits & 0x800f_ffff_ffff_ffff | 0x3ff0_0000_0000_0000)) * 2f64.powi(scale);
            for v in [x, y] {
                prop_assume!(!v.is_nan());
                prop_assert_eq!(bf16_from_f64(v).to_bits(), bf16_from_f64_general(v).to_bits(), "bf16 {}", v);
                prop_assert_eq!(f16_from_f64(v).to_bits(), f16_from_f64_general(v).to_bits(), "f16 {}", v);
            }
        }

        #[test]
        fn f16_agrees_with_half_on_f32_inputs(x in any::<f32>()) {
            prop_assume!(!x.is_nan());
            prop_assert_eq!(f16_from_f64(x as f64).to_bits(), f16::from_f32(x).to_bits());
        }

        #[test]
        fn bf16_agrees_with_half_on_f32_inputs(x in any::<f32>()) {
            // From an f32 there is only one rounding, so ours and half's must agree.
            prop_assume!(!x.is_nan());
            prop_assert_eq!(bf16_from_f64(x as f64).to_bits(), bf16::from_f32(x).to_bits());
        }
    }
}
