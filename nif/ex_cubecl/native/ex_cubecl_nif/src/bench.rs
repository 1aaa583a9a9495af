//! Helpers for `examples/call_cost.rs`: the op table called from Rust, as the NIF calls it.
use crate::device::{Dev, default_device};
use crate::opts::{OptVal, Opts};
use crate::tensor::AnyPrim;

/// `spec`, or the NIF's default device.
pub fn device(spec: Option<String>) -> Dev {
    match spec {
        Some(s) => Dev::parse("bench", &s).expect("a device"),
        None => default_device().expect("a default device"),
    }
}

/// An f32 tensor of `shape` on `device`.
pub fn upload(device: &Dev, values: &[f32], shape: &[usize]) -> AnyPrim {
    let bytes = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    crate::buffer::upload("bench", bytes, shape.to_vec(), burn_backend::DType::F32, device).expect("upload")
}

/// One kernel call, ready to run again and again.
pub struct Call {
    op: String,
    inputs: Vec<AnyPrim>,
    opts: Opts,
    device: Dev,
}

impl Call {
    /// Kernel `op` on `inputs` with integer-list options.
    pub fn new(op: &str, inputs: Vec<AnyPrim>, opts: &[(&str, Vec<i64>)], device: &Dev) -> Self {
        let opts = Opts(opts.iter().map(|(k, v)| (k.to_string(), OptVal::List(v.iter().map(|&i| OptVal::Int(i)).collect()))).collect());
        Self { op: op.into(), inputs, opts, device: device.clone() }
    }

    /// Runs the call.
    pub fn run(&self) -> Vec<AnyPrim> {
        crate::run(&self.op, self.inputs.clone(), &self.opts, &self.device).expect("kernel")
    }

    /// Runs the call and waits for the device.
    pub fn run_and_sync(&self) {
        let out = self.run();
        match &self.device {
            #[cfg(feature = "wgpu")]
            Dev::Wgpu(d) => <crate::tensor::AdWgpu as burn_backend::Backend>::sync(d).expect("sync"),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => <crate::tensor::AdCuda as burn_backend::Backend>::sync(d).expect("sync"),
        }
        drop(out);
    }
}
