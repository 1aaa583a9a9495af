//! Fused elementwise launches: a [`FusedProgram`] of float ops over broadcast views of its
//! inputs, in one launch (`ex_cubecl_kernels::fused`).
use burn_backend::{BoolStore, DType, Scalar, Shape};
use cubecl::Runtime;
use cubecl::prelude::{InputScalar, SequenceArg};
use ex_cubecl_kernels::fused::{FusedProgram, FusedRead, fused_float};
pub use ex_cubecl_kernels::binary::BinaryFloatOp;
pub use ex_cubecl_kernels::compare::CompareOp;
pub use ex_cubecl_kernels::fused::FusedOp;
pub use ex_cubecl_kernels::unary::UnaryFloatOp;

use super::copy::{cast, full, into_contiguous};
use super::elementwise::{Rhs, binary_float_op, compare, unary_float_op};
use super::mask::mask_where;
use super::view::expand;
use super::{accumulator_dtype, divmods, usizes};
use crate::runtime::{Geometry, Layout, coalesce, launch, storage_type};
use crate::tensor::CubeTensor;

/// The outputs of `ops` run elementwise over `shape`: output `j` is register `outputs[j]`,
/// where register `k` is input `k` (broadcast to `shape` as numpy does) and each op writes
/// the next register. Every input has the same float dtype, which the outputs take; each op
/// gives the bits that its own launch would (see the kernel).
///
/// One launch where the device binds that many buffers to a kernel (inputs and outputs; 31
/// on lavapipe, 1024 on CUDA), else one launch per op with the same results.
///
/// # Panics
/// When an input has another dtype, isn't a float or doesn't broadcast to `shape`, when an op
/// reads a register that isn't written yet, or when an output names none.
pub fn fused<R: Runtime>(inputs: Vec<CubeTensor<R>>, shape: Shape, ops: Vec<FusedOp>, outputs: Vec<usize>) -> Vec<CubeTensor<R>> {
    let first = inputs.first().unwrap_or_else(|| panic!("ex_cubecl: fused: no inputs (ops {ops:?})"));
    let (dtype, client, device) = (first.dtype, first.client.clone(), first.device.clone());
    if !dtype.is_float() || inputs.iter().any(|t| t.dtype != dtype) {
        panic!("ex_cubecl: fused: the inputs must share one float dtype, got {}", describe(&inputs));
    }
    check_registers(inputs.len(), &ops, &outputs);
    if dtype != DType::F32 && ops.iter().any(|op| matches!(op, FusedOp::Const(_))) {
        panic!("ex_cubecl: fused: constants are for f32 programs, the inputs are {}", describe(&inputs));
    }
    let views = |inputs: &[CubeTensor<R>]| -> Vec<Layout> {
        inputs
            .iter()
            .map(|t| {
                let view = t.layout.broadcast_to(&shape);
                view.unwrap_or_else(|| panic!("ex_cubecl: fused: {:?} doesn't broadcast to {:?} (inputs {})", t.dims(), shape.as_slice(), describe(inputs)))
            })
            .collect()
    };
    views(&inputs);
    if inputs.len() + outputs.len() > client.properties().hardware.max_bindings as usize {
        return one_by_one(inputs, shape, &ops, &outputs);
    }
    // bf16 held as bits (see `super::bf16`): the program runs in f32 and rounds each op's
    // result to bf16, the bits that separate bf16 launches give.
    let round_to_bf16 = first.bf16_bits();
    let (inputs, dtype) = match round_to_bf16 {
        true => (inputs.into_iter().map(super::bf16::widen).collect::<Vec<_>>(), DType::F32),
        false => (inputs, dtype),
    };
    let views = views(&inputs);
    let results: Vec<CubeTensor<R>> = outputs.iter().map(|_| CubeTensor::empty(&client, &device, shape.clone(), dtype)).collect();
    let results_out = |results: Vec<CubeTensor<R>>| match round_to_bf16 {
        true => results.into_iter().map(|t| super::bf16::narrow(t, DType::BF16)).collect(),
        false => results,
    };
    let n = shape.num_elements();
    if n == 0 {
        return results_out(results);
    }
    let reads: Vec<FusedRead> = views.iter().map(read).collect();
    let strided: Vec<&[usize]> = views.iter().zip(&reads).filter(|(_, r)| **r == FusedRead::Strided).map(|(v, _)| v.strides.as_slice()).collect();
    let (dims, coalesced) = match strided.is_empty() {
        true => (Vec::new(), Vec::new()),
        false => coalesce(&shape, &strided),
    };
    // Every input's strides in turn (zeros for those not read strided), as the kernel indexes them.
    let mut next = coalesced.into_iter();
    let strides: Vec<usize> = reads
        .iter()
        .flat_map(|r| match r {
            FusedRead::Strided => next.next().expect("one per strided input"),
            _ => vec![0; dims.len()],
        })
        .collect();
    let offsets: Vec<usize> = views.iter().map(|v| v.offset).collect();
    let program = FusedProgram { reads, ops, outputs, round_to_bf16 };
    let name = format!("fused {:?}", program.ops);
    let dtypes = [storage_type(dtype), storage_type(accumulator_dtype(dtype))];
    let one = InputScalar::new(1.0, storage_type(dtype));
    let outs = results.clone();
    launch(&client, &name, Geometry::Units(n), move |client, count, dim| {
        let mut ins = SequenceArg::new();
        inputs.iter().for_each(|t| ins.push(t.buffer_arg()));
        let mut os = SequenceArg::new();
        outs.iter().for_each(|t| os.push(t.buffer_arg()));
        // SAFETY: the kernel guards `pos < n`; every view lies inside its buffer and every
        // output holds `n` elements.
        unsafe {
            fused_float::launch_unchecked::<R>(
                client,
                count,
                dim,
                ins,
                os,
                usizes(&offsets),
                divmods(&dims),
                usizes(&strides),
                n,
                one,
                one,
                program.clone(),
                dtypes,
            )
        }
    });
    results_out(results)
}

