//! Reading a record: the metadata, then every `ParamSerde` of the item by dotted path, each
//! `TensorData` checked (a known dtype, bytes that fit the shape).
use burn_backend::{BoolStore, DType, TensorData};

use crate::format::{DTYPE_NAMES, METADATA_KEYS, Metadata, Record, dtype_name, supported};
use crate::mpk::{self, Value};

/// The record that `bytes` (a whole file) holds.
pub fn decode(bytes: &[u8]) -> Result<Record, String> {
    if bytes.is_empty() {
        return Err("the file is empty".into());
    }
    let root = mpk::decode(bytes)?;
    let not_record = |what: &str| format!("not a Burn record: {what}");
    if !matches!(root, Value::Map(_)) {
        return Err(not_record(&format!("the file holds {}, not a map", root.kind())));
    }
    let meta = root.get("metadata").ok_or_else(|| not_record("no \"metadata\" entry"))?;
    let item = root.get("item").ok_or_else(|| not_record("no \"item\" entry"))?;
    let mut metadata = Metadata::burn();
    for key in METADATA_KEYS {
        let value = meta
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| not_record(&format!("the metadata has no string {key:?}")))?;
        metadata.set(key, value.to_string())?;
    }
    let mut params = Vec::new();
    walk(item, &mut Vec::new(), &mut params)?;
    Ok(Record { metadata, params })
}

/// Collects the parameters under `value`, whose path is `path`.
fn walk(value: &Value, path: &mut Vec<String>, out: &mut Vec<(String, TensorData)>) -> Result<(), String> {
    match value {
        Value::Map(_) if is_param(value) => {
            let name = path.join(".");
            let param = value.get("param").expect("is_param checked it");
            out.push((name.clone(), tensor_data(&name, param)?));
        }
        Value::Map(pairs) => {
            for (key, child) in pairs {
                let key = key
                    .as_str()
                    .ok_or_else(|| format!("a key under {:?} is {}, not a string", path.join("."), key.kind()))?;
                path.push(key.to_string());
                walk(child, path, out)?;
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(i.to_string());
                walk(child, path, out)?;
                path.pop();
            }
        }
        // An EmptyRecord, an absent Option, or a plain value of the module: no parameter.
        _ => {}
    }
    Ok(())
}

/// Whether `value` is a `ParamSerde`: `{"id": string, "param": {"bytes", "shape", "dtype"}}`.
fn is_param(value: &Value) -> bool {
    let param = value.get("param");
    value.get("id").and_then(Value::as_str).is_some()
        && param.is_some_and(|p| p.get("bytes").is_some() && p.get("shape").is_some() && p.get("dtype").is_some())
}

/// The `TensorData` of parameter `name`, checked: known dtype, a shape whose element count
/// matches the bytes.
fn tensor_data(name: &str, param: &Value) -> Result<TensorData, String> {
    let bad = |what: String| format!("parameter {name:?}: {what}");
    let Some(Value::Bin(bytes)) = param.get("bytes") else {
        return Err(bad(format!("its bytes are {}, not a binary", param.get("bytes").map_or("missing", Value::kind))));
    };
    let Some(Value::Array(dims)) = param.get("shape") else {
        return Err(bad("its shape is not an array".into()));
    };
    let shape = dims
        .iter()
        .map(|d| match d {
            Value::UInt(n) => usize::try_from(*n).map_err(|_| bad(format!("dimension {n} is too large"))),
            other => Err(bad(format!("a dimension of its shape is {}", other.kind()))),
        })
        .collect::<Result<Vec<usize>, String>>()?;
    let dtype = dtype_of(param.get("dtype").expect("is_param checked it")).map_err(bad)?;
    let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let expected = count.and_then(|n| n.checked_mul(dtype.size()));
    if expected != Some(bytes.len()) {
        return Err(bad(format!(
            "shape {shape:?} of {} needs {} bytes, the record has {}",
            dtype_name(dtype),
            expected.map_or("too many".to_string(), |n| n.to_string()),
            bytes.len()
        )));
    }
    Ok(match dtype {
        // Bools as the NIF holds them on the host: a byte each, 0 or 1.
        DType::Bool(BoolStore::U32) => {
            let flags = bytes.chunks_exact(4).map(|c| u8::from(c != [0, 0, 0, 0])).collect();
            TensorData::from_bytes_vec(flags, shape, DType::Bool(BoolStore::Native))
        }
        DType::Bool(_) => {
            let flags = bytes.iter().map(|&b| u8::from(b != 0)).collect();
            TensorData::from_bytes_vec(flags, shape, DType::Bool(BoolStore::Native))
        }
        _ => TensorData::from_bytes_vec(bytes.to_vec(), shape, dtype),
    })
}

/// The dtype serialized as `value`; `Flex32` (f32 storage) reads as F32.
fn dtype_of(value: &Value) -> Result<DType, String> {
    if let Some(name) = value.as_str() {
        if name == "Flex32" {
            return Ok(DType::F32);
        }
        return DTYPE_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, d)| *d)
            .ok_or_else(|| format!("unsupported dtype {name:?} (supported: {}, Bool)", supported()));
    }
    match value {
        Value::Map(pairs) if pairs.len() == 1 => {
            let (key, store) = &pairs[0];
            match (key.as_str(), store.as_str()) {
                (Some("Bool"), Some("Native")) => Ok(DType::Bool(BoolStore::Native)),
                (Some("Bool"), Some("U8")) => Ok(DType::Bool(BoolStore::U8)),
                (Some("Bool"), Some("U32")) => Ok(DType::Bool(BoolStore::U32)),
                (Some("QFloat"), _) => {
                    Err(format!("unsupported dtype: quantized (QFloat) tensors (supported: {}, Bool)", supported()))
                }
                (Some(other), _) => Err(format!("unsupported dtype {other:?} (supported: {}, Bool)", supported())),
                (None, _) => Err("its dtype is not a name".into()),
            }
        }
        other => Err(format!("its dtype is {}, not a dtype name", other.kind())),
    }
}
