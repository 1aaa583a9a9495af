//! Fused reductions (`ex_cubecl_kernels::fused_reduce`): a fused program over the input
//! shape, the reduction of one of its values along an axis, and a fused program over the
//! reduced shape, in one launch.
use std::sync::Arc;

use burn_backend::{BoolStore, DType, Shape};
use cubecl::Runtime;
use cubecl::prelude::{ComputeClient, CubeDim, InputScalar};
use ex_cubecl_kernels::fused::{FusedProgram, FusedRead};
use ex_cubecl_kernels::fused_reduce::{FusedReduceProgram, fused_reduce as fused_reduce_kernel};
use ex_cubecl_kernels::fused_reduce_vec::{FusedReduceVecProgram, fused_reduce_vec};
use ex_cubecl_kernels::fused_vec::VectorRead;
pub use ex_cubecl_kernels::reduce::ReduceOp;

use super::fused::{Chain, FusedOp, buffers, fused_chain, read, scalars, views};
use super::reduce::{CUBE_SIZE, Strategy, reduce_dim, vector_min_units};
use super::{accumulator_dtype, divmods, usizes};
use crate::runtime::{Geometry, Layout, OpName, launch, storage_type};
use crate::tensor::CubeTensor;

/// A fused reduction as the host gives it. The read program's registers are the read inputs
/// (floats, then bools), then its ops' results; the write program's are the reduced value,
/// the write inputs (floats, then bools), then its ops' results. Both programs' `scalars` and
/// `params` are one list (`read.scalars` / `read.params`; the write chain's are unused).
#[derive(Clone, Debug, PartialEq)]
pub struct ReduceChain {
    /// The read program; its outputs have the input shape.
    pub read: Chain,
    /// The read register reduced.
    pub reduced: usize,
    /// The reduction: `Sum`, `Mean`, `Prod`, `Max` or `Min`.
    pub op: ReduceOp,
    /// The axis reduced.
    pub axis: usize,
    /// The write program; its outputs have the reduced shape.
    pub write: Chain,
}

/// The tensors of a fused reduction: each program's float and bool inputs.
pub struct ReduceInputs<R: Runtime> {
    /// Read inputs (broadcast to the input shape).
    pub floats: Vec<CubeTensor<R>>,
    /// Read bool inputs.
    pub bools: Vec<CubeTensor<R>>,
    /// Write inputs (broadcast to the reduced shape).
    pub write_floats: Vec<CubeTensor<R>>,
    /// Write bool inputs.
    pub write_bools: Vec<CubeTensor<R>>,
}

/// The outputs of a fused reduction: the read program's (input shape) and the write
/// program's (reduced shape), each float then bool.
pub type ReduceOutputs<R> = [Vec<CubeTensor<R>>; 4];

