//! Layout ops (reshape, permute, slices with steps, flip, expand, unfold, cat, repeat,
//! slice_assign), indexing (gather, scatter_add, select, select_add, bool scatter/select) and
//! masks, on float, int and bool tensors.
use burn_backend::ops::*;
use burn_backend::{DType, Scalar, Shape, Slice, TensorData};
use ex_cubecl_conformance::*;

fn slices_for(rng: &mut Rng, shape: &[usize]) -> Vec<Slice> {
    shape
        .iter()
        .map(|&n| {
            let start = rng.int(0, n as i64 + 1) as isize;
            let end = rng.int(start as i64, n as i64 + 1) as isize;
            let step = [1, 2, 3, -1, -2][rng.int(0, 5) as usize];
            Slice::new(start, Some(end), step)
        })
        .collect()
}

#[test]
fn views_and_copies_match_ndarray() {
    let mut suite = Suite::new("layout");
    let seed = 71;
    let mut rng = Rng::new(seed);
    for shape in shapes(&mut rng) {
        let rank = shape.len();
        let a = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0);
        let n: usize = shape.iter().product();
        let ai = int_data(&mut rng, &shape, DType::I32, -9, 9);
        let ab = bool_data(&mut rng, &shape);
        let mut axes: Vec<usize> = (0..rank).collect();
        axes.reverse();
        let flat = Shape::from(vec![n]);
        let mut cases = vec![
            ("reshape flat", on_both!(|B| rf::<B>(B::float_reshape(f::<B>(&a), flat.clone())))),
            ("reshape of permuted", on_both!(|B| rf::<B>(B::float_reshape(B::float_permute(f::<B>(&a), &axes), flat.clone())))),
            ("permute", on_both!(|B| rf::<B>(B::float_permute(f::<B>(&a), &axes)))),
            ("flip all", on_both!(|B| rf::<B>(B::float_flip(f::<B>(&a), &axes)))),
            ("flip first", on_both!(|B| rf::<B>(B::float_flip(f::<B>(&a), &[0])))),
            ("int flip", on_both!(|B| ri::<B>(B::int_flip(i::<B>(&ai), &axes)))),
            ("bool flip", on_both!(|B| rb::<B>(B::bool_flip(b::<B>(&ab), &[0])))),
            ("int permute", on_both!(|B| ri::<B>(B::int_permute(i::<B>(&ai), &axes)))),
            ("bool reshape", on_both!(|B| rb::<B>(B::bool_reshape(B::bool_permute(b::<B>(&ab), &axes), flat.clone())))),
            ("cat dim 0", on_both!(|B| rf::<B>(B::float_cat(vec![f::<B>(&a), float_view::<B>(f::<B>(&a), View::Reversed)], 0)))),
            ("int cat last", on_both!(|B| ri::<B>(B::int_cat(vec![i::<B>(&ai), i::<B>(&ai), i::<B>(&ai)], rank - 1)))),
            ("bool cat", on_both!(|B| rb::<B>(B::bool_cat(vec![b::<B>(&ab), b::<B>(&ab)], 0)))),
            ("repeat_dim", on_both!(|B| rf::<B>(B::float_repeat_dim(f::<B>(&a), rank - 1, 3)))),
        ];
        if rank >= 2 {
            cases.push(("swap_dims", on_both!(|B| rf::<B>(B::float_swap_dims(f::<B>(&a), 0, rank - 1)))));
            cases.push(("bool swap_dims", on_both!(|B| rb::<B>(B::bool_swap_dims(b::<B>(&ab), 0, 1)))));
        }
        // Expand a size-1 leading view to a bigger batch.
        let mut big = vec![3];
        big.extend_from_slice(&shape);
        let big = Shape::from(big);
        let mut one = vec![1];
        one.extend_from_slice(&shape);
        let one = Shape::from(one);
        // burn-ndarray stops at rank 6.
        if rank < 6 {
        cases.push(("expand", on_both!(|B| rf::<B>(B::float_expand(B::float_reshape(f::<B>(&a), one.clone()), big.clone())))));
        cases.push(("int expand", on_both!(|B| ri::<B>(B::int_expand(B::int_reshape(i::<B>(&ai), one.clone()), big.clone())))));
        cases.push(("bool expand", on_both!(|B| rb::<B>(B::bool_expand(B::bool_reshape(b::<B>(&ab), one.clone()), big.clone())))));
        }
        if shape[rank - 1] >= 2 && rank < 6 {
            cases.push(("unfold", on_both!(|B| rf::<B>(B::float_unfold(f::<B>(&a), rank - 1, 2, 1)))));
            cases.push(("int unfold step 2", on_both!(|B| ri::<B>(B::int_unfold(i::<B>(&ai), rank - 1, 2, 2)))));
            cases.push(("bool unfold", on_both!(|B| rb::<B>(B::bool_unfold(b::<B>(&ab), rank - 1, 1, 1)))));
        }
        for (name, result) in cases {
            suite.check(format!("{name} shape={shape:?} seed={seed}"), Tol::EXACT, result);
        }
        for _ in 0..4 {
            let slices = slices_for(&mut rng, &shape);
            let region: Vec<usize> = slices.iter().zip(&shape).map(|(s, &d)| s.output_size(d)).collect();
            let v = float_data(&mut rng, &region, DType::F32, -1.0, 1.0);
            let vi = int_data(&mut rng, &region, DType::I32, -5, 5);
            let vb = bool_data(&mut rng, &region);
            let cases = vec![
                ("slice", on_both!(|B| rf::<B>(B::float_slice(f::<B>(&a), &slices)))),
                ("slice of transposed", on_both!(|B| rf::<B>(B::float_slice(float_view::<B>(f::<B>(&a), View::Stepped), &slices[..slices.len().min(rank - 1)])))),
                ("int slice", on_both!(|B| ri::<B>(B::int_slice(i::<B>(&ai), &slices)))),
                ("bool slice", on_both!(|B| rb::<B>(B::bool_slice(b::<B>(&ab), &slices)))),
                ("slice_assign", on_both!(|B| rf::<B>(B::float_slice_assign(f::<B>(&a), &slices, f::<B>(&v))))),
                ("int slice_assign", on_both!(|B| ri::<B>(B::int_slice_assign(i::<B>(&ai), &slices, i::<B>(&vi))))),
                ("bool slice_assign", on_both!(|B| rb::<B>(B::bool_slice_assign(b::<B>(&ab), &slices, b::<B>(&vb))))),
            ];
            for (name, result) in cases {
                suite.check(format!("{name} {slices:?} shape={shape:?} seed={seed}"), Tol::EXACT, result);
            }
        }
    }
    suite.finish();
}

