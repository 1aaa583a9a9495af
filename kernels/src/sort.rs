//! Sorting along the last dimension of `[lines, n]` with a bitonic network in global memory.
//!
//! Lines are padded to `p = n.next_power_of_two()`; padding positions (index >= n) compare
//! after every real element. Ties are broken by the original index, so the sort is stable
//! and argsort matches a stable reference sort. NaN sorts as the largest value.
use cubecl::prelude::*;

use crate::strided::strided_offset;

/// Copies the view `[lines, n]` into `keys` `[lines, p]` and writes the identity into `indices`.
#[cube(launch_unchecked)]
pub fn sort_init<T: Numeric>(
    input: &Tensor<T>,
    keys: &mut Tensor<T>,
    indices: &mut Tensor<u32>,
    offset: usize,
    n: usize,
    p: usize,
    #[define(T)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= keys.len() {
        terminate!();
    }
    let line = ABSOLUTE_POS / p;
    let i = ABSOLUTE_POS % p;
    let mut value = T::from_int(0);
    if i < n {
        value = input[offset + strided_offset::<T>(input, line * n + i)];
    }
    keys[ABSOLUTE_POS] = value;
    indices[ABSOLUTE_POS] = i as u32;
}

/// Whether `(va, ia)` goes before `(vb, ib)`. NaN is the largest value (as `f32::total_cmp`
/// orders Rust's NaN): last in an ascending sort, first in a descending one; NaNs tie.
#[cube]
fn goes_before<T: Numeric>(va: T, ia: u32, vb: T, ib: u32, n: u32, #[comptime] descending: bool) -> bool {
    // NaN is the only value unequal to itself (`!=` compiles to an ordered comparison,
    // false for NaN, hence the negated `==`).
    let a_nan = !(va == va);
    let b_nan = !(vb == vb);
    let less = (!a_nan && b_nan) || (!a_nan && !b_nan && va < vb);
    let greater = (a_nan && !b_nan) || (!a_nan && !b_nan && va > vb);
    let ordered = if descending { greater } else { less };
    ia < n && (ib >= n || ordered || (!less && !greater && ia < ib))
}

/// One compare-exchange step `(k, j)` of the bitonic network, on every line at once.
#[cube(launch_unchecked)]
pub fn sort_step<T: Numeric>(
    keys: &mut Tensor<T>,
    indices: &mut Tensor<u32>,
    n: u32,
    p: usize,
    k: usize,
    j: usize,
    #[comptime] descending: bool,
    #[define(T)] _dtype: StorageType,
) {
    let half = p / 2;
    if ABSOLUTE_POS >= keys.len() / 2 {
        terminate!();
    }
    let line = ABSOLUTE_POS / half;
    let r = ABSOLUTE_POS % half;
    let i = 2 * j * (r / j) + r % j;
    let l = i + j;
    let base = line * p;
    let vi = keys[base + i];
    let vl = keys[base + l];
    let ii = indices[base + i];
    let il = indices[base + l];
    let up = (i & k) == 0;
    let swap = if up {
        goes_before::<T>(vl, il, vi, ii, n, descending)
    } else {
        goes_before::<T>(vi, ii, vl, il, n, descending)
    };
    if swap {
        keys[base + i] = vl;
        keys[base + l] = vi;
        indices[base + i] = il;
        indices[base + l] = ii;
    }
}
