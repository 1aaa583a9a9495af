//! Flash attention with its keys and values loaded by Hopper's Tensor Memory Accelerator
//! (`ex_cubecl_kernels::flash_attention_mma::flash_attention_mma_tma`): f16 and bf16 on the
//! `mma.sync` kernel's tiles, where the device has TMA, the head dimensions pad to multiples of
//! 64 (a box of 128-byte rows) and the keys and values start at their buffers' start with
//! strides a tensor map can describe (`tma_layout`: `[b, h, seq, d]` contiguous, or with the
//! batch or the heads broadcast). Everything else runs the kernel on asynchronous copies;
//! `EX_CUBECL_TMA=0` keeps attention there, as it does the products.
use burn_backend::DType;
use cubecl::Runtime;
use cubecl::prelude::{CubeDim, TensorMapArg, TensorMapSwizzle, Tiled, TiledArgs};
use cubecl::zspace::Shape as ZShape;
use ex_cubecl_kernels::flash_attention_mma::{FlashTile, flash_attention_mma_tma};
use ex_cubecl_kernels::tensor_core::BOX_INNER;

use super::float_arg;
use super::matmul_mma::{tma_available, tma_layout};
use crate::runtime::{Geometry, Layout, elem_size, launch};
use crate::tensor::CubeTensor;

/// The keys' and values' tensor-map layouts (`[b · h, seq_k, d]` when `batched`, else
/// `[seq_k, d]`).
pub(super) struct KvMaps {
    key: Layout,
    value: Layout,
    batched: bool,
}

/// The tensor maps of `key` and `value` for the TMA kernel on `tile`, or `None` where it can't
/// run: no TMA (or `EX_CUBECL_TMA=0`), TF32, head dimensions padded to other than multiples of
/// [`BOX_INNER`], key tiles of more than 256 rows (a box's limit), too little shared memory,
/// or layouts a tensor map can't take (the keys and values alike batched or not).
pub(super) fn kv_maps<R: Runtime>(key: &CubeTensor<R>, value: &CubeTensor<R>, tile: &FlashTile) -> Option<KvMaps> {
    let boxed = |n: usize| n % BOX_INNER == 0;
    let elem = elem_size(key.dtype);
    // Queries, two stages of keys and values, their 1024-byte alignment and the barriers.
    let shared = (16 * tile.warps * tile.d_pad + 2 * tile.block_kv * (tile.d_pad + tile.dv_pad)) * elem + 2048;
    let usable = !tile.tf32
        && boxed(tile.d_pad)
        && boxed(tile.dv_pad)
        && tile.block_kv <= 256
        && shared <= key.client.properties().hardware.max_shared_memory_size
        && tma_available(&key.client);
    if !usable {
        return None;
    }
    kv_layouts(&key.layout, &value.layout, elem)
}

/// The tensor-map layouts of keys and values `[b, h, seq_k, d]` of `elem`-byte elements
/// (`tma_layout`'s), or `None` where either can't be one or only one of them is batched.
fn kv_layouts(key: &Layout, value: &Layout, elem: usize) -> Option<KvMaps> {
    let (key, key_batched) = tma_layout(key, 2, 3, elem)?;
    let (value, value_batched) = tma_layout(value, 2, 3, elem)?;
    (key_batched == value_batched).then_some(KvMaps { key, value, batched: key_batched })
}