#[test]
fn indexing_and_masks_match_ndarray() {
    let mut suite = Suite::new("index");
    let seed = 44;
    let mut rng = Rng::new(seed);
    let mut all_shapes = shapes(&mut rng);
    all_shapes.retain(|s| s.iter().product::<usize>() > 0);
    for shape in all_shapes {
        let rank = shape.len();
        let a = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0);
        let ai = int_data(&mut rng, &shape, DType::I32, -9, 9);
        let ab = bool_data(&mut rng, &shape);
        for dim in 0..rank {
            let n = shape[dim];
            // gather / scatter: indices with the tensor's shape but `dim` resized.
            let mut ishape = shape.clone();
            ishape[dim] = rng.int(1, 5) as usize;
            let idx = int_data(&mut rng, &ishape, DType::I64, 0, n as i64);
            let vals = float_data(&mut rng, &ishape, DType::F32, -1.0, 1.0);
            let vals_i = int_data(&mut rng, &ishape, DType::I32, -3, 3);
            let vals_b = bool_data(&mut rng, &ishape);
            // select: 1-D indices (with repeats) and values shaped like the selection.
            let k = rng.int(1, 6) as usize;
            let sel = int_data(&mut rng, &[k], DType::I64, 0, n as i64);
            let mut sshape = shape.clone();
            sshape[dim] = k;
            let svals = float_data(&mut rng, &sshape, DType::F32, -1.0, 1.0);
            let svals_i = int_data(&mut rng, &sshape, DType::I32, -3, 3);
            let svals_b = bool_data(&mut rng, &sshape);
            let cases = vec![
                ("gather", on_both!(|B| rf::<B>(B::float_gather(dim, f::<B>(&a), i::<B>(&idx))))),
                ("gather transposed", on_both!(|B| rf::<B>(B::float_gather(dim, B::float_add_scalar(f::<B>(&a), Scalar::Float(0.0)), i::<B>(&idx))))),
                ("scatter_add", on_both!(|B| rf::<B>(B::float_scatter_add(dim, f::<B>(&a), i::<B>(&idx), f::<B>(&vals))))),
                ("select", on_both!(|B| rf::<B>(B::float_select(f::<B>(&a), dim, i::<B>(&sel))))),
                ("select_add", on_both!(|B| rf::<B>(B::float_select_add(f::<B>(&a), dim, i::<B>(&sel), f::<B>(&svals))))),
                ("int gather", on_both!(|B| ri::<B>(B::int_gather(dim, i::<B>(&ai), i::<B>(&idx))))),
                ("int scatter_add", on_both!(|B| ri::<B>(B::int_scatter_add(dim, i::<B>(&ai), i::<B>(&idx), i::<B>(&vals_i))))),
                ("int select", on_both!(|B| ri::<B>(B::int_select(i::<B>(&ai), dim, i::<B>(&sel))))),
                ("int select_add", on_both!(|B| ri::<B>(B::int_select_add(i::<B>(&ai), dim, i::<B>(&sel), i::<B>(&svals_i))))),
                ("bool gather", on_both!(|B| rb::<B>(B::bool_gather(dim, b::<B>(&ab), i::<B>(&idx))))),
                ("bool scatter_or", on_both!(|B| rb::<B>(B::bool_scatter_or(dim, b::<B>(&ab), i::<B>(&idx), b::<B>(&vals_b))))),
                ("bool select", on_both!(|B| rb::<B>(B::bool_select(b::<B>(&ab), dim, i::<B>(&sel))))),
                ("bool select_or", on_both!(|B| rb::<B>(B::bool_select_or(b::<B>(&ab), dim, i::<B>(&sel), b::<B>(&svals_b))))),
            ];
            for (name, result) in cases {
                suite.check(format!("{name}(dim={dim}) shape={shape:?} seed={seed}"), Tol::of(1e-6), result);
            }
        }
        // Masks broadcast from a leading size-1 dimension.
        let mut mshape = shape.clone();
        mshape[0] = 1;
        let mask = bool_data(&mut rng, &mshape);
        let v = float_data(&mut rng, &shape, DType::F32, -1.0, 1.0);
        let vi = int_data(&mut rng, &shape, DType::I32, -5, 5);
        let vb = bool_data(&mut rng, &shape);
        let cases = vec![
            ("mask_where", on_both!(|B| rf::<B>(B::float_mask_where(f::<B>(&a), B::bool_expand(b::<B>(&mask), shape.clone().into()), f::<B>(&v))))),
            ("mask_fill", on_both!(|B| rf::<B>(B::float_mask_fill(f::<B>(&a), B::bool_expand(b::<B>(&mask), shape.clone().into()), Scalar::Float(-7.5))))),
            ("int mask_where", on_both!(|B| ri::<B>(B::int_mask_where(i::<B>(&ai), B::bool_expand(b::<B>(&mask), shape.clone().into()), i::<B>(&vi))))),
            ("int mask_fill", on_both!(|B| ri::<B>(B::int_mask_fill(i::<B>(&ai), B::bool_expand(b::<B>(&mask), shape.clone().into()), Scalar::Int(42))))),
            ("bool mask_where", on_both!(|B| rb::<B>(B::bool_mask_where(b::<B>(&ab), B::bool_expand(b::<B>(&mask), shape.clone().into()), b::<B>(&vb))))),
            ("bool mask_fill", on_both!(|B| rb::<B>(B::bool_mask_fill(b::<B>(&ab), B::bool_expand(b::<B>(&mask), shape.clone().into()), Scalar::Bool(true))))),
        ];
        for (name, result) in cases {
            suite.check(format!("{name} shape={shape:?} seed={seed}"), Tol::EXACT, result);
        }
    }
    suite.finish();
}

