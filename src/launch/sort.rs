//! Stable sort and argsort along a dimension (bitonic network over padded lines).
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use ex_cubecl_kernels::sort::{sort_init, sort_step};

use super::check_dim;
use super::copy::cast;
use super::view::permute;
use crate::runtime::{Geometry, Layout, launch};
use crate::tensor::CubeTensor;

/// Sorted values and the indices (as `index_dtype`) they came from, along `dim`.
pub fn sort<R: Runtime>(
    tensor: CubeTensor<R>,
    dim: usize,
    descending: bool,
    index_dtype: DType,
) -> (CubeTensor<R>, CubeTensor<R>) {
    if tensor.bf16_bits() {
        let (values, indices) = sort(super::bf16::widen(tensor), dim, descending, index_dtype);
        return (super::bf16::narrow(values, DType::BF16), indices);
    }
    check_dim("sort", &tensor, dim);
    let rank = tensor.layout.rank();
    // Move `dim` last: lines are then the rows of a [lines, n] view.
    let mut axes: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    axes.push(dim);
    let moved = permute(tensor.clone(), &axes);
    let n = tensor.dims()[dim];
    let lines = if n == 0 { 0 } else { tensor.num_elements() / n };
    let p = n.next_power_of_two().max(1);
    let client = &tensor.client;
    let keys = CubeTensor::empty(client, &tensor.device, Shape::from(vec![lines, p]), tensor.dtype);
    let indices = CubeTensor::empty(client, &tensor.device, Shape::from(vec![lines, p]), DType::U32);
    let (k_, i_, storage) = (keys.clone(), indices.clone(), tensor.storage());
    launch(client, "sort", Geometry::Units(lines * p), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < lines * p` and reads the view only for i < n.
        unsafe {
            sort_init::launch_unchecked::<R>(
                client, count, cube_dim, moved.as_arg(), k_.as_arg(), i_.as_arg(),
                moved.layout.offset, n, p, storage,
            )
        }
    });
    let mut k = 2;
    while k <= p {
        let mut j = k / 2;
        while j > 0 {
            let (k_, i_) = (keys.clone(), indices.clone());
            launch(client, "sort", Geometry::Units(lines * p / 2), move |client, count, cube_dim| {
                // SAFETY: the kernel guards `pos < lines * p / 2`; partners stay in the line.
                unsafe {
                    sort_step::launch_unchecked::<R>(
                        client, count, cube_dim, k_.as_arg(), i_.as_arg(), n as u32, p, k, j,
                        descending, storage,
                    )
                }
            });
            j /= 2;
        }
        k *= 2;
    }
    // Un-pad ([lines, n] view of [lines, p]), restore the moved shape, then the original order.
    let moved_shape: Vec<usize> = axes.iter().map(|&a| tensor.dims()[a]).collect();
    let unpadded = |t: &CubeTensor<R>| {
        let layout = Layout { shape: Shape::from(vec![lines, n]), strides: vec![p, 1], offset: 0 };
        t.with_layout(layout)
    };
    let restore = |t: CubeTensor<R>| {
        let t = super::copy::into_contiguous(t);
        let t = t.with_layout(Layout::contiguous(Shape::from(moved_shape.clone())));
        let mut inverse = vec![0; rank];
        for (i, &a) in axes.iter().enumerate() {
            inverse[a] = i;
        }
        permute(t, &inverse)
    };
    let values = restore(unpadded(&keys));
    let indices = restore(cast(unpadded(&indices), index_dtype));
    (values, indices)
}
