//! Scaled dot-product attention, in one of three ways:
//!
//! - fused on `mma.sync` (`ex_cubecl_kernels::flash_attention_mma`): f16 and bf16, and f32
//!   rounded to TF32 under [`MatmulPrecision::Tf32`](super::matmul::MatmulPrecision), where
//!   the device has manual MMA (CUDA, Ampere and later) and queries, keys and values can be
//!   read in 16-byte chunks along the head dimension, for head dimensions up to
//!   [`MAX_FUSED_DIM`]; on Hopper its keys and values come by TMA where they can
//!   ([`super::attention_tma`]);
//! - fused (flash attention, `ex_cubecl_kernels::flash_attention`): one kernel streams keys
//!   and values through shared memory with a running softmax, on the matrix units (f16, bf16,
//!   and f32 rounded to TF32 when
//!   [`MatmulPrecision::Tf32`](super::matmul::MatmulPrecision) is chosen) or on plain arithmetic units (exact
//!   f32, devices without matrix units), for head dimensions up to [`MAX_FUSED_DIM`];
//! - unfused, for wider heads and other dtypes: `Q·Kᵀ` (matmul), one pass from scores to
//!   probabilities (scale, soft cap, masks, bias, NaN-safe softmax), and `P·V` (matmul).
use burn_backend::ops::AttentionModuleOptions;
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::ir::StorageType;
use cubecl::prelude::{ComputeClient, CubeDim};
use ex_cubecl_kernels::attention::attention_probs;
use ex_cubecl_kernels::flash_attention::flash_attention;
use ex_cubecl_kernels::flash_attention_mma::{FlashTile, flash_attention_mma};

use super::attention_tma::{kv_maps, launch_tma};
use super::bf16;
use super::conv::check_float;
use super::matmul::{MatmulPrecision, cmma_operand, matmul_precision, vector_size};
use super::matmul_mma::{chunked, fragment_type, has_mma};
use super::{accumulator, accumulator_dtype, float_arg, matmul::matmul};
use crate::runtime::{Geometry, launch, storage_type};
use crate::tensor::CubeTensor;

/// The widest query/key and value head dimensions the fused kernel takes.
pub const MAX_FUSED_DIM: usize = 128;

/// How the fused kernel runs: `warps` planes of 32 units (16 query rows each), key tiles of
/// `block_kv`, head dimensions padded to `d_pad` and `dv_pad`, and the matrix units' operand
/// type and instruction K where they compute the products.
#[derive(Clone, Copy, Debug)]
struct FlashPlan {
    warps: usize,
    block_kv: usize,
    d_pad: usize,
    dv_pad: usize,
    tensor_cores: Option<(StorageType, usize)>,
}

/// The fused kernel's plan for `dtype` and head dimensions `d`, `dv`, or `None` where it
/// doesn't apply (other dtypes, wider heads, too little shared memory).
fn flash_plan<R: Runtime>(client: &ComputeClient<R>, dtype: DType, d: usize, dv: usize, warps: Option<usize>) -> Option<FlashPlan> {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) || d > MAX_FUSED_DIM || dv > MAX_FUSED_DIM {
        return None;
    }
    let (d_pad, dv_pad) = (d.div_ceil(16).max(1) * 16, dv.div_ceil(16).max(1) * 16);
    let tensor_cores = cmma_operand(client, dtype);
    let max_shared = client.properties().hardware.max_shared_memory_size;
    let shapes = match warps {
        Some(w) => vec![(w, 64), (w, 32)],
        None => vec![(4, 64), (4, 32), (2, 32)],
    };
    shapes
        .into_iter()
        .filter(|&(w, _)| w > 0)
        .map(|(warps, block_kv)| FlashPlan { warps, block_kv, d_pad, dv_pad, tensor_cores })
        .find(|p| flash_shared_bytes(p, dtype) <= max_shared)
}

/// Shared memory of the fused kernel, in bytes: queries, keys, values and probabilities in
/// the tensors' type (rows padded by 16 bytes), scores in f32, and the row statistics.
fn flash_shared_bytes(p: &FlashPlan, dtype: DType) -> usize {
    let elem = storage_type(dtype).size();
    let pad = 16 / elem;
    let block_q = 16 * p.warps;
    let lds = p.block_kv.max(p.dv_pad) + 4;
    let typed = block_q * (p.d_pad + pad) + p.block_kv * (p.d_pad + pad) + p.block_kv * (p.dv_pad + pad) + block_q * (p.block_kv + pad);
    typed * elem + block_q * lds * 4 + block_q * 2 * 4
}