/// Runs `chain` over `shape` (the input shape) in float `dtype`: one launch where the device
/// binds that many buffers and the reduction is one a unit or a cube per line does; else the
/// read program, the reduction and the write program one after the other (the same bits).
///
/// # Panics
/// When an input has another dtype or doesn't broadcast to its program's shape, when the axis
/// is out of range, or as `fused_chain` does for a bad program.
pub fn fused_reduce<R: Runtime>(inputs: ReduceInputs<R>, shape: Shape, dtype: DType, chain: ReduceChain) -> ReduceOutputs<R> {
    let dims = shape.as_slice().to_vec();
    let axis = chain.axis;
    assert!(axis < dims.len(), "ex_cubecl: fused reduce: axis {axis} of {dims:?}");
    let mut reduced_dims = dims.clone();
    reduced_dims[axis] = 1;
    let reduced_shape = Shape::from(reduced_dims.clone());
    let first = inputs.floats.first().or(inputs.bools.first()).expect("ex_cubecl: fused reduce: no read inputs");
    let (client, device) = (first.client.clone(), first.device.clone());
    let (len, count) = (dims[axis], reduced_shape.num_elements());
    let strategy = Strategy::of(len, count, axis + 1 == dims.len());
    let buffers_bound = inputs.floats.len() + inputs.bools.len() + inputs.write_floats.len() + inputs.write_bools.len()
        + chain.read.outputs.len() + chain.read.bool_outputs.len() + chain.write.outputs.len() + chain.write.bool_outputs.len();
    let fits = buffers_bound <= client.properties().hardware.max_bindings as usize;
    if matches!(strategy, Strategy::Split(_)) || !fits || len == 0 || count == 0 {
        return in_steps(inputs, shape, reduced_shape, dtype, chain);
    }
    let bool_dtype = chain.read.bool_dtype.or(chain.write.bool_dtype).unwrap_or(DType::Bool(BoolStore::U32));
    let round_to_bf16 = super::bf16::held_as_bits(&client, dtype);
    let wide = |ts: Vec<CubeTensor<R>>| match round_to_bf16 {
        true => ts.into_iter().map(super::bf16::widen).collect(),
        false => ts,
    };
    let (floats, write_floats) = (wide(inputs.floats), wide(inputs.write_floats));
    let (bools, write_bools) = (inputs.bools, inputs.write_bools);
    let compute = if round_to_bf16 { DType::F32 } else { dtype };
    let read_views = views(&floats, &bools, &shape);
    let write_views = views(&write_floats, &write_bools, &reduced_shape);
    let others = |v: &[usize]| v.iter().enumerate().filter(|&(d, _)| d != axis).map(|(_, &x)| x).collect::<Vec<_>>();
    let contiguous = Layout::contiguous(shape.clone());
    // Offsets and line strides: the read inputs, the read outputs (contiguous), the write
    // inputs; axis strides: the read inputs, the read outputs.
    let mut offsets: Vec<usize> = read_views.iter().map(|v| v.offset).collect();
    offsets.push(0);
    offsets.extend(write_views.iter().map(|v| v.offset));
    let line_strides: Vec<usize> = read_views
        .iter()
        .chain([&contiguous])
        .chain(write_views.iter())
        .flat_map(|v| others(&v.strides))
        .collect();
    let axis_strides: Vec<usize> = read_views.iter().chain([&contiguous]).map(|v| v.strides[axis]).collect();
    let lines = others(&dims);
    let empty = |n: usize, shape: &Shape, dtype| (0..n).map(|_| CubeTensor::empty(&client, &device, shape.clone(), dtype)).collect::<Vec<_>>();
    let outs = [
        empty(chain.read.outputs.len(), &shape, compute),
        empty(chain.read.bool_outputs.len(), &shape, bool_dtype),
        empty(chain.write.outputs.len(), &reduced_shape, compute),
        empty(chain.write.bool_outputs.len(), &reduced_shape, bool_dtype),
    ];
    let (float_type, compute_type) = (storage_type(compute), storage_type(accumulator_dtype(compute)));
    let no_bools = bools.is_empty() && write_bools.is_empty() && outs[1].is_empty() && outs[3].is_empty();
    let mut sizes = client.io_optimized_vector_sizes(float_type.size()).filter(|&v| v > 1);
    let units = (count, vector_min_units(&client));
    let plan = match strategy == Strategy::PerUnit && no_bools {
        true => sizes.find_map(|v| line_vectors(v, axis, &dims, units, &read_views, &write_views)),
        false => None,
    };
    if let Some(plan) = plan {
        let layout = LineLayout { offsets, lines, line_strides, axis_strides, len, count };
        launch_vec(&client, plan, chain, round_to_bf16, [floats, write_floats], &outs, layout, [float_type, compute_type]);
        return narrowed_outputs(outs, round_to_bf16);
    }
    let cube_size = (strategy == Strategy::PerCube).then_some(CUBE_SIZE);
    let write_reads: Vec<FusedRead> = write_views.iter().map(read).collect();
    let (write_float_reads, write_bool_reads) = write_reads.split_at(write_floats.len());
    let program = FusedReduceProgram {
        read: FusedProgram {
            reads: vec![FusedRead::Strided; floats.len()],
            bool_reads: vec![FusedRead::Strided; bools.len()],
            ops: chain.read.ops,
            outputs: chain.read.outputs,
            bool_outputs: chain.read.bool_outputs,
            round_to_bf16,
        },
        reduced: chain.reduced,
        op: chain.op,
        write: FusedProgram {
            // Input 0 is the reduced value, not read from memory.
            reads: [FusedRead::Scalar].into_iter().chain(write_float_reads.iter().copied()).collect(),
            bool_reads: write_bool_reads.to_vec(),
            ops: chain.write.ops,
            outputs: chain.write.outputs,
            bool_outputs: chain.write.bool_outputs,
            round_to_bf16,
        },
        cube_size,
    };
    // Shared with the launch, which may be recorded: the name borrows it, formatting nothing.
    let program = Arc::new(program);
    let ops = (program.op, &program.read.ops, &program.write.ops);
    let name = OpName("fused reduce", &ops);
    let dtypes = [float_type, compute_type, storage_type(bool_dtype)];
    let (scalar_values, param_values) = (chain.read.scalars, chain.read.params);
    let one = InputScalar::new(1.0, float_type);
    let geometry = match cube_size {
        Some(size) => Geometry::Cubes { count, dim: CubeDim::new_1d(size as u32) },
        None => Geometry::Units(count),
    };
    let (written, kernel) = (outs.clone(), program.clone());
    launch(&client, &name, geometry, move |client, cubes, dim| {
        let [read_outs, read_bool_outs, write_outs, write_bool_outs] = &written;
        // SAFETY: units (or cubes) past `count` leave first; every read lies inside its
        // input's view and every write inside its contiguous output.
        unsafe {
            fused_reduce_kernel::launch_unchecked::<R>(
                client,
                cubes,
                dim,
                buffers(&floats),
                buffers(&bools),
                buffers(&write_floats),
                buffers(&write_bools),
                buffers(read_outs),
                buffers(read_bool_outs),
                buffers(write_outs),
                buffers(write_bool_outs),
                usizes(&offsets),
                divmods(&lines),
                usizes(&line_strides),
                usizes(&axis_strides),
                len,
                count,
                scalars::<R>(&scalar_values, float_type),
                scalars::<R>(&param_values, compute_type),
                one,
                one,
                (*kernel).clone(),
                dtypes,
            )
        }
    });
    narrowed_outputs(outs, round_to_bf16)
}

