//! The ExCubecl runtime: device buffers with a dtype, allocations and device-thread failures
//! that reach the caller, layouts that make views free, a context per device, the single launcher through which every kernel launch goes, pipelines that
//! capture and replay those launches ([`Pipeline`]), queues of asynchronous commands
//! ([`CommandQueue`]), and the [`shutdown`] that winds it all down before the process exits.

pub mod alloc;
mod bindings;
pub(crate) mod buffer_id;
pub(crate) mod capture;
pub mod collective;
pub mod command_queue;
mod context;
mod convert;
mod device_failure;
mod dtype;
mod launcher;
mod layout;
mod nccl;
mod peer;
pub mod pipeline;
mod pipeline_error;
mod pipeline_io;
pub(crate) mod pipeline_record;
pub mod shutdown;
pub mod wait;

pub(crate) use bindings::bound;
pub use capture::check_host_read;
pub(crate) use capture::refused_host_read;
pub(crate) use capture::is_capturing;
pub use command_queue::{Callback, CommandError, CommandId, CommandOutcome, CommandQueue, CommandStatus, DEFAULT_RETENTION, Work};
pub use context::{DeviceContext, next_random_key};
pub use device_failure::{install_panic_hook, on_device_thread, take_device_failure};
pub use dtype::{bf16_in_u16, dtype_usage, elem_size, storage_type};
pub use launcher::{Geometry, OpName, launch, launch_count};
pub use layout::{Layout, coalesce};
pub use nccl::{NCCL_ENV, nccl_status};
pub(crate) use peer::{device_to_device, exact_buffer};
pub use collective::{COLLECTIVE_TIMEOUT_ENV, REDUCIBLE_DTYPES, ReduceOp};
pub use peer::peer_to_peer;
pub(crate) use pipeline::donated_state;
pub use convert::{CubeKind, from_cube, to_cube};
pub use pipeline::{Pipeline, StepResults};
pub use pipeline_error::PipelineError;
pub use shutdown::{ShutdownError, is_shut_down, shutdown};