/// `softmax(mask(Q·Kᵀ · scale) + bias) · V` for `[batch, heads, seq, dim]` tensors.
pub fn attention<R: Runtime>(
    query: CubeTensor<R>,
    key: CubeTensor<R>,
    value: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    options: AttentionModuleOptions,
) -> CubeTensor<R> {
    attention_with(query, key, value, mask, bias, options, None)
}

/// [`attention`] with the fused kernels' shape chosen by the caller (for benchmarks and
/// tuning); `None` picks the default. Ignored where no fused kernel runs.
#[doc(hidden)]
pub fn attention_with<R: Runtime>(
    query: CubeTensor<R>,
    key: CubeTensor<R>,
    value: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    options: AttentionModuleOptions,
    tuning: Option<FlashTuning>,
) -> CubeTensor<R> {
    let op = "attention";
    let mut all = vec![("query", &query), ("key", &key), ("value", &value)];
    all.extend(bias.as_ref().map(|b| ("attn_bias", b)));
    check_float(op, &all);
    if query.bf16_bits() {
        let (key, value, bias) = (bf16::widen(key), bf16::widen(value), bf16::widen_opt(bias));
        return bf16::map(query, |q| attention_with(q, key, value, mask, bias, options, tuning));
    }
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

    let flags = (mask.is_some(), bias.is_some(), options.softcap.is_some(), options.is_causal);
    if let Some(tile) = mma_tile(&query, &key, &value, flags, tuning) {
        return fused_mma(op, query, key, value, mask, bias, options, tile);
    }
    match flash_plan(&query.client, query.dtype, q[3], v[3], tuning.map(|t| t.warps)) {
        Some(plan) => fused(op, query, key, value, mask, bias, options, plan),
        None => unfused(op, query, key, value, mask, bias, options),
    }
}

/// How the fused kernels run (for benchmarks and tuning): planes per cube (16 query rows
/// each), and for the `mma.sync` kernel keys per tile and whether queries are read again at
/// every key tile instead of held in registers.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashTuning {
    /// Planes per cube.
    pub warps: usize,
    /// Keys per tile of the `mma.sync` kernel (a multiple of 16).
    pub block_kv: usize,
    /// Query fragments read from shared memory at every key tile.
    pub reload_q: bool,
}

/// The `mma.sync` kernel's default: 4 planes, 64 keys per tile; f16 / bf16 queries read again
/// at every key tile (fewer live registers, the same speed), TF32 queries held in registers
/// (reading them again costs eight shared loads per key tile and unit). On an H200 at [4, 16, 1024, 64] (2026-11-27, two runs of one
/// session) f16 ran 0.137 / 0.139 ms reloading its queries and 0.138 / 0.142 holding them,
/// f32 as TF32 0.462 / 0.390 against 0.405 / 0.401; two or eight planes, or 32 keys, were
/// slower (f16 0.149-0.162, f32 0.410-0.649, another machine).
fn mma_tuning(tf32: bool) -> FlashTuning {
    FlashTuning { warps: 4, block_kv: 64, reload_q: !tf32 }
}

