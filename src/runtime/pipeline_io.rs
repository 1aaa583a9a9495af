//! How a pipeline run takes its inputs and gives its outputs without copying them: the
//! buffers the capture saw its inputs in, and those its outputs view, are bound for the
//! run to the caller's tensors and to fresh buffers (see [`super::bindings`]).
//!
//! - An input the caller gives contiguous from its buffer's start is bound: the replayed
//!   launches read the caller's buffer (they never write an input: no op writes in place
//!   during a capture but the fused optimizers, and those only the state). An input of any
//!   other layout is copied into the pipeline's buffer, as before.
//! - An output that views a buffer the captured launches write (one allocated during the
//!   capture) is given in a fresh buffer that the run binds in its place, so the launches
//!   write it directly. An output that views a bound input is given as a view of the
//!   caller's tensor. Any other output (a view of the state, which the next run overwrites,
//!   of a constant, or of an input that was copied) is copied out.
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::server::Handle;

use super::alloc;
use super::buffer_id::{BufferId, MemoryKey};
use crate::tensor::CubeTensor;

/// How a run gives one output.
#[derive(Clone, Copy, Debug)]
enum Give {
    /// A view of the `k`th buffer the captured launches write, bound to a fresh one.
    Fresh(usize),
    /// A view of input `k`'s buffer: the caller's tensor where the run binds that input.
    Input(usize),
    /// A copy.
    Copy,
}

/// A pipeline's plan for binding its inputs and outputs, made at capture.
pub(crate) struct Io {
    /// Each input buffer of the pipeline (which keeps them).
    inputs: Vec<MemoryKey>,
    /// How each output is given.
    gives: Vec<Give>,
    /// The buffers (and their bytes) that outputs view and that runs bind to fresh buffers
    /// (the pipeline keeps them through its outputs).
    fresh: Vec<(MemoryKey, u64)>,
}

/// What one run binds: the bindings and, per input, whether it is bound; per fresh buffer,
/// the buffer.
pub(crate) struct RunIo {
    pub bindings: Vec<(MemoryKey, Handle)>,
    bound: Vec<bool>,
    fresh: Vec<Handle>,
}

impl Io {
    /// The plan for a pipeline whose input buffers are `inputs` and whose closure returned
    /// `outputs`, with `scratch` the buffers allocated during the capture.
    pub(crate) fn plan<R: Runtime>(inputs: &[CubeTensor<R>], outputs: &[CubeTensor<R>], scratch: &[BufferId]) -> Self {
        let inputs: Vec<MemoryKey> = inputs.iter().map(|t| MemoryKey::of(&t.handle)).collect();
        let mut fresh: Vec<(MemoryKey, u64)> = Vec::new();
        let gives = outputs
            .iter()
            .map(|t| {
                let key = MemoryKey::of(&t.handle);
                if let Some(k) = inputs.iter().position(|&i| i == key) {
                    Give::Input(k)
                } else if scratch.contains(&BufferId::of(&t.handle)) {
                    let k = fresh.iter().position(|&(f, _)| f == key).unwrap_or_else(|| {
                        fresh.push((key, t.handle.size_in_used()));
                        fresh.len() - 1
                    });
                    Give::Fresh(k)
                } else {
                    Give::Copy
                }
            })
            .collect();
        Self { inputs, gives, fresh }
    }

    /// Whether a run binds `input` rather than copying it: when it is contiguous from its
    /// buffer's start (its shape and dtype are checked before).
    pub(crate) fn binds<R: Runtime>(input: &CubeTensor<R>) -> bool {
        input.layout.is_contiguous_from_start()
    }

    /// The bindings of a run on `inputs`, with a fresh buffer for each output buffer.
    pub(crate) fn bind<R: Runtime>(&self, inputs: &[CubeTensor<R>], client: &cubecl::prelude::ComputeClient<R>) -> RunIo {
        let bound: Vec<bool> = inputs.iter().map(Self::binds).collect();
        let mut bindings: Vec<(MemoryKey, Handle)> =
            (0..inputs.len()).filter(|&i| bound[i]).map(|i| (self.inputs[i], inputs[i].handle.clone())).collect();
        let fresh: Vec<Handle> = self
            .fresh
            .iter()
            .map(|&(_, bytes)| alloc::empty(client, "pipeline output", &Shape::from(vec![bytes as usize]), DType::U8))
            .collect();
        bindings.extend(self.fresh.iter().zip(&fresh).map(|(&(id, _), h)| (id, h.clone())));
        RunIo { bindings, bound, fresh }
    }

    /// Output `k` of a run: `output` (the closure's, as captured) in the buffer the run bound
    /// for it, or `copy(output)` where the run has no such buffer.
    pub(crate) fn give<R: Runtime>(
        &self,
        k: usize,
        output: &CubeTensor<R>,
        inputs: &[CubeTensor<R>],
        run: &RunIo,
        copy: impl Fn(&CubeTensor<R>) -> CubeTensor<R>,
    ) -> CubeTensor<R> {
        let handle = match self.gives[k] {
            Give::Fresh(f) => run.fresh[f].clone(),
            Give::Input(i) if run.bound[i] => inputs[i].handle.clone(),
            Give::Input(_) | Give::Copy => return copy(output),
        };
        CubeTensor { handle, ..output.clone() }
    }

    /// The copy launches a run on `inputs` makes for its inputs and outputs.
    pub(crate) fn copies<R: Runtime>(&self, inputs: &[CubeTensor<R>]) -> usize {
        let copied_in = inputs.iter().filter(|t| !Self::binds(t)).count();
        let copied_out = self
            .gives
            .iter()
            .filter(|g| match g {
                Give::Fresh(_) => false,
                Give::Input(i) => !Self::binds(&inputs[*i]),
                Give::Copy => true,
            })
            .count();
        copied_in + copied_out
    }
}
