//! Nx types that the device stores in a container dtype and computes in a wider one:
//! - the 8-bit floats, `f8` (E5M2) and `f8_e4m3fn`, as their bits in u8;
//! - the sub-byte integers `s2`, `s4`, `u2`, `u4`, one per byte in s8 / u8.
//!
//! The floats compute in f32, the integers in their container (wrapping arithmetic modulo 256
//! then modulo 2^bits is arithmetic modulo 2^bits). An entry decodes its narrow inputs (option
//! `narrow`: each input's Nx type name, "" for the others), runs in the compute dtype, and
//! encodes each narrow result (option `narrow_out`, one name per result) as `Nx.BinaryBackend`
//! writes the type: f8 keeps the upper half of the f16 (rounded to nearest) bits, f8_e4m3fn saturates at ±448 and rounds its 3 mantissa bits half
//! away from zero as `Nx.Floating.dump_f8_e4m3fn`, NaN is each type's NaN, integers wrap.
use burn_backend::{BoolStore, DType, Scalar};
use crate::ops::Extension;

use super::any;
use crate::dtype::int_scalar;
use crate::error::{NifError, NifResult};
use crate::opts::{OptVal, Opts};
use crate::tensor::Prim;

const BOOL: BoolStore = BoolStore::Native;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Narrow {
    /// E5M2: the upper byte of an f16.
    F8,
    /// E4M3FN: bias 7, no infinities, NaN only at S.1111.111.
    F8E4M3FN,
    Int { signed: bool, bits: u32 },
}

impl Narrow {
    /// The narrow type of Nx type `name`. (bf16 is not one: the backend has it on every
    /// device, held as u16 bits and computed in f32 where the device lacks it.)
    pub fn parse(name: &str) -> Option<Narrow> {
        Some(match name {
            "f8" => Narrow::F8,
            "f8_e4m3fn" => Narrow::F8E4M3FN,
            "s2" | "s4" | "u2" | "u4" => Narrow::Int { signed: name.starts_with('s'), bits: name[1..].parse().ok()? },
            _ => return None,
        })
    }

    /// The dtype that holds it on the device.
    pub fn storage(self) -> DType {
        match self {
            Narrow::F8 | Narrow::F8E4M3FN | Narrow::Int { signed: false, .. } => DType::U8,
            Narrow::Int { signed: true, .. } => DType::I8,
        }
    }

    /// The dtype it computes in.
    pub fn compute(self) -> DType {
        match self {
            Narrow::Int { .. } => self.storage(),
            _ => DType::F32,
        }
    }

    /// Its stored values (of the storage dtype) in the compute dtype.
    pub fn decode<B: Extension>(self, op: &str, p: Prim<B>) -> NifResult<Prim<B>> {
        match self {
            Narrow::Int { .. } => Ok(p),
            Narrow::F8 => {
                let half = B::bitcast(shl(any::cast(op, p, DType::U16)?, 8), DType::F16);
                any::cast(op, half, DType::F32)
            }
            Narrow::F8E4M3FN => {
                let x = any::cast(op, p, DType::U32)?;
                let e = and(shr(x.clone(), 3), 15);
                let m = and(x.clone(), 7);
                // Normal: 2^(e - 7) (1 + m/8), the f32 exponent e - 7 + 127.
                let normal = or(shl(plus(e.clone(), 120), 23), shl(m.clone(), 20));
                // Subnormal: m/8 2^-6, exact in f32.
                let sub = B::float_mul_scalar(any::float::<B>(any::cast(op, m, DType::F32)?), Scalar::Float(2f64.powi(-9)));
                let sub = B::bitcast(Prim::Float(sub), DType::U32);
                let bits = any::select_where(B::int_equal_elem(any::int::<B>(e), int_scalar(DType::U32, 0), BOOL), sub, normal);
                let signed = or(bits, shl(shr(x.clone(), 7), 31));
                let nan = B::int_equal_elem(any::int::<B>(and(x, 127)), int_scalar(DType::U32, 127), BOOL);
                let f = any::float::<B>(B::bitcast(signed, DType::F32));
                Ok(Prim::Float(B::float_mask_fill(f, nan, Scalar::Float(f64::NAN))))
            }
        }
    }

