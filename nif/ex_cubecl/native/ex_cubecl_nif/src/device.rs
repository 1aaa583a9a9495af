//! Devices: the runtimes this build has, the adapters of this machine, and the default.
//!
//! A device crosses the NIF as a string: `"cuda:N"`, `"wgpu"` (wgpu's default adapter: a
//! hardware GPU where there is one, else Mesa's lavapipe), `"wgpu:discrete:N"`,
//! `"wgpu:integrated:N"`, `"wgpu:virtual:N"` or `"wgpu:cpu"`.
use crate::error::{NifError, NifResult};

/// A device of one of the compiled-in runtimes.
#[derive(Clone, Debug, PartialEq)]
pub enum Dev {
    #[cfg(feature = "wgpu")]
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
            #[cfg(feature = "wgpu")]
            Some("wgpu") => {
                use ex_cubecl::cubecl::wgpu::WgpuDevice;
                let device = match (parts.get(1).copied(), parts.len()) {
                    (None, _) => WgpuDevice::DefaultDevice,
                    (Some("discrete"), 2 | 3) => WgpuDevice::DiscreteGpu(index(parts.get(2))?),
                    (Some("integrated"), 2 | 3) => WgpuDevice::IntegratedGpu(index(parts.get(2))?),
                    (Some("virtual"), 2 | 3) => WgpuDevice::VirtualGpu(index(parts.get(2))?),
                    (Some("cpu"), 2) => WgpuDevice::Cpu,
                    _ => return Err(bad("unknown wgpu adapter kind")),
                };
                Ok(Dev::Wgpu(device))
            }
            #[cfg(not(feature = "wgpu"))]
            Some("wgpu") => Err(bad("this build has no wgpu runtime")),
            _ => Err(bad("unknown runtime")),
        }
    }

    /// The device string.
    pub fn spec(&self) -> String {
        match self {
            #[cfg(feature = "wgpu")]
            Dev::Wgpu(d) => {
                use ex_cubecl::cubecl::wgpu::WgpuDevice;
                match d {
                    WgpuDevice::DiscreteGpu(i) => format!("wgpu:discrete:{i}"),
                    WgpuDevice::IntegratedGpu(i) => format!("wgpu:integrated:{i}"),
                    WgpuDevice::VirtualGpu(i) => format!("wgpu:virtual:{i}"),
                    WgpuDevice::Cpu => "wgpu:cpu".into(),
                    _ => "wgpu".into(),
                }
            }
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
    #[cfg(feature = "wgpu")]
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

#[cfg(feature = "wgpu")]
fn wgpu_devices() -> Vec<DeviceEntry> {
    use wgpu::DeviceType;
    let instance = wgpu::Instance::default();
    let adapters =
        ex_cubecl::cubecl::future::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let mut counts = [0usize; 3];
    let mut entries: Vec<(u8, DeviceEntry)> = adapters
        .iter()
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
/// software), or wgpu's default adapter where enumeration finds nothing.
pub fn default_device() -> NifResult<Dev> {
    match devices().first() {
        Some(entry) => Dev::parse("default_device", &entry.spec),
        None => Dev::parse("default_device", "wgpu"),
    }
}
