//! No silent device failure: tensors larger than the device takes are refused when they are
//! made, and work that fails on cubecl's device thread (a launch the device refuses, a kernel
//! it cannot compile) makes the next read fail with the device's message instead of
//! returning zeros or stale values.
//!
//! One test, its cases in order: the last case may leave the device unusable for the rest of
//! this process, which is why these cases have a test binary of their own.
use burn_backend::ops::FloatTensorOps;
use burn_backend::TensorData;
use burn_tensor::TensorPrimitive;
use cubecl::prelude::*;
use ex_cubecl::CubeTensor;
use ex_cubecl::runtime::{Geometry, launch};
use ex_cubecl_conformance::*;

#[cfg(feature = "wgpu")]
type R = cubecl::wgpu::WgpuRuntime;
#[cfg(all(feature = "cuda", not(feature = "wgpu")))]
type R = cubecl::cuda::CudaRuntime;

#[cube(launch)]
fn fill_sevens(out: &mut Tensor<f32>) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = 7.0;
    }
}

/// A kernel on the matrix units, which a device without them cannot compile.
#[cube(launch)]
fn matrix_units(out: &mut Tensor<f32>) {
    let acc = cmma::Matrix::<f32>::from_value(cmma::MatrixIdent::Accumulator, 16usize, 16usize, 8usize, cmma::MatrixLayout::Undefined, 1.0);
    let mut staging = SharedMemory::<f32>::new(256usize);
    cmma::store(&mut staging.slice_mut(0usize, 256usize), &acc, 16u32, cmma::MatrixLayout::RowMajor);
    sync_cube();
    out[UNIT_POS as usize] = staging[UNIT_POS as usize];
}

/// A 16-element f32 tensor of ones and its primitive.
fn ones() -> (burn_tensor::Tensor<Ex, 1>, CubeTensor<R>) {
    let t = burn_tensor::Tensor::<Ex, 1>::ones([16], &dev::<Ex>());
    let prim = t.clone().into_primitive().tensor();
    (t, prim)
}

fn read(prim: CubeTensor<R>) -> Result<Vec<f32>, String> {
    burn_tensor::Tensor::<Ex, 1>::from_primitive(TensorPrimitive::Float(prim))
        .try_into_data()
        .map(|d| d.to_vec::<f32>().expect("f32"))
        .map_err(|e| format!("{e:?}"))
}

#[test]
fn device_failures_reach_the_caller() {
    let mut suite = Suite::new("device failures");
    let device = dev::<Ex>();

    // 2^28 f32 ones (1 GiB): summed exactly where the device takes such a buffer, refused
    // when it is made where it doesn't (lavapipe binds 128 MiB at most); never a wrong sum.
    let r = catch(|| burn_tensor::Tensor::<Ex, 1>::ones([1 << 28], &device).sum().into_scalar());
    suite.record("ones([2^28]).sum()", match r {
        Ok(sum) if sum == (1u64 << 28) as f32 => Ok(()),
        Ok(sum) => Err(format!("sum {sum}, expected 2^28")),
        Err(msg) if msg.contains("largest buffer the device takes") && msg.contains("1073741824 bytes") => Ok(()),
        Err(msg) => Err(format!("unexpected panic: {msg}")),
    });

    // Far beyond any device's memory: refused when made, naming the size and the limit.
    for (name, shape) in [("zeros([2^40])", vec![1usize << 40]), ("zeros([2^31, 2^31])", vec![1 << 31, 1 << 31])] {
        let r = catch(|| Ex::float_zeros(shape.clone().into(), &device, burn_backend::FloatDType::F32));
        suite.record(name, match r {
            Ok(_) => Err("made a tensor the device cannot hold".into()),
            Err(msg) if msg.contains("largest buffer the device takes") && msg.contains(&format!("{shape:?}")) => Ok(()),
            Err(msg) => Err(format!("unexpected panic: {msg}")),
        });
    }
    let r = catch(|| Ex::float_from_data(TensorData::new(vec![0f32; 4], [4]), &device));
    suite.record("a correct upload after the refusals", r.map(|_| ()));

    // A launch the device refuses (more units per cube than it has): the next read fails.
    let (_, prim) = ones();
    let target = prim.clone();
    let max = prim.client.properties().hardware.max_units_per_cube;
    let geometry = Geometry::Cubes { count: 1, dim: CubeDim::new_1d(max * 2) };
    launch(&prim.client, "test_oversized_cube", geometry, move |client, count, dim| {
        fill_sevens::launch::<R>(client, count, dim, target.as_arg());
    });
    suite.record("read after a refused launch", match read(prim) {
        Ok(values) => Err(format!("read {:?}, expected an error", &values[..4])),
        Err(msg) if msg.contains("Cube dim exceeds maximum") || msg.contains("Too many resources") => Ok(()),
        Err(msg) => Err(format!("unexpected error: {msg}")),
    });
    let (t, _) = ones();
    suite.record("a correct op after the refused launch", match catch(|| (t * 3.0).into_data().to_vec::<f32>().unwrap()) {
        Ok(v) if v.iter().all(|&x| x == 3.0) => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // A kernel the device cannot compile: matrix units on a device without them (lavapipe).
    // Devices with matrix units run it; the read then gives the kernel's ones.
    let (_, prim) = ones();
    let has_matrix_units = !prim.client.features().matmul.cmma.is_empty();
    let target = prim.clone();
    launch(&prim.client, "test_matrix_units", Geometry::Cubes { count: 1, dim: CubeDim::new_1d(32) }, move |client, count, dim| {
        matrix_units::launch::<R>(client, count, dim, target.as_arg());
    });
    let r = catch(|| read(prim));
    suite.record(format!("read after a kernel on matrix units (device has them: {has_matrix_units})"), match r {
        Ok(Ok(values)) if has_matrix_units && values.iter().all(|&x| x == 1.0) => Ok(()),
        Ok(Ok(values)) => Err(format!("read {:?} without an error", &values[..4])),
        Ok(Err(msg)) if !has_matrix_units && msg.contains("earlier work failed") => Ok(()),
        Ok(Err(msg)) => Err(format!("unexpected error: {msg}")),
        Err(panic) => Err(format!("the read panicked instead of returning an error: {panic}")),
    });
    suite.finish();
}
