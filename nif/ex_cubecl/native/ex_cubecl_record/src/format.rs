//! The layout of a file of Burn 0.21's `NamedMpkFileRecorder<FullPrecisionSettings>`, as
//! `rmp_serde::encode::write_named` writes its `BurnRecord`:
//!
//! ```text
//! { "metadata": { "float": "f32", "int": "i32",
//!                 "format": "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
//!                 "version": "0.21.0", "settings": "FullPrecisionSettings" },
//!   "item": <the module's record>,
//!   "_b": [] }                      (BurnRecord's PhantomData: a unit struct, an empty array)
//! ```
//!
//! A module's record is a map of its fields; a `Vec` of modules an array; a parameter a
//! `ParamSerde`, `{"id": <ParamId: 8 bytes little-endian in base32 (DNSSEC alphabet)>,
//! "param": <TensorData>}`, where `TensorData` is `{"bytes": <bin, little-endian elements>,
//! "shape": [dims], "dtype": "F32" | "F64" | "F16" | "BF16" | "I64" | ... | {"Bool": "Native"}}`;
//! an absent `Option` (a `Linear` without bias) and a module without parameters (`Relu`,
//! `MaxPool2d`, and the plain fields of `Conv2d`, e.g. its stride) are `EmptyRecord`s,
//! written as nil. Burn's loader accepts such a field when it is nil or absent
//! (`EmptyRecord`'s deserializer takes anything, and serde reads a missing field as none), so
//! the writer writes the parameters alone and every other field of the module keeps the value
//! the module was built with.
//!
//! The metadata is not checked by Burn's loader (it is only quoted in its error message when
//! the item does not load); a float or int type other than the settings' is converted on
//! load, so files of f64 or f16 parameters load into an f32 module.
use burn_backend::{DType, TensorData};

pub use crate::decode::decode;
pub use crate::encode::{base32_dnssec, encode};

/// The metadata of a record (`BurnMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The settings' float type (`"f32"`).
    pub float: String,
    /// The settings' int type (`"i32"`).
    pub int: String,
    /// The recorder's type name.
    pub format: String,
    /// Burn's version.
    pub version: String,
    /// The settings, `Debug`-printed (`"FullPrecisionSettings"`).
    pub settings: String,
}

/// The metadata's field names, in Burn's order.
pub const METADATA_KEYS: [&str; 5] = ["float", "int", "format", "version", "settings"];

impl Metadata {
    /// What Burn 0.21.0's `NamedMpkFileRecorder<FullPrecisionSettings>` writes.
    pub fn burn() -> Self {
        Self {
            float: "f32".into(),
            int: "i32".into(),
            format: "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>"
                .into(),
            version: "0.21.0".into(),
            settings: "FullPrecisionSettings".into(),
        }
    }

    /// `(name, value)` of each field, in Burn's order.
    pub fn fields(&self) -> [(&'static str, &str); 5] {
        [
            ("float", &self.float),
            ("int", &self.int),
            ("format", &self.format),
            ("version", &self.version),
            ("settings", &self.settings),
        ]
    }

    /// Sets field `key`; an error for a name Burn's metadata doesn't have.
    pub fn set(&mut self, key: &str, value: String) -> Result<(), String> {
        let slot = match key {
            "float" => &mut self.float,
            "int" => &mut self.int,
            "format" => &mut self.format,
            "version" => &mut self.version,
            "settings" => &mut self.settings,
            other => return Err(format!("unknown metadata field {other:?} (Burn's are {})", METADATA_KEYS.join(", "))),
        };
        *slot = value;
        Ok(())
    }
}

/// A record: its metadata and every parameter of its item, named by dotted path
/// (`"hidden1.weight"`; an element of a `Vec` of modules by its index, `"layers.0.weight"`),
/// in the file's order.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The record's metadata.
    pub metadata: Metadata,
    /// Every parameter by dotted path, with its data.
    pub params: Vec<(String, TensorData)>,
}

/// The dtypes a record holds, by the name Burn's `DType` serializes to (bools are a map,
/// `{"Bool": store}`; quantized tensors, `{"QFloat": scheme}`, are not supported).
pub(crate) const DTYPE_NAMES: [(&str, DType); 12] = [
    ("F64", DType::F64),
    ("F32", DType::F32),
    ("F16", DType::F16),
    ("BF16", DType::BF16),
    ("I64", DType::I64),
    ("I32", DType::I32),
    ("I16", DType::I16),
    ("I8", DType::I8),
    ("U64", DType::U64),
    ("U32", DType::U32),
    ("U16", DType::U16),
    ("U8", DType::U8),
];

/// The dtype names a record may hold, for error messages.
pub(crate) fn supported() -> String {
    DTYPE_NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// The name Burn serializes `dtype` to (bools: `Bool`).
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool(_) => "Bool",
        other => DTYPE_NAMES.iter().find(|(_, d)| *d == other).map_or("unsupported", |(n, _)| *n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpk::{self, Value};

    fn data(values: Vec<f32>, shape: Vec<usize>) -> TensorData {
        TensorData::new(values, shape)
    }

    #[test]
    fn records_round_trip_with_nesting_and_vecs() {
        let record = Record {
            metadata: Metadata::burn(),
            params: vec![
                ("a.weight".into(), data(vec![1.0, 2.0], vec![1, 2])),
                ("a.bias".into(), data(vec![3.0], vec![1])),
                ("layers.0.w".into(), TensorData::new(vec![1i64, -2], [2])),
                ("layers.1.w".into(), TensorData::new(vec![true, false, true], [3])),
                ("scalar".into(), TensorData::new(vec![burn_backend::f16::from_f32(0.5)], Vec::<usize>::new())),
            ],
        };
        let bytes = encode(&record).unwrap();
        assert_eq!(decode(&bytes).unwrap(), record);
        let root = mpk::decode(&bytes).unwrap();
        assert!(matches!(root.get("item").unwrap().get("layers"), Some(Value::Array(_))));
    }
}
