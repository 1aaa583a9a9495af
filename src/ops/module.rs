//! `ModuleOps`: convolutions, pooling, resampling, attention, layer norm and CTC loss on our kernels.
//! Every spatial rank shares one kernel per family (1-D and 2-D convolutions are lifted to
//! 3-D, 1-D pooling to 2-D); the backward passes are kernels of their own where a kernel
//! does better than Burn's composition of tensor ops.
use burn_backend::DeviceOps;
use burn_backend::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConv2dBackward, DeformConvOptions,
    InterpolateOptions, MaxPool1dBackward, MaxPool1dWithIndices, MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps,
    UnfoldOptions,
};
use burn_backend::tensor::{BoolTensor, IntTensor};
use burn_backend::{Shape, TensorMetadata, get_device_settings};
use cubecl::Runtime;

use crate::ExCubeclBackend;
use crate::launch::conv::{ConvSpec, bias_backward, conv, conv_transpose, conv_weight_backward};
use crate::launch::pool::{self, Window};
use crate::launch::{attention, ctc, deform_conv, interpolate, norm, view};

type T<R> = crate::tensor::CubeTensor<R>;

/// The dtype of max-pooling indices: the device's default int dtype.
fn index_dtype<R: Runtime>(device: &R::Device) -> burn_backend::DType
where
    R::Device: DeviceOps,
{
    get_device_settings::<ExCubeclBackend<R>>(device).int_dtype.into()
}

/// A 2-D pooling window.
fn window(kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], ceil_mode: bool) -> Window {
    Window { kernel, stride, padding, dilation, ceil_mode }
}

