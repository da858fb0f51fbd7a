//! Reading and strictly validating a safetensors header.
//!
//! The format: 8 bytes little-endian header length N, then N bytes of JSON (an object whose
//! keys are tensor names, each `{"dtype", "shape", "data_offsets": [begin, end]}`, plus an
//! optional `"__metadata__"` map of strings), then the data. Offsets are relative to the end
//! of the header. A checkpoint comes from another program, so every claim in the header is
//! checked before it is used: lengths are bounded, arithmetic is checked, and the tensors
//! must tile the data exactly (no gaps, no overlaps, nothing beyond the file).

use crate::dtype::Dtype;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// The largest header accepted, in bytes (as the reference implementation). Bounds the
/// memory spent parsing a hostile header.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The most dimensions a tensor may have; bounds each shape's allocation.
pub const MAX_RANK: usize = 64;

/// A name from the header as an error message shows it: at most 64 characters (then
/// `...`), control characters escaped, so that a hostile file cannot flood or split the
/// message.
pub(crate) fn shown(name: &str) -> String {
    hadar_request::excerpt_of(name, 64)
}

/// What is wrong with a header.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than 8 bytes.
    #[error("file is {0} bytes, shorter than the 8-byte header length")]
    TooShort(u64),
    /// The declared header length exceeds the bound.
    #[error("header length {0} exceeds the {MAX_HEADER_BYTES}-byte limit")]
    HeaderTooLong(u64),
    /// The declared header runs past the end of the file.
    #[error("header length {header} runs past the end of the {file}-byte file")]
    HeaderBeyondFile {
        /// Declared header length.
        header: u64,
        /// File length.
        file: u64,
    },
    /// The header is not valid JSON of the expected form.
    #[error("header JSON: {0}")]
    Json(String),
    /// A tensor name appears twice.
    #[error("tensor `{}` appears twice in the header", shown(.0))]
    DuplicateTensor(String),
    /// An unknown dtype.
    #[error("tensor `{}`: unknown dtype `{}`", shown(.tensor), shown(.dtype))]
    UnknownDtype {
        /// The tensor.
        tensor: String,
        /// What the header said.
        dtype: String,
    },
    /// begin > end.
    #[error("tensor `{}`: data_offsets begin after they end", shown(.0))]
    ReversedOffsets(String),
    /// Element count times element size overflows or is not whole bytes.
    #[error(
        "tensor `{}`: shape gives a size that overflows or is not a whole number of bytes",
        shown(.0)
    )]
    SizeOverflow(String),
    /// The byte range does not match shape and dtype.
    #[error(
        "tensor `{}`: shape and dtype give {expected} bytes but data_offsets span {actual}",
        shown(.tensor)
    )]
    SizeMismatch {
        /// The tensor.
        tensor: String,
        /// product(shape) x dtype size.
        expected: u64,
        /// end - begin.
        actual: u64,
    },
    /// Tensors overlap or leave a gap.
    #[error(
        "tensor `{}`: data starts at byte {begin} but the previous tensor ends at {expected} (tensors must be contiguous, without overlap)",
        shown(.tensor)
    )]
    NotContiguous {
        /// The tensor.
        tensor: String,
        /// Its begin offset.
        begin: u64,
        /// Where the previous tensor ended.
        expected: u64,
    },
    /// The tensors do not cover the data section exactly.
    #[error("tensors cover {covered} data bytes but the file holds {actual} after the header")]
    DataLength {
        /// End of the last tensor.
        covered: u64,
        /// Data bytes in the file.
        actual: u64,
    },
}

/// One tensor's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Byte range within the data section.
    pub begin: u64,
    /// End of the byte range (exclusive).
    pub end: u64,
}

impl TensorInfo {
    /// Bytes of data.
    pub fn len(&self) -> u64 {
        self.end - self.begin
    }

    /// True when the tensor holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.end == self.begin
    }
}

/// A validated header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Length of the JSON part in bytes.
    pub json_len: u64,
    /// The `__metadata__` map, if any.
    pub metadata: Option<BTreeMap<String, String>>,
    /// Tensors in data order (sorted by begin offset).
    pub tensors: Vec<TensorInfo>,
}

impl Header {
    /// Byte position where the data section starts in the file.
    pub fn data_start(&self) -> u64 {
        8 + self.json_len
    }

