//! ExCubecl's conformance suite: every backend op compared with burn-ndarray 0.21 on seeded
//! random inputs and edge cases.
//!
//! Tests work on backend primitives (rank is dynamic) through [`on_both!`], which runs the
//! same body once with `B = Ex` and once with `B = Ref`. A [`Suite`] compares the results,
//! counts the op × dtype × case combinations checked, and reports every failure with the op,
//! shapes, dtypes and seed needed to replay it.
#![warn(missing_docs)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn_backend::{Backend, DType, TensorData};

/// The backend under test.
#[cfg(feature = "wgpu")]
pub type Ex = ex_cubecl::ExWgpu;
/// The backend under test.
#[cfg(all(feature = "cuda", not(feature = "wgpu")))]
pub type Ex = ex_cubecl::ExCuda;

/// The reference backend.
pub type Ref = burn_ndarray::NdArray<f32>;

/// The cubecl runtime of a backend of ours.
pub trait HasRuntime {
    /// The runtime.
    type R: cubecl::Runtime;
}

impl<R: cubecl::Runtime> HasRuntime for ex_cubecl::ExCubeclBackend<R> {
    type R = R;
}

/// The cubecl runtime of [`Ex`] (tests on its primitives: `CubeTensor<Rt>`).
pub type Rt = <Ex as HasRuntime>::R;

pub use burn_backend;

pub mod grad;
pub mod reference;

/// Runs `$body` with the type alias `$B` bound to [`Ex`] (catching panics) and to [`Ref`];
/// gives `(Result<TensorData, String>, TensorData)`.
#[macro_export]
macro_rules! on_both {
    (|$B:ident| $body:expr) => {{
        let ours = $crate::catch(|| {
            #[allow(dead_code)]
            type $B = $crate::Ex;
            $body
        });
        let reference = {
            #[allow(dead_code)]
            type $B = $crate::Ref;
            $body
        };
        (ours, reference)
    }};
}

thread_local! {
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, turning a panic into its message. Panics caught here are reported by the suite,
/// so the panic hook stays quiet for them.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(|c| c.get()) {
                default(info);
            }
        }));
    });
    CATCHING.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(false));
    result.map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())
    })
}

/// The device of backend `B`.
pub fn dev<B: Backend>() -> B::Device {
    Default::default()
}

/// Uploads float data. burn-ndarray computes in f32 where it lacks the dtype (f16, bf16),
/// so half-precision results are compared with an f32 reference.
pub fn f<B: Backend>(data: &TensorData) -> B::FloatTensorPrimitive {
    let is_ref = std::any::TypeId::of::<B>() == std::any::TypeId::of::<Ref>();
    if is_ref && matches!(data.dtype, DType::F16 | DType::BF16) {
        return B::float_from_data(data.clone().convert_dtype(DType::F32), &dev::<B>());
    }
    B::float_from_data(data.clone(), &dev::<B>())
}

/// Uploads int data.
pub fn i<B: Backend>(data: &TensorData) -> B::IntTensorPrimitive {
    B::int_from_data(data.clone(), &dev::<B>())
}

/// Uploads bool data.
pub fn b<B: Backend>(data: &TensorData) -> B::BoolTensorPrimitive {
    B::bool_from_data(data.clone(), &dev::<B>())
}

/// Reads a float primitive back.
pub fn rf<B: Backend>(t: B::FloatTensorPrimitive) -> TensorData {
    burn_backend::read_sync(B::float_into_data(t)).expect("float_into_data")
}

/// Reads an int primitive back.
pub fn ri<B: Backend>(t: B::IntTensorPrimitive) -> TensorData {
    burn_backend::read_sync(B::int_into_data(t)).expect("int_into_data")
}

/// Reads a bool primitive back.
pub fn rb<B: Backend>(t: B::BoolTensorPrimitive) -> TensorData {
    burn_backend::read_sync(B::bool_into_data(t)).expect("bool_into_data")
}

/// A small deterministic generator (SplitMix64): the suite needs no `rand`.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn float(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Uniform in `lo..hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }

    /// A random shape of `rank` dimensions, each in `1..=max`.
    pub fn shape(&mut self, rank: usize, max: usize) -> Vec<usize> {
        (0..rank).map(|_| self.int(1, max as i64 + 1) as usize).collect()
    }
}

