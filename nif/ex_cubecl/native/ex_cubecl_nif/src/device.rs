//! Devices: the runtimes this build has, the adapters of this machine, and the default.
//!
//! A device crosses the NIF as a string: `"cuda:N"`, `"wgpu"` (wgpu's default adapter: a
//! hardware GPU where there is one, else Mesa's lavapipe), `"wgpu:discrete:N"`,
//! `"wgpu:integrated:N"`, `"wgpu:virtual:N"` or `"wgpu:cpu"`.
//!
//! Every build has the CPU device (`"wgpu:cpu"`: wgpu's software adapter, Mesa's lavapipe or
//! llvmpipe, Windows' WARP); the `vulkan`, `metal` and `wgpu` features add hardware adapters
//! of that API (of any API for `wgpu`), `cuda` NVIDIA GPUs. Without any of them the NIF runs
//! on the CPU device alone: `"wgpu"` means `"wgpu:cpu"` and hardware adapters are refused.
use std::sync::Mutex;

use ex_cubecl::cubecl::wgpu::{GraphicsApi, WgpuDevice};

use crate::error::{NifError, NifResult};

/// The graphics API of this build's wgpu devices: Metal on Apple targets, DX12 on Windows
/// (WARP, its CPU device, is DX12's) unless the `vulkan` feature asks for Vulkan, Vulkan
/// elsewhere (Linux, Android).
pub fn api() -> wgpu::Backend {
    if cfg!(target_vendor = "apple") {
        wgpu::Backend::Metal
    } else if cfg!(all(target_os = "windows", not(feature = "vulkan"))) {
        wgpu::Backend::Dx12
    } else {
        wgpu::Backend::Vulkan
    }
}

/// Whether this build uses hardware adapters of `api()` (else only its CPU adapter).
pub fn gpu_adapters() -> bool {
    cfg!(feature = "wgpu")
        || (cfg!(feature = "vulkan") && api() == wgpu::Backend::Vulkan)
        || (cfg!(feature = "metal") && api() == wgpu::Backend::Metal)
}

/// Creates `device`'s cubecl client on [`api`] where cubecl's own choice differs (cubecl
/// 0.10 picks Metal on macOS and Vulkan everywhere else, iOS and Windows included); once per
/// device, before any other use of it, so that the lazily created client never takes the
/// wrong API.
fn open_on_api(device: &WgpuDevice) {
    use ex_cubecl::cubecl::wgpu::{AutoGraphicsApi, Dx12, Metal, RuntimeOptions, init_setup};
    static OPENED: Mutex<Vec<WgpuDevice>> = Mutex::new(Vec::new());
    if api() == AutoGraphicsApi::backend() {
        return;
    }
    let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    if opened.contains(device) {
        return;
    }
    match api() {
        wgpu::Backend::Metal => drop(init_setup::<Metal>(device, RuntimeOptions::default())),
        _ => drop(init_setup::<Dx12>(device, RuntimeOptions::default())),
    }
    opened.push(device.clone());
}

/// Why a hardware wgpu adapter is refused in a build without one.
const NO_GPU_ADAPTERS: &str = "this build runs on the CPU device alone (build the NIF with the \
     `vulkan`, `metal` or `wgpu` feature for hardware adapters)";

/// A device of one of the compiled-in runtimes.
#[derive(Clone, Debug, PartialEq)]
pub enum Dev {
    Wgpu(ex_cubecl::cubecl::wgpu::WgpuDevice),
    #[cfg(feature = "cuda")]
    Cuda(ex_cubecl::cubecl::cuda::CudaDevice),
}