/// Launches the TMA kernel for `out` on `tile` (its `tma` set here) with `cubes` cubes; `mask`
/// and `bias` are views of the scores' shape (or stand-ins the tile doesn't read), `scalars`
/// the kernel's scale, soft cap and `tiny` as f64.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_tma<R: Runtime>(
    op: &str,
    (query, key, value): (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>),
    (mask, bias): (CubeTensor<R>, CubeTensor<R>),
    out: &CubeTensor<R>,
    maps: KvMaps,
    tile: FlashTile,
    (scale, softcap, tiny): (f64, f64, f64),
    cubes: usize,
) {
    let tile = FlashTile { tma: true, ..tile };
    let geometry = Geometry::Cubes { count: if out.num_elements() == 0 { 0 } else { cubes }, dim: CubeDim::new_1d(32 * tile.warps as u32) };
    let f32_arg = |x: f64| float_arg(x, DType::F32);
    let (scale, softcap, tiny) = (f32_arg(scale), f32_arg(softcap), f32_arg(tiny));
    let (seq_k, dv) = (key.dims()[2], value.dims()[3]);
    let storage = query.storage();
    let dtypes = [storage, mask.storage()];
    // A box of [block_kv, BOX_INNER] elements, a batch of one in front for a batched map.
    let mut size = vec![tile.block_kv, BOX_INNER];
    if maps.batched {
        size.insert(0, 1);
    }
    let boxes = TiledArgs { tile_size: ZShape::from(size) };
    let out_arg = out.clone();
    launch(&out.client, op, geometry, move |client, count, dim| {
        let map = |t: &CubeTensor<R>, layout: &Layout| {
            TensorMapArg::<R, Tiled>::new(boxes.clone(), t.view_arg(layout), storage).with_swizzle(TensorMapSwizzle::B128)
        };
        // SAFETY: cubes past `cubes` leave uniformly before any barrier; query chunks are read
        // only inside the sequence and head dimension (checked per chunk), the tensor maps
        // describe the keys and values inside their buffers (`tma_layout`) and TMA fills what
        // lies past them with zeros; mask and bias reads are guarded by the query row and key
        // (both views of the scores' shape), output writes by the query row and value
        // dimension; shared-memory indices stay inside the tiles.
        unsafe {
            flash_attention_mma_tma::launch_unchecked::<R>(
                client, count, dim, 8, query.as_arg(), map(&key, &maps.key), map(&value, &maps.value), mask.as_arg(),
                bias.as_arg(), out_arg.as_arg(), query.layout.offset, mask.layout.offset, bias.layout.offset, seq_k, dv,
                scale, softcap, tiny, cubes, tile, maps.batched, dtypes,
            )
        }
    });
}

#[cfg(test)]
mod tests {
    use burn_backend::Shape;

    use super::*;

    fn layout(shape: [usize; 4], strides: [usize; 4]) -> Layout {
        Layout { shape: Shape::from(shape.to_vec()), strides: strides.to_vec(), offset: 0 }
    }

    #[test]
    fn kv_layouts_take_contiguous_and_broadcast_heads_and_refuse_interleaved_or_mixed_ones() {
        // [2, 3, 130, 64] contiguous: one map over the 6 heads' [130, 64] matrices.
        let contiguous = layout([2, 3, 130, 64], [3 * 130 * 64, 130 * 64, 64, 1]);
        let maps = kv_layouts(&contiguous, &contiguous, 2).expect("contiguous");
        assert!(maps.batched);
        assert_eq!(maps.key.shape.to_vec(), vec![6, 130, 64]);
        assert_eq!(maps.key.strides, vec![130 * 64, 64, 1]);
        // One head of one batch entry: a map without a batch dimension.
        let single = layout([1, 1, 64, 128], [64 * 128, 64 * 128, 128, 1]);
        let maps = kv_layouts(&single, &single, 2).expect("one head");
        assert!(!maps.batched);
        assert_eq!(maps.value.shape.to_vec(), vec![64, 128]);
        // Keys and values shared by every batch entry and head (stride 0): unbatched.
        let shared = layout([2, 3, 40, 64], [0, 0, 64, 1]);
        assert!(!kv_layouts(&shared, &shared, 2).expect("broadcast").batched);
        // [b, seq, h, d] seen as [b, h, seq, d]: the heads don't collapse with the batch.
        let interleaved = layout([2, 3, 40, 64], [40 * 3 * 64, 64, 3 * 64, 1]);
        assert!(kv_layouts(&interleaved, &interleaved, 2).is_none());
        // Batched keys beside shared values: one kernel can't index both.
        assert!(kv_layouts(&contiguous, &shared, 2).is_none());
        // A head of 40 f16 (80-byte rows) is a map; of 36 (72 bytes) it isn't.
        let rows = |d: usize| layout([1, 2, 40, d], [2 * 40 * d, 40 * d, d, 1]);
        assert!(kv_layouts(&rows(40), &rows(40), 2).is_some());
        assert!(kv_layouts(&rows(36), &rows(36), 2).is_none());
    }
}
