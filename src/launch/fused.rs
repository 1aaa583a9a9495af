//! Fused elementwise launches: a [`FusedProgram`] of float ops over broadcast views of its
//! inputs, in one launch (`ex_cubecl_kernels::fused`).
use burn_backend::{BoolStore, DType, Scalar, Shape};
use cubecl::Runtime;
use cubecl::prelude::{Array, CubePrimitive, InputScalar, SequenceArg};
use ex_cubecl_kernels::fused::{FusedProgram, FusedRead, fused_float};
use ex_cubecl_kernels::fused_vec::{VectorRead, fused_float_vec};
pub use ex_cubecl_kernels::binary::BinaryFloatOp;
pub use ex_cubecl_kernels::compare::{CompareOp, PredicateOp};
pub use ex_cubecl_kernels::fused::FusedOp;
pub use ex_cubecl_kernels::unary::UnaryFloatOp;

use super::copy::{cast, full, into_contiguous};
use super::elementwise::{Rhs, binary_float_op, compare, predicate, unary_float_op};
use super::mask::mask_where;
use super::view::expand;
use super::{accumulator_dtype, divmods, usizes};
use crate::runtime::{DeviceContext, Geometry, Layout, OpName, coalesce, launch, storage_type};
use crate::tensor::CubeTensor;

/// The outputs of `ops` run elementwise over `shape`: output `j` is register `outputs[j]`,
/// where register `k` is input `k` (broadcast to `shape` as numpy does) and each op writes
/// the next register. Every input has the same float dtype, which the outputs take; each op
/// gives the bits that its own launch would (see the kernel).
///
/// One launch where the device binds that many buffers to a kernel (inputs and outputs; 31
/// on lavapipe, 1024 on CUDA), else one launch per op with the same results. The launch
/// reads and writes vectors of the device's widest efficient size where every input's layout
/// allows it (`vectorised`), else one element per unit.
///
/// # Panics
/// When an input has another dtype, isn't a float or doesn't broadcast to `shape`, when an op
/// reads a register that isn't written yet, or when an output names none.
pub fn fused<R: Runtime>(inputs: Vec<CubeTensor<R>>, shape: Shape, ops: Vec<FusedOp>, outputs: Vec<usize>) -> Vec<CubeTensor<R>> {
    let first = inputs.first().unwrap_or_else(|| panic!("ex_cubecl: fused: no inputs (ops {ops:?})"));
    let dtype = first.dtype;
    let chain = Chain { ops, outputs, ..Chain::default() };
    fused_chain(inputs, Vec::new(), shape, dtype, chain).0
}

/// A fused program as the host gives it: its ops, the values of its runtime scalars and
/// parameters, and the registers written out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chain {
    /// The ops; op `i` writes the register after the inputs' and earlier ops'.
    pub ops: Vec<FusedOp>,
    /// The values `FusedOp::Scalar(k)` reads (`scalars[k]`, in the float dtype).
    pub scalars: Vec<f64>,
    /// The parameters `FusedOp::UnaryWith` reads (in the type its op computes in).
    pub params: Vec<f64>,
    /// The register that float output `j` takes.
    pub outputs: Vec<usize>,
    /// The register that bool output `j` takes (stored as `register != 0`).
    pub bool_outputs: Vec<usize>,
    /// The bool dtype of the bool outputs (and the bool inputs' store); `None` when there
    /// are neither.
    pub bool_dtype: Option<DType>,
}

/// [`fused`] with bool inputs and outputs, runtime scalars and parameters: the registers
/// are `floats` (of the float `dtype`), then `bools` (read as 0.0 / 1.0), then the ops'
/// results; gives the float outputs and the bool outputs (of `chain.bool_dtype`).
///
/// # Panics
/// As [`fused`]; also when a bool input's dtype isn't `chain.bool_dtype`, or an op reads a
/// scalar or parameter that `chain` doesn't hold.
pub fn fused_chain<R: Runtime>(
    floats: Vec<CubeTensor<R>>,
    bools: Vec<CubeTensor<R>>,
    shape: Shape,
    dtype: DType,
    chain: Chain,
) -> (Vec<CubeTensor<R>>, Vec<CubeTensor<R>>) {
    fused_chain_into(floats, bools, shape, dtype, chain, &[])
}

