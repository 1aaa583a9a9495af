//! The one tensor primitive, shared by float, int and bool tensors: a device buffer, the
//! layout of the tensor over it, and the dtype.
use burn_backend::quantization::{QuantLevel, QuantScheme};
use burn_backend::{DType, QTensorPrimitive, Shape, TensorMetadata};
use cubecl::Runtime;
use cubecl::prelude::{ArrayArg, ComputeClient, TensorArg};
use cubecl::server::Handle;
use cubecl::zspace::{Strides, Shape as ZShape};

use crate::runtime::{Layout, alloc, bf16_in_u16, bound, elem_size, storage_type};

/// A tensor on an ExCubecl device: a buffer handle (shared by views), a layout and a dtype.
#[derive(Clone)]
pub struct CubeTensor<R: Runtime> {
    /// The compute client of the tensor's device.
    pub client: ComputeClient<R>,
    /// The tensor's device.
    pub device: R::Device,
    /// The buffer; views of one tensor share it.
    pub handle: Handle,
    /// Shape, strides and offset over the buffer.
    pub layout: Layout,
    /// Element type.
    pub dtype: DType,
}

impl<R: Runtime> core::fmt::Debug for CubeTensor<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CubeTensor")
            .field("shape", &self.layout.shape.to_vec())
            .field("strides", &self.layout.strides)
            .field("offset", &self.layout.offset)
            .field("dtype", &self.dtype)
            .field("device", &self.device)
            .finish()
    }
}

impl<R: Runtime> TensorMetadata for CubeTensor<R> {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn shape(&self) -> Shape {
        self.layout.shape.clone()
    }

    fn rank(&self) -> usize {
        self.layout.rank()
    }
}

impl<R: Runtime> CubeTensor<R> {
    /// A new uninitialised contiguous tensor.
    ///
    /// # Panics
    /// When the tensor is larger than the largest buffer the device takes, or the device
    /// cannot allocate it (see [`crate::runtime::alloc`]); and when earlier work failed on
    /// the device's thread (see [`crate::runtime::take_device_failure`]), so that an op never
    /// builds on the results of work that did not run.
    pub fn empty(client: &ComputeClient<R>, device: &R::Device, shape: Shape, dtype: DType) -> Self {
        if let Some(failure) = alloc::take_failure(client, device) {
            panic!("ex_cubecl: earlier work failed on device {device:?}: {failure}");
        }
        let handle = alloc::empty(client, "allocate", &shape, dtype);
        Self {
            client: client.clone(),
            device: device.clone(),
            handle,
            layout: Layout::contiguous(shape),
            dtype,
        }
    }

    /// The same buffer seen through another layout.
    pub fn with_layout(&self, layout: Layout) -> Self {
        Self {
            layout,
            ..self.clone()
        }
    }

    /// Shape as a slice.
    pub fn dims(&self) -> &[usize] {
        self.layout.shape.as_slice()
    }

    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.layout.num_elements()
    }

    /// The kernel argument for this tensor's own layout.
    pub fn as_arg(&self) -> TensorArg<R> {
        self.view_arg(&self.layout)
    }

    /// The kernel argument for `layout` over this tensor's buffer. The layout's offset is
    /// passed to kernels separately.
    pub fn view_arg(&self, layout: &Layout) -> TensorArg<R> {
        let handle = bound(&self.handle);
        debug_assert!(
            layout.span() * elem_size(self.dtype) <= handle.size_in_used() as usize
                || layout.num_elements() == 0
        );
        // A rank-0 tensor (a scalar; Burn never makes one, the NIF does for Nx) goes to
        // kernels as one element of rank 1: cubecl-cuda's launch crashed on rank-0 arguments.
        let (strides, shape) = match layout.shape.len() {
            0 => (vec![1], vec![1]),
            _ => (layout.strides.to_vec(), layout.shape.to_vec()),
        };
        // SAFETY: the layout stays inside the buffer (checked when views are made), and the
        // kernels guard every access with the iteration size.
        unsafe { TensorArg::from_raw_parts(handle, Strides::new(&strides), ZShape::from(shape)) }
    }

    /// The kernel argument for this tensor's whole buffer, as an array: kernels get a view's
    /// offset and strides besides it (see `ex_cubecl_kernels::strided::seq_offset`), which
    /// spares the metadata upload that a tensor argument costs every launch.
    pub fn buffer_arg(&self) -> ArrayArg<R> {
        let handle = bound(&self.handle);
        let len = handle.size_in_used() as usize / elem_size(self.dtype);
        // SAFETY: the length is the buffer's, and kernels guard their accesses with the
        // iteration size.
        unsafe { ArrayArg::from_raw_parts(handle, len) }
    }

    /// Whether this tensor is the only user of its buffer, so that a kernel may write into it.
    pub fn can_mut(&self) -> bool {
        self.handle.can_mut()
    }

    /// The cubecl storage type of the elements.
    pub fn storage(&self) -> cubecl::ir::StorageType {
        match self.bf16_bits() {
            true => storage_type(DType::U16),
            false => storage_type(self.dtype),
        }
    }

    /// Whether this is a bf16 tensor held as its bits in u16 (see
    /// [`crate::runtime::bf16_in_u16`]): kernels that compute see one only where they read
    /// and write the bits themselves (see `crate::launch::bf16`).
    pub fn bf16_bits(&self) -> bool {
        self.dtype == DType::BF16 && bf16_in_u16(&self.client)
    }
}

/// A quantized tensor: 8-bit values, their f32 scales and the scheme.
///
/// `values` is an i8 tensor whose layout is the quantized tensor's view (views change only
/// that layout, as for float tensors). Scales belong to positions in the values *buffer*: the
/// value at buffer position `p` has scale `scales[p / block]`, where `block` is the scheme's
/// block size (flat chunks of `block` consecutive elements, as burn-ndarray and Burn's
/// `compute_range` read it) or the whole buffer for per-tensor quantization. Scales are kept
/// as given (0 for an all-zero block) and read as 0.1 when 0, as burn-ndarray does.
#[derive(Clone, Debug)]
pub struct QuantizedTensor<R: Runtime> {
    /// The quantized values (i8), seen through the tensor's layout.
    pub values: CubeTensor<R>,
    /// The scales (f32, contiguous): one per block of the values buffer.
    pub scales: CubeTensor<R>,
    /// The quantization scheme.
    pub scheme: QuantScheme,
}

impl<R: Runtime> QuantizedTensor<R> {
    /// Elements per scale: the block size, or `None` for one scale per tensor.
    pub fn block_elems(&self) -> Option<usize> {
        match self.scheme.level {
            QuantLevel::Tensor => None,
            QuantLevel::Block(block) => Some(block.num_elements()),
        }
    }

    /// The same scales and scheme over other values.
    pub fn with_values(&self, values: CubeTensor<R>) -> Self {
        Self {
            values,
            ..self.clone()
        }
    }
}

impl<R: Runtime> TensorMetadata for QuantizedTensor<R> {
    fn dtype(&self) -> DType {
        DType::QFloat(self.scheme)
    }

    fn shape(&self) -> Shape {
        self.values.shape()
    }
}

impl<R: Runtime> QTensorPrimitive for QuantizedTensor<R> {
    fn scheme(&self) -> &QuantScheme {
        &self.scheme
    }
}
