//! Real FFTs along one dimension: `rfft` (N real samples to N/2 + 1 complex bins) and its
//! inverse `irfft`, for power-of-two N.
//!
//! Both pack a real line of N samples into M = max(N/2, 1) complex values (even samples as
//! real parts, odd samples as imaginary parts) and run one complex FFT of length M:
//! - rfft: `z[m] = x[2m] + i x[2m+1]`, `Z = FFT_M(z)`, then every bin is
//!   `X[k] = E[k] + W^k O[k]` with `E = (Z[k] + conj Z[M-k]) / 2`,
//!   `O = (Z[k] - conj Z[M-k]) / 2i` and `W = exp(-2πi / N)` (indices of Z modulo M).
//! - irfft: `Z'[k] = (X[k] + conj X[M-k]) + i (X[k] - conj X[M-k]) W^-k` for k < M,
//!   `z = IFFT_M(Z')` unnormalised, and `x[2m] = Re z[m] / N`, `x[2m+1] = Im z[m] / N`.
//!   Bins past the input's length or past N/2 read as zero; the imaginary parts of the DC and
//!   Nyquist bins are ignored (as numpy and PyTorch do).
//!
//! Two strategies: when a line fits a cube's shared memory, one cube per line loads it
//! (bit-reversed), runs an in-place radix-2 Cooley-Tukey FFT and writes the bins
//! ([`rfft_shared`](fn@rfft_shared), [`irfft_shared`](fn@irfft_shared)); longer lines go through global work buffers of
//! `lines × M` complex values: a pack kernel, one radix-2 Stockham launch per stage
//! ([`fft_stage`](fn@fft_stage)) and an unpack kernel. Computation runs in `A` (f32 for half-precision
//! tensors); twiddles are computed with sin / cos from `pi`, passed in `A`'s precision.
use cubecl::prelude::*;

use crate::strided::line_offset;

/// A complex value in the compute type.
#[derive(CubeType, Clone, Copy)]
pub struct Complex<A: Float> {
    /// Real part.
    pub re: A,
    /// Imaginary part.
    pub im: A,
}

#[cube]
fn mul<A: Float>(a: Complex<A>, b: Complex<A>) -> Complex<A> {
    Complex::<A> {
        re: a.re * b.re - a.im * b.im,
        im: a.re * b.im + a.im * b.re,
    }
}

/// `exp(∓2πi num / den)`: the forward sign, or `+` with `inverse`.
#[cube]
fn twiddle<A: Float>(num: usize, den: usize, pi: A, #[comptime] inverse: bool) -> Complex<A> {
    let angle = A::cast_from(num as u32) * (pi + pi) / A::cast_from(den as u32);
    let sc = crate::math::sin_cos::<A>(angle);
    Complex::<A> {
        re: sc.cos,
        im: if inverse { sc.sin } else { -sc.sin },
    }
}

/// Sample `t` of a real line, zero past `avail` (the signal's length, or `n` when shorter).
#[cube]
fn real_sample<T: Float, A: Float>(
    input: &Tensor<T>,
    start: usize,
    stride: usize,
    avail: usize,
    t: usize,
) -> A {
    let mut v = A::new(0.0);
    if t < avail {
        v = A::cast_from(input[start + t * stride]);
    }
    v
}

/// Bin `j` of a half spectrum given as real and imaginary views: zero at `j >= avail` (the
/// bins the input has, capped at N/2 + 1), real at `j == 0` and `j == nyquist`.
#[cube]
fn spectrum_bin<T: Float, A: Float>(
    re: &Tensor<T>,
    im: &Tensor<T>,
    re_start: usize,
    im_start: usize,
    j: usize,
    avail: usize,
    nyquist: usize,
    dim: usize,
) -> Complex<A> {
    let mut r = A::new(0.0);
    let mut i = A::new(0.0);
    if j < avail {
        r = A::cast_from(re[re_start + j * re.stride(dim)]);
        if !(j == 0 || j == nyquist) {
            i = A::cast_from(im[im_start + j * im.stride(dim)]);
        }
    }
    Complex::<A> { re: r, im: i }
}

