//! Checks NCCL across processes: run one per GPU with `scripts/launch_distributed.sh --nproc N
//! -- process_group`. Each rank all-reduces tensors whose values it knows the sum of (f32,
//! f16, bf16; sum and mean), checks the results, then times a 64 MiB f32 all-reduce and prints
//! NCCL's bus bandwidth (2 (n - 1) / n bytes per second). `--print-id` prints a new NCCL unique
//! id for EX_CUBECL_NCCL_ID instead.
use std::time::Instant;

use burn_backend::TensorData;
use burn_tensor::{FloatDType, Tensor};
use ex_cubecl::ExCuda;
use ex_cubecl::cubecl::cuda::CudaDevice;
use ex_cubecl::distributed::{ProcessGroup, ReduceOperation, UniqueId, init_from_env};

fn main() {
    if std::env::args().any(|a| a == "--print-id") {
        match UniqueId::new() {
            Ok(id) => println!("{}", id.to_hex()),
            Err(e) => fail(&e.to_string()),
        }
        return;
    }
    let group = init_from_env().unwrap_or_else(|e| fail(&e.to_string()));
    let device = CudaDevice::new(group.local_device());
    let (rank, n) = (group.rank(), group.world_size());
    let len = 1 << 12;
    for dtype in [FloatDType::F32, FloatDType::F16, FloatDType::BF16] {
        for op in [ReduceOperation::Sum, ReduceOperation::Mean] {
            // Rank r holds (r + 1) * (i % 5): the sum is n (n + 1) / 2 * (i % 5), exact in every dtype here.
            let values: Vec<f32> = (0..len).map(|i| ((rank + 1) * (i % 5)) as f32).collect();
            let t = Tensor::<ExCuda, 1>::from_data(TensorData::new(values, [len]), &device).cast(dtype);
            let out = reduce(&group, t, op);
            let got = out.into_data().convert::<f32>().to_vec::<f32>().unwrap();
            let total = (n * (n + 1) / 2) as f32;
            let scale = if op == ReduceOperation::Mean { total / n as f32 } else { total };
            let tol = if dtype == FloatDType::F32 { 1e-6 } else { 1e-2 };
            for (i, g) in got.iter().enumerate() {
                let want = scale * (i % 5) as f32;
                if (g - want).abs() > tol * (1.0 + want.abs()) {
                    fail(&format!("rank {rank}: {dtype:?} {op:?}: element {i} is {g}, expected {want}"));
                }
            }
            println!("process_group: rank {rank} of {n}: {dtype:?} {op:?} all-reduce correct");
        }
    }
    let bytes = 64 << 20;
    let big = Tensor::<ExCuda, 1>::ones([bytes / 4], &device);
    let _ = reduce(&group, big.clone(), ReduceOperation::Sum);
    let runs = 10;
    let start = Instant::now();
    for _ in 0..runs {
        let _ = reduce(&group, big.clone(), ReduceOperation::Sum);
    }
    let seconds = start.elapsed().as_secs_f64() / runs as f64;
    let bus = 2.0 * (n as f64 - 1.0) / n as f64 * bytes as f64 / seconds / 1e9;
    println!("process_group: rank {rank}: 64 MiB f32 all-reduce {:.3} ms, bus bandwidth {bus:.1} GB/s", seconds * 1e3);
}

fn reduce(group: &ProcessGroup, t: Tensor<ExCuda, 1>, op: ReduceOperation) -> Tensor<ExCuda, 1> {
    group.all_reduce(t, op).unwrap_or_else(|e| fail(&e.to_string()))
}

fn fail(message: &str) -> ! {
    eprintln!("process_group: {message}");
    std::process::exit(1)
}
