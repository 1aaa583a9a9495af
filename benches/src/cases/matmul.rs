//! Matrix products: square f32 (TF32 by default on both backends), f16 and bf16, a batched
//! product, a transposed operand, and ours in exact f32.
use burn_backend::{Backend, DType, TensorPrimitive};
use burn_tensor::Tensor;
use ex_cubecl::launch::matmul::{CmmaTiling, HALF_TILING_LARGE, TensorCoreKernel, matmul_with};
use ex_cubecl::{CubeTensor, MatmulPrecision, set_matmul_precision};

use super::{downcast, uniform};
use crate::{Case, DynCase, Precision, RunFn, Runtime, Size, Work};

/// How the product is computed.
#[derive(Clone, Copy, Debug)]
pub enum Variant {
    /// `lhs.matmul(rhs)` on both backends, default settings.
    Default,
    /// `lhs.matmul(rhs.T)` with `rhs` stored transposed (a strided view).
    TransposedRhs,
    /// Ours with `MatmulPrecision::Exact` (no peer: burn-cubecl has no such setting).
    Exact,
    /// Ours with a given tensor-core tiling (tuning).
    Tiling(TensorCoreKernel),
}

/// `[batch, m, k] @ [batch, k, n]`.
pub struct Matmul {
    /// Element type.
    pub dtype: DType,
    /// Batch size (1 prints no batch).
    pub batch: usize,
    /// Rows of the output.
    pub m: usize,
    /// Inner dimension.
    pub k: usize,
    /// Columns of the output.
    pub n: usize,
    /// How it is computed.
    pub variant: Variant,
}

/// The matmul cases at `size` (plus tiling variants of ours when `tune`).
pub fn cases(size: Size, tune: bool) -> Vec<Box<dyn DynCase>> {
    let s = match size {
        Size::Small => 256,
        Size::Full => 4096,
    };
    let (bs, bn) = match size {
        Size::Small => (4, 64),
        Size::Full => (64, 512),
    };
    let sq = |dtype, variant| Matmul { dtype, batch: 1, m: s, k: s, n: s, variant };
    let mut out: Vec<Box<dyn DynCase>> = vec![
        Box::new(sq(DType::F32, Variant::Default)),
        Box::new(sq(DType::F16, Variant::Default)),
        Box::new(sq(DType::BF16, Variant::Default)),
        Box::new(sq(DType::F32, Variant::Exact)),
        Box::new(sq(DType::F32, Variant::TransposedRhs)),
        Box::new(sq(DType::F16, Variant::TransposedRhs)),
        Box::new(Matmul { dtype: DType::F16, batch: bs, m: bn, k: bn, n: bn, variant: Variant::Default }),
        Box::new(Matmul { dtype: DType::F32, batch: bs, m: bn, k: bn, n: bn, variant: Variant::Default }),
    ];
    if tune {
        let t = |block_m, block_n, block_k, warps_m, warps_n, stages| CmmaTiling { block_m, block_n, block_k, warps_m, warps_n, stages };
        let half = [
            t(128, 256, 32, 2, 4, 4),
            t(128, 256, 32, 2, 4, 3),
            t(256, 128, 32, 4, 2, 3),
            t(128, 128, 32, 2, 2, 4),
            t(128, 128, 64, 2, 2, 3),
            t(128, 256, 64, 2, 4, 3),
            t(256, 128, 32, 4, 2, 4),
            t(64, 64, 32, 2, 2, 4),
            // K slices of 64 on tiles of 64 to 256: the TMA kernel where the device has TMA.
            t(128, 128, 64, 2, 2, 4),
            t(128, 256, 64, 2, 4, 4),
            t(256, 128, 64, 4, 2, 4),
        ];
        for tiling in half {
            for dtype in [DType::F16, DType::BF16] {
                out.push(Box::new(sq(dtype, Variant::Tiling(TensorCoreKernel::Mma(tiling)))));
            }
        }
        out.push(Box::new(sq(DType::F16, Variant::Tiling(TensorCoreKernel::Wmma(HALF_TILING_LARGE)))));
        out.push(Box::new(sq(DType::BF16, Variant::Tiling(TensorCoreKernel::Wmma(HALF_TILING_LARGE)))));
        for tiling in [
            t(128, 128, 32, 2, 2, 3),
            t(128, 128, 32, 2, 2, 4),
            t(128, 256, 32, 2, 4, 3),
            t(256, 128, 32, 4, 2, 3),
            t(128, 128, 64, 2, 2, 2),
            t(64, 64, 32, 2, 2, 4),
        ] {
            out.push(Box::new(sq(DType::F32, Variant::Tiling(TensorCoreKernel::Mma(tiling)))));
        }
        for tiling in [
            t(128, 128, 16, 2, 4, 6),
            t(128, 256, 16, 2, 4, 4),
            t(256, 128, 16, 4, 4, 4),
        ] {
            out.push(Box::new(sq(DType::F32, Variant::Tiling(TensorCoreKernel::Wmma(tiling)))));
        }
    }
    out
}