/// rfft bin `k` of an N-sample line from `a = Z[k mod M]` and `b = Z[(M - k) mod M]`.
#[cube]
fn rfft_bin<A: Float>(a: Complex<A>, b: Complex<A>, k: usize, n: usize, pi: A) -> Complex<A> {
    let half = A::new(0.5);
    let e = Complex::<A> {
        re: (a.re + b.re) * half,
        im: (a.im - b.im) * half,
    };
    // (a - conj b) / 2i
    let o = Complex::<A> {
        re: (a.im + b.im) * half,
        im: (b.re - a.re) * half,
    };
    let wo = mul::<A>(twiddle::<A>(k, n, pi, false), o);
    // The DC and Nyquist bins of a real signal are real: exactly, not up to sin(π) ≈ 1e-7.
    let real = k == 0 || 2 * k == n;
    Complex::<A> {
        re: e.re + wo.re,
        im: select(real, A::new(0.0), e.im + wo.im),
    }
}

/// irfft input `Z'[k]` of an N-sample line from `a = X[k]` and `b = X[M - k]`.
#[cube]
fn irfft_coeff<A: Float>(a: Complex<A>, b: Complex<A>, k: usize, n: usize, pi: A) -> Complex<A> {
    let e = Complex::<A> {
        re: a.re + b.re,
        im: a.im - b.im,
    };
    let d = Complex::<A> {
        re: a.re - b.re,
        im: a.im + b.im,
    };
    let o = mul::<A>(d, twiddle::<A>(k, n, pi, true));
    Complex::<A> {
        re: e.re - o.im,
        im: e.im + o.re,
    }
}

/// `j` with its lowest `bits` bits reversed.
#[cube]
fn bit_reverse(j: usize, bits: u32) -> usize {
    let mut r = 0usize;
    let mut v = j;
    for _ in 0..bits {
        r = (r << 1) | (v & 1);
        v >>= 1;
    }
    r
}

/// In-place radix-2 decimation-in-time FFT of `m` values held bit-reversed in shared memory
/// (natural order out). Every unit of the cube takes part; ends with a barrier.
#[cube]
fn shared_fft<A: Float>(
    re: &mut SharedMemory<A>,
    im: &mut SharedMemory<A>,
    pi: A,
    #[comptime] m: usize,
    #[comptime] inverse: bool,
) {
    let mut half = 1usize;
    while half < m {
        let mut b = UNIT_POS as usize;
        while b < m / 2 {
            let pos = b % half;
            let i0 = (b - pos) * 2 + pos;
            let i1 = i0 + half;
            let w = twiddle::<A>(pos, half * 2, pi, inverse);
            let x = Complex::<A> { re: re[i1], im: im[i1] };
            let t = mul::<A>(w, x);
            let ar = re[i0];
            let ai = im[i0];
            re[i0] = ar + t.re;
            im[i0] = ai + t.im;
            re[i1] = ar - t.re;
            im[i1] = ai - t.im;
            b += CUBE_DIM as usize;
        }
        sync_cube();
        half *= 2;
    }
}

/// rfft with one cube per line, the line's `m = max(n/2, 1)` complex values in shared
/// memory (`log2m` = log2 of `m`). Outputs are contiguous with `n/2 + 1` bins along `dim`;
/// the input's samples past `avail` read as zero.
#[cube(launch_unchecked)]
pub fn rfft_shared<T: Float, A: Float>(
    input: &Tensor<T>,
    out_re: &mut Tensor<T>,
    out_im: &mut Tensor<T>,
    offset: usize,
    dim: usize,
    n: usize,
    avail: usize,
    num_lines: usize,
    pi: InputScalar,
    #[comptime] m: usize,
    #[comptime] log2m: u32,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let line = CUBE_POS;
    // Uniform per cube: a cube past the end leaves as a whole, before any barrier.
    if line >= num_lines {
        terminate!();
    }
    let pi = pi.get::<A>();
    let start = offset + line_offset::<T>(input, line, dim);
    let stride = input.stride(dim);
    let mut re = SharedMemory::<A>::new(m);
    let mut im = SharedMemory::<A>::new(m);
    let mut j = UNIT_POS as usize;
    while j < m {
        let r = bit_reverse(j, log2m);
        re[r] = real_sample::<T, A>(input, start, stride, avail, 2 * j);
        im[r] = real_sample::<T, A>(input, start, stride, avail, 2 * j + 1);
        j += CUBE_DIM as usize;
    }
    sync_cube();
    shared_fft::<A>(&mut re, &mut im, pi, m, false);

    let out_start = line_offset::<T>(out_re, line, dim);
    let out_stride = out_re.stride(dim);
    let mut k = UNIT_POS as usize;
    while k < n / 2 + 1 {
        let ka = k % m;
        let kb = (m - ka) % m;
        let a = Complex::<A> { re: re[ka], im: im[ka] };
        let b = Complex::<A> { re: re[kb], im: im[kb] };
        let x = rfft_bin::<A>(a, b, k, n, pi);
        out_re[out_start + k * out_stride] = T::cast_from(x.re);
        out_im[out_start + k * out_stride] = T::cast_from(x.im);
        k += CUBE_DIM as usize;
    }
}

