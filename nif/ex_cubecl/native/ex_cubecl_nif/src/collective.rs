//! `all_reduce/2`: the all-reduce of tensors on several devices of one runtime (one per
//! device), through `ex_cubecl::runtime::collective`: NCCL on CUDA where it is installed, the
//! host-staged all-reduce elsewhere (wgpu). Tracked tensors come back untracked: the
//! all-reduce is for gradients and weights between steps, not part of a graph.
use ex_cubecl::runtime::{ReduceOp, collective};

use crate::error::{NifError, NifResult};
use crate::tensor::{AnyPrim, Prim, from_inner, to_inner};

/// The all-reduce of `inputs` with `op` (`"sum"` or `"mean"`), one result per input, on its
/// input's device.
pub fn all_reduce(inputs: Vec<AnyPrim>, op: &str) -> NifResult<Vec<AnyPrim>> {
    const OP: &str = "all_reduce";
    let op = match op {
        "sum" => ReduceOp::Sum,
        "mean" => ReduceOp::Mean,
        other => return Err(NifError::new(OP, format!("unknown reduction {other:?}"), "reductions: sum, mean")),
    };
    let Some(first) = inputs.first() else {
        return Err(NifError::new(OP, "no tensors", "give one tensor per device"));
    };
    let (shape, dtype) = (first.shape(), first.dtype());
    let mut devices = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        if t.shape() != shape || t.dtype() != dtype {
            return Err(NifError::new(
                OP,
                "the tensors differ in shape or type",
                format!("tensor {i} is {}, tensor 0 is {}", t.describe(), first.describe()),
            ));
        }
        if !ex_cubecl::runtime::REDUCIBLE_DTYPES.contains(&dtype) {
            return Err(NifError::new(OP, format!("type {} is not supported", t.describe()), "types: f32, f16, bf16, f64"));
        }
        let spec = t.device().spec();
        if devices.contains(&spec) {
            return Err(NifError::new(OP, "two tensors are on one device", format!("tensor {i} is on {spec}; give one tensor per device")));
        }
        devices.push(spec);
    }
    macro_rules! on {
        ($variant:ident, $B:ty) => {{
            let cubes = inputs
                .into_iter()
                .map(|p| match p {
                    AnyPrim::$variant(p) => match to_inner::<$B>(p) {
                        Prim::Float(t) => Ok(t),
                        other => Err(NifError::new(OP, "not a float tensor", other.describe())),
                    },
                    #[allow(unreachable_patterns)]
                    other => Err(NifError::new(OP, "the tensors are on different runtimes", other.describe())),
                })
                .collect::<NifResult<Vec<_>>>()?;
            Ok(collective::all_reduce(cubes, op)
                .into_iter()
                .map(|t| AnyPrim::$variant(from_inner::<$B>(Prim::Float(t))))
                .collect())
        }};
    }
    match first {
        AnyPrim::Wgpu(_) => on!(Wgpu, crate::tensor::AdWgpu),
        #[cfg(feature = "cuda")]
        AnyPrim::Cuda(_) => on!(Cuda, crate::tensor::AdCuda),
    }
}
