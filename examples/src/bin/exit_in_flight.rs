//! A program that returns from `main` with work in flight: a few training steps of Burn's
//! autodiff whose last step is never read, commands queued on the device's `CommandQueue` and
//! never waited for, and threads still launching kernels (most of them compiled for the first
//! time) when `main` returns. It must exit with status 0: at exit the runtime winds down
//! (`ex_cubecl::runtime::shutdown`, registered with `atexit`) before the libraries' destructors
//! run, where cubecl's device thread could otherwise still be compiling inside lavapipe's LLVM.
//! `scripts/exit_check.sh` runs it many times in a row; `EX_CUBECL_EXIT_SHUTDOWN=0` turns the
//! winding down off, to see what it prevents.
use std::time::Duration;

use burn_autodiff::Autodiff;
use burn_tensor::{Distribution, Tensor};
use cubecl::wgpu::WgpuRuntime;
use ex_cubecl::{CommandQueue, ExWgpu, Work, to_cube};

type B = Autodiff<ExWgpu>;

fn main() {
    let device = Default::default();
    let x = Tensor::<B, 2>::random([64, 8], Distribution::Uniform(-1.0, 1.0), &device);
    let y = x.clone().sum_dim(1);
    let mut w = Tensor::<B, 2>::zeros([8, 1], &device).require_grad();
    for step in 0..4 {
        let loss = (x.clone().matmul(w.clone()) - y.clone()).powi_scalar(2).mean();
        let grads = loss.backward();
        let g = w.grad(&grads).expect("gradient of w");
        w = Tensor::from_inner(w.inner() - g * 0.1).require_grad();
        if step == 0 {
            println!("exit_in_flight: first loss {:.4}", loss.into_scalar());
        }
    }

    // Commands queued and never waited for.
    let queue = CommandQueue::<WgpuRuntime>::for_device(&device);
    for i in 0..8 {
        let d = device.clone();
        let _ = queue.submit(Work::ops(move || {
            let a = Tensor::<ExWgpu, 2>::ones([32 + i, 48], &d);
            vec![to_cube(a.clone().matmul(a.transpose()).tanh())]
        }));
    }

    // Threads launching kernels, each op and dtype a kernel compiled on first use.
    for t in 0..2usize {
        let d = device.clone();
        std::thread::spawn(move || {
            let a = Tensor::<ExWgpu, 2>::random([64, 64], Distribution::Uniform(0.1, 1.0), &d);
            for i in 0usize.. {
                let a = if (i + t) % 2 == 0 { a.clone() } else { a.clone().cast(burn_tensor::FloatDType::F16) };
                let _ = match i % 12 {
                    0 => a.exp(),
                    1 => a.log1p(),
                    2 => a.sin(),
                    3 => a.cos(),
                    4 => a.tanh(),
                    5 => a.sqrt(),
                    6 => a.erf(),
                    7 => a.recip(),
                    8 => a.floor(),
                    9 => a.ceil(),
                    10 => a.round(),
                    _ => a.clone().matmul(a),
                };
            }
        });
    }
    std::thread::sleep(Duration::from_millis(30));
    println!("exit_in_flight: returning from main with work in flight");
}