impl Dev {
    /// Parses a device string (see the module docs).
    pub fn parse(op: &str, spec: &str) -> NifResult<Self> {
        let bad = |why: &str| {
            NifError::new(
                op,
                format!("bad device {spec:?}: {why}"),
                "devices: cuda:N, wgpu, wgpu:discrete:N, wgpu:integrated:N, wgpu:virtual:N, wgpu:cpu",
            )
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let index = |s: Option<&&str>| {
            s.map_or(Ok(0), |s| {
                s.parse::<usize>()
                    .map_err(|_| bad("the index is not a number"))
            })
        };
        match parts.first().copied() {
            #[cfg(feature = "cuda")]
            Some("cuda") if parts.len() <= 2 => Ok(Dev::Cuda(
                ex_cubecl::cubecl::cuda::CudaDevice::new(index(parts.get(1))?),
            )),
            #[cfg(not(feature = "cuda"))]
            Some("cuda") => Err(bad(
                "this build has no CUDA runtime (build the NIF with the `cuda` feature)",
            )),
            Some("wgpu") => {
                let device = match (parts.get(1).copied(), parts.len()) {
                    (None, _) if !gpu_adapters() => WgpuDevice::Cpu,
                    (None, _) => WgpuDevice::DefaultDevice,
                    (Some("cpu"), 2) => WgpuDevice::Cpu,
                    (Some("discrete" | "integrated" | "virtual"), 2 | 3) if !gpu_adapters() => {
                        return Err(bad(NO_GPU_ADAPTERS));
                    }
                    (Some("discrete"), 2 | 3) => WgpuDevice::DiscreteGpu(index(parts.get(2))?),
                    (Some("integrated"), 2 | 3) => WgpuDevice::IntegratedGpu(index(parts.get(2))?),
                    (Some("virtual"), 2 | 3) => WgpuDevice::VirtualGpu(index(parts.get(2))?),
                    _ => return Err(bad("unknown wgpu adapter kind")),
                };
                open_on_api(&device);
                Ok(Dev::Wgpu(device))
            }
            _ => Err(bad("unknown runtime")),
        }
    }

    /// The device string.
    pub fn spec(&self) -> String {
        match self {
            Dev::Wgpu(d) => match d {
                WgpuDevice::DiscreteGpu(i) => format!("wgpu:discrete:{i}"),
                WgpuDevice::IntegratedGpu(i) => format!("wgpu:integrated:{i}"),
                WgpuDevice::VirtualGpu(i) => format!("wgpu:virtual:{i}"),
                WgpuDevice::Cpu => "wgpu:cpu".into(),
                _ => "wgpu".into(),
            },
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => format!("cuda:{}", d.index),
        }
    }
}

/// One device of this machine, as `devices/0` lists it.
pub struct DeviceEntry {
    pub spec: String,
    pub name: String,
    pub kind: &'static str,
    pub api: String,
}

/// The devices of this machine that a compiled-in runtime can use, best first: CUDA GPUs,
/// then hardware wgpu adapters (discrete, integrated, virtual), then software ones.
pub fn devices() -> Vec<DeviceEntry> {
    let mut out = Vec::new();
    #[cfg(feature = "cuda")]
    out.extend(cuda_devices());
    out.extend(wgpu_devices());
    out
}

#[cfg(feature = "cuda")]
fn cuda_devices() -> Vec<DeviceEntry> {
    use ex_cubecl::cubecl::Runtime;
    use ex_cubecl::cubecl::cuda::{CudaDevice, CudaRuntime};
    // cubecl panics where there is no driver or no GPU: then there is no CUDA device.
    let count = std::panic::catch_unwind(|| {
        let client = CudaRuntime::client(&CudaDevice::new(0));
        client.device_count(ex_cubecl::cubecl::device::Device::to_id(&CudaDevice::new(0)).type_id)
    })
    .unwrap_or(0);
    (0..count)
        .map(|i| DeviceEntry {
            spec: format!("cuda:{i}"),
            name: format!("CUDA device {i}"),
            kind: "gpu",
            api: "cuda".into(),
        })
        .collect()
}

/// The adapters of [`api`] (the API cubecl's devices open, so that `wgpu:discrete:N` here is
/// cubecl's N-th discrete adapter), the hardware ones only where [`gpu_adapters`].
fn wgpu_devices() -> Vec<DeviceEntry> {
    use wgpu::DeviceType;
    let instance = wgpu::Instance::default();
    let adapters = ex_cubecl::cubecl::future::block_on(instance.enumerate_adapters(api().into()));
    let mut counts = [0usize; 3];
    let mut entries: Vec<(u8, DeviceEntry)> = adapters
        .iter()
        .filter(|adapter| {
            gpu_adapters()
                || matches!(
                    adapter.get_info().device_type,
                    DeviceType::Cpu | DeviceType::Other
                )
        })
        .map(|adapter| {
            let info = adapter.get_info();
            let (rank, kind, spec) = match info.device_type {
                DeviceType::DiscreteGpu => (0, "gpu", Some(("discrete", 0))),
                DeviceType::IntegratedGpu => (1, "gpu", Some(("integrated", 1))),
                DeviceType::VirtualGpu => (2, "gpu", Some(("virtual", 2))),
                DeviceType::Cpu | DeviceType::Other => (3, "cpu", None),
            };
            let spec = match spec {
                Some((name, slot)) => {
                    counts[slot] += 1;
                    format!("wgpu:{name}:{}", counts[slot] - 1)
                }
                None => "wgpu:cpu".to_string(),
            };
            (
                rank,
                DeviceEntry {
                    spec,
                    name: info.name.clone(),
                    kind,
                    api: format!("{:?}", info.backend).to_lowercase(),
                },
            )
        })
        .collect();
    entries.sort_by_key(|(rank, _)| *rank);
    let mut seen = std::collections::HashSet::new();
    entries
        .into_iter()
        .map(|(_, e)| e)
        .filter(|e| seen.insert(e.spec.clone()))
        .collect()
}

/// The default device: the first of [`devices`] (CUDA, then hardware adapters, then
/// software), or wgpu's default adapter where enumeration finds nothing; an error where this
/// build runs on the CPU device alone and the machine has no CPU adapter.
pub fn default_device() -> NifResult<Dev> {
    match devices().first() {
        Some(entry) => Dev::parse("default_device", &entry.spec),
        None if !gpu_adapters() && !cfg!(feature = "cuda") => Err(NifError::new(
            "default_device",
            "no device: this build runs on the CPU device alone and this machine has no CPU adapter",
            format!(
                "wgpu found no {:?} software adapter (lavapipe, llvmpipe or WARP)",
                api()
            ),
        )),
        None => Dev::parse("default_device", "wgpu"),
    }
}