/// Random float data of `dtype`, uniform in `[lo, hi)`.
pub fn float_data(rng: &mut Rng, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> TensorData {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|_| rng.float(lo, hi) as f32).collect();
    TensorData::new(values, shape.to_vec()).convert_dtype(dtype)
}

/// Random int data of `dtype`, uniform in `lo..hi`.
pub fn int_data(rng: &mut Rng, shape: &[usize], dtype: DType, lo: i64, hi: i64) -> TensorData {
    let n: usize = shape.iter().product();
    let values: Vec<i64> = (0..n).map(|_| rng.int(lo, hi)).collect();
    TensorData::new(values, shape.to_vec()).convert_dtype(dtype)
}

/// Random bools.
pub fn bool_data(rng: &mut Rng, shape: &[usize]) -> TensorData {
    let n: usize = shape.iter().product();
    let values: Vec<bool> = (0..n).map(|_| rng.next_u64() & 1 == 1).collect();
    TensorData::new(values, shape.to_vec())
}

/// Float tolerance: `|a - b| <= abs + rel * |b|`.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    /// Absolute part.
    pub abs: f64,
    /// Relative part.
    pub rel: f64,
}

impl Tol {
    /// Bit-exact (ints, bools, layout ops).
    pub const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

    /// `abs` and `rel` at once.
    pub const fn of(x: f64) -> Tol {
        Tol { abs: x, rel: x }
    }

    /// The tolerance widened for a low-precision dtype.
    pub fn for_dtype(self, dtype: DType) -> Tol {
        match dtype {
            DType::F16 => Tol { abs: self.abs.max(2e-2), rel: self.rel.max(1e-2) },
            DType::BF16 => Tol { abs: self.abs.max(1e-1), rel: self.rel.max(5e-2) },
            _ => self,
        }
    }
}

/// Float dtypes the device supports (f32 always, f16 / bf16 / f64 where the adapter has them).
pub fn float_dtypes() -> Vec<DType> {
    [DType::F32, DType::F16, DType::BF16, DType::F64]
        .into_iter()
        .filter(|&d| Ex::supports_dtype(&dev::<Ex>(), d))
        .collect()
}

/// Int dtypes the device supports, among those burn-ndarray also computes in.
pub fn int_dtypes() -> Vec<DType> {
    [DType::I32, DType::I64, DType::U32, DType::U8, DType::I16, DType::I8, DType::U16, DType::U64]
        .into_iter()
        .filter(|&d| Ex::supports_dtype(&dev::<Ex>(), d))
        .collect()
}

/// A group of checks that counts what it checked and collects failures.
pub struct Suite {
    name: &'static str,
    checked: usize,
    failures: Vec<String>,
}

impl Suite {
    /// A new, empty suite.
    pub fn new(name: &'static str) -> Self {
        Self { name, checked: 0, failures: Vec::new() }
    }

    /// Compares our result with the reference's; `case` names the op, shapes, dtypes and seed.
    pub fn check(&mut self, case: impl Into<String>, tol: Tol, result: (Result<TensorData, String>, TensorData)) {
        self.checked += 1;
        let case = case.into();
        let (ours, reference) = result;
        let ours = match ours {
            Ok(d) => d,
            Err(msg) => return self.failures.push(format!("{case}: panicked: {msg}")),
        };
        if let Err(msg) = compare(&ours, &reference, tol) {
            self.failures.push(format!("{case}: {msg}"));
        }
    }

    /// Checks that our backend rejects an input with a panic whose message contains `needle`.
    pub fn check_panics(&mut self, case: impl Into<String>, needle: &str, ours: Result<TensorData, String>) {
        self.checked += 1;
        let case = case.into();
        match ours {
            Ok(d) => self.failures.push(format!("{case}: expected a panic, got shape {:?}", d.shape)),
            Err(msg) if !msg.contains(needle) => {
                self.failures.push(format!("{case}: panic message {msg:?} does not contain {needle:?}"))
            }
            Err(_) => {}
        }
    }

    /// Records a check done outside [`Suite::check`].
    pub fn record(&mut self, case: impl Into<String>, ok: Result<(), String>) {
        self.checked += 1;
        if let Err(msg) = ok {
            self.failures.push(format!("{}: {msg}", case.into()));
        }
    }

