//! Fused integer launches: an [`IntFusedOp`] chain over broadcast views of its inputs, in one
//! launch (`ex_cubecl_kernels::fused_int`).
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use ex_cubecl_kernels::fused::FusedRead;
use ex_cubecl_kernels::fused_int::{IntFusedProgram, fused_int};
pub use ex_cubecl_kernels::binary::BinaryIntOp;
pub use ex_cubecl_kernels::fused_int::IntFusedOp;

use super::fused::{buffers, read, read_strides, views};
use super::{divmods, usizes};
use crate::runtime::{Geometry, OpName, launch, storage_type};
use crate::tensor::CubeTensor;

/// The outputs of `ops` run elementwise over `shape`: output `j` is register `outputs[j]`,
/// where register `k` is input `k` (broadcast to `shape` as numpy does) and each op writes
/// the next register. Every input has the same integer dtype, which the outputs take; each
/// op gives the bits that Nx's own entry gives (see the kernel). One launch where the device
/// binds that many buffers, else the caller's op-by-op path must be used: see
/// [`int_fused_fits`].
///
/// # Panics
/// When an input has another dtype or isn't an integer, doesn't broadcast to `shape`, when an
/// op reads a register that isn't written yet, when an output names none, or when the device
/// can't bind that many buffers.
///
/// With `stacked`, the outputs come as one tensor: their concatenation along the first axis
/// (`shape` must have one), each written in place there.
pub fn int_fused<R: Runtime>(inputs: Vec<CubeTensor<R>>, shape: Shape, ops: Vec<IntFusedOp>, outputs: Vec<usize>, stacked: bool) -> Vec<CubeTensor<R>> {
    let first = inputs.first().unwrap_or_else(|| panic!("ex_cubecl: int_fused: no inputs (ops {ops:?})"));
    let (client, device, dtype) = (first.client.clone(), first.device.clone(), first.dtype);
    check(&inputs, dtype, &ops, &outputs);
    assert!(int_fused_fits(first, inputs.len(), outputs.len()), "ex_cubecl: int_fused: {} inputs and {} outputs are more buffers than the device binds", inputs.len(), outputs.len());
    assert!(!stacked || !shape.is_empty(), "ex_cubecl: int_fused: stacked outputs need a first axis, the shape is {:?}", shape.as_slice());
    let results: Vec<CubeTensor<R>> = match stacked {
        true => {
            let mut dims = shape.as_slice().to_vec();
            dims[0] *= outputs.len();
            vec![CubeTensor::empty(&client, &device, Shape::from(dims), dtype)]
        }
        false => outputs.iter().map(|_| CubeTensor::empty(&client, &device, shape.clone(), dtype)).collect(),
    };
    let n = shape.num_elements();
    if n == 0 {
        return results;
    }
    let views = views(&inputs, &[], &shape);
    let reads: Vec<FusedRead> = views.iter().map(read).collect();
    let (dims, strides) = read_strides(&shape, &views, &reads);
    let offsets: Vec<usize> = views.iter().map(|v| v.offset).collect();
    let name_ops = ops.clone();
    let name = OpName("int_fused", &name_ops);
    let program = IntFusedProgram { reads, ops, outputs, bits: (dtype.size() * 8) as u32, signed: is_signed(dtype), stacked };
    let outs = results.clone();
    launch(&client, &name, Geometry::Units(n), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < n`; every view lies inside its buffer (checked by
        // `views`) and every output holds `n` elements.
        unsafe {
            fused_int::launch_unchecked::<R>(
                client,
                count,
                dim,
                buffers(&inputs),
                buffers(&outs),
                usizes(&offsets),
                divmods(&dims),
                usizes(&strides),
                n,
                program.clone(),
                storage_type(dtype),
            )
        }
    });
    results
}

/// Whether one launch of `inputs` inputs and `outputs` outputs fits the device's bindings.
pub fn int_fused_fits<R: Runtime>(any: &CubeTensor<R>, inputs: usize, outputs: usize) -> bool {
    inputs + outputs <= any.client.properties().hardware.max_bindings as usize
}

fn is_signed(dtype: DType) -> bool {
    matches!(dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}

/// Panics unless every input is of the integer `dtype`, every op reads registers written
/// before it and every output names a register.
fn check<R: Runtime>(inputs: &[CubeTensor<R>], dtype: DType, ops: &[IntFusedOp], outputs: &[usize]) {
    let integer = matches!(dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U16 | DType::U32 | DType::U64);
    if !integer || inputs.iter().any(|t| t.dtype != dtype) {
        let described: Vec<String> = inputs.iter().map(|t| format!("{:?} {:?}", t.dims(), t.dtype)).collect();
        panic!("ex_cubecl: int_fused: the inputs must share one integer dtype, got {}", described.join(", "));
    }
    for (i, op) in ops.iter().enumerate() {
        let written = inputs.len() + i;
        let reads: Vec<usize> = match *op {
            IntFusedOp::Binary(b, x, y) => {
                assert!(!matches!(b, BinaryIntOp::Shl | BinaryIntOp::Shr), "ex_cubecl: int_fused: op {i}: shifts are ShiftLeft / ShiftRight");
                vec![x, y]
            }
            IntFusedOp::ShiftLeft(x, y) | IntFusedOp::ShiftRight(x, y) | IntFusedOp::Compare(_, x, y) => vec![x, y],
            IntFusedOp::Negate(x) | IntFusedOp::BitNot(x) => vec![x],
            IntFusedOp::Select(p, x, y) => vec![p, x, y],
            IntFusedOp::Const(_) => vec![],
        };
        if let Some(r) = reads.iter().find(|&&r| r >= written) {
            panic!("ex_cubecl: int_fused: op {i} ({op:?}) reads register {r}, but only {written} are written before it");
        }
    }
    let registers = inputs.len() + ops.len();
    if outputs.is_empty() || outputs.iter().any(|&r| r >= registers) {
        panic!("ex_cubecl: int_fused: outputs {outputs:?} must name registers below {registers} ({} inputs, {} ops)", inputs.len(), ops.len());
    }
}
