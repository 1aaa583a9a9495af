//! Why a pipeline's capture, run or state copy failed.
use std::fmt;

use burn_backend::DType;

/// Why a capture or a run failed.
#[derive(Clone, Debug, PartialEq)]
pub enum PipelineError {
    /// A capture was started while another one is active on this thread.
    NestedCapture,
    /// The captured closure read data back to the host (`op` did).
    HostRead {
        /// The operation that read, e.g. `into_data`.
        op: String,
    },
    /// The captured closure panicked.
    CapturePanicked {
        /// The panic message.
        message: String,
    },
    /// A pipeline was run while a capture is active on this thread.
    RunDuringCapture,
    /// An input is on another device than the pipeline.
    WrongDevice {
        /// Position of the input.
        index: usize,
        /// The pipeline's device.
        expected: String,
        /// The input's device.
        got: String,
    },
    /// A run got another number of inputs than the capture.
    InputCount {
        /// Inputs the pipeline was captured with.
        expected: usize,
        /// Inputs given.
        got: usize,
    },
    /// A run's input differs in shape or dtype from the capture's.
    InputMismatch {
        /// Position of the input.
        index: usize,
        /// Shape at capture.
        expected_shape: Vec<usize>,
        /// Dtype at capture.
        expected_dtype: DType,
        /// Shape given.
        got_shape: Vec<usize>,
        /// Dtype given.
        got_dtype: DType,
    },
    /// A replay panicked (a device error).
    ReplayPanicked {
        /// The panic message.
        message: String,
    },
    /// A state tensor is on another device than the pipeline.
    StateWrongDevice {
        /// Position of the state tensor.
        index: usize,
        /// The pipeline's device.
        expected: String,
        /// The tensor's device.
        got: String,
    },
    /// The captured closure returned another number of new state tensors than it got.
    NewStateCount {
        /// State tensors the closure got.
        expected: usize,
        /// New state tensors it returned.
        got: usize,
    },
    /// A new state tensor differs in shape or dtype from its state tensor.
    NewStateMismatch {
        /// Position of the state tensor.
        index: usize,
        /// The state's shape.
        expected_shape: Vec<usize>,
        /// The state's dtype.
        expected_dtype: DType,
        /// The new state's shape.
        got_shape: Vec<usize>,
        /// The new state's dtype.
        got_dtype: DType,
    },
    /// A state tensor was updated in place during the capture, and another of the closure's
    /// results (an output, or the new value of another state tensor) shares its buffer.
    DonatedStateAliased {
        /// Position of the state tensor updated in place.
        index: usize,
        /// The result that shares its buffer, e.g. `output 1` or `new state 3`.
        alias: String,
    },
    /// `set_state` got another number of tensors than the pipeline's state has.
    StateCount {
        /// The pipeline's state tensors.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// A tensor given to `set_state` differs in shape or dtype from the pipeline's state.
    StateMismatch {
        /// Position of the state tensor.
        index: usize,
        /// The pipeline's shape.
        expected_shape: Vec<usize>,
        /// The pipeline's dtype.
        expected_dtype: DType,
        /// Shape given.
        got_shape: Vec<usize>,
        /// Dtype given.
        got_dtype: DType,
    },
    /// Copying a pipeline's state in or out failed (a device error).
    StateCopyFailed {
        /// The panic message.
        message: String,
    },
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NestedCapture => {
                write!(f, "ex_cubecl: pipeline capture: another capture is active on this thread; captures do not nest")
            }
            Self::HostRead { op } => write!(
                f,
                "ex_cubecl: pipeline capture: {op} reads data back to the host, which a pipeline cannot replay; \
                 return the tensor as an output of the captured closure instead"
            ),
            Self::CapturePanicked { message } => write!(f, "ex_cubecl: pipeline capture: the closure panicked: {message}"),
            Self::RunDuringCapture => write!(
                f,
                "ex_cubecl: pipeline run: cannot run a pipeline or copy its state while a capture is active on this thread"
            ),
            Self::WrongDevice { index, expected, got } => {
                write!(f, "ex_cubecl: pipeline: input {index} is on device {got}, but the pipeline is on {expected}")
            }
            Self::InputCount { expected, got } => {
                write!(f, "ex_cubecl: pipeline run: got {got} inputs, but the pipeline was captured with {expected}")
            }
            Self::InputMismatch { index, expected_shape, expected_dtype, got_shape, got_dtype } => write!(
                f,
                "ex_cubecl: pipeline run: input {index} has shape {got_shape:?} ({got_dtype:?}), but the pipeline \
                 was captured with shape {expected_shape:?} ({expected_dtype:?})"
            ),
            Self::ReplayPanicked { message } => write!(f, "ex_cubecl: pipeline run: the replay failed: {message}"),
            Self::StateWrongDevice { index, expected, got } => {
                write!(f, "ex_cubecl: pipeline: state {index} is on device {got}, but the pipeline is on {expected}")
            }
            Self::NewStateCount { expected, got } => write!(
                f,
                "ex_cubecl: pipeline capture: the closure returned {got} new state tensors for its {expected} state tensors"
            ),
            Self::NewStateMismatch { index, expected_shape, expected_dtype, got_shape, got_dtype } => write!(
                f,
                "ex_cubecl: pipeline capture: new state {index} has shape {got_shape:?} ({got_dtype:?}), but state \
                 {index} has shape {expected_shape:?} ({expected_dtype:?}); a step keeps each state tensor's shape and dtype"
            ),
            Self::DonatedStateAliased { index, alias } => write!(
                f,
                "ex_cubecl: pipeline capture: state {index} was updated in place, but {alias} shares its buffer and \
                 may stand for the value the update overwrote; state is donated to the step: return the updated \
                 tensor only as new state {index} (read it with Pipeline::state, or return a copy an op made)"
            ),
            Self::StateCount { expected, got } => {
                write!(f, "ex_cubecl: pipeline set_state: got {got} state tensors, but the pipeline has {expected}")
            }
            Self::StateMismatch { index, expected_shape, expected_dtype, got_shape, got_dtype } => write!(
                f,
                "ex_cubecl: pipeline set_state: state {index} has shape {got_shape:?} ({got_dtype:?}), but the \
                 pipeline's state {index} has shape {expected_shape:?} ({expected_dtype:?})"
            ),
            Self::StateCopyFailed { message } => write!(f, "ex_cubecl: pipeline state: copying the state failed: {message}"),
        }
    }
}

impl std::error::Error for PipelineError {}
