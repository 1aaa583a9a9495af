//! Helpers shared by the module-op suites (`module.rs`: convolutions; `module_pool_attention.rs`:
//! pooling, resampling, attention, layer norm).
#![allow(dead_code)]
use burn_backend::ops::FloatTensorOps;
use burn_backend::{Backend, DType, TensorData, TensorMetadata};
use ex_cubecl_conformance::*;

/// Float dtypes for the module ops: every one the device computes but f64. The module
/// kernels are dtype-generic and their f64 arithmetic is checked by the float, reduce and
/// math_f64 suites; their f64 forms alone took over an hour of 2-core CI time on lavapipe.
pub fn module_dtypes() -> Vec<DType> {
    float_dtypes().into_iter().filter(|&d| d != DType::F64).collect()
}

/// How an input tensor is laid out: contiguous, last two dimensions swapped (uploaded
/// transposed, then swapped back as a view), or batch broadcast from one entry (stride 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lay {
    /// Contiguous.
    Contig,
    /// Last two dimensions swapped.
    Swapped,
    /// Batch broadcast from one entry.
    Expanded,
}

/// Uploads `data` laid out as `lay` (the values seen are the same on both backends).
pub fn up<B: Backend>(data: &TensorData, lay: Lay) -> B::FloatTensorPrimitive {
    let rank = data.shape.len();
    match lay {
        Lay::Swapped if rank >= 2 => B::float_swap_dims(f::<B>(data), rank - 2, rank - 1),
        Lay::Expanded if rank >= 1 && data.shape[0] > 0 => {
            let t = f::<B>(data);
            let shape = t.shape();
            let mut s = vec![burn_backend::Slice::new(0, None, 1); rank];
            s[0] = burn_backend::Slice::new(0, Some(1), 1);
            B::float_expand(B::float_slice(t, &s), shape)
        }
        _ => f::<B>(data),
    }
}

/// Random float data of `shape` in [-1, 1].
pub fn rand(rng: &mut Rng, shape: &[usize], dtype: DType) -> TensorData {
    float_data(rng, shape, dtype, -1.0, 1.0)
}

/// Compares each named output of ours and of the reference.
pub fn check_outputs(suite: &mut Suite, case: &str, names: &[&str], tol: Tol, ours: Result<Vec<TensorData>, String>, reference: Vec<TensorData>) {
    for (k, name) in names.iter().enumerate() {
        let mine = ours.as_ref().map(|v| v[k].clone()).map_err(|e| e.clone());
        suite.check(format!("{case} [{name}]"), tol, (mine, reference[k].clone()));
    }
}

pub fn tol(dtype: DType) -> Tol {
    Tol::of(2e-4).for_dtype(dtype)
}

/// Whether f32 products run on TF32 matrix units on this device (the default precision where
/// the device has them): then `[1 + 2⁻²⁰, ..] @ identity`, 16 × 16, comes out as exactly 1,
/// since TF32 keeps 10 mantissa bits.
pub fn tf32_products() -> bool {
    static TF32: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TF32.get_or_init(|| {
        let n = 16;
        let lhs = TensorData::new(vec![1.0f32 + 2f32.powi(-20); n * n], [n, n]);
        let eye = TensorData::new((0..n * n).map(|i| if i % (n + 1) == 0 { 1.0f32 } else { 0.0 }).collect::<Vec<_>>(), [n, n]);
        let out = rf::<Ex>(Ex::float_matmul(f::<Ex>(&lhs), f::<Ex>(&eye)));
        out.to_vec::<f32>().expect("f32")[0] == 1.0
    })
}

/// Tolerance of ops built on matrix products (the forward convolution, attention): TF32
/// operands (a 10-bit mantissa) where the device multiplies f32 on TF32 units.
pub fn product_tol(dtype: DType) -> Tol {
    if dtype == DType::F32 && tf32_products() { Tol::of(1e-2) } else { tol(dtype) }
}

/// Σ a·b in f64.
pub fn dot(a: &TensorData, b: &TensorData) -> f64 {
    values(a).iter().zip(values(b)).map(|(x, y)| x * y).sum()
}
