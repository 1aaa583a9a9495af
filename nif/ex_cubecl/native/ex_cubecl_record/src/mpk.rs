//! A MessagePack value tree, enough for Burn's record files: a decoder over a byte slice that
//! borrows strings and binaries from it and refuses malformed input with the byte offset
//! (never a panic, never an allocation sized by an unchecked length), and an encoder on `rmp`,
//! the crate under `rmp-serde`, so that markers are chosen exactly as Burn's recorder chooses
//! them (the most compact length and integer forms).

/// Nesting deeper than this is refused (a record of nested modules is a few levels deep; a
/// corrupt file could otherwise nest until the stack runs out).
const MAX_DEPTH: usize = 128;

/// A MessagePack value. Strings are kept as bytes (MessagePack does not guarantee UTF-8);
/// [`Value::as_str`] checks them.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // the variants are MessagePack's types
pub enum Value<'a> {
    Nil,
    Bool(bool),
    /// Any integer that fits in `u64`.
    UInt(u64),
    /// A negative integer.
    NegInt(i64),
    F32(f32),
    F64(f64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Array(Vec<Value<'a>>),
    /// Key-value pairs in the file's order.
    Map(Vec<(Value<'a>, Value<'a>)>),
    /// An extension type: its tag and bytes.
    Ext(i8, &'a [u8]),
}

impl<'a> Value<'a> {
    /// A string value of `s`.
    pub fn str(s: &'a str) -> Self {
        Value::Str(s.as_bytes())
    }

    /// The string, if this is a string of valid UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::Str(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value under string key `key`, if this is a map that has it.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Map(pairs) => pairs.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// What kind of value this is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "a boolean",
            Value::UInt(_) | Value::NegInt(_) => "an integer",
            Value::F32(_) | Value::F64(_) => "a float",
            Value::Str(_) => "a string",
            Value::Bin(_) => "a binary",
            Value::Array(_) => "an array",
            Value::Map(_) => "a map",
            Value::Ext(..) => "an extension value",
        }
    }
}

/// Decodes the one value that `bytes` holds; an error names what is wrong and where.
pub fn decode(bytes: &[u8]) -> Result<Value<'_>, String> {
    let mut reader = Reader { bytes, pos: 0 };
    let value = reader.value(0)?;
    if reader.pos != bytes.len() {
        return Err(format!("{} bytes after the end of the record (at byte {})", bytes.len() - reader.pos, reader.pos));
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(format!(
                "the file ends at byte {} inside a value that needs {n} more bytes from byte {} (truncated?)",
                self.bytes.len(),
                self.pos
            )),
        }
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len8(&mut self) -> Result<usize, String> {
        Ok(self.be::<1>()?[0] as usize)
    }

    fn len16(&mut self) -> Result<usize, String> {
        Ok(u16::from_be_bytes(self.be()?) as usize)
    }

    fn len32(&mut self) -> Result<usize, String> {
        Ok(u32::from_be_bytes(self.be()?) as usize)
    }

    /// `n` elements, each at least one byte: more than the bytes left is a corrupt length.
    fn count(&self, n: usize, per: usize) -> Result<usize, String> {
        let left = self.bytes.len() - self.pos;
        if n.saturating_mul(per) > left {
            Err(format!(
                "a collection of {n} entries before byte {} does not fit in the {left} bytes left (truncated or not a record)",
                self.pos
            ))
        } else {
            Ok(n)
        }
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value<'a>, String> {
        let n = self.count(n, 1)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value<'a>, String> {
        let n = self.count(n, 2)?;
        let mut pairs = Vec::with_capacity(n);
        for _ in 0..n {
            let key = self.value(depth + 1)?;
            let value = self.value(depth + 1)?;
            pairs.push((key, value));
        }
        Ok(Value::Map(pairs))
    }

    fn ext(&mut self, n: usize) -> Result<Value<'a>, String> {
        let tag = self.be::<1>()?[0] as i8;
        Ok(Value::Ext(tag, self.take(n)?))
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>, String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested more than {MAX_DEPTH} deep at byte {}", self.pos));
        }
        let at = self.pos;
        let marker = self.be::<1>()?[0];
        Ok(match marker {
            0x00..=0x7f => Value::UInt(marker as u64),
            0x80..=0x8f => self.map((marker & 0x0f) as usize, depth)?,
            0x90..=0x9f => self.array((marker & 0x0f) as usize, depth)?,
            0xa0..=0xbf => Value::Str(self.take((marker & 0x1f) as usize)?),
            0xc0 => Value::Nil,
            0xc1 => return Err(format!("byte {at} is 0xc1, which MessagePack never uses (not a record file)")),
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4 => {
                let n = self.len8()?;
                Value::Bin(self.take(n)?)
            }
            0xc5 => {
                let n = self.len16()?;
                Value::Bin(self.take(n)?)
            }
            0xc6 => {
                let n = self.len32()?;
                Value::Bin(self.take(n)?)
            }
            0xc7 => {
                let n = self.len8()?;
                self.ext(n)?
            }
            0xc8 => {
                let n = self.len16()?;
                self.ext(n)?
            }
            0xc9 => {
                let n = self.len32()?;
                self.ext(n)?
            }
            0xca => Value::F32(f32::from_be_bytes(self.be()?)),
            0xcb => Value::F64(f64::from_be_bytes(self.be()?)),
            0xcc => Value::UInt(u8::from_be_bytes(self.be()?) as u64),
            0xcd => Value::UInt(u16::from_be_bytes(self.be()?) as u64),
            0xce => Value::UInt(u32::from_be_bytes(self.be()?) as u64),
            0xcf => Value::UInt(u64::from_be_bytes(self.be()?)),
            0xd0 => int(i8::from_be_bytes(self.be()?) as i64),
            0xd1 => int(i16::from_be_bytes(self.be()?) as i64),
            0xd2 => int(i32::from_be_bytes(self.be()?) as i64),
            0xd3 => int(i64::from_be_bytes(self.be()?)),
            0xd4 => self.ext(1)?,
            0xd5 => self.ext(2)?,
            0xd6 => self.ext(4)?,
            0xd7 => self.ext(8)?,
            0xd8 => self.ext(16)?,
            0xd9 => {
                let n = self.len8()?;
                Value::Str(self.take(n)?)
            }
            0xda => {
                let n = self.len16()?;
                Value::Str(self.take(n)?)
            }
            0xdb => {
                let n = self.len32()?;
                Value::Str(self.take(n)?)
            }
            0xdc => {
                let n = self.len16()?;
                self.array(n, depth)?
            }
            0xdd => {
                let n = self.len32()?;
                self.array(n, depth)?
            }
            0xde => {
                let n = self.len16()?;
                self.map(n, depth)?
            }
            0xdf => {
                let n = self.len32()?;
                self.map(n, depth)?
            }
            0xe0..=0xff => Value::NegInt(marker as i8 as i64),
        })
    }
}

