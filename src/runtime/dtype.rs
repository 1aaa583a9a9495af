//! The one dtype table of the Rust side: Burn `DType` to cubecl storage type, and what a
//! device supports.
use burn_backend::{DTypeUsage, DTypeUsageSet};
use burn_backend::{BoolStore, DType};
use cubecl::features::TypeUsage;
use cubecl::ir::{ElemType, FloatKind, IntKind, StorageType, UIntKind};
use cubecl::prelude::ComputeClient;
use cubecl::Runtime;

/// The cubecl storage type of a Burn dtype. Bools are stored as 0 / 1 in a `u8` (native and
/// `U8` stores) or `u32` buffer.
///
/// # Panics
/// For quantized dtypes, which have no element storage type.
pub fn storage_type(dtype: DType) -> StorageType {
    let elem = match dtype {
        DType::F64 => ElemType::Float(FloatKind::F64),
        DType::F32 | DType::Flex32 => ElemType::Float(FloatKind::F32),
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        DType::I64 => ElemType::Int(IntKind::I64),
        DType::I32 => ElemType::Int(IntKind::I32),
        DType::I16 => ElemType::Int(IntKind::I16),
        DType::I8 => ElemType::Int(IntKind::I8),
        DType::U64 => ElemType::UInt(UIntKind::U64),
        DType::U32 | DType::Bool(BoolStore::U32) => ElemType::UInt(UIntKind::U32),
        DType::U16 => ElemType::UInt(UIntKind::U16),
        DType::U8 | DType::Bool(BoolStore::U8) | DType::Bool(BoolStore::Native) => {
            ElemType::UInt(UIntKind::U8)
        }
        DType::QFloat(scheme) => {
            panic!("ex_cubecl: quantized dtype {scheme:?} has no element storage type")
        }
    };
    StorageType::Scalar(elem)
}

/// Bytes per element on the device.
pub fn elem_size(dtype: DType) -> usize {
    storage_type(dtype).size()
}

/// Whether bf16 tensors on the device behind `client` hold their bits in u16 buffers and
/// compute in f32: on devices without bf16 arithmetic (lavapipe, most Vulkan and Metal GPUs).
/// Ops that move elements move the bits; ops that compute widen their bf16 operands to f32
/// and round their results to nearest even (`crate::launch::bf16`), which is what the
/// kernels do with native bf16, whose arithmetic is in f32 too.
pub fn bf16_in_u16<R: Runtime>(client: &ComputeClient<R>) -> bool {
    let usage = client.properties().type_usage(storage_type(DType::BF16));
    !usage.is_superset(TypeUsage::Buffer | TypeUsage::Conversion | TypeUsage::Arithmetic)
}

/// What the device behind `client` supports of `dtype`: storage when it has buffers of the
/// type, arithmetic when it also computes in it. bf16 has both everywhere: where the device
/// lacks it, stored as u16 bits and computed in f32 ([`bf16_in_u16`]). Quantized dtypes are
/// not supported.
pub fn dtype_usage<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> DTypeUsageSet {
    if matches!(dtype, DType::QFloat(_)) {
        return DTypeUsageSet::empty();
    }
    if dtype == DType::BF16 && bf16_in_u16(client) {
        return dtype_usage(client, DType::U16) & dtype_usage(client, DType::F32);
    }
    let usage = match dtype {
        // cubecl 0.10's CUDA runtime leaves f64 out of its registered types (its own matmul
        // failed with it), but its CUDA compiler emits `double` for every instruction, and
        // every NVIDIA GPU it runs on computes in f64. Our kernels are tested with it there.
        DType::F64 if R::name(client) == "cuda" => TypeUsage::all(),
        _ => client.properties().type_usage(storage_type(dtype)),
    };
    let mut out = DTypeUsageSet::empty();
    if usage.contains(TypeUsage::Buffer) && usage.contains(TypeUsage::Conversion) {
        out |= DTypeUsage::Storage;
        // f64 arithmetic includes the math functions: SPIR-V has none for f64, so the kernels
        // use their own (`ex_cubecl_kernels::math`), on wgpu and CUDA alike.
        if usage.contains(TypeUsage::Arithmetic) {
            out |= DTypeUsage::Arithmetic;
        }
    }
    out
}
