//! Where a kernel launch's host time goes: the same tiny kernel (16 f32 elements, one cube)
//! launched through cubecl's client in several ways, and through our backend, each many times
//! back to back then synced, so that the time per launch is the throughput of the whole launch
//! path (our closure, cubecl's client and channel, its device thread, the driver); the device
//! finishes each tiny kernel in a few microseconds. Prints a markdown table.
//!
//! ```text
//! launch_cost [--launches N] [--reps N]
//! ```
//! Rows:
//! - `a + b`, tensor arguments: cubecl uploads every launch's shapes and strides (its
//!   "dynamic metadata") into a small device buffer before launching;
//! - the same kernel on array arguments: lengths only, passed with the launch, no upload;
//! - one array argument, and eight: the cost of a binding;
//! - a kernel whose compile-time settings make its cache key larger (the key is hashed on
//!   every launch);
//! - our backend's `add` (eager: op logic, allocation, our launcher) and a pipeline replay of
//!   a chain of adds (our recorded closures);
//! - the latency of one launch + sync;
//! - the heap allocations per launch, of the whole process (our code, cubecl's client and its
//!   device thread), counted by this binary's allocator;
//! - an eager add + sync with the wait on the calling thread or on cubecl's device thread,
//!   after a millisecond of idleness or none (`runtime::wait`).
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use burn_tensor::Tensor as BurnTensor;
use cubecl::Runtime as _;
use cubecl::prelude::*;
use ex_cubecl::runtime::{Pipeline, from_cube, to_cube};
use ex_cubecl_benches::{Ours, Runtime};

#[cube(launch_unchecked)]
fn add_tensor(a: &Tensor<f32>, b: &Tensor<f32>, out: &mut Tensor<f32>) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = a[ABSOLUTE_POS] + b[ABSOLUTE_POS];
    }
}

#[cube(launch_unchecked)]
fn add_array(a: &Array<f32>, b: &Array<f32>, out: &mut Array<f32>) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = a[ABSOLUTE_POS] + b[ABSOLUTE_POS];
    }
}

#[cube(launch_unchecked)]
fn touch_array(out: &mut Array<f32>) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] += 1.0;
    }
}

#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
fn sum8_array(
    a: &Array<f32>,
    b: &Array<f32>,
    c: &Array<f32>,
    d: &Array<f32>,
    e: &Array<f32>,
    f: &Array<f32>,
    g: &Array<f32>,
    out: &mut Array<f32>,
) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = a[ABSOLUTE_POS] + b[ABSOLUTE_POS] + c[ABSOLUTE_POS] + d[ABSOLUTE_POS] + e[ABSOLUTE_POS] + f[ABSOLUTE_POS] + g[ABSOLUTE_POS];
    }
}

/// Compile-time settings like those of our elementwise kernels (an op, a layout).
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Settings {
    pub op: u32,
    pub lhs_linear: bool,
    pub rhs_linear: bool,
    pub rhs_scalar: bool,
    pub a: u32,
    pub b: u32,
    pub c: u32,
    pub d: u32,
}

#[cube(launch_unchecked)]
fn add_array_settings(a: &Array<f32>, b: &Array<f32>, out: &mut Array<f32>, #[comptime] s: Settings) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = a[ABSOLUTE_POS] + b[ABSOLUTE_POS] * f32::cast_from(s.op);
    }
}

const N: usize = 16;