fn int(v: i64) -> Value<'static> {
    if v >= 0 { Value::UInt(v as u64) } else { Value::NegInt(v) }
}

/// Appends `value` to `out`, as rmp-serde writes the same value.
pub fn encode(value: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    use rmp::encode as e;
    let len = |n: usize| {
        u32::try_from(n).map_err(|_| format!("{n} entries or bytes are more than MessagePack holds (2^32 - 1)"))
    };
    let io = |err: std::io::Error| format!("encoding: {err}");
    let w = |err: rmp::encode::ValueWriteError| format!("encoding: {err}");
    match value {
        Value::Nil => e::write_nil(out).map_err(io)?,
        Value::Bool(b) => e::write_bool(out, *b).map_err(io)?,
        Value::UInt(v) => e::write_uint(out, *v).map(drop).map_err(w)?,
        Value::NegInt(v) => e::write_sint(out, *v).map(drop).map_err(w)?,
        Value::F32(v) => e::write_f32(out, *v).map_err(w)?,
        Value::F64(v) => e::write_f64(out, *v).map_err(w)?,
        Value::Str(s) => {
            e::write_str_len(out, len(s.len())?).map_err(w)?;
            out.extend_from_slice(s);
        }
        Value::Bin(b) => {
            e::write_bin_len(out, len(b.len())?).map_err(w)?;
            out.extend_from_slice(b);
        }
        Value::Array(items) => {
            e::write_array_len(out, len(items.len())?).map_err(w)?;
            for item in items {
                encode(item, out)?;
            }
        }
        Value::Map(pairs) => {
            e::write_map_len(out, len(pairs.len())?).map_err(w)?;
            for (k, v) in pairs {
                encode(k, out)?;
                encode(v, out)?;
            }
        }
        Value::Ext(tag, data) => {
            e::write_ext_meta(out, len(data.len())?, *tag).map_err(w)?;
            out.extend_from_slice(data);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(v: Value) {
        let mut out = Vec::new();
        encode(&v, &mut out).unwrap();
        assert_eq!(decode(&out).unwrap(), v);
    }

    #[test]
    fn values_round_trip() {
        let big = vec![7u8; 70_000];
        round_trip(Value::Map(vec![
            (
                Value::str("a"),
                Value::Array(vec![
                    Value::UInt(0),
                    Value::UInt(300),
                    Value::UInt(u64::MAX),
                    Value::NegInt(-5),
                    Value::NegInt(i64::MIN),
                ]),
            ),
            (Value::str("b"), Value::Bin(&big)),
            (Value::str("c"), Value::Nil),
            (Value::str(&"x".repeat(300)), Value::F64(1.5)),
            (Value::str("d"), Value::Array(vec![])),
        ]));
    }

    #[test]
    fn truncated_and_bad_input_are_errors() {
        let mut out = Vec::new();
        encode(&Value::Map(vec![(Value::str("k"), Value::Bin(&[1, 2, 3]))]), &mut out).unwrap();
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err(), "a cut at {cut} decoded");
        }
        assert!(decode(&[0xc1]).is_err());
        assert!(decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err(), "a huge array length");
        assert!(decode(&[0x91; 1000]).is_err(), "too deep");
        assert!(decode(&[0xc0, 0xc0]).is_err(), "trailing bytes");
    }
}
