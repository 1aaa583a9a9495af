//! The ExCubecl runtime: device buffers with a dtype, layouts that make views free, a context
//! per device, and the single launcher through which every kernel launch goes.

mod context;
mod dtype;
mod launcher;
mod layout;

pub use context::{DeviceContext, next_random_key};
pub use dtype::{dtype_usage, elem_size, storage_type};
pub use launcher::{Geometry, launch, launch_count};
pub use layout::Layout;
