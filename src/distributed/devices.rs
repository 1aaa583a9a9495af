//! Several logical wgpu devices on one adapter: data-parallel code runs and is tested on a
//! machine with one GPU, or none (Mesa's lavapipe).
use std::sync::Mutex;

use cubecl::future::block_on;
use cubecl::wgpu::{AutoGraphicsApi, GraphicsApi, RuntimeOptions, WgpuDevice, WgpuSetup, init_device};

/// Devices made so far, and the adapter they share.
struct Made {
    instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    devices: Vec<WgpuDevice>,
}

static MADE: Mutex<Option<Made>> = Mutex::new(None);

/// `n` logical devices (`WgpuDevice::Existing`) on the adapter that `WgpuDevice::DefaultDevice`
/// uses (the best GPU, else lavapipe), each with its own wgpu device, queue and cubecl
/// server: as independent as separate GPUs, sharing the adapter's hardware. The same `n`
/// devices come back on every call of this process (more are made when `n` grows).
///
/// # Panics
/// When wgpu finds no adapter or the adapter refuses a device.
pub fn wgpu_devices(n: usize) -> Vec<WgpuDevice> {
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let made = made.get_or_insert_with(|| {
        let backend = AutoGraphicsApi::backend();
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: backend.into(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter = block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
        }))
        .unwrap_or_else(|e| panic!("ex_cubecl: wgpu_devices: no {backend:?} adapter: {e}"));
        Made { instance, adapter, devices: Vec::new() }
    });
    while made.devices.len() < n {
        let (device, queue) = request_device(&made.adapter);
        let setup = WgpuSetup {
            instance: made.instance.clone(),
            adapter: made.adapter.clone(),
            device,
            queue,
            backend: made.adapter.get_info().backend,
        };
        made.devices.push(init_device(setup, RuntimeOptions::default()));
    }
    made.devices[..n].to_vec()
}

/// A new device and queue on `adapter`, with the features and limits cubecl asks for.
fn request_device(adapter: &wgpu::Adapter) -> (wgpu::Device, wgpu::Queue) {
    if let Some(pair) = block_on(cubecl::wgpu::vulkan::request_vulkan_device(adapter)) {
        return pair;
    }
    let descriptor = wgpu::DeviceDescriptor {
        label: Some("ex_cubecl logical device"),
        required_features: adapter.features().difference(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS),
        required_limits: adapter.limits(),
        memory_hints: wgpu::MemoryHints::MemoryUsage,
        trace: wgpu::Trace::Off,
        // SAFETY: the features cubecl-wgpu's own device requests enable, for the same kernels.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
    };
    block_on(adapter.request_device(&descriptor))
        .unwrap_or_else(|e| panic!("ex_cubecl: wgpu_devices: the adapter {:?} refused a device: {e}", adapter.get_info().name))
}