/// A 1-D pooling window, pooled as `[b, c, 1, l]`.
fn window_1d(kernel: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> Window {
    window([1, kernel], [1, stride], [0, padding], [1, dilation], ceil_mode)
}

/// `[b, c, l]` as `[b, c, 1, l]` (a view).
fn as_2d<R: Runtime>(t: T<R>) -> T<R> {
    let d = t.dims().to_vec();
    if d.len() != 3 {
        panic!("ex_cubecl: 1-D module op: expected [batch, channels, length], got {d:?} ({:?})", t.dtype);
    }
    view::reshape(t, Shape::new([d[0], d[1], 1, d[2]]))
}

/// `[b, c, 1, l]` back to `[b, c, l]`.
fn as_1d<R: Runtime>(t: T<R>) -> T<R> {
    let d = t.dims().to_vec();
    view::reshape(t, Shape::new([d[0], d[1], d[3]]))
}

fn weight_grad<R: Runtime, const N: usize>(op: &str, x: T<R>, weight: &T<R>, grad: T<R>, o: &ConvOptions<N>) -> T<R> {
    conv_weight_backward(op, x, grad, weight.shape(), ConvSpec::conv(op, o), false)
}

fn transposed_weight_grad<R: Runtime, const N: usize>(op: &str, x: T<R>, weight: &T<R>, grad: T<R>, o: &ConvTransposeOptions<N>) -> T<R> {
    conv_weight_backward(op, x, grad, weight.shape(), ConvSpec::transposed(op, o), true)
}

impl<R: Runtime> ModuleOps<Self> for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn conv1d(x: T<R>, weight: T<R>, bias: Option<T<R>>, options: ConvOptions<1>) -> T<R> {
        conv("conv1d", x, weight, bias, ConvSpec::conv("conv1d", &options))
    }

    fn conv1d_weight_backward(x: T<R>, weight: T<R>, output_grad: T<R>, options: ConvOptions<1>) -> T<R> {
        weight_grad("conv1d_weight_backward", x, &weight, output_grad, &options)
    }

    fn conv1d_bias_backward(_x: T<R>, _bias: T<R>, output_grad: T<R>) -> T<R> {
        bias_backward(output_grad)
    }

    fn conv2d(x: T<R>, weight: T<R>, bias: Option<T<R>>, options: ConvOptions<2>) -> T<R> {
        conv("conv2d", x, weight, bias, ConvSpec::conv("conv2d", &options))
    }

    fn conv2d_weight_backward(x: T<R>, weight: T<R>, output_grad: T<R>, options: ConvOptions<2>) -> T<R> {
        weight_grad("conv2d_weight_backward", x, &weight, output_grad, &options)
    }

    fn conv2d_bias_backward(_x: T<R>, _bias: T<R>, output_grad: T<R>) -> T<R> {
        bias_backward(output_grad)
    }

    fn deform_conv2d(
        x: T<R>,
        offset: T<R>,
        weight: T<R>,
        mask: Option<T<R>>,
        bias: Option<T<R>>,
        options: DeformConvOptions<2>,
    ) -> T<R> {
        deform_conv::deform_conv2d(x, offset, weight, mask, bias, &options)
    }

    fn deform_conv2d_backward(
        x: T<R>,
        offset: T<R>,
        weight: T<R>,
        mask: Option<T<R>>,
        bias: Option<T<R>>,
        output_grad: T<R>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        let (x, offset, weight, mask, bias) = deform_conv::deform_conv2d_backward(x, offset, weight, mask, bias, output_grad, &options);
        DeformConv2dBackward::new(x, offset, weight, mask, bias)
    }

    fn conv3d(x: T<R>, weight: T<R>, bias: Option<T<R>>, options: ConvOptions<3>) -> T<R> {
        conv("conv3d", x, weight, bias, ConvSpec::conv("conv3d", &options))
    }

    fn conv3d_weight_backward(x: T<R>, weight: T<R>, output_grad: T<R>, options: ConvOptions<3>) -> T<R> {
        weight_grad("conv3d_weight_backward", x, &weight, output_grad, &options)
    }

    fn conv3d_bias_backward(_x: T<R>, _bias: T<R>, output_grad: T<R>) -> T<R> {
        bias_backward(output_grad)
    }

    fn conv_transpose1d(x: T<R>, weight: T<R>, bias: Option<T<R>>, options: ConvTransposeOptions<1>) -> T<R> {
        let op = "conv_transpose1d";
        conv_transpose(op, x, weight, bias, ConvSpec::transposed(op, &options), &options.padding_out)
    }

    fn conv_transpose1d_weight_backward(x: T<R>, weight: T<R>, output_grad: T<R>, options: ConvTransposeOptions<1>) -> T<R> {
        transposed_weight_grad("conv_transpose1d_weight_backward", x, &weight, output_grad, &options)
    }

    fn conv_transpose1d_bias_backward(_x: T<R>, _bias: T<R>, output_grad: T<R>) -> T<R> {
        bias_backward(output_grad)
    }

    fn conv_transpose2d(x: T<R>, weight: T<R>, bias: Option<T<R>>, options: ConvTransposeOptions<2>) -> T<R> {
        let op = "conv_transpose2d";
        conv_transpose(op, x, weight, bias, ConvSpec::transposed(op, &options), &options.padding_out)
    }

    fn conv_transpose2d_weight_backward(x: T<R>, weight: T<R>, output_grad: T<R>, options: ConvTransposeOptions<2>) -> T<R> {
        transposed_weight_grad("conv_transpose2d_weight_backward", x, &weight, output_grad, &options)
    }

    fn conv_transpose2d_bias_backward(_x: T<R>, _bias: T<R>, output_grad: T<R>) -> T<R> {
        bias_backward(output_grad)
    }

    fn conv_transpose3d(x: T<R>, weight: T<R>, bias: Option<T<R>>, options: ConvTransposeOptions<3>) -> T<R> {
        let op = "conv_transpose3d";
        conv_transpose(op, x, weight, bias, ConvSpec::transposed(op, &options), &options.padding_out)
    }

    fn conv_transpose3d_weight_backward(x: T<R>, weight: T<R>, output_grad: T<R>, options: ConvTransposeOptions<3>) -> T<R> {
        transposed_weight_grad("conv_transpose3d_weight_backward", x, &weight, output_grad, &options)
    }

    fn conv_transpose3d_bias_backward(_x: T<R>, _bias: T<R>, output_grad: T<R>) -> T<R> {
        bias_backward(output_grad)
    }

    fn unfold4d(x: T<R>, kernel_size: [usize; 2], options: UnfoldOptions) -> T<R> {
        let spec = ConvOptions::new(options.stride, options.padding, options.dilation, 1);
        crate::launch::conv::unfold4d(x, kernel_size, ConvSpec::conv("unfold4d", &spec))
    }

    fn avg_pool1d(x: T<R>, kernel_size: usize, stride: usize, padding: usize, count_include_pad: bool, ceil_mode: bool) -> T<R> {
        as_1d(pool::avg_pool2d(as_2d(x), window_1d(kernel_size, stride, padding, 1, ceil_mode), count_include_pad))
    }

    fn avg_pool1d_backward(
        x: T<R>,
        grad: T<R>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> T<R> {
        let w = window_1d(kernel_size, stride, padding, 1, ceil_mode);
        as_1d(pool::avg_pool2d_backward(as_2d(x), as_2d(grad), w, count_include_pad))
    }

    fn avg_pool2d(
        x: T<R>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> T<R> {
        pool::avg_pool2d(x, window(kernel_size, stride, padding, [1, 1], ceil_mode), count_include_pad)
    }

    fn avg_pool2d_backward(
        x: T<R>,
        grad: T<R>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> T<R> {
        pool::avg_pool2d_backward(x, grad, window(kernel_size, stride, padding, [1, 1], ceil_mode), count_include_pad)
    }

    fn adaptive_avg_pool1d(x: T<R>, output_size: usize) -> T<R> {
        as_1d(pool::adaptive_avg_pool2d(as_2d(x), [1, output_size]))
    }

    fn adaptive_avg_pool1d_backward(x: T<R>, grad: T<R>) -> T<R> {
        as_1d(pool::adaptive_avg_pool2d_backward(as_2d(x), as_2d(grad)))
    }

    fn adaptive_avg_pool2d(x: T<R>, output_size: [usize; 2]) -> T<R> {
        pool::adaptive_avg_pool2d(x, output_size)
    }

    fn adaptive_avg_pool2d_backward(x: T<R>, grad: T<R>) -> T<R> {
        pool::adaptive_avg_pool2d_backward(x, grad)
    }

    fn max_pool1d(x: T<R>, kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> T<R> {
        as_1d(pool::max_pool2d(as_2d(x), window_1d(kernel_size, stride, padding, dilation, ceil_mode), None).0)
    }

    fn max_pool1d_with_indices(
        x: T<R>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
    ) -> MaxPool1dWithIndices<Self> {
        let w = window_1d(kernel_size, stride, padding, dilation, ceil_mode);
        let x_device = x.device.clone();
        let (out, indices) = pool::max_pool2d(as_2d(x), w, Some(index_dtype::<R>(&x_device)));
        MaxPool1dWithIndices::new(as_1d(out), as_1d(indices.expect("indices")))
    }

    fn max_pool1d_with_indices_backward(
        x: T<R>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
        output_grad: T<R>,
        indices: IntTensor<Self>,
    ) -> MaxPool1dBackward<Self> {
        let w = window_1d(kernel_size, stride, padding, dilation, ceil_mode);
        MaxPool1dBackward::new(as_1d(pool::max_pool2d_backward(as_2d(x), as_2d(output_grad), as_2d(indices), w)))
    }

    fn max_pool2d(
        x: T<R>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> T<R> {
        pool::max_pool2d(x, window(kernel_size, stride, padding, dilation, ceil_mode), None).0
    }

    fn max_pool2d_with_indices(
        x: T<R>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> MaxPool2dWithIndices<Self> {
        let w = window(kernel_size, stride, padding, dilation, ceil_mode);
        let x_device = x.device.clone();
        let (out, indices) = pool::max_pool2d(x, w, Some(index_dtype::<R>(&x_device)));
        MaxPool2dWithIndices::new(out, indices.expect("indices"))
    }

    fn max_pool2d_with_indices_backward(
        x: T<R>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        output_grad: T<R>,
        indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        let w = window(kernel_size, stride, padding, dilation, ceil_mode);
        MaxPool2dBackward::new(pool::max_pool2d_backward(x, output_grad, indices, w))
    }

    fn interpolate(x: T<R>, output_size: [usize; 2], options: InterpolateOptions) -> T<R> {
        interpolate::interpolate(x, output_size, &options)
    }

    fn interpolate_backward(x: T<R>, grad: T<R>, output_size: [usize; 2], options: InterpolateOptions) -> T<R> {
        interpolate::interpolate_backward(x, grad, output_size, &options)
    }

    fn attention(
        query: T<R>,
        key: T<R>,
        value: T<R>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<T<R>>,
        options: AttentionModuleOptions,
    ) -> T<R> {
        attention::attention(query, key, value, mask, attn_bias, options)
    }

    fn ctc_loss(log_probs: T<R>, targets: T<R>, input_lengths: T<R>, target_lengths: T<R>, blank: usize) -> T<R> {
        ctc::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank)
    }

    fn has_ctc_loss_backward() -> bool {
        true
    }

    fn ctc_loss_backward(
        log_probs: T<R>,
        targets: T<R>,
        input_lengths: T<R>,
        target_lengths: T<R>,
        grad_loss: T<R>,
        blank: usize,
    ) -> T<R> {
        ctc::ctc_loss_backward(log_probs, targets, input_lengths, target_lengths, grad_loss, blank)
    }

    fn layer_norm(tensor: T<R>, gamma: T<R>, beta: Option<T<R>>, epsilon: f64) -> T<R> {
        norm::layer_norm(tensor, gamma, beta, epsilon)
    }

    fn rfft(signal: T<R>, dim: usize, n: Option<usize>) -> (T<R>, T<R>) {
        crate::launch::fft::rfft(signal, dim, n)
    }

    fn irfft(spectrum_re: T<R>, spectrum_im: T<R>, dim: usize, n: Option<usize>) -> T<R> {
        crate::launch::fft::irfft(spectrum_re, spectrum_im, dim, n)
    }
}
