//! `QTensorOps`: quantization gets its kernels with the module-ops issue; until then each
//! required method fails with a message naming it.
use burn_backend::ops::QTensorOps;
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{Device, FloatTensor, IntTensor};
use burn_backend::{DeviceOps, ExecutionError, FloatDType, Shape, Slice, TensorData};
use cubecl::Runtime;

use crate::ExCubeclBackend;

type Q<R> = crate::tensor::QuantizedTensor<R>;

fn not_yet(op: &str) -> ! {
    panic!("ex_cubecl: {op} is not implemented yet: quantized tensors are not part of this release")
}

#[allow(unused_variables)]
impl<R: Runtime> QTensorOps<Self> for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn q_from_data(data: TensorData, device: &Device<Self>) -> Q<R> {
        not_yet("q_from_data")
    }

    fn quantize(tensor: FloatTensor<Self>, scheme: &QuantScheme, qparams: QuantizationParametersPrimitive<Self>) -> Q<R> {
        not_yet("quantize")
    }

    fn dequantize(tensor: Q<R>, dtype: FloatDType) -> FloatTensor<Self> {
        not_yet("dequantize")
    }

    fn q_device(tensor: &Q<R>) -> Device<Self> {
        tensor.values.device.clone()
    }

    fn q_to_device(tensor: Q<R>, device: &Device<Self>) -> Q<R> {
        not_yet("q_to_device")
    }

    fn q_reshape(tensor: Q<R>, shape: Shape) -> Q<R> {
        not_yet("q_reshape")
    }

    fn q_into_data(tensor: Q<R>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        async { Err(ExecutionError::WithContext { reason: "ex_cubecl: q_into_data is not implemented yet".into() }) }
    }

    fn q_expand(tensor: Q<R>, shape: Shape) -> Q<R> {
        not_yet("q_expand")
    }

    fn q_swap_dims(tensor: Q<R>, dim1: usize, dim2: usize) -> Q<R> {
        not_yet("q_swap_dims")
    }

    fn q_permute(tensor: Q<R>, axes: &[usize]) -> Q<R> {
        not_yet("q_permute")
    }

    fn q_flip(tensor: Q<R>, axes: &[usize]) -> Q<R> {
        not_yet("q_flip")
    }

    fn q_select(tensor: Q<R>, dim: usize, indices: IntTensor<Self>) -> Q<R> {
        not_yet("q_select")
    }

    fn q_slice(tensor: Q<R>, slices: &[Slice]) -> Q<R> {
        not_yet("q_slice")
    }
}