#[test]
fn scatter_long_lines_match_ndarray() {
    // Lines longer than a plane, every position hit several times (on GPUs the scatter runs
    // one plane or one cube per line; the sums must come out in the line's order, as the
    // reference's).
    let mut suite = Suite::new("scatter long lines");
    let seed = 45;
    let mut rng = Rng::new(seed);
    // On GPUs: [4, 300] (700 entries a line, each position hit by several of a batch) runs one
    // cube per line, the others one plane per line ([2, 9000]'s lines are too long for shared
    // memory).
    for (shape, dim, len) in [(vec![3, 70], 1, 150), (vec![70, 5], 0, 100), (vec![2, 33, 3], 1, 67), (vec![4, 300], 1, 700), (vec![2, 9000], 1, 300)] {
        let mut ishape = shape.clone();
        ishape[dim] = len;
        let a = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0);
        let ai = int_data(&mut rng, &shape, DType::I32, -9, 9);
        let idx = int_data(&mut rng, &ishape, DType::I64, 0, shape[dim] as i64);
        let vals = float_data(&mut rng, &ishape, DType::F32, -1.0, 1.0);
        let vals_i = int_data(&mut rng, &ishape, DType::I32, -3, 3);
        let r = on_both!(|B| rf::<B>(B::float_scatter_add(dim, f::<B>(&a), i::<B>(&idx), f::<B>(&vals))));
        suite.check(format!("scatter_add {shape:?} dim={dim} indices={ishape:?} seed={seed}"), Tol::EXACT, r);
        let r = on_both!(|B| ri::<B>(B::int_scatter_add(dim, i::<B>(&ai), i::<B>(&idx), i::<B>(&vals_i))));
        suite.check(format!("int scatter_add {shape:?} dim={dim} indices={ishape:?} seed={seed}"), Tol::EXACT, r);
    }
    suite.finish();
}

