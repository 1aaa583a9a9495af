//! Quantization: float tensors to 8-bit symmetric values with one f32 scale per tensor or per
//! block of the last axis, and back. Burn's `Autodiff` doesn't track quantized tensors, so
//! these always run on the inner backend (see `crate::run`).
use burn_backend::quantization::{QuantLevel, QuantScheme, QuantStore, QuantValue};
use burn_backend::{Backend, FloatDType};

use super::{dtype_opt, float, take};
use crate::dtype::{Class, class, name};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let [x] = take::<B, 1>(op, inputs)?;
    Ok(vec![match op {
        "quantize" => {
            let scheme = scheme(op, opts, &x)?;
            Prim::Quant(B::quantize_dynamic(float(op, x)?, &scheme))
        }
        _ => {
            let Prim::Quant(q) = x else {
                return Err(NifError::new(
                    op,
                    "expects a quantized tensor (from quantize)",
                    x.describe(),
                ));
            };
            let dtype = dtype_opt(op, opts, "dtype", Some("f32"))?;
            if class(dtype) != Class::Float {
                return Err(NifError::new(
                    op,
                    format!("dequantizes to a float dtype, not {}", name(dtype)),
                    "dtype: :f32, :f16, :bf16 or :f64",
                ));
            }
            Prim::Float(B::dequantize(q, FloatDType::from(dtype)))
        }
    }])
}

/// The scheme of options `value` (`q8s`, symmetric range -127..127, or `q8f`, full range
/// -128..127) and `block_size` (elements per scale along the last axis; absent: one scale).
fn scheme<B: Backend>(op: &str, opts: &Opts, x: &Prim<B>) -> NifResult<QuantScheme> {
    let value = match opts.name(op, "value", Some("q8s"))?.as_str() {
        "q8s" => QuantValue::Q8S,
        "q8f" => QuantValue::Q8F,
        other => {
            return Err(NifError::new(
                op,
                format!("unknown quantization value {other:?}"),
                "value: :q8s or :q8f",
            ));
        }
    };
    let base = QuantScheme::default()
        .with_value(value)
        .with_store(QuantStore::Native);
    if !opts.has("block_size") {
        return Ok(base.with_level(QuantLevel::Tensor));
    }
    let block = opts.int(op, "block_size", None)?;
    let shape = x.shape();
    let last = shape.as_slice().last().copied().unwrap_or(1);
    if !(1..=255).contains(&block) || last % block as usize != 0 {
        return Err(NifError::new(
            op,
            format!("block_size {block} must be 1..255 and divide the last dimension {last}"),
            x.describe(),
        ));
    }
    Ok(base.with_level(QuantLevel::block([block as u8])))
}