/// The inputs' shapes and dtypes, for messages.
fn describe<R: Runtime>(inputs: &[CubeTensor<R>]) -> String {
    inputs.iter().map(|t| format!("{:?} {:?}", t.dims(), t.dtype)).collect::<Vec<_>>().join(", ")
}

/// The program run one launch per op (the registers keep their own broadcast shapes), each
/// output then expanded to `shape` and made contiguous. Nx's `max` and `min` are `Max` and
/// `Min`, which also give NaN where an operand is NaN; comparisons give 1 or 0 in the dtype.
fn one_by_one<R: Runtime>(inputs: Vec<CubeTensor<R>>, shape: Shape, ops: &[FusedOp], outputs: &[usize]) -> Vec<CubeTensor<R>> {
    let device = inputs[0].device.clone();
    let mut regs = inputs;
    for op in ops {
        let binary = |x: usize, y: usize, op| binary_float_op(regs[x].clone(), Rhs::Tensor(regs[y].clone()), op);
        let r = match *op {
            FusedOp::Unary(u, x) => unary_float_op(regs[x].clone(), u, 0.0, 0.0),
            FusedOp::Binary(b, x, y) => binary(x, y, b),
            FusedOp::NanMax(x, y) => binary(x, y, BinaryFloatOp::Max),
            FusedOp::NanMin(x, y) => binary(x, y, BinaryFloatOp::Min),
            FusedOp::Compare(c, x, y) => {
                let dtype = regs[x].dtype;
                cast(compare(regs[x].clone(), Rhs::Tensor(regs[y].clone()), c, BoolStore::Native), dtype)
            }
            FusedOp::Select(p, x, y) => {
                let nonzero = compare(regs[p].clone(), Rhs::Scalar(Scalar::Float(0.0)), CompareOp::NotEqual, BoolStore::Native);
                mask_where("fused select", regs[y].clone(), nonzero, Rhs::Tensor(regs[x].clone()))
            }
            FusedOp::Const(bits) => full(&device, Shape::from(Vec::<usize>::new()), Scalar::Float(f32::from_bits(bits) as f64), DType::F32),
        };
        regs.push(r);
    }
    outputs.iter().map(|&r| into_contiguous(expand(regs[r].clone(), shape.clone()))).collect()
}

/// How the kernel reads a view over the output's shape.
fn read(view: &Layout) -> FusedRead {
    if view.is_contiguous() {
        FusedRead::Linear
    } else if view.strides.iter().all(|&s| s == 0) {
        FusedRead::Scalar
    } else {
        FusedRead::Strided
    }
}

/// Panics unless every op reads registers written before it and every output names one.
fn check_registers(inputs: usize, ops: &[FusedOp], outputs: &[usize]) {
    for (i, op) in ops.iter().enumerate() {
        let written = inputs + i;
        let reads: &[usize] = match op {
            FusedOp::Unary(_, x) => &[*x],
            FusedOp::Binary(_, x, y) | FusedOp::NanMax(x, y) | FusedOp::NanMin(x, y) | FusedOp::Compare(_, x, y) => &[*x, *y],
            FusedOp::Select(p, x, y) => &[*p, *x, *y],
            FusedOp::Const(bits) => {
                let value = f32::from_bits(*bits);
                assert!(value.is_finite(), "ex_cubecl: fused: op {i}: the constant {value} is not finite (pass it as an input)");
                &[]
            }
        };
        if let Some(r) = reads.iter().find(|&&r| r >= written) {
            panic!("ex_cubecl: fused: op {i} ({op:?}) reads register {r}, but only {written} are written before it");
        }
    }
    let registers = inputs + ops.len();
    if outputs.is_empty() || outputs.iter().any(|&r| r >= registers) {
        panic!("ex_cubecl: fused: outputs {outputs:?} must name registers below {registers} ({inputs} inputs, {} ops)", ops.len());
    }
}