/// The `mma.sync` kernel's tile for these operands and `(mask, bias, softcap, causal)`, or
/// `None` where it doesn't apply: other dtypes (f32 only under the TF32 precision) or
/// devices, heads wider than [`MAX_FUSED_DIM`], operands that can't be read in 16-byte chunks
/// along the head dimension, too little shared memory, or a `tuning` it can't take (`None`:
/// the default, [`mma_tuning`]).
fn mma_tile<R: Runtime>(
    query: &CubeTensor<R>,
    key: &CubeTensor<R>,
    value: &CubeTensor<R>,
    (has_mask, has_bias, has_softcap, causal): (bool, bool, bool, bool),
    tuning: Option<FlashTuning>,
) -> Option<FlashTile> {
    let client = &query.client;
    let dtype = query.dtype;
    let tf32 = match dtype {
        DType::F16 | DType::BF16 => false,
        DType::F32 if matmul_precision() == MatmulPrecision::Tf32 => true,
        _ => return None,
    };
    // TF32 rows are read at 8 chunks of 4 at least (the swizzles' span).
    let (chunk, min_pad) = if tf32 { (4, 32) } else { (8, 16) };
    let (d, dv) = (query.dims()[3], value.dims()[3]);
    if !has_mma(client, dtype, tf32) || d > MAX_FUSED_DIM || dv > MAX_FUSED_DIM || ![query, key, value].iter().all(|t| chunked(&t.layout, 3, chunk)) {
        return None;
    }
    let pad = |n: usize| n.max(min_pad).next_power_of_two();
    let FlashTuning { warps, block_kv, reload_q } = tuning.unwrap_or(mma_tuning(tf32));
    let (d_pad, dv_pad) = (pad(d), pad(dv));
    let tile = FlashTile { warps, block_kv, d_pad, dv_pad, has_mask, has_bias, has_softcap, causal, tf32, reload_q, tma: false };
    let units = 32 * warps;
    let divides = |cols: usize| (block_kv * cols / chunk) % units == 0;
    let elem = storage_type(dtype).size();
    let shared = (16 * warps * d_pad + 2 * block_kv * (d_pad + dv_pad)) * elem;
    let fits = warps > 0
        && block_kv > 0
        && block_kv % 16 == 0
        && divides(d_pad)
        && divides(dv_pad)
        && shared <= client.properties().hardware.max_shared_memory_size;
    fits.then_some(tile)
}

/// The `mma.sync` kernel, its keys and values by TMA where [`kv_maps`] allows; `mask` and
/// `bias` are views of the scores' shape.
#[allow(clippy::too_many_arguments)]
fn fused_mma<R: Runtime>(
    op: &str,
    query: CubeTensor<R>,
    key: CubeTensor<R>,
    value: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    options: AttentionModuleOptions,
    tile: FlashTile,
) -> CubeTensor<R> {
    let (q, v) = (query.dims().to_vec(), value.dims().to_vec());
    let dtype = query.dtype;
    let out = CubeTensor::empty(&query.client, &query.device, Shape::new([q[0], q[1], q[2], v[3]]), dtype);
    let cubes = q[0] * q[1] * q[2].div_ceil(16 * tile.warps);
    let scale = options.scale.unwrap_or(1.0 / (q[3] as f64).sqrt());
    let softcap = options.softcap.unwrap_or(1.0);
    let tiny = dtype.finfo().expect("float dtype").min_positive;
    let mask = mask.unwrap_or_else(|| query.clone());
    let bias = bias.unwrap_or_else(|| query.clone());
    if let Some(maps) = kv_maps(&key, &value, &tile) {
        launch_tma(op, (query, key, value), (mask, bias), &out, maps, tile, (scale, softcap, tiny), cubes);
        return out;
    }
    let geometry = Geometry::Cubes { count: if out.num_elements() == 0 { 0 } else { cubes }, dim: CubeDim::new_1d(32 * tile.warps as u32) };
    let f32_arg = |x: f64| float_arg(x, DType::F32);
    let (scale, softcap, tiny) = (f32_arg(scale), f32_arg(softcap), f32_arg(tiny));
    let dtypes = [query.storage(), fragment_type(dtype, tile.tf32), mask.storage()];
    let chunk = tile.chunk();
    let out_arg = out.clone();
    launch(&out.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave uniformly before any barrier; query, key and value
        // chunks are read only inside their sequence lengths and head dimensions (checked per
        // chunk, zero-filled past them), mask and bias reads are guarded by the query row and
        // key (both views of the scores' shape), output writes by the query row and value
        // dimension; shared-memory indices stay inside the tiles.
        unsafe {
            flash_attention_mma::launch_unchecked::<R>(
                client, count, dim, chunk, query.as_arg(), key.as_arg(), value.as_arg(), mask.as_arg(), bias.as_arg(),
                out_arg.as_arg(), query.layout.offset, key.layout.offset, value.layout.offset, mask.layout.offset,
                bias.layout.offset, scale, softcap, tiny, cubes, tile, dtypes,
            )
        }
    });
    out
}

