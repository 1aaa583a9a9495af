use burn_backend::ops::ActivationOps;
use burn_backend::{DeviceOps, Scalar};
use cubecl::Runtime;
use ex_cubecl_kernels::binary::BinaryFloatOp;
use ex_cubecl_kernels::unary::UnaryFloatOp as U;

use crate::launch::elementwise::{Rhs, binary_float_op, unary_float_op};
use crate::launch::softmax;
use crate::ExCubeclBackend;

type T<R> = crate::tensor::CubeTensor<R>;

/// One kernel each instead of Burn's compositions of several elementwise ops.
impl<R: Runtime> ActivationOps<Self> for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn relu(tensor: T<R>) -> T<R> {
        unary_float_op(tensor, U::Relu, 0.0, 0.0)
    }

    fn relu_backward(output: T<R>, grad: T<R>) -> T<R> {
        binary_float_op(output, Rhs::Tensor(grad), BinaryFloatOp::ReluGrad)
    }

    fn leaky_relu(tensor: T<R>, negative_slope: Scalar) -> T<R> {
        unary_float_op(tensor, U::LeakyRelu, negative_slope.elem::<f64>(), 0.0)
    }

    fn gelu(tensor: T<R>) -> T<R> {
        unary_float_op(tensor, U::Gelu, 0.0, 0.0)
    }

    fn sigmoid(tensor: T<R>) -> T<R> {
        unary_float_op(tensor, U::Sigmoid, 0.0, 0.0)
    }

    fn hard_sigmoid(tensor: T<R>, alpha: Scalar, beta: Scalar) -> T<R> {
        unary_float_op(tensor, U::HardSigmoid, alpha.elem::<f64>(), beta.elem::<f64>())
    }

    fn log_sigmoid(tensor: T<R>) -> T<R> {
        unary_float_op(tensor, U::LogSigmoid, 0.0, 0.0)
    }

    fn softmax(tensor: T<R>, dim: usize) -> T<R> {
        softmax::softmax(tensor, dim, false)
    }

    fn log_softmax(tensor: T<R>, dim: usize) -> T<R> {
        softmax::softmax(tensor, dim, true)
    }
}
