//! The one dtype table of the NIF: Elixir's type atoms (Nx's names) to Burn's `DType`.
use burn_backend::{BoolStore, DType, Scalar};

use crate::error::{NifError, NifResult};

/// Every dtype by its Elixir name, in the order `supported_dtypes/0` lists them.
pub const DTYPES: [(&str, DType); 13] = [
    ("f32", DType::F32),
    ("f16", DType::F16),
    ("bf16", DType::BF16),
    ("f64", DType::F64),
    ("s8", DType::I8),
    ("s16", DType::I16),
    ("s32", DType::I32),
    ("s64", DType::I64),
    ("u8", DType::U8),
    ("u16", DType::U16),
    ("u32", DType::U32),
    ("u64", DType::U64),
    ("bool", DType::Bool(BoolStore::Native)),
];

/// The dtype named `name`.
pub fn parse(op: &str, name: &str) -> NifResult<DType> {
    DTYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, d)| *d)
        .ok_or_else(|| {
            let known: Vec<&str> = DTYPES.iter().map(|(n, _)| *n).collect();
            NifError::new(
                op,
                format!("unknown dtype {name:?}"),
                format!("known dtypes: {}", known.join(", ")),
            )
        })
}

/// The Elixir name of `dtype` (every bool store is `bool`).
pub fn name(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool(_) => "bool",
        DType::QFloat(_) => "q8",
        other => DTYPES
            .iter()
            .find(|(_, d)| *d == other)
            .map_or("unsupported", |(n, _)| *n),
    }
}

/// Bytes per element on the host (bools: one byte).
pub fn host_size(dtype: DType) -> usize {
    match dtype {
        DType::Bool(_) => 1,
        other => other.size(),
    }
}

/// Whether `dtype` is a float, an int or a bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Float,
    Int,
    Bool,
}

pub fn class(dtype: DType) -> Class {
    match dtype {
        DType::Bool(_) => Class::Bool,
        d if d.is_float() => Class::Float,
        _ => Class::Int,
    }
}

/// `value` as a scalar of integer `dtype`, wrapped to its width as Nx does.
pub fn int_scalar(dtype: DType, value: i128) -> Scalar {
    let bits = dtype.size() * 8;
    let wrapped = value.rem_euclid(1i128 << bits);
    if matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64) {
        Scalar::UInt(wrapped as u64)
    } else {
        let signed = if wrapped >= 1i128 << (bits - 1) { wrapped - (1i128 << bits) } else { wrapped };
        Scalar::Int(signed as i64)
    }
}
