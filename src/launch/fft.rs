//! Real FFTs along one dimension: `rfft` and `irfft` of power-of-two length, batched over
//! every other dimension (one line per combination of the other indices).
//!
//! Conventions (Burn's `ModuleOps::rfft` / `irfft` contract, numpy's normalisation):
//! - `rfft` is unnormalised, `X[k] = Σ x[t] exp(-2πi kt/N)`, with N = `n` or the signal's
//!   length; the signal is truncated or zero-padded to N; N/2 + 1 bins come out.
//! - `irfft` scales by 1/N, N = `n` or `2 (bins - 1)`; the spectrum is truncated or
//!   zero-padded to N/2 + 1 bins, and the imaginary parts of the DC and Nyquist bins are
//!   ignored.
//! - Lengths that are not a power of two panic, as do dimensions out of range.
//!
//! A line whose `M = max(N/2, 1)` complex values fit a cube's shared memory is transformed
//! by one cube; longer lines take a multi-pass path through global work buffers with one
//! launch per radix-2 stage (see the kernels' module).
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::prelude::{CubeDim, InputScalar};
use ex_cubecl_kernels::fft::{
    fft_stage, irfft_pack, irfft_shared, irfft_unpack, rfft_pack, rfft_shared, rfft_unpack,
};

use super::{check_dim, check_same_dtype, float_arg};
use crate::runtime::{Geometry, elem_size, launch, storage_type};
use crate::tensor::CubeTensor;

/// Most complex values per line that the one-cube-per-line path holds in shared memory.
const MAX_SHARED_VALUES: usize = 2048;
/// Most units per cube of the one-cube-per-line path.
const CUBE_UNITS: usize = 256;

/// The real FFT of `signal` along `dim`: `(re, im)` with `N/2 + 1` bins along `dim`, where
/// N is `n` or the signal's length there (a power of two).
pub fn rfft<R: Runtime>(signal: CubeTensor<R>, dim: usize, n: Option<usize>) -> (CubeTensor<R>, CubeTensor<R>) {
    let op = "rfft";
    check_float(op, &signal);
    if signal.bf16_bits() {
        let (re, im) = rfft(super::bf16::widen(signal), dim, n);
        return (super::bf16::narrow(re, DType::BF16), super::bf16::narrow(im, DType::BF16));
    }
    check_dim(op, &signal, dim);
    let len = signal.dims()[dim];
    let n = transform_len(op, &signal, dim, n, len, "signal length");
    let bins = n / 2 + 1;
    let shape = with_dim(signal.dims(), dim, bins);
    let out_re = CubeTensor::empty(&signal.client, &signal.device, shape.clone(), signal.dtype);
    let out_im = CubeTensor::empty(&signal.client, &signal.device, shape, signal.dtype);
    let lines = out_re.num_elements() / bins;
    let avail = len.min(n);
    let plan = Plan::new(&signal, n);
    let (client, dtypes) = (&out_re.client, [signal.storage(), plan.acc]);

    if plan.shared {
        let geometry = Geometry::Cubes { count: lines, dim: plan.cube_dim() };
        let (signal, re, im) = (signal.clone(), out_re.clone(), out_im.clone());
        launch(client, op, geometry, move |client, count, cube_dim| {
            // SAFETY: cubes past `lines` leave before any access; samples past `avail` and
            // bins past `n/2` are never touched, and shared indices stay below `m`.
            unsafe {
                rfft_shared::launch_unchecked::<R>(
                    client, count, cube_dim, signal.as_arg(), re.as_arg(), im.as_arg(),
                    signal.layout.offset, dim, n, avail, lines, plan.pi(), plan.m, plan.log2m, dtypes,
                )
            }
        });
        return (out_re, out_im);
    }

    let work = Work::new(&signal, &plan, lines);
    let total = lines * plan.m;
    let (re, im) = (work.re[0].clone(), work.im[0].clone());
    launch(client, op, Geometry::Units(total), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < lines × m`; samples past `avail` are not read.
        unsafe {
            rfft_pack::launch_unchecked::<R>(
                client, count, cube_dim, signal.as_arg(), re.as_arg(), im.as_arg(),
                signal.layout.offset, dim, avail, plan.m, total, dtypes,
            )
        }
    });
    let result = work.transform(op, &plan, false);
    let total = lines * bins;
    let (re, im, o_re, o_im) = (work.re[result].clone(), work.im[result].clone(), out_re.clone(), out_im.clone());
    launch(client, op, Geometry::Units(total), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < lines × bins`; work indices stay inside the line.
        unsafe {
            rfft_unpack::launch_unchecked::<R>(
                client, count, cube_dim, re.as_arg(), im.as_arg(),
                o_re.as_arg(), o_im.as_arg(), dim, n, plan.m, total, plan.pi(), dtypes,
            )
        }
    });
    (out_re, out_im)
}

