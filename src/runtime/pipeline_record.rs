//! Recording a pipeline's step: a capture begun where the step's kernels launch (the calling
//! thread, or the thread of Burn's fusion engine), the step run, the capture ended there, and
//! what went wrong told apart (a host read, a panic).
use std::panic::{AssertUnwindSafe, catch_unwind};

use cubecl::Runtime;
use cubecl::stream_id::StreamId;

use super::buffer_id::BufferId;
use super::capture::{self, Recording};
use super::pipeline::{RecordedStep, StepResults, panic_message};
use super::pipeline_error::PipelineError;
use crate::tensor::CubeTensor;

/// The thread whose launches a capture records: this one, or the thread that runs Burn's
/// fusion engine for a device.
pub(crate) trait CaptureSite {
    /// Starts a capture there whose state buffers are `state`; `false` when one is active
    /// there already.
    fn begin(&self, state: Vec<(BufferId, usize)>) -> bool;
    /// Runs what is queued for it there, ends the capture and gives what it recorded (`None`
    /// when none was active) and the stream it launched on.
    fn end(&self) -> (Option<Recording>, StreamId);
}

/// The calling thread: launches are recorded as the ops run.
pub(crate) struct ThisThread;

impl CaptureSite for ThisThread {
    fn begin(&self, state: Vec<(BufferId, usize)>) -> bool {
        capture::begin(state)
    }

    fn end(&self) -> (Option<Recording>, StreamId) {
        (capture::end(), StreamId::current())
    }
}

/// Runs the step `f` on the inputs and state buffers as a capture at `site` whose state is
/// `buffers`, and gives its outputs, its new state, the recording and its stream.
pub(crate) fn record_step<R: Runtime, F>(
    inputs: &[CubeTensor<R>],
    buffers: &[CubeTensor<R>],
    site: &impl CaptureSite,
    f: F,
) -> Result<RecordedStep<R>, PipelineError>
where
    F: FnOnce(Vec<CubeTensor<R>>, Vec<CubeTensor<R>>) -> StepResults<R>,
{
    let donated = buffers.iter().map(|b| (BufferId::of(&b.handle), b.num_elements())).collect();
    if !catch_unwind(AssertUnwindSafe(|| site.begin(donated))).unwrap_or(false) {
        return Err(PipelineError::NestedCapture);
    }
    // A panic in `f` (or in running what it queued) is caught here, so the capture state is
    // cleared however `f` leaves.
    let result = catch_unwind(AssertUnwindSafe(|| f(inputs.to_vec(), buffers.to_vec())));
    let ended = catch_unwind(AssertUnwindSafe(|| site.end()));
    let (recording, stream) = match ended {
        Ok((recording, stream)) => (recording.unwrap_or_default(), stream),
        Err(payload) => return Err(PipelineError::CapturePanicked { message: panic_message(payload.as_ref()) }),
    };
    let (outputs, new_state) = match result {
        Ok(results) => results,
        Err(payload) => {
            return Err(match recording.host_read {
                Some(op) => PipelineError::HostRead { op },
                None => PipelineError::CapturePanicked { message: panic_message(payload.as_ref()) },
            });
        }
    };
    if let Some(op) = recording.host_read {
        // The closure caught the read's panic itself; the capture is still unusable.
        return Err(PipelineError::HostRead { op });
    }
    Ok((outputs, new_state, recording, stream))
}
