//! The `#[cube]` kernels of ExCubecl.
//!
//! One module per kernel family, each with a comptime `…Op` enum: a new op is a variant and a
//! match arm, not a new kernel. Kernels are generic over their element types and are
//! specialised per dtype at launch through `#[define(..)]` storage-type arguments. This crate
//! depends on cubecl only and knows nothing of Burn; the host-side launch code lives in the
//! `ex_cubecl` crate (`src/launch/`).
//!
//! Conventions shared by every kernel:
//! - Outputs are contiguous; `ABSOLUTE_POS` walks them linearly and every kernel starts with a
//!   bounds guard, so that launches may round the unit count up.
//! - Inputs are strided views: a `Tensor` argument whose shape is the iteration shape and whose
//!   strides are the view's (0 on broadcast dimensions), plus an element offset argument.
//! - Index tensors are read as signed 64-bit-safe values and checked against the dimension;
//!   an index out of range never reads or writes outside a buffer.
#![warn(missing_docs)]

// The `#[cube]` macros generate undocumented items; each module documents its kernels.
#[allow(missing_docs)]
pub mod attention;
#[allow(missing_docs)]
pub mod bf16;
#[allow(missing_docs)]
pub mod binary;
#[allow(missing_docs)]
pub mod compare;
#[allow(missing_docs)]
pub mod conv;
#[allow(missing_docs)]
pub mod conv_cmma;
#[allow(missing_docs)]
pub mod conv_mma;
#[allow(missing_docs)]
pub mod conv_tma;
#[allow(missing_docs)]
pub mod conv_direct;
#[allow(missing_docs)]
pub mod conv_gemm;
#[allow(missing_docs)]
pub mod conv_weight_cmma;
#[allow(missing_docs)]
pub mod conv_weight_mma;
#[allow(missing_docs)]
pub mod conv_weight_gemm;
#[allow(missing_docs)]
pub mod flash_attention;
#[allow(missing_docs)]
pub mod flash_attention_mma;
#[allow(missing_docs)]
pub mod fused;
#[allow(missing_docs)]
pub mod fused_int;
#[allow(missing_docs)]
pub mod fused_matmul;
#[allow(missing_docs)]
pub mod fused_reduce;
#[allow(missing_docs)]
pub mod fused_reduce_vec;
#[allow(missing_docs)]
pub mod fused_vec;
#[allow(missing_docs)]
pub mod copy;
#[allow(missing_docs)]
pub mod ctc;
#[allow(missing_docs)]
pub mod cumulative;
#[allow(missing_docs)]
pub mod deform_conv;
#[allow(missing_docs)]
pub mod fft;
#[allow(missing_docs)]
pub mod index;
#[allow(missing_docs)]
pub mod index_nd;
#[allow(missing_docs)]
pub mod interpolate;
#[allow(missing_docs)]
pub mod math;
#[allow(missing_docs)]
pub mod mask;
#[allow(missing_docs)]
pub mod matmul;
#[allow(missing_docs)]
pub mod norm;
#[allow(missing_docs)]
pub mod optim;
#[allow(missing_docs)]
pub mod pool;
#[allow(missing_docs)]
pub mod quantize;
#[allow(missing_docs)]
pub mod random;
#[allow(missing_docs)]
pub mod reduce;
#[allow(missing_docs)]
pub mod reduce_pair;
#[allow(missing_docs)]
pub mod reduce_vec;
#[allow(missing_docs)]
pub mod softmax;
#[allow(missing_docs)]
pub mod sort;
#[allow(missing_docs)]
pub mod split_sum;
#[allow(missing_docs)]
pub mod strided;
#[allow(missing_docs)]
pub mod tensor_core;
#[allow(missing_docs)]
pub mod unary;
