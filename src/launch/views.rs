//! The layouts of a launch's operands as kernel arguments: the iteration shape as divisors and
//! each operand's strides over it, comptime-length sequences that travel with the launch's
//! scalars (`ex_cubecl_kernels::strided::seq_offset`), where `Tensor` arguments would make
//! cubecl upload their shapes and strides into a metadata buffer before every launch.
use cubecl::Runtime;
use cubecl::prelude::SequenceArg;
use cubecl::std::FastDivmod;

use super::{divmods, usizes};
use crate::runtime::coalesce;

/// The iteration shape and the strides of each operand over it, with the dimensions that
/// every operand steps through alike merged ([`coalesce`]).
#[derive(Clone, Debug)]
pub(crate) struct Views {
    shape: Vec<usize>,
    strides: Vec<Vec<usize>>,
}

impl Views {
    /// The views of operands with `strides` over `shape`; none at all (empty sequences, one
    /// kernel for every rank) when `linear`: every operand is then read linearly.
    pub fn new(shape: &[usize], strides: &[&[usize]], linear: bool) -> Self {
        if linear {
            return Self { shape: Vec::new(), strides: vec![Vec::new(); strides.len()] };
        }
        let (shape, strides) = coalesce(shape, strides);
        Self { shape, strides }
    }

    /// The views of operands with `strides` over `shape`, each dimension kept (for kernels
    /// that mirror some of them).
    pub fn uncoalesced(shape: &[usize], strides: &[&[usize]]) -> Self {
        Self { shape: shape.to_vec(), strides: strides.iter().map(|s| s.to_vec()).collect() }
    }

    /// The iteration shape as sizes (empty when every operand is read linearly).
    pub fn dims(&self) -> &[usize] {
        &self.shape
    }

    /// The strides of operand `k` as sizes.
    pub fn strides_of(&self, k: usize) -> &[usize] {
        &self.strides[k]
    }

    /// The number of dimensions left.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The iteration shape, as divisors.
    pub fn shape<R: Runtime>(&self) -> SequenceArg<R, FastDivmod<usize>> {
        divmods(&self.shape)
    }

    /// The strides of operand `k`.
    pub fn strides<R: Runtime>(&self, k: usize) -> SequenceArg<R, usize> {
        usizes(&self.strides[k])
    }
}
