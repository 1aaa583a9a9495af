//! Asynchronous runs of programs (`ExBurn.async/3`): a run goes on the device's command
//! queue, whose worker thread runs it after the commands before it; the NIF returns the
//! command's id at once and the caller gets `{:ex_cubecl, id, {:ok, {outputs, events}}}` or
//! `{:ex_cubecl, id, {:error, error}}` when it ends. A failed run fails its command only.
use std::sync::{Arc, Mutex};

use ex_cubecl::runtime::Work;
use rustler::{Encoder, LocalPid};

use super::exec::{self, NoCalls};
use super::ProgramRef;
use crate::device::Dev;
use crate::error::{NifError, NifResult, on_nif_stream};
use crate::pipeline::{from_code, to_code};
use crate::tensor::{AnyPrim, TensorRef, wrap};

mod atoms {
    rustler::atoms! { ok, error }
}

/// Queues a run of `program` on `inputs` (already on its device); gives the command's id.
pub fn submit(program: ProgramRef, inputs: Vec<AnyPrim>, pid: LocalPid) -> NifResult<u64> {
    if program.calls {
        return Err(NifError::new("program_submit", "a program with runtime calls can't run on the command queue", "call it with program_run/2"));
    }
    // Per output, then per hook event tensor: its kind code; and each event's id and size.
    let layout: Arc<Mutex<(Vec<u8>, usize, Vec<(usize, usize)>)>> = Arc::default();
    macro_rules! go {
        ($variant:ident, $d:expr) => {{
            let (out_layout, program) = (layout.clone(), program.clone());
            let work = Work::ops(move || {
                let ran = on_nif_stream(|| {
                    let mut loaded = program.loaded.lock().unwrap_or_else(|e| e.into_inner());
                    let (p, state) = &mut *loaded;
                    super::check_inputs("program_submit", p, &inputs)?;
                    exec::run(p, state, inputs, &mut NoCalls)
                });
                let (outputs, events) = ran.unwrap_or_else(|e| panic!("{e}"));
                let n = outputs.len();
                let sizes = events.iter().map(|(id, ts)| (*id, ts.len())).collect();
                let all = outputs.into_iter().chain(events.into_iter().flat_map(|(_, ts)| ts));
                let (tensors, codes): (Vec<_>, Vec<_>) = crate::prims_of!(all, $variant, "program_submit")
                    .unwrap_or_else(|e| panic!("{e}"))
                    .into_iter()
                    .map(|p| to_code(crate::tensor::to_inner(p)))
                    .unzip();
                *out_layout.lock().unwrap_or_else(|e| e.into_inner()) = (codes, n, sizes);
                tensors
            });
            Ok(crate::command::submit_reply($d, work, pid, move |env, outcome| match outcome {
                Ok(tensors) => {
                    let (codes, n, sizes) = std::mem::take(&mut *layout.lock().unwrap_or_else(|e| e.into_inner()));
                    let mut refs = tensors.iter().zip(&codes).map(|(t, &k)| wrap(AnyPrim::$variant(crate::tensor::from_inner(from_code(t.clone(), k)))));
                    let outputs: Vec<TensorRef> = refs.by_ref().take(n).collect();
                    let events: Vec<(usize, Vec<TensorRef>)> = sizes.into_iter().map(|(id, k)| (id, refs.by_ref().take(k).collect())).collect();
                    (atoms::ok(), (outputs, events)).encode(env)
                }
                Err(e) => (atoms::error(), NifError::new("program_submit", e, "the run failed on the command queue")).encode(env),
            }))
        }};
    }
    match program.device.clone() {
        Dev::Wgpu(d) => go!(Wgpu, &d),
        #[cfg(feature = "cuda")]
        Dev::Cuda(d) => go!(Cuda, &d),
    }
}