/// irfft with one cube per line (see [`rfft_shared`](fn@rfft_shared)): `avail` bins of the spectrum views are
/// used (the input's bin count capped at `n/2 + 1`); the output is contiguous with `n`
/// samples along `dim`.
#[cube(launch_unchecked)]
pub fn irfft_shared<T: Float, A: Float>(
    spec_re: &Tensor<T>,
    spec_im: &Tensor<T>,
    output: &mut Tensor<T>,
    re_offset: usize,
    im_offset: usize,
    dim: usize,
    n: usize,
    avail: usize,
    num_lines: usize,
    pi: InputScalar,
    #[comptime] m: usize,
    #[comptime] log2m: u32,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let line = CUBE_POS;
    if line >= num_lines {
        terminate!();
    }
    let pi = pi.get::<A>();
    let re_start = re_offset + line_offset::<T>(spec_re, line, dim);
    let im_start = im_offset + line_offset::<T>(spec_im, line, dim);
    let nyquist = n / 2;
    let mut re = SharedMemory::<A>::new(m);
    let mut im = SharedMemory::<A>::new(m);
    let mut k = UNIT_POS as usize;
    while k < m {
        let a = spectrum_bin::<T, A>(spec_re, spec_im, re_start, im_start, k, avail, nyquist, dim);
        let b = spectrum_bin::<T, A>(spec_re, spec_im, re_start, im_start, m - k, avail, nyquist, dim);
        let z = irfft_coeff::<A>(a, b, k, n, pi);
        let r = bit_reverse(k, log2m);
        re[r] = z.re;
        im[r] = z.im;
        k += CUBE_DIM as usize;
    }
    sync_cube();
    shared_fft::<A>(&mut re, &mut im, pi, m, true);

    let out_start = line_offset::<T>(output, line, dim);
    let out_stride = output.stride(dim);
    let scale = A::new(1.0) / A::cast_from(n as u32);
    let mut j = UNIT_POS as usize;
    while j < m {
        output[out_start + 2 * j * out_stride] = T::cast_from(re[j] * scale);
        if 2 * j + 1 < n {
            output[out_start + (2 * j + 1) * out_stride] = T::cast_from(im[j] * scale);
        }
        j += CUBE_DIM as usize;
    }
}

/// Packs real lines into the global work buffers (`num_lines × m` complex values, contiguous)
/// for the multi-pass rfft: one unit per complex value.
#[cube(launch_unchecked)]
pub fn rfft_pack<T: Float, A: Float>(
    input: &Tensor<T>,
    work_re: &mut Tensor<A>,
    work_im: &mut Tensor<A>,
    offset: usize,
    dim: usize,
    avail: usize,
    m: usize,
    total: usize,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let line = pos / m;
    let j = pos % m;
    let start = offset + line_offset::<T>(input, line, dim);
    let stride = input.stride(dim);
    work_re[pos] = real_sample::<T, A>(input, start, stride, avail, 2 * j);
    work_im[pos] = real_sample::<T, A>(input, start, stride, avail, 2 * j + 1);
}