/// The system allocator, counting allocations (and reallocations) of every thread.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map_or(default, |v| v.parse().expect("a number"))
    };
    let launches = flag("--launches", 4000);
    let reps = flag("--reps", 7);

    let device = Default::default();
    let client = Runtime::client(&device);
    let buf = |v: f32| client.create_from_slice(f32::as_bytes(&[v; N]));
    let (a, b, out) = (buf(1.0), buf(2.0), buf(0.0));
    let extra: Vec<_> = (0..5).map(|i| buf(i as f32)).collect();
    let (count, dim) = (CubeCount::Static(1, 1, 1), CubeDim::new_1d(32));
    let sync = || cubecl::future::block_on(client.sync()).expect("sync");
    let tensor = |h: &cubecl::server::Handle| unsafe { TensorArg::<Runtime>::from_raw_parts(h.clone(), [1].into(), [N].into()) };
    let array = |h: &cubecl::server::Handle| unsafe { ArrayArg::<Runtime>::from_raw_parts(h.clone(), N) };
    let settings = Settings { op: 1, lhs_linear: true, rhs_linear: true, rhs_scalar: false, a: 7, b: 8, c: 9, d: 10 };

    let ours_a = BurnTensor::<Ours, 1>::ones([N], &device);
    let ours_b = BurnTensor::<Ours, 1>::ones([N], &device);
    let chain = |inputs: Vec<ex_cubecl::tensor::CubeTensor<Runtime>>| {
        let (mut t, b) = (from_cube::<Runtime, 1, burn_tensor::Float>(inputs[0].clone()), from_cube::<Runtime, 1, burn_tensor::Float>(inputs[1].clone()));
        for _ in 0..100 {
            t = t + b.clone();
        }
        vec![to_cube(t)]
    };
    let pipeline = Pipeline::capture(&device, &[to_cube(ours_a.clone()), to_cube(ours_b.clone())], chain).expect("capture");

    type Row<'a> = (&'a str, usize, Box<dyn Fn() + 'a>);
    let rows: Vec<Row> = vec![
        ("a + b, tensor arguments (shapes and strides uploaded)", 1, Box::new(|| unsafe {
            add_tensor::launch_unchecked::<Runtime>(&client, count.clone(), dim, tensor(&a), tensor(&b), tensor(&out));
        })),
        ("a + b, array arguments", 1, Box::new(|| unsafe {
            add_array::launch_unchecked::<Runtime>(&client, count.clone(), dim, array(&a), array(&b), array(&out));
        })),
        ("one array argument", 1, Box::new(|| unsafe {
            touch_array::launch_unchecked::<Runtime>(&client, count.clone(), dim, array(&out));
        })),
        ("eight array arguments", 1, Box::new(|| unsafe {
            sum8_array::launch_unchecked::<Runtime>(
                &client, count.clone(), dim, array(&a), array(&b), array(&extra[0]), array(&extra[1]), array(&extra[2]),
                array(&extra[3]), array(&extra[4]), array(&out),
            );
        })),
        ("a + b, array arguments, larger compile-time key", 1, Box::new(|| unsafe {
            add_array_settings::launch_unchecked::<Runtime>(&client, count.clone(), dim, array(&a), array(&b), array(&out), settings);
        })),
        ("our backend's add, eager", 1, Box::new(|| drop(ours_a.clone() + ours_b.clone()))),
        ("pipeline replay of 100 adds", 103, Box::new(|| {
            drop(pipeline.run(&[to_cube(ours_a.clone()), to_cube(ours_b.clone())]).expect("replay"));
        })),
    ];

    println!("{launches} launches back to back then one sync, medians of {reps}; µs per launch\n");
    println!("| launch | µs per launch | one launch + sync, µs | allocations per launch |");
    println!("|---|---|---|---|");
    for (name, per_call, run) in &rows {
        let calls = launches / per_call;
        for _ in 0..calls.min(200) {
            run();
        }
        sync();
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..calls {
            run();
        }
        sync();
        let allocations = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / (calls * per_call) as f64;
        let throughput = median((0..reps).map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                run();
            }
            sync();
            start.elapsed() / (calls * per_call) as u32
        }));
        let latency = median((0..200).map(|_| {
            let start = Instant::now();
            run();
            sync();
            start.elapsed()
        }));
        println!("| {name} | {:.2} | {:.1} | {allocations:.1} |", us(throughput), us(latency));
    }
    sync_styles(&device, &client);
}

/// One eager add + sync, timed with the sync's wait on the calling thread (cubecl's `sync`
/// future) and on cubecl's device thread (our backend's `sync`, through `exclusive`), with and
/// without a millisecond of host work before each op (long enough for an idle device thread
/// to fall asleep).
fn sync_styles(device: &<Runtime as cubecl::Runtime>::Device, client: &ComputeClient<Runtime>) {
    use burn_tensor::backend::Backend as _;
    let caller = || cubecl::future::block_on(client.sync()).expect("sync");
    let runner = || Ours::sync(device).expect("sync");
    let idle = |gap: Duration| {
        let start = Instant::now();
        while start.elapsed() < gap {
            std::hint::spin_loop();
        }
    };
    let round_trip = median((0..200).map(|_| {
        let start = Instant::now();
        client.exclusive(|| ()).expect("exclusive");
        start.elapsed()
    }));
    println!("\nA round trip to the device thread (`exclusive` of nothing, what confirming a large allocation costs): {:.1} µs", us(round_trip));
    println!("\n| add + sync | wait on the calling thread, µs | on the device thread, µs | idle 1 ms first: calling thread | idle 1 ms first: device thread |");
    println!("|---|---|---|---|---|");
    for n in [16usize, 1 << 26] {
        let a = BurnTensor::<Ours, 1>::ones([n], device);
        let b = BurnTensor::<Ours, 1>::ones([n], device);
        let time = |wait: &dyn Fn(), gap: Duration| {
            median((0..200).map(|_| {
                idle(gap);
                let start = Instant::now();
                drop(a.clone() + b.clone());
                wait();
                start.elapsed()
            }))
        };
        let mut cells = Vec::new();
        for gap in [Duration::ZERO, Duration::from_millis(1)] {
            for wait in [&caller as &dyn Fn(), &runner] {
                time(wait, gap);
                cells.push(format!("{:.1}", us(time(wait, gap))));
            }
        }
        println!("| {n} f32 | {} |", cells.join(" | "));
    }
}

fn median(times: impl Iterator<Item = Duration>) -> Duration {
    let mut times: Vec<Duration> = times.collect();
    times.sort();
    times[times.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