/// The inverse of [`rfft`]: a real signal of N samples along `dim`, N = `n` or
/// `2 (bins - 1)` (a power of two), from the half spectrum `(re, im)`.
pub fn irfft<R: Runtime>(re: CubeTensor<R>, im: CubeTensor<R>, dim: usize, n: Option<usize>) -> CubeTensor<R> {
    let op = "irfft";
    check_float(op, &re);
    check_same_dtype(op, &re, &im);
    if re.bf16_bits() {
        return super::bf16::map2(op, re, im, |re, im| irfft(re, im, dim, n));
    }
    if re.dims() != im.dims() {
        panic!(
            "ex_cubecl: {op}: the real part has shape {:?} and the imaginary part {:?} ({:?})",
            re.dims(),
            im.dims(),
            re.dtype
        );
    }
    check_dim(op, &re, dim);
    let bins = re.dims()[dim];
    let n = transform_len(op, &re, dim, n, 2 * bins.saturating_sub(1), "output length 2 (bins - 1)");
    let out = CubeTensor::empty(&re.client, &re.device, with_dim(re.dims(), dim, n), re.dtype);
    let lines = out.num_elements() / n;
    let avail = bins.min(n / 2 + 1);
    let plan = Plan::new(&re, n);
    let (client, dtypes) = (&out.client, [re.storage(), plan.acc]);

    if plan.shared {
        let geometry = Geometry::Cubes { count: lines, dim: plan.cube_dim() };
        let (re, im, o) = (re.clone(), im.clone(), out.clone());
        launch(client, op, geometry, move |client, count, cube_dim| {
            // SAFETY: cubes past `lines` leave before any access; bins past `avail` are not
            // read, samples past `n` not written, and shared indices stay below `m`.
            unsafe {
                irfft_shared::launch_unchecked::<R>(
                    client, count, cube_dim, re.as_arg(), im.as_arg(), o.as_arg(), re.layout.offset,
                    im.layout.offset, dim, n, avail, lines, plan.pi(), plan.m, plan.log2m, dtypes,
                )
            }
        });
        return out;
    }

    let work = Work::new(&re, &plan, lines);
    let total = lines * plan.m;
    let (w_re, w_im) = (work.re[0].clone(), work.im[0].clone());
    launch(client, op, Geometry::Units(total), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < lines × m`; bins past `avail` are not read.
        unsafe {
            irfft_pack::launch_unchecked::<R>(
                client, count, cube_dim, re.as_arg(), im.as_arg(), w_re.as_arg(),
                w_im.as_arg(), re.layout.offset, im.layout.offset, dim, n, avail, plan.m,
                total, plan.pi(), dtypes,
            )
        }
    });
    let result = work.transform(op, &plan, true);
    let (w_re, w_im, o) = (work.re[result].clone(), work.im[result].clone(), out.clone());
    launch(client, op, Geometry::Units(total), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < lines × m`; samples past `n` are not written.
        unsafe {
            irfft_unpack::launch_unchecked::<R>(
                client, count, cube_dim, w_re.as_arg(), w_im.as_arg(),
                o.as_arg(), dim, n, plan.m, total, dtypes,
            )
        }
    });
    out
}