#[test]
fn out_of_range_indices_stay_inside_buffers() {
    let mut suite = Suite::new("index bounds");
    let a = TensorData::new((0..12).map(|x| x as f32).collect::<Vec<_>>(), [3, 4]);
    let bad = TensorData::new(vec![0i64, 7, -1, 3, 100, 2, 1, -5, 0, 0, 0, 3], [3, 4]);
    // Out-of-range gathers read 0; out-of-range scatters write nothing.
    let ours = catch(|| rf::<Ex>(Ex::float_gather(1, f::<Ex>(&a), i::<Ex>(&bad))));
    let expected = TensorData::new(vec![0.0f32, 0.0, 0.0, 3.0, 0.0, 6.0, 5.0, 0.0, 8.0, 8.0, 8.0, 11.0], [3, 4]);
    suite.check("gather with out-of-range indices", Tol::EXACT, (ours, expected));
    let ones = TensorData::new(vec![1.0f32; 12], [3, 4]);
    let ours = catch(|| rf::<Ex>(Ex::float_scatter_add(1, f::<Ex>(&a), i::<Ex>(&bad), f::<Ex>(&ones))));
    let expected = TensorData::new(vec![1.0f32, 1.0, 2.0, 4.0, 4.0, 6.0, 7.0, 7.0, 11.0, 9.0, 10.0, 12.0], [3, 4]);
    suite.check("scatter_add with out-of-range indices", Tol::EXACT, (ours, expected));
    suite.finish();
}

