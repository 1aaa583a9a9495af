//! Fused blocks that write a step's new state over its old one during a pipeline capture.
//!
//! A step captured with `Pipeline::capture_fused_with_state` reads its state from buffers the
//! pipeline owns, and every run ends with each new state in its state buffer: copied there,
//! one launch per state tensor, unless it was computed there. A fused elementwise block that
//! reads a state tensor for the last time (Burn's engine marks that read `ReadWrite`: no later
//! operation of the step reads it) writes one of its outputs over it, as the fused optimizers
//! update donated state in place; so does a matrix product's epilogue. Which output: among
//! those computed from that state, the one computed from the fewest of the block's state
//! inputs, then the earliest computed. An optimizer's update of a parameter
//! and of each of its moments reads its own old value, so each lands over its own state and
//! no copy is left. Where the guess is wrong, the new state is copied as before, aside first
//! where it sits in another state's buffer (two copies where there was one): results never
//! depend on it.
//!
//! A state buffer is written over only when no other tensor the engine holds shares its memory
//! (a view of the old state kept for later, say), and only during a capture: outside one,
//! fused blocks write buffers of their own.
use burn_backend::Shape;
use burn_fusion::stream::Context;
use burn_ir::{TensorId, TensorIr, TensorStatus};
use cubecl::Runtime;

use super::IrHandle;
use super::program::{BlockProgram, operands};
use crate::runtime::buffer_id::{BufferId, MemoryKey};
use crate::runtime::capture;
use crate::tensor::CubeTensor;

/// For each float output of `program` (over `shape`), the float input of the launch it is
/// written over, if any (see the module docs): what `fused_chain_into` and `fused_matmul`
/// take. `floats` are the launch's float inputs, `program`'s float inputs after its first
/// `skipped` (a product or a reduction's result, which no tensor holds yet).
pub(super) fn donated_outputs<R: Runtime>(
    context: &Context<IrHandle<R>>,
    program: &BlockProgram,
    skipped: usize,
    floats: &[CubeTensor<R>],
    shape: &Shape,
) -> Vec<Option<usize>> {
    if !capture::is_capturing() {
        return Vec::new();
    }
    // At most 64 state inputs (launch indices), each a bit of the masks below.
    let state: Vec<usize> =
        (0..floats.len()).filter(|&m| donated(context, &program.floats[skipped + m], &floats[m], shape)).take(64).collect();
    if state.is_empty() {
        return Vec::new();
    }
    // For each register (inputs, then the ops' results), the state inputs it is computed from.
    let mut from: Vec<u64> = (0..program.floats.len() + program.bools.len())
        .map(|r| state.iter().position(|&m| skipped + m == r).map_or(0, |k| 1 << k))
        .collect();
    for &op in &program.ops {
        let mask = operands(op).into_iter().fold(0, |mask, r| mask | from[r]);
        from.push(mask);
    }
    let mask = |j: usize| from[program.outputs[j].1];
    // Fewest state inputs first, then the earliest computed (a new state is an early update
    // of the old, values derived from it come later).
    let mut order: Vec<usize> = (0..program.outputs.len()).collect();
    order.sort_by_key(|&j| (mask(j).count_ones(), program.outputs[j].1));
    let (mut into, mut taken) = (vec![None; program.outputs.len()], 0u64);
    for j in order {
        let free = mask(j) & !taken;
        if free != 0 {
            let k = free.trailing_zeros() as usize;
            taken |= 1 << k;
            into[j] = Some(state[k]);
        }
    }
    into
}

/// Whether `tensor`, read as `read` (relative), is a state buffer of the capture that may be
/// written over: read for the last time, whole, of the block's shape, its memory held by no
/// other tensor of the engine.
fn donated<R: Runtime>(context: &Context<IrHandle<R>>, read: &TensorIr, tensor: &CubeTensor<R>, shape: &Shape) -> bool {
    read.status == TensorStatus::ReadWrite
        && tensor.layout.is_contiguous_from_start()
        && tensor.dims() == shape.as_slice()
        && capture::is_state_buffer(BufferId::of(&tensor.handle), tensor.num_elements())
        && !shared(context, BlockProgram::global(context, read).id, tensor)
}

/// Whether a tensor of the engine other than `id` shares `tensor`'s memory.
fn shared<R: Runtime>(context: &Context<IrHandle<R>>, id: TensorId, tensor: &CubeTensor<R>) -> bool {
    let key = MemoryKey::of(&tensor.handle);
    let shares = |t: &CubeTensor<R>| MemoryKey::of(&t.handle).same_memory(&key);
    context.handles.handle_ids().filter(|other| **other != id).any(|other| match context.handles.get_handle_ref(other) {
        Some(IrHandle::Tensor(t)) => shares(t),
        Some(IrHandle::Quantized(q)) => shares(&q.values) || shares(&q.scales),
        None => false,
    })
}
