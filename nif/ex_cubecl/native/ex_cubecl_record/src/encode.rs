//! Writing a record: the parameters placed by dotted name in nested maps, each a `ParamSerde`
//! with a fresh `ParamId`.
use burn_backend::{DType, TensorData};

use crate::format::{Record, dtype_name};
use crate::mpk::{self, Value};

/// The bytes of a file holding `record` as Burn writes it: each parameter a `ParamSerde`
/// with a fresh id (as a new `Param` gets one), placed by its dotted name in nested maps
/// (arrays where a level's names are exactly 0, 1, ..., n - 1: a `Vec` of modules).
pub fn encode(record: &Record) -> Result<Vec<u8>, String> {
    let mut tree = Tree::default();
    for (name, data) in &record.params {
        check_writable(name, data)?;
        tree.insert(name)?;
    }
    let ids: Vec<String> = (0..record.params.len()).map(|_| param_id()).collect();
    let shapes: Vec<Vec<Value>> = record
        .params
        .iter()
        .map(|(_, d)| d.shape.as_slice().iter().map(|&n| Value::UInt(n as u64)).collect())
        .collect();
    let metadata = Value::Map(record.metadata.fields().iter().map(|(k, v)| (Value::str(k), Value::str(v))).collect());
    let item = tree.value(&|i| {
        let data = &record.params[i].1;
        let dtype = match data.dtype {
            DType::Bool(_) => Value::Map(vec![(Value::str("Bool"), Value::str("Native"))]),
            other => Value::str(dtype_name(other)),
        };
        Value::Map(vec![
            (Value::str("id"), Value::str(&ids[i])),
            (
                Value::str("param"),
                Value::Map(vec![
                    (Value::str("bytes"), Value::Bin(data.as_bytes())),
                    (Value::str("shape"), Value::Array(shapes[i].clone())),
                    (Value::str("dtype"), dtype),
                ]),
            ),
        ])
    });
    let root = Value::Map(vec![
        (Value::str("metadata"), metadata),
        (Value::str("item"), item),
        (Value::str("_b"), Value::Array(Vec::new())),
    ]);
    let mut out = Vec::new();
    mpk::encode(&root, &mut out)?;
    Ok(out)
}

/// Names are dot-separated non-empty segments; the dtype must be one a record holds and the
/// bytes must match the shape.
fn check_writable(name: &str, data: &TensorData) -> Result<(), String> {
    if name.is_empty() || name.split('.').any(str::is_empty) {
        return Err(format!(
            "bad parameter name {name:?}: names are dot-separated module paths, e.g. \"hidden1.weight\""
        ));
    }
    if dtype_name(data.dtype) == "unsupported" {
        return Err(format!("parameter {name:?}: a record can't hold dtype {:?}", data.dtype));
    }
    let expected = data.shape.as_slice().iter().product::<usize>() * data.dtype.size();
    if expected != data.as_bytes().len() {
        return Err(format!(
            "parameter {name:?}: {} bytes for shape {:?}",
            data.as_bytes().len(),
            data.shape.as_slice()
        ));
    }
    Ok(())
}

/// The nested names of the parameters: a leaf is the index of a parameter.
#[derive(Default)]
struct Tree {
    children: Vec<(String, Node)>,
}

enum Node {
    Leaf(usize),
    Branch(Tree),
}

impl Tree {
    /// Adds parameter `name` as the next index.
    fn insert(&mut self, name: &str) -> Result<(), String> {
        let index = self.count();
        let segments: Vec<&str> = name.split('.').collect();
        let mut level = self;
        for (depth, segment) in segments.iter().enumerate() {
            let last = depth + 1 == segments.len();
            let prefix = segments[..=depth].join(".");
            let pos = level.children.iter().position(|(k, _)| k == segment);
            match (pos, last) {
                (None, true) => {
                    level.children.push((segment.to_string(), Node::Leaf(index)));
                    return Ok(());
                }
                (None, false) => {
                    level.children.push((segment.to_string(), Node::Branch(Tree::default())));
                    let end = level.children.len() - 1;
                    level = match &mut level.children[end].1 {
                        Node::Branch(t) => t,
                        Node::Leaf(_) => unreachable!(),
                    };
                }
                (Some(p), _) => match &mut level.children[p].1 {
                    Node::Leaf(_) if last => return Err(format!("parameter {name:?} is given twice")),
                    Node::Leaf(_) => return Err(format!("{prefix:?} is a parameter, so {name:?} can't be under it")),
                    Node::Branch(_) if last => {
                        return Err(format!("{name:?} names a module that has parameters under it, not a parameter"));
                    }
                    Node::Branch(t) => level = t,
                },
            }
        }
        Ok(())
    }

    fn count(&self) -> usize {
        self.children
            .iter()
            .map(|(_, n)| match n {
                Node::Leaf(_) => 1,
                Node::Branch(t) => t.count(),
            })
            .sum()
    }

    /// The value of this level: an array where the names are 0..n in order, else a map.
    fn value<'a>(&'a self, leaf: &dyn Fn(usize) -> Value<'a>) -> Value<'a> {
        let child = |n: &'a Node| match n {
            Node::Leaf(i) => leaf(*i),
            Node::Branch(t) => t.value(leaf),
        };
        let indexed =
            !self.children.is_empty() && self.children.iter().enumerate().all(|(i, (k, _))| *k == i.to_string());
        if indexed {
            Value::Array(self.children.iter().map(|(_, n)| child(n)).collect())
        } else {
            Value::Map(self.children.iter().map(|(k, n)| (Value::str(k), child(n))).collect())
        }
    }
}

/// A fresh `ParamId` as Burn serializes one: a random `u64`, little-endian, in base32 with the
/// DNSSEC alphabet (`0-9a-v`, no padding).
fn param_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(t.as_nanos());
    }
    base32_dnssec(&hasher.finish().to_le_bytes())
}

/// RFC 4648 base32 with the alphabet `0-9a-v`, without padding (data-encoding's
/// `BASE32_DNSSEC`, which Burn's `ParamId` uses).
pub fn base32_dnssec(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for &b in bytes {
        buffer = (buffer << 8) | b as u32;
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
        buffer &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Metadata;

    fn data(values: Vec<f32>, shape: Vec<usize>) -> TensorData {
        TensorData::new(values, shape)
    }

    #[test]
    fn bad_names_are_refused() {
        let one = || data(vec![1.0], vec![1]);
        for names in [vec!["a", "a"], vec!["a", "a.b"], vec!["a.b", "a"], vec![""], vec!["a..b"]] {
            let record =
                Record { metadata: Metadata::burn(), params: names.iter().map(|n| (n.to_string(), one())).collect() };
            assert!(encode(&record).is_err(), "{names:?} was written");
        }
    }

    #[test]
    fn base32_matches_data_encoding() {
        // BASE32_DNSSEC.encode(&123456u64.to_le_bytes()), as Burn's ParamId::serialize gives it.
        assert_eq!(base32_dnssec(&[]), "");
        assert_eq!(base32_dnssec(&[0xff]), "vs");
        assert_eq!(base32_dnssec(&123456u64.to_le_bytes()).len(), 13);
    }
}