/// One radix-2 Stockham stage over the work buffers (`num_lines × m` complex values): the
/// sub-transforms have length `len` and interleave with stride `s` (`len × s = m`); reads
/// `src`, writes `dst`. One unit per butterfly (`num_lines × m / 2` of them).
#[cube(launch_unchecked)]
pub fn fft_stage<A: Float>(
    src_re: &Tensor<A>,
    src_im: &Tensor<A>,
    dst_re: &mut Tensor<A>,
    dst_im: &mut Tensor<A>,
    len: usize,
    s: usize,
    m: usize,
    total: usize,
    pi: InputScalar,
    #[comptime] inverse: bool,
    #[define(A)] _dtype: StorageType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let pi = pi.get::<A>();
    let half_m = m / 2;
    let base = (pos / half_m) * m;
    let b = pos % half_m;
    let p = b / s;
    let q = b % s;
    let half = len / 2;
    let ia = base + q + s * p;
    let ib = ia + s * half;
    let a = Complex::<A> { re: src_re[ia], im: src_im[ia] };
    let c = Complex::<A> { re: src_re[ib], im: src_im[ib] };
    let d = Complex::<A> {
        re: a.re - c.re,
        im: a.im - c.im,
    };
    let w = twiddle::<A>(p, len, pi, inverse);
    let dw = mul::<A>(d, w);
    let o0 = base + q + s * 2 * p;
    let o1 = o0 + s;
    dst_re[o0] = a.re + c.re;
    dst_im[o0] = a.im + c.im;
    dst_re[o1] = dw.re;
    dst_im[o1] = dw.im;
}

/// Turns the transformed work buffers into rfft bins (`n/2 + 1` per line): one unit per bin.
#[cube(launch_unchecked)]
pub fn rfft_unpack<T: Float, A: Float>(
    work_re: &Tensor<A>,
    work_im: &Tensor<A>,
    out_re: &mut Tensor<T>,
    out_im: &mut Tensor<T>,
    dim: usize,
    n: usize,
    m: usize,
    total: usize,
    pi: InputScalar,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let pi = pi.get::<A>();
    let bins = n / 2 + 1;
    let line = pos / bins;
    let k = pos % bins;
    let base = line * m;
    let ka = base + k % m;
    let kb = base + (m - k % m) % m;
    let a = Complex::<A> { re: work_re[ka], im: work_im[ka] };
    let b = Complex::<A> { re: work_re[kb], im: work_im[kb] };
    let x = rfft_bin::<A>(a, b, k, n, pi);
    let out = line_offset::<T>(out_re, line, dim) + k * out_re.stride(dim);
    out_re[out] = T::cast_from(x.re);
    out_im[out] = T::cast_from(x.im);
}

/// Packs half spectra into the global work buffers for the multi-pass irfft: one unit per
/// complex value (`num_lines × m`).
#[cube(launch_unchecked)]
pub fn irfft_pack<T: Float, A: Float>(
    spec_re: &Tensor<T>,
    spec_im: &Tensor<T>,
    work_re: &mut Tensor<A>,
    work_im: &mut Tensor<A>,
    re_offset: usize,
    im_offset: usize,
    dim: usize,
    n: usize,
    avail: usize,
    m: usize,
    total: usize,
    pi: InputScalar,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let pi = pi.get::<A>();
    let line = pos / m;
    let k = pos % m;
    let re_start = re_offset + line_offset::<T>(spec_re, line, dim);
    let im_start = im_offset + line_offset::<T>(spec_im, line, dim);
    let nyquist = n / 2;
    let a = spectrum_bin::<T, A>(spec_re, spec_im, re_start, im_start, k, avail, nyquist, dim);
    let b = spectrum_bin::<T, A>(spec_re, spec_im, re_start, im_start, m - k, avail, nyquist, dim);
    let z = irfft_coeff::<A>(a, b, k, n, pi);
    work_re[pos] = z.re;
    work_im[pos] = z.im;
}

/// Writes the inverse-transformed work buffers as real lines of `n` samples, scaled by 1/n:
/// one unit per complex value (two samples).
#[cube(launch_unchecked)]
pub fn irfft_unpack<T: Float, A: Float>(
    work_re: &Tensor<A>,
    work_im: &Tensor<A>,
    output: &mut Tensor<T>,
    dim: usize,
    n: usize,
    m: usize,
    total: usize,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let line = pos / m;
    let j = pos % m;
    let scale = A::new(1.0) / A::cast_from(n as u32);
    let out = line_offset::<T>(output, line, dim);
    let stride = output.stride(dim);
    output[out + 2 * j * stride] = T::cast_from(work_re[pos] * scale);
    if 2 * j + 1 < n {
        output[out + (2 * j + 1) * stride] = T::cast_from(work_im[pos] * scale);
    }
}