    /// Finds a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Parses and validates the header of a file of `file_len` bytes whose first bytes are
/// `prefix` (at least the first 8 + header-length bytes, when the file has them).
pub fn parse_header(prefix: &[u8], file_len: u64) -> Result<Header, HeaderError> {
    if file_len < 8 || prefix.len() < 8 {
        return Err(HeaderError::TooShort(file_len.min(prefix.len() as u64)));
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&prefix[..8]);
    let json_len = u64::from_le_bytes(len_bytes);
    if json_len > MAX_HEADER_BYTES {
        return Err(HeaderError::HeaderTooLong(json_len));
    }
    let header_end = 8 + json_len; // cannot overflow: json_len is bounded
    if header_end > file_len || header_end > prefix.len() as u64 {
        return Err(HeaderError::HeaderBeyondFile {
            header: json_len,
            file: file_len,
        });
    }
    let json = &prefix[8..header_end as usize];
    let raw: RawHeader =
        serde_json::from_slice(json).map_err(|e| HeaderError::Json(e.to_string()))?;

    let mut names = HashSet::new();
    let mut tensors = Vec::with_capacity(raw.tensors.len());
    for (name, entry) in raw.tensors {
        if !names.insert(name.clone()) {
            return Err(HeaderError::DuplicateTensor(name));
        }
        let dtype = Dtype::parse(&entry.dtype).ok_or_else(|| HeaderError::UnknownDtype {
            tensor: name.clone(),
            dtype: entry.dtype.clone(),
        })?;
        let [begin, end] = entry.data_offsets;
        if begin > end {
            return Err(HeaderError::ReversedOffsets(name));
        }
        let bits = entry
            .shape
            .0
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(*d))
            .and_then(|n| n.checked_mul(dtype.bits()))
            .ok_or_else(|| HeaderError::SizeOverflow(name.clone()))?;
        if bits % 8 != 0 {
            return Err(HeaderError::SizeOverflow(name));
        }
        let expected = bits / 8;
        if expected != end - begin {
            return Err(HeaderError::SizeMismatch {
                tensor: name,
                expected,
                actual: end - begin,
            });
        }
        tensors.push(TensorInfo {
            name,
            dtype,
            shape: entry.shape.0,
            begin,
            end,
        });
    }
    // Zero-length tensors sort before others at the same offset so the walk below sees
    // ranges in order.
    tensors.sort_by_key(|t| (t.begin, t.end));
    let mut expected = 0u64;
    for t in &tensors {
        if t.begin != expected {
            return Err(HeaderError::NotContiguous {
                tensor: t.name.clone(),
                begin: t.begin,
                expected,
            });
        }
        expected = t.end;
    }
    let actual = file_len - header_end;
    if expected != actual {
        return Err(HeaderError::DataLength {
            covered: expected,
            actual,
        });
    }
    Ok(Header {
        json_len,
        metadata: raw.metadata,
        tensors,
    })
}

/// The header as written: entries in file order, duplicates kept so they can be refused.
struct RawHeader {
    metadata: Option<BTreeMap<String, String>>,
    tensors: Vec<(String, RawTensor)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    dtype: String,
    shape: Shape,
    data_offsets: [u64; 2],
}

