//! Scaled dot-product attention: `Q·Kᵀ` (matmul), one fused pass from scores to
//! probabilities (scale, soft cap, masks, bias, NaN-safe softmax), and `P·V` (matmul).
use burn_backend::ops::AttentionModuleOptions;
use burn_backend::Shape;
use cubecl::Runtime;
use ex_cubecl_kernels::attention::attention_probs;

use super::conv::check_float;
use super::{accumulator, accumulator_dtype, float_arg, matmul::matmul};
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// `softmax(mask(Q·Kᵀ · scale) + bias) · V` for `[batch, heads, seq, dim]` tensors.
pub fn attention<R: Runtime>(
    query: CubeTensor<R>,
    key: CubeTensor<R>,
    value: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    options: AttentionModuleOptions,
) -> CubeTensor<R> {
    let op = "attention";
    let mut all = vec![("query", &query), ("key", &key), ("value", &value)];
    all.extend(bias.as_ref().map(|b| ("attn_bias", b)));
    check_float(op, &all);
    let (q, k, v) = (query.dims().to_vec(), key.dims().to_vec(), value.dims().to_vec());
    let fits = q.len() == 4 && k.len() == 4 && v.len() == 4 && q[..2] == k[..2] && k[..3] == v[..3] && q[3] == k[3];
    if !fits {
        panic!("ex_cubecl: {op}: expected query [b, h, sq, d], key [b, h, sk, d] and value [b, h, sk, dv]; got {q:?}, {k:?}, {v:?} ({:?})", query.dtype);
    }
    if let Some(cap) = options.softcap
        && cap.partial_cmp(&0.0) != Some(core::cmp::Ordering::Greater)
    {
        panic!("ex_cubecl: {op}: softcap must be positive, got {cap}");
    }
    let scores_shape = Shape::new([q[0], q[1], q[2], k[2]]);
    let view = |t: &CubeTensor<R>, name: &str| {
        let layout = t.layout.broadcast_to(&scores_shape).unwrap_or_else(|| {
            panic!("ex_cubecl: {op}: {name} {:?} ({:?}) does not broadcast to the scores {:?}", t.dims(), t.dtype, scores_shape.as_slice())
        });
        t.with_layout(layout)
    };
    let mask = mask.map(|m| {
        if !m.dtype.is_bool() {
            panic!("ex_cubecl: {op}: mask must be a bool tensor, got {:?} {:?}", m.dims(), m.dtype);
        }
        view(&m, "mask")
    });
    let bias = bias.map(|b| view(&b, "attn_bias"));

    let dtype = query.dtype;
    let key_t = key.with_layout(key.layout.swap(2, 3));
    let scores = matmul(op, query, key_t);
    let probs = CubeTensor::empty(&scores.client, &scores.device, scores_shape, dtype);
    let rows = q[0] * q[1] * q[2];
    let acc = accumulator_dtype(dtype);
    let info = dtype.finfo().expect("float dtype");
    let scale = float_arg(options.scale.unwrap_or(1.0 / (q[3] as f64).sqrt()), acc);
    let softcap = float_arg(options.softcap.unwrap_or(1.0), acc);
    let (lowest, tiny) = (float_arg(info.min, acc), float_arg(info.min_positive, acc));
    let mask_ref = mask.as_ref().unwrap_or(&scores);
    let bias_ref = bias.as_ref().unwrap_or(&scores);
    let mask_storage = mask.as_ref().map_or(scores.storage(), |m| m.storage());
    if k[2] > 0 {
        let (mask_ref, bias_ref, p) = (mask_ref.clone(), bias_ref.clone(), probs.clone());
        launch(&probs.client, op, Geometry::Units(rows), move |client, count, dim| {
            // SAFETY: the kernel guards `row < rows`; mask and bias are views of the scores'
            // shape, read within it.
            unsafe {
                attention_probs::launch_unchecked::<R>(
                    client, count, dim, scores.as_arg(), mask_ref.as_arg(), bias_ref.as_arg(), p.as_arg(),
                    mask_ref.layout.offset, bias_ref.layout.offset, scale, softcap, lowest, tiny, rows, mask.is_some(),
                    bias.is_some(), options.softcap.is_some(), options.is_causal,
                    [scores.storage(), mask_storage, accumulator(dtype)],
                )
            }
        });
    }
    matmul(op, probs, value)
}