impl Case for Matmul {
    fn name(&self) -> String {
        let variant = match self.variant {
            Variant::Default => String::new(),
            Variant::TransposedRhs => " (rhs transposed)".into(),
            Variant::Exact => " exact (ours only)".into(),
            Variant::Tiling(kernel) => {
                let (name, t) = match kernel {
                    TensorCoreKernel::Wmma(t) => ("wmma", t),
                    TensorCoreKernel::Mma(t) => ("mma", t),
                };
                format!(
                    " {name} {}x{}x{} {}x{} warps {} stages (ours only)",
                    t.block_m, t.block_n, t.block_k, t.warps_m, t.warps_n, t.stages
                )
            }
        };
        format!("matmul {:?}{variant}", self.dtype).to_lowercase()
    }

    fn size(&self) -> String {
        let batch = if self.batch > 1 { format!("{}x", self.batch) } else { String::new() };
        format!("{batch}{}x{}x{}", self.m, self.k, self.n)
    }

    fn work(&self) -> Work {
        let precision = match (self.dtype, self.variant) {
            (DType::F32, Variant::Exact) => Precision::F32,
            (DType::F32, _) => Precision::Tf32,
            _ => Precision::Half,
        };
        Work::Flops(2.0 * (self.batch * self.m * self.k * self.n) as f64, precision)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        if !B::supports_dtype(device, self.dtype) {
            return None;
        }
        let ours = std::any::TypeId::of::<B>() == std::any::TypeId::of::<crate::Ours>();
        let only_ours = matches!(self.variant, Variant::Exact | Variant::Tiling(_));
        if only_ours && !ours {
            return None;
        }
        let (batch, m, k, n) = (self.batch, self.m, self.k, self.n);
        let lhs = uniform::<B, 3>([batch, m, k], 1, device).cast(self.dtype);
        let rhs = match self.variant {
            Variant::TransposedRhs => uniform::<B, 3>([batch, n, k], 2, device).cast(self.dtype).swap_dims(1, 2),
            _ => uniform::<B, 3>([batch, k, n], 2, device).cast(self.dtype),
        };
        let flat = |t: Tensor<B, 3>| t.flatten::<1>(0, 2);
        Some(match self.variant {
            Variant::Default | Variant::TransposedRhs => Box::new(move || flat(lhs.clone().matmul(rhs.clone()))),
            Variant::Exact => Box::new(move || {
                set_matmul_precision(MatmulPrecision::Exact);
                let out = lhs.clone().matmul(rhs.clone());
                set_matmul_precision(MatmulPrecision::Tf32);
                flat(out)
            }),
            Variant::Tiling(tiling) => {
                let prim = |t: Tensor<B, 3>| downcast::<CubeTensor<Runtime>, _>(t.into_primitive().tensor()).expect("ours");
                let (a, b) = (prim(lhs), prim(rhs));
                Box::new(move || {
                    let out = matmul_with("bench matmul", a.clone(), b.clone(), Some(tiling));
                    let out = downcast::<B::FloatTensorPrimitive, _>(out).expect("ours");
                    flat(Tensor::from_primitive(TensorPrimitive::Float(out)))
                })
            }
        })
    }
}
