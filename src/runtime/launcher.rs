//! The launcher: every kernel launch of the backend goes through [`launch`], so launches are
//! checked in one place (empty work is skipped, cube counts are within the device's limits),
//! counted, and recorded while a [`Pipeline`](super::Pipeline) captures on this thread.
//!
//! A launch is a closure that owns what it binds (tensors, which are cheap handle clones,
//! and scalars by value) and receives the client, cube count and cube dimension. Outside a
//! capture it runs once, at once. During a capture it runs once as well and is then kept,
//! boxed, in the recording, so that the pipeline can call it again on every replay.
use std::fmt::{self, Debug, Display};
use std::sync::atomic::{AtomicU64, Ordering};

use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim, Runtime};

use super::capture::{self, RecordedLaunch};

static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// Units per cube of the elementwise launches.
pub const ELEMWISE_CUBE: u32 = 256;

/// How a kernel's work is laid out over the device.
#[derive(Clone, Debug)]
pub enum Geometry {
    /// One unit per item, `ELEMWISE_CUBE` units per cube.
    Units(usize),
    /// `count` cubes of `dim` units each, numbered linearly by `CUBE_POS`.
    Cubes {
        /// Number of cubes.
        count: usize,
        /// Units per cube.
        dim: CubeDim,
    },
}

/// An operation's name made of a family and a value (`fused [Binary(Add, 0, 1), ..]`), written
/// out only where a name is shown or recorded: a launch that goes well formats nothing.
pub struct OpName<'a, T: Debug + ?Sized>(pub &'a str, pub &'a T);

impl<T: Debug + ?Sized> Display for OpName<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.0, self.1)
    }
}

/// Launches a kernel: `kernel` receives the client, and the cube count and cube dimension to
/// launch with. Nothing is launched for empty work. `op` names the operation in error
/// messages and in a capture's recording, and is formatted only there.
///
/// `kernel` must own everything it binds, and launch the same work each time it is called:
/// during a pipeline capture it is recorded and called again on every replay.
///
/// # Panics
/// When the work needs more cubes than the device can run in one launch, or after
/// [`shutdown`](super::shutdown()).
pub fn launch<R: Runtime>(
    client: &ComputeClient<R>,
    op: impl Display,
    geometry: Geometry,
    kernel: impl Fn(&ComputeClient<R>, CubeCount, CubeDim) + Send + 'static,
) {
    let (cubes, dim) = match geometry {
        Geometry::Units(0) | Geometry::Cubes { count: 0, .. } => return,
        Geometry::Units(n) => (n.div_ceil(ELEMWISE_CUBE as usize), CubeDim::new_1d(ELEMWISE_CUBE)),
        Geometry::Cubes { count, dim } => (count, dim),
    };
    let max = client.properties().hardware.max_cube_count;
    let capacity = max.0 as u64 * max.1 as u64 * max.2 as u64;
    assert!(
        (cubes as u64) <= capacity,
        "ex_cubecl: {op}: the work needs {cubes} cubes, more than the device's {capacity}"
    );
    let count = spread(cubes as u32, max);
    let _launching = super::shutdown::launching(&op);
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    if capture::is_capturing() {
        kernel(client, count.clone(), dim);
        let client = client.clone();
        capture::record(RecordedLaunch {
            op: op.to_string(),
            count,
            dim,
            kernel: Box::new(move |count, dim| kernel(&client, count, dim)),
        });
    } else {
        kernel(client, count, dim);
    }
}

/// Launches a recorded kernel again (pipeline replays).
pub(crate) fn replay(launch: &RecordedLaunch) {
    let _launching = super::shutdown::launching(&launch.op);
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    (launch.kernel)(launch.count.clone(), launch.dim);
}

/// Spreads `cubes` over x, then y, then z; the kernels number cubes linearly and skip those
/// past the end.
fn spread(cubes: u32, max: (u32, u32, u32)) -> CubeCount {
    if cubes <= max.0 {
        return CubeCount::Static(cubes, 1, 1);
    }
    let y = cubes.div_ceil(max.0);
    if y <= max.1 {
        let x = cubes.div_ceil(y);
        return CubeCount::Static(x, y, 1);
    }
    let z = y.div_ceil(max.1);
    let x = max.0;
    let y = cubes.div_ceil(x * z);
    CubeCount::Static(x, y, z)
}

/// Number of kernels launched by this process so far (all devices).
pub fn launch_count() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}
