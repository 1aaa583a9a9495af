//! Layout-only operations: they return a tensor over the same buffer whenever the result can
//! be expressed as a strided view, and copy only when it can't.
use burn_backend::{Shape, Slice};
use cubecl::Runtime;

use super::check_dim;
use super::copy::{flip, into_contiguous};
use crate::runtime::Layout;
use crate::tensor::CubeTensor;

/// `tensor` with another shape of the same size: a view of contiguous data, a copy otherwise.
pub fn reshape<R: Runtime>(tensor: CubeTensor<R>, shape: Shape) -> CubeTensor<R> {
    if shape.num_elements() != tensor.num_elements() {
        panic!(
            "ex_cubecl: reshape: cannot reshape {:?} ({} elements) into {:?} ({:?})",
            tensor.dims(), tensor.num_elements(), shape.to_vec(), tensor.dtype
        );
    }
    match tensor.layout.reshape(shape.clone()) {
        Some(layout) => tensor.with_layout(layout),
        None => {
            let t = into_contiguous(tensor);
            let layout = t.layout.reshape(shape).expect("contiguous");
            t.with_layout(layout)
        }
    }
}

/// Dimensions reordered; a view.
pub fn permute<R: Runtime>(tensor: CubeTensor<R>, axes: &[usize]) -> CubeTensor<R> {
    let rank = tensor.layout.rank();
    let mut seen = vec![false; rank];
    if axes.len() != rank || axes.iter().any(|&a| a >= rank || std::mem::replace(&mut seen[a], true)) {
        panic!("ex_cubecl: permute: {axes:?} is not a permutation of the dimensions of {:?}", tensor.dims());
    }
    let layout = tensor.layout.permute(axes);
    tensor.with_layout(layout)
}

/// Two dimensions swapped; a view.
pub fn swap_dims<R: Runtime>(tensor: CubeTensor<R>, a: usize, b: usize) -> CubeTensor<R> {
    check_dim("swap_dims", &tensor, a);
    check_dim("swap_dims", &tensor, b);
    let layout = tensor.layout.swap(a, b);
    tensor.with_layout(layout)
}

/// `tensor` broadcast to `shape`; a view with stride 0 on the broadcast dimensions.
pub fn expand<R: Runtime>(tensor: CubeTensor<R>, shape: Shape) -> CubeTensor<R> {
    match tensor.layout.broadcast_to(&shape) {
        Some(layout) => tensor.with_layout(layout),
        None => panic!(
            "ex_cubecl: expand: cannot expand {:?} to {:?} ({:?})",
            tensor.dims(), shape.to_vec(), tensor.dtype
        ),
    }
}

/// Sliding windows along `dim`; a view.
pub fn unfold<R: Runtime>(tensor: CubeTensor<R>, dim: usize, size: usize, step: usize) -> CubeTensor<R> {
    check_dim("unfold", &tensor, dim);
    if step == 0 || size == 0 {
        panic!("ex_cubecl: unfold: size ({size}) and step ({step}) must be positive (shape {:?})", tensor.dims());
    }
    let layout = tensor.layout.unfold(dim, size, step);
    tensor.with_layout(layout)
}

/// The region of `layout` selected by `slices` as a positive-step view, and the mask of the
/// dimensions that negative steps traverse backwards.
pub(crate) fn slice_view(op: &str, layout: &Layout, slices: &[Slice]) -> (Layout, u32) {
    if slices.len() > layout.rank() {
        panic!("ex_cubecl: {op}: {} slices for shape {:?}", slices.len(), layout.shape.to_vec());
    }
    let mut view = layout.clone();
    let mut flip_mask = 0u32;
    for (dim, slice) in slices.iter().enumerate() {
        let size = layout.shape[dim];
        if slice.step == 0 {
            panic!("ex_cubecl: {op}: slice {slice:?} has step 0 (shape {:?})", layout.shape.to_vec());
        }
        let range = slice.to_range(size);
        if range.end > size || (range.start > size && range.start < range.end) {
            panic!("ex_cubecl: {op}: slice {slice:?} is out of range for dim {dim} of shape {:?}", layout.shape.to_vec());
        }
        let len = slice.output_size(size);
        let step = slice.step.unsigned_abs();
        let start = if slice.step > 0 || len == 0 { range.start } else { range.end - 1 - step * (len - 1) };
        view = view.narrow(dim, start, len, step);
        if slice.step < 0 && len > 1 {
            flip_mask |= 1 << dim;
        }
    }
    (view, flip_mask)
}

/// The region selected by `slices`: a view for positive steps, a copy for negative ones.
pub fn slice<R: Runtime>(tensor: CubeTensor<R>, slices: &[Slice]) -> CubeTensor<R> {
    let (view, flip_mask) = slice_view("slice", &tensor.layout, slices);
    let viewed = tensor.with_layout(view);
    if flip_mask == 0 {
        return viewed;
    }
    let axes: Vec<usize> = (0..32).filter(|d| flip_mask >> d & 1 == 1).collect();
    flip(viewed, &axes)
}