/// A shape, refused beyond [`MAX_RANK`] dimensions before it is allocated.
struct Shape(Vec<u64>);

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an array of at most {MAX_RANK} non-negative integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
                let mut dims = Vec::new();
                while let Some(d) = seq.next_element::<u64>()? {
                    if dims.len() == MAX_RANK {
                        return Err(de::Error::custom(format!(
                            "shape has more than {MAX_RANK} dimensions"
                        )));
                    }
                    dims.push(d);
                }
                Ok(Shape(dims))
            }
        }
        d.deserialize_seq(V)
    }
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
                let mut metadata = None;
                let mut tensors = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "__metadata__" {
                        if metadata.is_some() {
                            return Err(de::Error::custom("`__metadata__` appears twice"));
                        }
                        let m: BTreeMap<String, String> = map
                            .next_value()
                            .map_err(|e| de::Error::custom(format!("`__metadata__`: {e}")))?;
                        metadata = Some(m);
                    } else {
                        let t: RawTensor = map
                            .next_value()
                            .map_err(|e| de::Error::custom(format!("tensor `{key}`: {e}")))?;
                        tensors.push((key, t));
                    }
                }
                Ok(RawHeader { metadata, tensors })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file(json: &str, data_len: usize) -> Vec<u8> {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v.extend(std::iter::repeat_n(0u8, data_len));
        v
    }

    fn parse(json: &str, data_len: usize) -> Result<Header, HeaderError> {
        let f = file(json, data_len);
        parse_header(&f, f.len() as u64)
    }

    #[test]
    fn a_valid_header_parses_in_data_order() {
        let h = parse(
            r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            12,
        )
        .unwrap();
        assert_eq!(h.tensors[0].name, "a");
        assert_eq!(h.tensors[1].name, "b");
        assert_eq!(h.metadata.unwrap()["format"], "pt");
    }

    #[test]
    fn empty_header_and_zero_sized_tensors_are_fine() {
        assert!(parse("{}", 0).unwrap().tensors.is_empty());
        let h = parse(r#"{"z":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}"#, 1).unwrap();
        assert_eq!(h.tensors.len(), 2);
    }

    #[test]
    fn packed_sub_byte_sizes_are_counted_in_bits() {
        assert!(
            parse(
                r#"{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}}"#,
                2
            )
            .is_ok()
        );
        assert_eq!(
            parse(
                r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
                2
            ),
            Err(HeaderError::SizeOverflow("a".into()))
        );
    }

    #[test]
    fn malformed_headers_are_refused_with_the_reason() {
        let f32a = |b: u64, e: u64| {
            format!(r#""a":{{"dtype":"F32","shape":[2],"data_offsets":[{b},{e}]}}"#)
        };
        assert!(matches!(
            parse(&format!("{{{}}}", f32a(0, 4)), 4),
            Err(HeaderError::SizeMismatch { .. })
        ));
        assert!(matches!(
            parse(&format!("{{{}}}", f32a(8, 0)), 8),
            Err(HeaderError::ReversedOffsets(_))
        ));
        assert!(matches!(
            parse(&format!("{{{}}}", f32a(0, 8)), 9),
            Err(HeaderError::DataLength {
                covered: 8,
                actual: 9
            })
        ));
        assert!(matches!(
            parse(&format!("{{{}}}", f32a(0, 8)), 4),
            Err(HeaderError::DataLength { .. })
        ));
        assert!(matches!(
            parse(&format!("{{{},{}}}", f32a(0, 8), f32a(0, 8)), 8),
            Err(HeaderError::DuplicateTensor(_))
        ));
        let overlap = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        assert!(matches!(
            parse(overlap, 8),
            Err(HeaderError::NotContiguous { .. })
        ));
        let gap = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
        assert!(matches!(
            parse(gap, 12),
            Err(HeaderError::NotContiguous { .. })
        ));
        assert!(matches!(
            parse(
                r#"{"a":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}}"#,
                4
            ),
            Err(HeaderError::UnknownDtype { .. })
        ));
        let huge = r#"{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#;
        assert!(matches!(parse(huge, 8), Err(HeaderError::SizeOverflow(_))));
        assert!(matches!(
            parse(
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}"#,
                4
            ),
            Err(HeaderError::Json(_))
        ));
        assert!(matches!(parse("[1,2]", 0), Err(HeaderError::Json(_))));
        let deep = format!(
            r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[0,1]}}}}"#,
            vec!["1"; MAX_RANK + 1].join(",")
        );
        assert!(matches!(parse(&deep, 1), Err(HeaderError::Json(_))));
        let mut f = file("{}", 0);
        f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            parse_header(&f, f.len() as u64),
            Err(HeaderError::HeaderTooLong(u64::MAX))
        );
        f[..8].copy_from_slice(&1000u64.to_le_bytes());
        assert!(matches!(
            parse_header(&f, f.len() as u64),
            Err(HeaderError::HeaderBeyondFile { .. })
        ));
        assert_eq!(parse_header(&[1, 2, 3], 3), Err(HeaderError::TooShort(3)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_header(&bytes, bytes.len() as u64);
        }

        #[test]
        fn random_headers_after_a_valid_length_never_panic(json in "\\{(\"[a-c]\":\\{\"dtype\":\"(F32|U8|F4|BOOL|X)\",\"shape\":\\[[0-9]{0,20}(,[0-9]{0,20}){0,3}\\],\"data_offsets\":\\[[0-9]{1,20},[0-9]{1,20}\\]\\},?){0,4}\\}", data in 0usize..64) {
            // Mostly well-formed JSON with hostile numbers: parsing must refuse or accept, and
            // anything accepted must tile the data exactly.
            let f = file(&json, data);
            if let Ok(h) = parse_header(&f, f.len() as u64) {
                let mut end = 0;
                for t in &h.tensors {
                    prop_assert_eq!(t.begin, end);
                    end = t.end;
                }
                prop_assert_eq!(end, data as u64);
            }
        }

        #[test]
        fn mutated_valid_files_never_panic(pos in 0usize..120, byte in any::<u8>()) {
            let mut f = file(r#"{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}}"#, 32);
            let p = pos % f.len();
            f[p] = byte;
            let _ = parse_header(&f, f.len() as u64);
        }
    }
}