/// Where a fused reduction's lines lie (see `ex_cubecl_kernels::fused_reduce`'s docs): each
/// input's offset and line strides (the read inputs, the read outputs, the write inputs), the
/// axis strides (the read inputs, the read outputs), the lines' shape, the line length and
/// the number of lines.
struct LineLayout {
    offsets: Vec<usize>,
    lines: Vec<usize>,
    line_strides: Vec<usize>,
    axis_strides: Vec<usize>,
    len: usize,
    count: usize,
}

/// Launches `fused_reduce_vec` as `plan` says, writing `outs` (no bool outputs): the read
/// and write programs of `chain` (its scalars and parameters in `chain.read`) over the read
/// floats and the write floats, with the float and compute types `types`.
#[allow(clippy::too_many_arguments)]
fn launch_vec<R: Runtime>(
    client: &ComputeClient<R>,
    plan: LineVectors,
    chain: ReduceChain,
    round_to_bf16: bool,
    [floats, write_floats]: [Vec<CubeTensor<R>>; 2],
    outs: &ReduceOutputs<R>,
    mut layout: LineLayout,
    [float_type, compute_type]: [cubecl::ir::StorageType; 2],
) {
    let LineVectors { v, reads, write_reads } = plan;
    let (scalar_values, param_values) = (chain.read.scalars, chain.read.params);
    let program = Arc::new(FusedReduceVecProgram {
        read: FusedProgram { reads: reads.clone(), bool_reads: vec![], ops: chain.read.ops, outputs: chain.read.outputs, bool_outputs: vec![], round_to_bf16 },
        reduced: chain.reduced,
        op: chain.op,
        write: FusedProgram {
            // Input 0 is the reduced value, not read from memory.
            reads: [VectorRead::Scalar].into_iter().chain(write_reads.iter().copied()).collect(),
            bool_reads: vec![],
            ops: chain.write.ops,
            outputs: chain.write.outputs,
            bool_outputs: vec![],
            round_to_bf16,
        },
    });
    // Offsets of write inputs read `Linear` count vectors.
    let first_write = reads.len() + 1;
    for (k, read) in write_reads.iter().enumerate() {
        if *read == VectorRead::Linear {
            layout.offsets[first_write + k] /= v;
        }
    }
    let split = |tensors: &[CubeTensor<R>], reads: &[VectorRead], vector: bool| -> Vec<CubeTensor<R>> {
        tensors.iter().zip(reads).filter(|(_, r)| r.is_vector() == vector).map(|(t, _)| t.clone()).collect()
    };
    let (vectors, splats) = (split(&floats, &reads, true), split(&floats, &reads, false));
    let (write_vectors, write_splats) = (split(&write_floats, &write_reads, true), split(&write_floats, &write_reads, false));
    let ops = (program.op, &program.read.ops, &program.write.ops);
    let name = OpName("fused reduce", &ops);
    let units = layout.count / v;
    let (written, kernel) = (outs.clone(), program.clone());
    let one = InputScalar::new(1.0, float_type);
    launch(client, &name, Geometry::Units(units), move |client, cubes, dim| {
        let [read_outs, _, write_outs, _] = &written;
        let LineLayout { offsets, lines, line_strides, axis_strides, len, .. } = &layout;
        // SAFETY: units past `units` leave first; `line_vectors` checked that every vector
        // read is whole, aligned and inside its input's view, and every output holds
        // `units` vectors of lines (or their elements along the axis).
        unsafe {
            fused_reduce_vec::launch_unchecked::<R>(
                client,
                cubes,
                dim,
                v,
                buffers(&vectors),
                buffers(&splats),
                buffers(&write_vectors),
                buffers(&write_splats),
                buffers(read_outs),
                buffers(write_outs),
                usizes(offsets),
                divmods(lines),
                usizes(line_strides),
                usizes(axis_strides),
                *len,
                units,
                scalars::<R>(&scalar_values, float_type),
                scalars::<R>(&param_values, compute_type),
                one,
                one,
                (*kernel).clone(),
                [float_type, compute_type],
            )
        }
    });
}