    /// Values of the compute dtype as stored values, converted as Nx converts to the type.
    pub fn encode<B: Extension>(self, op: &str, p: Prim<B>) -> NifResult<Prim<B>> {
        match self {
            Narrow::Int { signed, bits } => {
                let p = any::cast(op, p, self.storage())?;
                let low = and(p, (1 << bits) - 1);
                // Sign-extend: (x ^ 2^(b-1)) - 2^(b-1).
                Ok(if signed { plus(xor(low, 1 << (bits - 1)), -(1 << (bits - 1))) } else { low })
            }
            Narrow::F8 => {
                let f = any::cast(op, p, DType::F32)?;
                let nan = B::float_is_nan(any::float::<B>(f.clone()), BOOL);
                let half = any::cast(op, f, DType::F16)?;
                let upper = any::cast(op, shr(B::bitcast(half, DType::U16), 8), DType::U8)?;
                Ok(Prim::Int(B::int_mask_fill(any::int::<B>(upper), nan, int_scalar(DType::U8, 0x7E))))
            }
            Narrow::F8E4M3FN => e4m3fn::<B>(op, any::cast(op, p, DType::F32)?),
        }
    }
}

/// f32 values as E4M3FN bytes, as `Nx.Floating.dump_f8_e4m3fn`: clamped to ±448; below 2^-6
/// the subnormal `round(|x| 2^9)` (at most 7); else the exponent of `|x|` and the mantissa
/// `round((significand - 1) 8)` within 0..7; NaN is 0x7F.
fn e4m3fn<B: Extension>(op: &str, f: Prim<B>) -> NifResult<Prim<B>> {
    let x = any::float::<B>(f);
    let nan = B::float_is_nan(x.clone(), BOOL);
    let c = B::float_clamp(x, Scalar::Float(-448.0), Scalar::Float(448.0));
    let sign = shr(B::bitcast(Prim::Float(c.clone()), DType::U32), 31);
    let a = B::float_abs(c);
    let abits = any::cast(op, B::bitcast(Prim::Float(a.clone()), DType::U32), DType::I32)?;
    // The biased E4M3 exponent: the f32 exponent - 127 + 7.
    let exp = plus(shr(abits.clone(), 23), -120);
    // Rounding half away from zero of a non-negative v: floor(v + 0.5).
    let round = |v: B::FloatTensorPrimitive| B::float_floor(B::float_add_scalar(v, Scalar::Float(0.5)));
    let sub = round(B::float_mul_scalar(a, Scalar::Float(512.0)));
    let sub = any::cast(op, Prim::Float(B::float_clamp_max(sub, Scalar::Float(7.0))), DType::I32)?;
    // The significand in [1, 2): the mantissa bits under the exponent of 1.
    let significand = B::bitcast(or_k(and(abits, 0x7F_FFFF), 127 << 23), DType::F32);
    let eighths = B::float_mul_scalar(B::float_add_scalar(any::float::<B>(significand), Scalar::Float(-1.0)), Scalar::Float(8.0));
    let mantissa = any::cast(op, Prim::Float(B::float_clamp(round(eighths), Scalar::Float(0.0), Scalar::Float(7.0))), DType::I32)?;
    let normal = or(shl(exp.clone(), 3), mantissa);
    let tiny = B::int_lower_equal_elem(any::int::<B>(exp), int_scalar(DType::I32, 0), BOOL);
    let bits = or(any::select_where(tiny, sub, normal), shl(any::cast(op, sign, DType::I32)?, 7));
    let byte = any::cast(op, and(bits, 0xFF), DType::U8)?;
    Ok(Prim::Int(B::int_mask_fill(any::int::<B>(byte), nan, int_scalar(DType::U8, 0x7F))))
}

// Integer ops with a scalar, in the tensor's own dtype.

fn and<B: Extension>(p: Prim<B>, v: i128) -> Prim<B> {
    let s = int_scalar(p.dtype(), v);
    Prim::Int(B::bitwise_and_scalar(any::int::<B>(p), s))
}