/// Whether attention on these operands (mask and bias present or not, `options`) runs the
/// `mma.sync` kernel with its keys and values by TMA (for tests).
#[doc(hidden)]
pub fn attention_uses_tma<R: Runtime>(
    query: &CubeTensor<R>,
    key: &CubeTensor<R>,
    value: &CubeTensor<R>,
    (has_mask, has_bias): (bool, bool),
    options: AttentionModuleOptions,
) -> bool {
    let flags = (has_mask, has_bias, options.softcap.is_some(), options.is_causal);
    !query.bf16_bits() && mma_tile(query, key, value, flags, None).is_some_and(|tile| kv_maps(key, value, &tile).is_some())
}

/// The fused kernel; `mask` and `bias` are views of the scores' shape.
#[allow(clippy::too_many_arguments)]
fn fused<R: Runtime>(
    op: &str,
    query: CubeTensor<R>,
    key: CubeTensor<R>,
    value: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    options: AttentionModuleOptions,
    plan: FlashPlan,
) -> CubeTensor<R> {
    let (q, v) = (query.dims().to_vec(), value.dims().to_vec());
    let dtype = query.dtype;
    let out = CubeTensor::empty(&query.client, &query.device, Shape::new([q[0], q[1], q[2], v[3]]), dtype);
    let block_q = 16 * plan.warps;
    let cubes = q[0] * q[1] * q[2].div_ceil(block_q);
    let geometry = Geometry::Cubes { count: if out.num_elements() == 0 { 0 } else { cubes }, dim: CubeDim::new_1d(32 * plan.warps as u32) };
    let f32_arg = |x: f64| float_arg(x, DType::F32);
    let info = dtype.finfo().expect("float dtype");
    let scale = f32_arg(options.scale.unwrap_or(1.0 / (q[3] as f64).sqrt()));
    let softcap = f32_arg(options.softcap.unwrap_or(1.0));
    let (lowest, tiny) = (f32_arg(info.min), f32_arg(info.min_positive));
    let (has_mask, has_bias) = (mask.is_some(), bias.is_some());
    let mask = mask.unwrap_or_else(|| query.clone());
    let bias = bias.unwrap_or_else(|| query.clone());
    let (operand, frag_k) = plan.tensor_cores.unwrap_or((accumulator(dtype), 16));
    let pad = 16 / query.storage().size();
    let dtypes = [query.storage(), operand, mask.storage()];
    // Vulkan drivers compile fully unrolled loops slowly (seconds on lavapipe).
    let unroll = !R::name(&query.client).starts_with("wgpu");
    let hardware = &query.client.properties().hardware;
    let plane_sync = hardware.plane_size_min == 32 && hardware.plane_size_max == 32;
    // Queries, keys and values are read in the widest vector that all three allow.
    let nv = [&query, &key, &value].into_iter().map(|t| vector_size(&t.client, &t.layout, dtype, 8)).min().unwrap_or(1);
    let out_arg = out.clone();
    launch(&out.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave uniformly before any barrier; query, key and value
        // reads are guarded by their sequence lengths and head dimensions, mask and bias reads
        // by the query row and key (both views of the scores' shape), output writes by the
        // query row and value dimension; shared-memory indices stay inside the tiles.
        unsafe {
            flash_attention::launch_unchecked::<R>(
                client, count, dim, nv, query.as_arg(), key.as_arg(), value.as_arg(), mask.as_arg(), bias.as_arg(),
                out_arg.as_arg(), query.layout.offset, key.layout.offset, value.layout.offset, mask.layout.offset,
                bias.layout.offset, scale, softcap, lowest, tiny, cubes, has_mask, has_bias, options.softcap.is_some(),
                options.is_causal, plan.tensor_cores.is_some(), plan.warps, plan.block_kv, plan.d_pad, plan.dv_pad,
                frag_k, pad, unroll, plane_sync, dtypes,
            )
        }
    });
    out
}

/// `Q·Kᵀ` (matmul), the fused pass from scores to probabilities, and `P·V` (matmul);
/// `mask` and `bias` are views of the scores' shape.
fn unfused<R: Runtime>(
    op: &str,
    query: CubeTensor<R>,
    key: CubeTensor<R>,
    value: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    options: AttentionModuleOptions,
) -> CubeTensor<R> {
    let (q, k) = (query.dims().to_vec(), key.dims().to_vec());
    let scores_shape = Shape::new([q[0], q[1], q[2], k[2]]);
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