/// Shapes whose inner sizes, offsets and strides allow whole vectors (4 and 8 elements) in
/// copies, next to ones that allow only some or none: cat along each dim (parts of sizes
/// 8, 4, 2 and 3 along it, one a sliced view with an offset), slice_assign into column
/// ranges, contiguous copies of offset slices and permutations, f16 and u8 (wider vectors),
/// and gathers with contiguous and permuted indices.
#[test]
fn vector_copies_and_gathers_match_ndarray() {
    let mut suite = Suite::new("vector copies");
    let mut rng = Rng::new(907);
    for shape in [vec![4, 8], vec![2, 3, 16], vec![5, 12], vec![24], vec![3, 2, 5], vec![3, 2, 4, 4]] {
        let rank = shape.len();
        let a = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0);
        let h = float_data(&mut rng, &shape, DType::F16, -3.0, 3.0);
        let u = int_data(&mut rng, &shape, DType::U8, 0, 200);
        let last = rank - 1;
        let n = shape[last];
        let tail = |s: usize| -> Vec<Slice> {
            let mut slices = vec![Slice::new(0, None, 1); rank];
            slices[last] = Slice::new(s as isize, None, 1);
            slices
        };
        let mut cases = Vec::new();
        for dim in 0..rank {
            cases.push((
                format!("cat dim {dim}"),
                on_both!(|B| rf::<B>(B::float_cat(vec![f::<B>(&a), B::float_slice(f::<B>(&a), &tail(0)), f::<B>(&a)], dim))),
            ));
            cases.push((format!("f16 cat dim {dim}"), on_both!(|B| rf::<B>(B::float_cat(vec![f::<B>(&h), f::<B>(&h)], dim)))));
            cases.push((format!("u8 cat dim {dim}"), on_both!(|B| ri::<B>(B::int_cat(vec![i::<B>(&u), i::<B>(&u), i::<B>(&u)], dim)))));
        }
        if shape[0] > 1 {
            // Contiguous parts at an offset (rows sliced off the front), and more parts than
            // one launch takes.
            let mut rows = vec![Slice::new(0, None, 1); rank];
            rows[0] = Slice::new(1, None, 1);
            for dim in 0..rank {
                let rows = rows.clone();
                cases.push((
                    format!("cat of row slices dim {dim}"),
                    on_both!(|B| rf::<B>(B::float_cat(vec![B::float_slice(f::<B>(&a), &rows), B::float_slice(f::<B>(&a), &rows)], dim))),
                ));
            }
            cases.push((format!("cat of 11 parts dim {last}"), on_both!(|B| rf::<B>(B::float_cat(vec![f::<B>(&a); 11], last)))));
        }
        for s in [1, 2, 4] {
            if s < n {
                cases.push((
                    format!("cat of slices from {s}"),
                    on_both!(|B| rf::<B>(B::float_cat(vec![B::float_slice(f::<B>(&a), &tail(s)), f::<B>(&a)], last))),
                ));
                cases.push((
                    format!("contiguous slice from {s}"),
                    on_both!(|B| rf::<B>(B::float_add_scalar(B::float_slice(f::<B>(&a), &tail(s)), Scalar::Float(0.0)))),
                ));
                let v = float_data(&mut rng, &{ let mut v = shape.clone(); v[last] = n - s; v }, DType::F32, -1.0, 1.0);
                cases.push((format!("slice_assign from {s}"), on_both!(|B| rf::<B>(B::float_slice_assign(f::<B>(&a), &tail(s), f::<B>(&v))))));
            }
        }
        if rank >= 3 {
            // Batch norm's copy: the first two dimensions swapped, the rest contiguous, in
            // vectors along the last one where they divide it; from the start and at an offset.
            let flat = Shape::from(vec![shape[1], shape.iter().product::<usize>() / shape[1]]);
            let mut rows = vec![Slice::new(0, None, 1); rank];
            rows[0] = Slice::new(1, None, 1);
            let mut sliced = shape.clone();
            sliced[0] -= 1;
            let sliced_flat = Shape::from(vec![shape[1], sliced.iter().product::<usize>() / shape[1]]);
            cases.push(("channels first".into(), on_both!(|B| rf::<B>(B::float_reshape(B::float_swap_dims(f::<B>(&a), 0, 1), flat.clone())))));
            cases.push(("f16 channels first".into(), on_both!(|B| rf::<B>(B::float_reshape(B::float_swap_dims(f::<B>(&h), 0, 1), flat.clone())))));
            cases.push(("u8 channels first".into(), on_both!(|B| ri::<B>(B::int_reshape(B::int_swap_dims(i::<B>(&u), 0, 1), flat.clone())))));
            cases.push((
                "channels first of a row slice".into(),
                on_both!(|B| rf::<B>(B::float_reshape(B::float_swap_dims(B::float_slice(f::<B>(&a), &rows), 0, 1), sliced_flat.clone()))),
            ));
        }
        let axes: Vec<usize> = (0..rank).rev().collect();
        cases.push(("permuted reshape".into(), on_both!(|B| rf::<B>(B::float_reshape(B::float_permute(f::<B>(&a), &axes), Shape::from(vec![shape.iter().product::<usize>()]))))));
        // Along the last dim in vectors of indices: rows of 8 and 4 indices, i32 and i64, the
        // tensor's rows sliced (an offset, a row stride other than the row's length).
        for (cols, idtype) in [(8, DType::I32), (4, DType::I64)] {
            let mut ishape = shape.clone();
            ishape[last] = cols;
            let idx = int_data(&mut rng, &ishape, idtype, 0, n as i64);
            cases.push((format!("gather last dim, {cols} {idtype:?} per row"), on_both!(|B| rf::<B>(B::float_gather(last, f::<B>(&a), i::<B>(&idx))))));
            if n > 2 {
                let mut jshape = shape.clone();
                jshape[last] = cols;
                let jdx = int_data(&mut rng, &jshape, idtype, 0, n as i64 - 2);
                cases.push((
                    format!("gather last dim of a slice, {cols} {idtype:?} per row"),
                    on_both!(|B| rf::<B>(B::float_gather(last, B::float_slice(f::<B>(&a), &tail(2)), i::<B>(&jdx)))),
                ));
            }
        }
        for dim in 0..rank {
            let mut ishape = shape.clone();
            ishape[dim] = 3;
            let idx = int_data(&mut rng, &ishape, DType::I64, 0, shape[dim] as i64);
            cases.push((format!("gather dim {dim}"), on_both!(|B| rf::<B>(B::float_gather(dim, f::<B>(&a), i::<B>(&idx))))));
            let mut tshape = shape.clone();
            tshape.reverse();
            let mut tidx_shape = tshape.clone();
            tidx_shape[rank - 1 - dim] = 3;
            let tidx = int_data(&mut rng, &tidx_shape, DType::I64, 0, shape[dim] as i64);
            cases.push((
                format!("gather dim {dim}, permuted indices"),
                on_both!(|B| rf::<B>(B::float_gather(dim, f::<B>(&a), B::int_permute(i::<B>(&tidx), &axes)))),
            ));
        }
        for (name, result) in cases {
            suite.check(format!("{name} shape={shape:?}"), Tol::EXACT, result);
        }
    }
    suite.finish();
}

