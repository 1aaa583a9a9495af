//! Matrix products with a fused epilogue (`ex_cubecl_kernels::fused_matmul`): the product and a
//! fused program over its result (bias, activation, scaling) in one launch.
use burn_backend::{BoolStore, DType};
use cubecl::Runtime;
use cubecl::prelude::InputScalar;
use ex_cubecl_kernels::fused::FusedRead;
use ex_cubecl_kernels::fused_matmul::fused_matmul as fused_matmul_kernel;

use super::fused::{Chain, buffers, check_chain, fused_chain_into, overwritten, program, read, read_strides, scalars, views};
use super::matmul::{Kernel, Product, TiledLaunch, matmul};
use super::{accumulator, check_same_dtype, divmods, usizes};
use crate::runtime::{OpName, launch, storage_type};
use crate::tensor::CubeTensor;

/// `lhs @ rhs` (as [`matmul`] takes them), then `chain` over the product's shape: register 0
/// is the product, then `floats` (of the operands' float dtype) and `bools` (of the chain's
/// bool dtype), each broadcast to the product's shape, then the ops' results. Gives the float
/// and the bool outputs, each bit for bit what [`matmul`] then
/// [`fused_chain`](super::fused::fused_chain) give. Float output `j` is written over
/// `floats[into[j]]` where one is given, as
/// [`fused_chain_into`] does (each unit reads the epilogue's
/// inputs at an output position, then writes there).
///
/// One launch where our tiled kernel runs the product (f32 and f64 under the exact matmul
/// precision, every float on devices without matrix units, outputs narrower than 16 rows or
/// columns) and the device binds that many buffers; else the product's own kernel, then one
/// fused launch of the chain.
///
/// # Panics
/// As [`matmul`] and [`fused_chain`](super::fused::fused_chain) do, naming `op`.
pub fn fused_matmul<R: Runtime>(
    op: &str,
    lhs: CubeTensor<R>,
    rhs: CubeTensor<R>,
    floats: Vec<CubeTensor<R>>,
    bools: Vec<CubeTensor<R>>,
    chain: Chain,
    into: &[Option<usize>],
) -> (Vec<CubeTensor<R>>, Vec<CubeTensor<R>>) {
    check_same_dtype(op, &lhs, &rhs);
    let (dtype, client, device) = (lhs.dtype, lhs.client.clone(), lhs.device.clone());
    let product = Product::of(op, &lhs, &rhs);
    let shape = product.out_shape();
    check_chain(1 + floats.len() + bools.len(), &floats, &bools, &shape, dtype, &chain);
    let bound = 2 + floats.len() + bools.len() + chain.outputs.len() + chain.bool_outputs.len();
    let one_launch = !lhs.bf16_bits()
        && matches!(product.kernel(&lhs, &rhs, None), Kernel::Tiled)
        && bound <= client.properties().hardware.max_bindings as usize
        && shape.num_elements() > 0;
    if !one_launch {
        let product = matmul(op, lhs, rhs);
        let into: Vec<Option<usize>> = into.iter().map(|m| m.map(|m| m + 1)).collect();
        return fused_chain_into([product].into_iter().chain(floats).collect(), bools, shape, dtype, chain, &into);
    }
    let (lhs, rhs) = product.contiguous_rows(lhs, rhs);
    let (lhs_view, rhs_view) = product.views(&lhs, &rhs);
    let t = TiledLaunch::of(&lhs, (&lhs_view, &rhs_view), shape.as_slice(), product.batches());
    let views = views(&floats, &bools, &shape);
    let input_reads: Vec<FusedRead> = views.iter().map(read).collect();
    let (dims, strides) = read_strides(&shape, &views, &input_reads);
    let offsets: Vec<usize> = views.iter().map(|v| v.offset).collect();
    // Register 0, the product, is no input: its read is unused.
    let reads: Vec<FusedRead> = [FusedRead::Scalar].into_iter().chain(input_reads).collect();
    let program = program(&reads, 1 + floats.len(), &chain, false);
    let bool_dtype = chain.bool_dtype.unwrap_or(DType::Bool(BoolStore::U32));
    let empty = |dtype| CubeTensor::empty(&client, &device, shape.clone(), dtype);
    let results: Vec<CubeTensor<R>> = (0..chain.outputs.len()).map(|j| overwritten(&floats, &shape, into, j).unwrap_or_else(|| empty(dtype))).collect();
    let bool_results: Vec<CubeTensor<R>> = (0..chain.bool_outputs.len()).map(|_| empty(bool_dtype)).collect();
    let float_type = storage_type(dtype);
    let dtypes = [float_type, accumulator(dtype), storage_type(bool_dtype)];
    let one = InputScalar::new(1.0, float_type);
    let name = OpName(op, &chain.ops);
    let (outs, bool_outs) = (results.clone(), bool_results.clone());
    launch(&client, &name, t.geometry(), move |client, count, dim| {
        // SAFETY: as `matmul_tiled`'s launch for the product; the epilogue runs at output
        // positions inside the output only, where every view lies inside its buffer and
        // every output holds the output's elements.
        unsafe {
            fused_matmul_kernel::launch_unchecked::<R>(
                client,
                count,
                dim,
                t.na,
                t.nb,
                lhs.view_arg(&lhs_view),
                rhs.view_arg(&rhs_view),
                buffers(&floats),
                buffers(&bools),
                buffers(&outs),
                buffers(&bool_outs),
                lhs_view.offset,
                rhs_view.offset,
                t.cubes,
                usizes(&offsets),
                divmods(&dims),
                usizes(&strides),
                scalars::<R>(&chain.scalars, float_type),
                scalars::<R>(&chain.params, accumulator(dtype)),
                one,
                one,
                t.config,
                program.clone(),
                dtypes,
            )
        }
    });
    (results, bool_results)
}