fn xor<B: Extension>(p: Prim<B>, v: i128) -> Prim<B> {
    let s = int_scalar(p.dtype(), v);
    Prim::Int(B::bitwise_xor_scalar(any::int::<B>(p), s))
}

fn plus<B: Extension>(p: Prim<B>, v: i128) -> Prim<B> {
    let s = int_scalar(p.dtype(), v);
    Prim::Int(B::int_add_scalar(any::int::<B>(p), s))
}

fn shl<B: Extension>(p: Prim<B>, v: i128) -> Prim<B> {
    let s = int_scalar(p.dtype(), v);
    Prim::Int(B::bitwise_left_shift_scalar(any::int::<B>(p), s))
}

fn shr<B: Extension>(p: Prim<B>, v: i128) -> Prim<B> {
    let s = int_scalar(p.dtype(), v);
    Prim::Int(B::bitwise_right_shift_scalar(any::int::<B>(p), s))
}

fn or_k<B: Extension>(p: Prim<B>, v: i128) -> Prim<B> {
    let s = int_scalar(p.dtype(), v);
    Prim::Int(B::bitwise_or_scalar(any::int::<B>(p), s))
}

fn or<B: Extension>(a: Prim<B>, b: Prim<B>) -> Prim<B> {
    Prim::Int(B::bitwise_or(any::int::<B>(a), any::int::<B>(b)))
}

/// The dtype named by option `key`, a narrow type standing for the dtype it computes in.
pub fn dtype_opt(op: &str, opts: &Opts, key: &str) -> NifResult<DType> {
    let name = opts.name(op, key, None)?;
    match Narrow::parse(&name) {
        Some(n) => Ok(n.compute()),
        None => crate::dtype::parse(op, &name),
    }
}

/// The narrow types named by option `key` (one name per tensor, "" for the others; absent:
/// none).
pub fn list(op: &str, opts: &Opts, key: &str, n: usize) -> NifResult<Vec<Option<Narrow>>> {
    match opts.get(key) {
        None => Ok(vec![None; n]),
        Some(OptVal::List(items)) if items.len() == n => items
            .iter()
            .map(|v| match v {
                OptVal::Str(s) | OptVal::Atom(s) if s.is_empty() => Ok(None),
                OptVal::Str(s) | OptVal::Atom(s) => Narrow::parse(s).map(Some).ok_or_else(|| NifError::new(op, format!("option {key}: {s} is not a narrow type"), "f8, f8_e4m3fn, s2, s4, u2, u4")),
                other => Err(NifError::new(op, format!("option {key} holds type names"), format!("{other:?}"))),
            })
            .collect(),
        Some(other) => Err(NifError::new(op, format!("option {key} must hold one name per tensor"), format!("{other:?} for {n}"))),
    }
}

/// `inputs` with each narrow one (stored in its container) decoded.
pub fn decode_inputs<B: Extension>(op: &str, opts: &Opts, inputs: Vec<Prim<B>>) -> NifResult<Vec<Prim<B>>> {
    let kinds = list(op, opts, "narrow", inputs.len())?;
    inputs
        .into_iter()
        .zip(kinds)
        .map(|(p, k)| match k {
            Some(n) if p.dtype() == n.storage() => n.decode(op, p),
            Some(n) => Err(NifError::new(op, format!("a {n:?} input must be stored as {:?}", n.storage()), p.describe())),
            None => Ok(p),
        })
        .collect()
}

/// `results` with each narrow one (option `narrow_out`) encoded.
pub fn encode_outputs<B: Extension>(op: &str, opts: &Opts, results: Vec<Prim<B>>) -> NifResult<Vec<Prim<B>>> {
    let Some(OptVal::List(names)) = opts.get("narrow_out") else { return Ok(results) };
    let kinds = list(op, opts, "narrow_out", names.len())?;
    results.into_iter().enumerate().map(|(k, p)| match kinds.get(k).copied().flatten() {
        Some(n) => n.encode(op, p),
        None => Ok(p),
    }).collect()
}