/// The outputs as the caller gets them: float outputs narrowed back to bf16 where the launch
/// computed in f32 for bf16 held as bits.
fn narrowed_outputs<R: Runtime>(outs: ReduceOutputs<R>, round_to_bf16: bool) -> ReduceOutputs<R> {
    let narrowed = |ts: Vec<CubeTensor<R>>| match round_to_bf16 {
        true => ts.into_iter().map(|t| super::bf16::narrow(t, DType::BF16)).collect(),
        false => ts,
    };
    let [a, b, c, d] = outs;
    [narrowed(a), b, narrowed(c), d]
}

/// How `fused_reduce_vec` reads a fused reduction's inputs `v` lines at a time.
struct LineVectors {
    v: usize,
    /// Each read input: `Strided` (as a vector) or `StridedSplat`.
    reads: Vec<VectorRead>,
    /// Each write input.
    write_reads: Vec<VectorRead>,
}

/// The plan for `v` adjacent lines per unit, when every input allows it: the axis is not the
/// innermost dimension, `v` divides that dimension, and the `lines` leave `min_units` units
/// at least ([`vector_min_units`]); each read input steps through it contiguously (with `v`
/// dividing its offset and every other stride, the axis's included) or repeats one element
/// along it; each write input likewise over the reduced shape, or is contiguous over it
/// (offset a multiple of `v`), or one value. The read outputs (contiguous over the input
/// shape) and the write outputs (over the reduced shape) then take whole, aligned vectors too.
fn line_vectors(v: usize, axis: usize, dims: &[usize], (lines, min_units): (usize, usize), read_views: &[Layout], write_views: &[Layout]) -> Option<LineVectors> {
    let last = dims.len() - 1;
    (axis < last && dims[last] % v == 0 && lines / v >= min_units).then_some(())?;
    let strided = |view: &Layout| match view.strides[last] {
        0 => Some(VectorRead::StridedSplat),
        1 if view.offset % v == 0 && view.strides[..last].iter().all(|&s| s % v == 0) => Some(VectorRead::Strided),
        _ => None,
    };
    let reads = read_views.iter().map(strided).collect::<Option<Vec<_>>>()?;
    let write_read = |view: &Layout| match read(view) {
        FusedRead::Linear => (view.offset % v == 0).then_some(VectorRead::Linear),
        FusedRead::Scalar => Some(VectorRead::Scalar),
        FusedRead::Strided => strided(view),
    };
    let write_reads = write_views.iter().map(write_read).collect::<Option<Vec<_>>>()?;
    Some(LineVectors { v, reads, write_reads })
}

/// The fused reduction in three steps: the read program (with the reduced value as one more
/// output), the reduction, the write program.
fn in_steps<R: Runtime>(inputs: ReduceInputs<R>, shape: Shape, reduced_shape: Shape, dtype: DType, chain: ReduceChain) -> ReduceOutputs<R> {
    let ReduceChain { mut read, reduced, op, axis, mut write } = chain;
    let read_outputs = read.outputs.len();
    read.outputs.push(reduced);
    let (mut outs, bool_outs) = fused_chain(inputs.floats, inputs.bools, shape, dtype, read.clone());
    let values = outs.pop().expect("the reduced value");
    let total = reduce_dim(values, axis, op, dtype);
    debug_assert_eq!(outs.len(), read_outputs);
    write.scalars = read.scalars;
    write.params = read.params;
    if write.outputs.is_empty() && write.bool_outputs.is_empty() {
        return [outs, bool_outs, Vec::new(), Vec::new()];
    }
    let mut write_floats = vec![total];
    write_floats.extend(inputs.write_floats);
    let (write_outs, write_bool_outs) = fused_chain(write_floats, inputs.write_bools, reduced_shape, dtype, write);
    [outs, bool_outs, write_outs, write_bool_outs]
}

/// `op` with its scalar and parameter indices moved past `scalars` and `params` others.
pub fn shift_constants(op: FusedOp, scalars: usize, params: usize) -> FusedOp {
    match op {
        FusedOp::Scalar(k) => FusedOp::Scalar(k + scalars),
        FusedOp::UnaryWith(u, x, a, b) => FusedOp::UnaryWith(u, x, a + params, b + params),
        op => op,
    }
}
