use burn_backend::DeviceOps;
use burn_backend::ops::TransactionOps;
use cubecl::Runtime;

use crate::ExCubeclBackend;

/// Burn's default transaction reads each tensor through `*_into_data`, which enqueues the
/// copies and waits once per tensor on our async client.
impl<R: Runtime> TransactionOps<Self> for ExCubeclBackend<R> where R::Device: DeviceOps {}
