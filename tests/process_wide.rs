//! The runtime's process-wide switches, in a test binary of their own and in one test (tests
//! of one binary run at once, on threads):
//! - `alloc::set_allocation_limit`: an allocation over it is refused with a panic naming the
//!   op, the size and the limit, smaller ones go on, and lifted, the refused op works;
//! - `shutdown` (which ends the runtime for good, so it comes last): the command queued
//!   before it finishes, the work launched before it can be read, a launch after it panics
//!   naming the op, a command submitted after it fails saying so, and a second call is fine.
//!   The process then exits through the at-exit winding down (a no-op after this one).
use std::panic::{AssertUnwindSafe, catch_unwind};

use burn_tensor::{Float, Tensor};
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use ex_cubecl::runtime::alloc::{allocation_limit, set_allocation_limit};
use ex_cubecl::runtime::{CommandQueue, Work, from_cube, is_shut_down, shutdown, to_cube};
use ex_cubecl::ExWgpu;

fn values(t: Tensor<ExWgpu, 1>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap().iter().map(|v| (v * 1000.0).round() / 1000.0).collect()
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[test]
fn allocation_limit_then_shutdown() {
    let device = WgpuDevice::default();
    let x = Tensor::<ExWgpu, 1>::from_floats([0.0, 1.0, 2.0], &device);

    let big = Tensor::<ExWgpu, 1>::ones([1024], &device);
    set_allocation_limit(Some(1024));
    assert_eq!(allocation_limit(), Some(1024));
    let refused = catch_unwind(AssertUnwindSafe(|| big.clone().exp().into_data())).expect_err("4096 bytes over a 1024-byte limit");
    let message = panic_message(refused);
    assert!(message.contains("needs 4096 bytes, more than the allocation limit") && message.contains("(1024 bytes)"), "{message}");
    assert_eq!(values(x.clone().exp()), [1.0, 2.718, 7.389], "small allocations go on");
    set_allocation_limit(None);
    assert_eq!(allocation_limit(), None);
    assert_eq!(big.exp().into_data().to_vec::<f32>().unwrap().len(), 1024);

    let queue = CommandQueue::<WgpuRuntime>::for_device(&device);
    let queued = {
        let x = x.clone();
        queue.submit(Work::ops(move || vec![to_cube(x.exp())]))
    };
    let launched = x.clone() * 2.0;
    assert!(!is_shut_down());

    shutdown().expect("shutdown");
    assert!(is_shut_down());
    let out = queue.wait(queued).expect("the command queued before the shutdown");
    assert_eq!(values(from_cube::<_, 1, Float>(out[0].clone())), [1.0, 2.718, 7.389]);
    assert_eq!(values(launched), [0.0, 2.0, 4.0], "work launched before it is read back");

    let refused = catch_unwind(AssertUnwindSafe(|| x.clone().sin().into_data())).expect_err("a launch after the shutdown");
    let message = panic_message(refused);
    assert!(message.contains("the runtime was shut down"), "{message}");

    let late = {
        let x = x.clone();
        queue.submit(Work::ops(move || vec![to_cube(x.cos())]))
    };
    let err = queue.wait(late).expect_err("a command submitted after the shutdown");
    assert!(err.to_string().contains("submitted after the runtime was shut down"), "{err}");
    assert_eq!(values(x), [0.0, 1.0, 2.0], "reads still work");
    shutdown().expect("a second shutdown");
}
