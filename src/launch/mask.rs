//! `mask_where` / `mask_fill`.
use burn_backend::Scalar;
use cubecl::Runtime;
use cubecl::prelude::InputScalar;
use ex_cubecl_kernels::mask::mask_where as mask_kernel;

use super::views::Views;
use super::{broadcast_shape, check_same_dtype, scalar_arg};
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// Where the mask is set, the value (a tensor or a scalar); elsewhere the tensor.
pub fn mask_where<R: Runtime>(
    op: &str,
    tensor: CubeTensor<R>,
    mask: CubeTensor<R>,
    value: super::elementwise::Rhs<R>,
) -> CubeTensor<R> {
    if !mask.dtype.is_bool() {
        panic!("ex_cubecl: {op}: the mask must be bool, got {:?} with shape {:?}", mask.dtype, mask.dims());
    }
    // A tensor value's bf16 bits are selected as they are; with a scalar, bf16 held as bits
    // goes through f32 in the kernel (see `super::bf16`) and the scalar is rounded from f32.
    let bits = tensor.bf16_bits() && matches!(value, super::elementwise::Rhs::Scalar(_));
    let mut shape = broadcast_shape(op, &tensor, &mask);
    let (value, scalar, value_scalar) = match value {
        super::elementwise::Rhs::Tensor(value) => {
            check_same_dtype(op, &tensor, &value);
            shape = match super::broadcast_dims(shape.as_slice(), value.dims()) {
                Some(dims) => dims.into(),
                None => panic!(
                    "ex_cubecl: {op}: cannot broadcast value of shape {:?} to {:?} ({:?})",
                    value.dims(),
                    shape.to_vec(),
                    tensor.dtype
                ),
            };
            (value, InputScalar::new(0, tensor.storage()), false)
        }
        super::elementwise::Rhs::Scalar(s) => {
            let dtype = if bits { burn_backend::DType::F32 } else { tensor.dtype };
            (tensor.clone(), scalar_arg(op, s, dtype), true)
        }
    };
    let bcast = |t: &CubeTensor<R>| t.layout.broadcast_to(&shape).expect("broadcast shape");
    let (tv, mv, vv) = (bcast(&tensor), bcast(&mask), if value_scalar { bcast(&tensor) } else { bcast(&value) });
    let out = CubeTensor::empty(&tensor.client, &tensor.device, shape.clone(), tensor.dtype);
    let o = out.clone();
    let views = Views::new(&shape, &[&tv.strides, &mv.strides, &vv.strides], false);
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < len`; all views lie inside their buffers.
        unsafe {
            mask_kernel::launch_unchecked::<R>(
                client,
                count,
                dim,
                tensor.buffer_arg(),
                mask.buffer_arg(),
                value.buffer_arg(),
                o.buffer_arg(),
                tv.offset,
                mv.offset,
                vv.offset,
                views.shape(),
                views.strides(0),
                views.strides(1),
                views.strides(2),
                scalar,
                value_scalar,
                bits,
                [tensor.storage(), mask.storage()],
            )
        }
    });
    out
}

/// `mask_where` with a scalar value.
pub fn mask_fill<R: Runtime>(op: &str, tensor: CubeTensor<R>, mask: CubeTensor<R>, value: Scalar) -> CubeTensor<R> {
    mask_where(op, tensor, mask, super::elementwise::Rhs::Scalar(value))
}