    /// Records that `result` is an error whose message contains every needle.
    pub fn expect_error<V, E: std::fmt::Display>(&mut self, case: &str, result: Result<V, E>, needles: &[&str]) {
        let outcome = match result {
            Ok(_) => Err("expected an error, got a result".to_string()),
            Err(e) => {
                let message = e.to_string();
                match needles.iter().find(|n| !message.contains(*n)) {
                    Some(missing) => Err(format!("message {message:?} lacks {missing:?}")),
                    None => Ok(()),
                }
            }
        };
        self.record(case, outcome);
    }

    /// Prints the count and fails with every failure.
    pub fn finish(self) {
        println!("conformance[{}]: {} op x dtype x case combinations checked, {} failed", self.name, self.checked, self.failures.len());
        if !self.failures.is_empty() {
            let shown: Vec<&String> = self.failures.iter().take(60).collect();
            panic!(
                "conformance[{}]: {} of {} checks failed:\n{}",
                self.name,
                self.failures.len(),
                self.checked,
                shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// Values of `data` as f64 (bools as 0 / 1).
pub fn values(data: &TensorData) -> Vec<f64> {
    match data.dtype {
        DType::Bool(_) => data.to_vec::<bool>().expect("bools").into_iter().map(|b| b as u8 as f64).collect(),
        _ => data.clone().convert::<f64>().to_vec::<f64>().expect("values"),
    }
}

/// Compares shapes and values within `tol`; NaN equals NaN and infinities must match.
pub fn compare(ours: &TensorData, reference: &TensorData, tol: Tol) -> Result<(), String> {
    if ours.shape != reference.shape {
        return Err(format!("shape {:?}, expected {:?}", ours.shape, reference.shape));
    }
    let (a, b) = (values(ours), values(reference));
    for (k, (&x, &y)) in a.iter().zip(&b).enumerate() {
        let same = (x.is_nan() && y.is_nan())
            || x == y
            || (x.is_finite() && y.is_finite() && (x - y).abs() <= tol.abs + tol.rel * y.abs());
        if !same {
            return Err(format!("element {k}: {x} vs reference {y} (tolerance {tol:?})"));
        }
    }
    Ok(())
}

/// How an input is laid out before the op sees it: the same view is made on both backends,
/// so results stay comparable while our kernels get non-contiguous inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// As uploaded.
    Contiguous,
    /// First and last dimensions swapped.
    Transposed,
    /// Every second element of the last dimension.
    Stepped,
    /// The first dimension reversed by a negative-step slice.
    Reversed,
    /// The first entry of dimension 0 broadcast back to the full shape (stride 0).
    Expanded,
}

/// Every view.
pub const VIEWS: [View; 5] = [View::Contiguous, View::Transposed, View::Stepped, View::Reversed, View::Expanded];

fn full_slices(rank: usize) -> Vec<burn_backend::Slice> {
    vec![burn_backend::Slice::new(0, None, 1); rank]
}

macro_rules! view_fn {
    ($(#[$doc:meta])* $name:ident, $prim:ident, $swap:ident, $slice:ident, $expand:ident) => {
        $(#[$doc])*
        pub fn $name<B: Backend>(t: B::$prim, view: View) -> B::$prim {
            use burn_backend::TensorMetadata;
            let shape = t.shape();
            let rank = shape.num_dims();
            let mut s = full_slices(rank);
            match view {
                View::Transposed if rank >= 2 => B::$swap(t, 0, rank - 1),
                View::Stepped => {
                    s[rank - 1] = burn_backend::Slice::new(0, None, 2);
                    B::$slice(t, &s)
                }
                View::Reversed => {
                    s[0] = burn_backend::Slice::new(0, None, -1);
                    B::$slice(t, &s)
                }
                View::Expanded => {
                    s[0] = burn_backend::Slice::new(0, Some(1), 1);
                    B::$expand(B::$slice(t, &s), shape)
                }
                _ => t,
            }
        }
    };
}

view_fn!(
    /// Applies `view` to a float primitive.
    float_view, FloatTensorPrimitive, float_swap_dims, float_slice, float_expand
);
view_fn!(
    /// Applies `view` to an int primitive.
    int_view, IntTensorPrimitive, int_swap_dims, int_slice, int_expand
);

/// Shapes every op is checked on: random shapes of rank 1 to 6 from `rng`, plus edge cases
/// (an empty tensor and a single element).
pub fn shapes(rng: &mut Rng) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (1..=4).map(|rank| rng.shape(rank, 7)).collect();
    out.push(rng.shape(6, 3));
    out.push(vec![3, 0, 2]);
    out.push(vec![1]);
    out
}