/// [`fused_chain`] writing float output `j` over float input `into[j]` where one is given: the
/// output is that input's tensor, each element written by the unit that read it (every unit
/// reads its inputs before it writes). An input serves where it is contiguous from its start,
/// of the output's shape, and not already taken by an earlier output; else the output gets a
/// buffer of its own, as it does when the launch goes op by op or computes in f32 for bf16.
/// The caller answers for the input's old value being dead: nothing else may read that
/// buffer afterwards.
///
/// # Panics
/// As [`fused_chain`].
pub fn fused_chain_into<R: Runtime>(
    floats: Vec<CubeTensor<R>>,
    bools: Vec<CubeTensor<R>>,
    shape: Shape,
    dtype: DType,
    chain: Chain,
    into: &[Option<usize>],
) -> (Vec<CubeTensor<R>>, Vec<CubeTensor<R>>) {
    let first = floats.first().or(bools.first());
    let first = first.unwrap_or_else(|| panic!("ex_cubecl: fused: no inputs (ops {:?})", chain.ops));
    let device = first.device.clone();
    fused_chain_on(&device, floats, bools, shape, dtype, chain, into)
}

/// [`fused_chain_into`] on `device`, the inputs' device: a chain without inputs (fills and the
/// ops on them) is told where to run.
///
/// # Panics
/// As [`fused_chain`].
pub fn fused_chain_on<R: Runtime>(
    device: &R::Device,
    floats: Vec<CubeTensor<R>>,
    bools: Vec<CubeTensor<R>>,
    shape: Shape,
    dtype: DType,
    chain: Chain,
    into: &[Option<usize>],
) -> (Vec<CubeTensor<R>>, Vec<CubeTensor<R>>) {
    let client = match floats.first().or(bools.first()) {
        Some(t) => t.client.clone(),
        None => DeviceContext::client::<R>(device),
    };
    let device = device.clone();
    let bool_dtype = chain.bool_dtype.unwrap_or(DType::Bool(BoolStore::U32));
    check_chain(floats.len() + bools.len(), &floats, &bools, &shape, dtype, &chain);
    let outputs = chain.outputs.len() + chain.bool_outputs.len();
    if floats.len() + bools.len() + outputs > client.properties().hardware.max_bindings as usize {
        return one_by_one(&device, floats, bools, shape, dtype, &chain);
    }
    // bf16 held as bits (see `super::bf16`): the kernel reads and writes the bits, its
    // registers are f32 and it rounds each op's result to bf16, the bits that separate bf16
    // launches give.
    let round_to_bf16 = super::bf16::held_as_bits(&client, dtype);
    let views = views(&floats, &bools, &shape);
    let empty = |dtype| CubeTensor::empty(&client, &device, shape.clone(), dtype);
    let results: Vec<CubeTensor<R>> = (0..chain.outputs.len()).map(|j| overwritten(&floats, &shape, into, j).unwrap_or_else(|| empty(dtype))).collect();
    let bool_results: Vec<CubeTensor<R>> = (0..chain.bool_outputs.len()).map(|_| empty(bool_dtype)).collect();
    let n = shape.num_elements();
    if n == 0 {
        return (results, bool_results);
    }
    let reads: Vec<FusedRead> = views.iter().map(read).collect();
    let (dims, strides) = read_strides(&shape, &views, &reads);
    let offsets: Vec<usize> = views.iter().map(|v| v.offset).collect();
    let float_count = floats.len();
    let name = OpName("fused", &chain.ops);
    // Float inputs and outputs are stored as `stored`; registers are of `dtype`.
    let (stored, dtype) = match round_to_bf16 {
        true => (storage_type(DType::U16), DType::F32),
        false => (storage_type(dtype), dtype),
    };
    let (float_type, compute_type) = (storage_type(dtype), storage_type(accumulator_dtype(dtype)));
    let dtypes = [stored, float_type, compute_type, storage_type(bool_dtype)];
    let (scalar_values, param_values) = (chain.scalars.clone(), chain.params.clone());
    let one = InputScalar::new(1.0, float_type);
    let (outs, bool_outs) = (results.clone(), bool_results.clone());
    let sizes = client.io_optimized_vector_sizes(storage_type(dtype).size());
    if let Some((v, vector_reads)) = sizes.filter(|&v| v > 1).find_map(|v| vectorised(v, n, &reads, &dims, &strides, &offsets)) {
        let program = program(&vector_reads, float_count, &chain, round_to_bf16);
        let offsets: Vec<usize> = offsets.iter().zip(&vector_reads).map(|(&o, r)| if *r == VectorRead::Linear { o / v } else { o }).collect();
        let bound = |tensors: &[CubeTensor<R>], reads: &[VectorRead], vector: bool| -> Vec<CubeTensor<R>> {
            tensors.iter().zip(reads).filter(|(_, r)| r.is_vector() == vector).map(|(t, _)| t.clone()).collect()
        };
        let (float_reads, bool_reads) = vector_reads.split_at(float_count);
        let (vectors, splats) = (bound(&floats, float_reads, true), bound(&floats, float_reads, false));
        let (bool_vectors, bool_splats) = (bound(&bools, bool_reads, true), bound(&bools, bool_reads, false));
        launch(&client, &name, Geometry::Units(n / v), move |client, count, dim| {
            // SAFETY: the kernel guards `pos < n / v`; `vectorised` checked that every vector
            // read lies inside its view, and every output holds `n` elements.
            unsafe {
                fused_float_vec::launch_unchecked::<R>(
                    client,
                    count,
                    dim,
                    v,
                    buffers(&vectors),
                    buffers(&splats),
                    buffers(&bool_vectors),
                    buffers(&bool_splats),
                    buffers(&outs),
                    buffers(&bool_outs),
                    usizes(&offsets),
                    divmods(&dims),
                    usizes(&strides),
                    n / v,
                    scalars::<R>(&scalar_values, float_type),
                    scalars::<R>(&param_values, compute_type),
                    one,
                    one,
                    program.clone(),
                    dtypes,
                )
            }
        });
        return (results, bool_results);
    }
    let program = program(&reads, float_count, &chain, round_to_bf16);
    launch(&client, &name, Geometry::Units(n), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < n`; every view lies inside its buffer and every
        // output holds `n` elements.
        unsafe {
            fused_float::launch_unchecked::<R>(
                client,
                count,
                dim,
                buffers(&floats),
                buffers(&bools),
                buffers(&outs),
                buffers(&bool_outs),
                usizes(&offsets),
                divmods(&dims),
                usizes(&strides),
                n,
                scalars::<R>(&scalar_values, float_type),
                scalars::<R>(&param_values, compute_type),
                one,
                one,
                program.clone(),
                dtypes,
            )
        }
    });
    (results, bool_results)
}

/// The float input that output `j` is written over ([`fused_chain_into`]), if one serves: a
/// clone of `floats[into[j]]`.
pub(crate) fn overwritten<R: Runtime>(floats: &[CubeTensor<R>], shape: &Shape, into: &[Option<usize>], j: usize) -> Option<CubeTensor<R>> {
    let m = into.get(j).copied().flatten()?;
    let input = floats.get(m)?;
    let whole = input.layout.is_contiguous_from_start() && input.dims() == shape.as_slice();
    (whole && !into[..j].contains(&Some(m))).then(|| input.clone())
}

/// Panics unless `floats` share the float `dtype`, `bools` have the chain's bool dtype, all
/// broadcast to `shape`, and `chain` is a program over `inputs` registers of inputs.
pub(crate) fn check_chain<R: Runtime>(inputs: usize, floats: &[CubeTensor<R>], bools: &[CubeTensor<R>], shape: &Shape, dtype: DType, chain: &Chain) {
    let bool_dtype = chain.bool_dtype.unwrap_or(DType::Bool(BoolStore::U32));
    if !dtype.is_float() || floats.iter().any(|t| t.dtype != dtype) || bools.iter().any(|t| t.dtype != bool_dtype) {
        panic!("ex_cubecl: fused: the float inputs must share one float dtype ({dtype:?}) and the bool inputs the bool dtype {bool_dtype:?}, got {}", describe(floats, bools));
    }
    check_registers(inputs, chain);
    if dtype != DType::F32 && chain.ops.iter().any(|op| matches!(op, FusedOp::Const(_))) {
        panic!("ex_cubecl: fused: constants are for f32 programs, the inputs are {}", describe(floats, bools));
    }
    views(floats, bools, shape);
}

/// The kernel's program: `reads` are the float inputs' (`floats` of them), then the bools'.
pub(crate) fn program<Read: Clone>(reads: &[Read], floats: usize, chain: &Chain, round_to_bf16: bool) -> FusedProgram<Read> {
    let (float_reads, bool_reads) = reads.split_at(floats);
    FusedProgram {
        reads: float_reads.to_vec(),
        bool_reads: bool_reads.to_vec(),
        ops: chain.ops.clone(),
        outputs: chain.outputs.clone(),
        bool_outputs: chain.bool_outputs.clone(),
        round_to_bf16,
    }
}

/// How each input is read `v` elements at a time, when every one can be: the `n` positions
/// split into vectors, each input contiguous (its offset a multiple of `v`), one value, or a
/// strided view (strides over the coalesced `dims`, `rank` of them per input in `strides`)
/// whose innermost dimension `v` divides and is either contiguous (with `v` dividing the
/// offset and every other stride, so each vector is whole and aligned) or broadcast.
fn vectorised(v: usize, n: usize, reads: &[FusedRead], dims: &[usize], strides: &[usize], offsets: &[usize]) -> Option<(usize, Vec<VectorRead>)> {
    let rank = dims.len();
    let inner = dims.last().copied().unwrap_or(n);
    let read = |(k, r): (usize, &FusedRead)| match r {
        FusedRead::Linear => (offsets[k] % v == 0).then_some(VectorRead::Linear),
        FusedRead::Scalar => Some(VectorRead::Scalar),
        FusedRead::Strided => {
            let s = &strides[k * rank..][..rank];
            match s[rank - 1] {
                0 => Some(VectorRead::StridedSplat),
                1 if offsets[k] % v == 0 && s[..rank - 1].iter().all(|&s| s % v == 0) => Some(VectorRead::Strided),
                _ => None,
            }
        }
    };
    let reads = (n % v == 0 && inner % v == 0).then(|| reads.iter().enumerate().map(read).collect::<Option<Vec<_>>>())??;
    Some((v, reads))
}

/// Launch scalars of the type `ty`.
pub(crate) fn scalars<R: Runtime>(values: &[f64], ty: cubecl::ir::StorageType) -> SequenceArg<R, InputScalar> {
    values.iter().fold(SequenceArg::new(), |mut seq, &v| {
        seq.push(InputScalar::new(v, ty));
        seq
    })
}

/// Each input's view broadcast to `shape`; panics when one doesn't broadcast.
pub(crate) fn views<R: Runtime>(floats: &[CubeTensor<R>], bools: &[CubeTensor<R>], shape: &Shape) -> Vec<Layout> {
    let view = |t: &CubeTensor<R>| {
        let view = t.layout.broadcast_to(shape);
        view.unwrap_or_else(|| panic!("ex_cubecl: fused: {:?} doesn't broadcast to {:?} (inputs {})", t.dims(), shape.as_slice(), describe(floats, bools)))
    };
    floats.iter().chain(bools).map(view).collect()
}

/// The tensors' buffers as a sequence of array arguments.
pub(crate) fn buffers<R: Runtime, T: CubePrimitive>(tensors: &[CubeTensor<R>]) -> SequenceArg<R, Array<T>> {
    tensors.iter().fold(SequenceArg::new(), |mut seq, t| {
        seq.push(t.buffer_arg());
        seq
    })
}

/// The inputs' shapes and dtypes, for messages.
fn describe<R: Runtime>(floats: &[CubeTensor<R>], bools: &[CubeTensor<R>]) -> String {
    floats.iter().chain(bools).map(|t| format!("{:?} {:?}", t.dims(), t.dtype)).collect::<Vec<_>>().join(", ")
}

/// The program run one launch per op (the registers keep their own broadcast shapes), each
/// output then expanded to `shape` and made contiguous. Nx's `max` and `min` are `Max` and
/// `Min`, which also give NaN where an operand is NaN; comparisons, predicates and bool
/// inputs are 1 or 0 in the dtype.
fn one_by_one<R: Runtime>(device: &R::Device, floats: Vec<CubeTensor<R>>, bools: Vec<CubeTensor<R>>, shape: Shape, dtype: DType, chain: &Chain) -> (Vec<CubeTensor<R>>, Vec<CubeTensor<R>>) {
    let store = BoolStore::Native;
    let mut regs = floats;
    regs.extend(bools.into_iter().map(|t| cast(t, dtype)));
    let scalar = |value: f64| full(device, Shape::from(Vec::<usize>::new()), Scalar::Float(value), dtype);
    for op in &chain.ops {
        let binary = |x: usize, y: usize, op| binary_float_op(regs[x].clone(), Rhs::Tensor(regs[y].clone()), op);
        let r = match *op {
            FusedOp::Unary(u, x) => unary_float_op(regs[x].clone(), u, 0.0, 0.0),
            FusedOp::UnaryWith(u, x, a, b) => unary_float_op(regs[x].clone(), u, chain.params[a], chain.params[b]),
            FusedOp::Binary(b, x, y) => binary(x, y, b),
            FusedOp::NanMax(x, y) => binary(x, y, BinaryFloatOp::Max),
            FusedOp::NanMin(x, y) => binary(x, y, BinaryFloatOp::Min),
            FusedOp::Compare(c, x, y) => cast(compare(regs[x].clone(), Rhs::Tensor(regs[y].clone()), c, store), dtype),
            FusedOp::Predicate(p, x) => cast(predicate(regs[x].clone(), p, store), dtype),
            FusedOp::Not(x) => cast(compare(regs[x].clone(), Rhs::Scalar(Scalar::Float(0.0)), CompareOp::Equal, store), dtype),
            FusedOp::Select(p, x, y) => {
                let nonzero = compare(regs[p].clone(), Rhs::Scalar(Scalar::Float(0.0)), CompareOp::NotEqual, store);
                mask_where("fused select", regs[y].clone(), nonzero, Rhs::Tensor(regs[x].clone()))
            }
            FusedOp::Const(bits) => scalar(f32::from_bits(bits) as f64),
            FusedOp::Scalar(k) => scalar(chain.scalars[k]),
        };
        regs.push(r);
    }
    let out = |r: usize| into_contiguous(expand(regs[r].clone(), shape.clone()));
    let bool_dtype = chain.bool_dtype.unwrap_or(DType::Bool(BoolStore::U32));
    let nonzero = |r: usize| cast(compare(out(r), Rhs::Scalar(Scalar::Float(0.0)), CompareOp::NotEqual, store), bool_dtype);
    (chain.outputs.iter().map(|&r| out(r)).collect(), chain.bool_outputs.iter().map(|&r| nonzero(r)).collect())
}

/// The iteration shape as the kernel walks it (`shape` with dimensions merged where every
/// strided read allows; empty when no input is read strided) and every input's strides over
/// it in turn (zeros for those not read strided), as the kernel indexes them.
pub(crate) fn read_strides(shape: &Shape, views: &[Layout], reads: &[FusedRead]) -> (Vec<usize>, Vec<usize>) {
    let strided: Vec<&[usize]> = views.iter().zip(reads).filter(|(_, r)| **r == FusedRead::Strided).map(|(v, _)| v.strides.as_slice()).collect();
    let (dims, coalesced) = match strided.is_empty() {
        true => (Vec::new(), Vec::new()),
        false => coalesce(shape, &strided),
    };
    let mut next = coalesced.into_iter();
    let strides = reads
        .iter()
        .flat_map(|r| match r {
            FusedRead::Strided => next.next().expect("one per strided input"),
            _ => vec![0; dims.len()],
        })
        .collect();
    (dims, strides)
}

/// How the kernel reads a view over the output's shape.
pub(crate) fn read(view: &Layout) -> FusedRead {
    if view.is_contiguous() {
        FusedRead::Linear
    } else if view.strides.iter().all(|&s| s == 0) {
        FusedRead::Scalar
    } else {
        FusedRead::Strided
    }
}

/// Panics unless every op reads registers written before it (and scalars and parameters
/// the chain holds) and every output names a register.
fn check_registers(inputs: usize, chain: &Chain) {
    let (scalars, params) = (chain.scalars.len(), chain.params.len());
    for (i, op) in chain.ops.iter().enumerate() {
        let written = inputs + i;
        let reads: &[usize] = match op {
            FusedOp::Unary(_, x) | FusedOp::Predicate(_, x) | FusedOp::Not(x) => &[*x],
            FusedOp::UnaryWith(_, x, a, b) => {
                assert!(*a < params && *b < params, "ex_cubecl: fused: op {i} ({op:?}) reads parameters {a} and {b} of {params}");
                &[*x]
            }
            FusedOp::Binary(_, x, y) | FusedOp::NanMax(x, y) | FusedOp::NanMin(x, y) | FusedOp::Compare(_, x, y) => &[*x, *y],
            FusedOp::Select(p, x, y) => &[*p, *x, *y],
            FusedOp::Const(bits) => {
                let value = f32::from_bits(*bits);
                assert!(value.is_finite(), "ex_cubecl: fused: op {i}: the constant {value} is not finite (pass it as an input)");
                &[]
            }
            FusedOp::Scalar(k) => {
                assert!(*k < scalars, "ex_cubecl: fused: op {i} reads scalar {k} of {scalars}");
                &[]
            }
        };
        if let Some(r) = reads.iter().find(|&&r| r >= written) {
            panic!("ex_cubecl: fused: op {i} ({op:?}) reads register {r}, but only {written} are written before it");
        }
    }
    let registers = inputs + chain.ops.len();
    let outputs = chain.outputs.iter().chain(&chain.bool_outputs);
    if chain.outputs.is_empty() && chain.bool_outputs.is_empty() || outputs.clone().any(|&r| r >= registers) {
        panic!(
            "ex_cubecl: fused: outputs {:?} and bool outputs {:?} must name registers below {registers} ({inputs} inputs, {} ops)",
            chain.outputs,
            chain.bool_outputs,
            chain.ops.len()
        );
    }
}