/// How lines of N samples are transformed: as M = max(N/2, 1) complex values, in `acc`.
#[derive(Clone, Copy)]
struct Plan {
    m: usize,
    log2m: u32,
    acc: cubecl::ir::StorageType,
    acc_dtype: DType,
    /// One cube per line with the line in shared memory (else the multi-pass path).
    shared: bool,
}

impl Plan {
    fn new<R: Runtime>(t: &CubeTensor<R>, n: usize) -> Self {
        let m = (n / 2).max(1);
        let acc_dtype = match t.dtype {
            DType::F16 | DType::BF16 => DType::F32,
            other => other,
        };
        let max_shared = t.client.properties().hardware.max_shared_memory_size;
        let shared = m <= MAX_SHARED_VALUES && 2 * m * elem_size(acc_dtype) <= max_shared;
        Self { m, log2m: m.trailing_zeros(), acc: storage_type(acc_dtype), acc_dtype, shared }
    }

    fn cube_dim(&self) -> CubeDim {
        CubeDim::new_1d(self.m.min(CUBE_UNITS) as u32)
    }

    /// π in the compute type, for the twiddles.
    fn pi(&self) -> InputScalar {
        float_arg(std::f64::consts::PI, self.acc_dtype)
    }
}

/// Ping-pong work buffers of the multi-pass path: `lines × m` complex values each.
struct Work<R: Runtime> {
    re: [CubeTensor<R>; 2],
    im: [CubeTensor<R>; 2],
    lines: usize,
}

impl<R: Runtime> Work<R> {
    fn new(t: &CubeTensor<R>, plan: &Plan, lines: usize) -> Self {
        let buffer = || CubeTensor::empty(&t.client, &t.device, Shape::from(vec![lines * plan.m]), plan.acc_dtype);
        Self { re: [buffer(), buffer()], im: [buffer(), buffer()], lines }
    }

    /// Runs the log2(m) Stockham stages on buffer 0; gives the index of the buffer holding
    /// the result.
    fn transform(&self, op: &str, plan: &Plan, inverse: bool) -> usize {
        let (client, plan) = (&self.re[0].client, *plan);
        let total = self.lines * plan.m / 2;
        let (mut src, mut len, mut s) = (0, plan.m, 1);
        while len > 1 {
            let dst = 1 - src;
            let (re, im) = (self.re.clone(), self.im.clone());
            launch(client, op, Geometry::Units(total), move |client, count, cube_dim| {
                // SAFETY: the kernel guards `pos < lines × m / 2`; every index stays inside
                // its line of `m` values.
                unsafe {
                    fft_stage::launch_unchecked::<R>(
                        client, count, cube_dim, re[src].as_arg(), im[src].as_arg(),
                        re[dst].as_arg(), im[dst].as_arg(), len, s, plan.m, total,
                        plan.pi(), inverse, plan.acc,
                    )
                }
            });
            (src, len, s) = (dst, len / 2, s * 2);
        }
        src
    }
}

/// Panics unless `t` is a float tensor.
fn check_float<R: Runtime>(op: &str, t: &CubeTensor<R>) {
    if !t.dtype.is_float() {
        panic!("ex_cubecl: {op}: expected a float tensor, got {:?} with shape {:?}", t.dtype, t.dims());
    }
}

/// The transform length: `n`, or `natural` (named `what`) when `n` is `None`; panics unless it
/// is a power of two.
fn transform_len<R: Runtime>(
    op: &str,
    t: &CubeTensor<R>,
    dim: usize,
    n: Option<usize>,
    natural: usize,
    what: &str,
) -> usize {
    let (len, name) = match n {
        Some(n) => (n, "n"),
        None => (natural, what),
    };
    if !len.is_power_of_two() {
        panic!(
            "ex_cubecl: {op}: {name} = {len} is not a power of two (shape {:?}, dim {dim}, {:?})",
            t.dims(),
            t.dtype
        );
    }
    len
}

/// `dims` with dimension `dim` set to `size`.
fn with_dim(dims: &[usize], dim: usize, size: usize) -> Shape {
    let mut dims = dims.to_vec();
    dims[dim] = size;
    Shape::from(dims)
}