/// Transposes of the last two dims made contiguous (`copy_tiles` on GPUs, in pairs of elements
/// where every size is even): tiles whole and cut at the edges, batched, f32, f16 and u8.
#[test]
fn transposes_match_ndarray() {
    let mut suite = Suite::new("transposes");
    let mut rng = Rng::new(911);
    for shape in [vec![66, 130], vec![3, 64, 64], vec![2, 70, 34], vec![65, 33], vec![3, 33, 7], vec![2, 4, 6]] {
        let rank = shape.len();
        let a = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0);
        let h = float_data(&mut rng, &shape, DType::F16, -3.0, 3.0);
        let u = int_data(&mut rng, &shape, DType::U8, 0, 200);
        let flat = Shape::from(vec![shape.iter().product::<usize>()]);
        let cases = [
            ("f32", on_both!(|B| rf::<B>(B::float_reshape(B::float_swap_dims(f::<B>(&a), rank - 2, rank - 1), flat.clone())))),
            ("f16", on_both!(|B| rf::<B>(B::float_reshape(B::float_swap_dims(f::<B>(&h), rank - 2, rank - 1), flat.clone())))),
            ("u8", on_both!(|B| ri::<B>(B::int_reshape(B::int_swap_dims(i::<B>(&u), rank - 2, rank - 1), flat.clone())))),
        ];
        for (name, result) in cases {
            suite.check(format!("{name} transpose shape={shape:?}"), Tol::EXACT, result);
        }
    }
    suite.finish();
}
