//! Multi-dimensional gather and scatter (`gather_nd`, `scatter_nd`) on float and int tensors,
//! with every reduction, repeated index tuples, views as inputs, and out-of-range coordinates.
use burn_backend::ops::*;
use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{DType, TensorData};
use ex_cubecl_conformance::*;

const UPDATES: [IndexingUpdateOp; 5] =
    [IndexingUpdateOp::Assign, IndexingUpdateOp::Add, IndexingUpdateOp::Mul, IndexingUpdateOp::Min, IndexingUpdateOp::Max];

/// `tuples` index tuples of `k` coordinates into `shape`, in range, with repeats.
fn tuples(rng: &mut Rng, shape: &[usize], k: usize, tuples: &[usize]) -> TensorData {
    let n: usize = tuples.iter().product();
    let mut values = Vec::with_capacity(n * k);
    for _ in 0..n {
        for &size in &shape[..k] {
            values.push(rng.int(0, size as i64));
        }
    }
    let mut dims = tuples.to_vec();
    dims.push(k);
    TensorData::new(values, dims)
}

#[test]
fn gather_and_scatter_nd_match_ndarray() {
    let mut suite = Suite::new("index_nd");
    let seed = 808;
    let mut rng = Rng::new(seed);
    for shape in [vec![5], vec![4, 3], vec![3, 4, 5], vec![2, 3, 2, 3]] {
        for k in 1..=shape.len() {
            for tuple_shape in [vec![1], vec![6], vec![2, 3]] {
                let idx = tuples(&mut rng, &shape, k, &tuple_shape);
                let mut value_shape = tuple_shape.clone();
                value_shape.extend_from_slice(&shape[k..]);
                let a = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0);
                let v = float_data(&mut rng, &value_shape, DType::F32, -3.0, 3.0);
                let ai = int_data(&mut rng, &shape, DType::I32, -9, 9);
                let vi = int_data(&mut rng, &value_shape, DType::I32, -9, 9);
                let case = format!("data={shape:?} k={k} tuples={tuple_shape:?} seed={seed}");
                let r = on_both!(|B| rf::<B>(B::float_gather_nd(f::<B>(&a), i::<B>(&idx))));
                suite.check(format!("float_gather_nd {case}"), Tol::EXACT, r);
                let r = on_both!(|B| ri::<B>(B::int_gather_nd(i::<B>(&ai), i::<B>(&idx))));
                suite.check(format!("int_gather_nd {case}"), Tol::EXACT, r);
                for update in UPDATES {
                    let r = on_both!(|B| rf::<B>(B::float_scatter_nd(f::<B>(&a), i::<B>(&idx), f::<B>(&v), update)));
                    suite.check(format!("float_scatter_nd {update:?} {case}"), Tol::of(1e-5), r);
                    let r = on_both!(|B| ri::<B>(B::int_scatter_nd(i::<B>(&ai), i::<B>(&idx), i::<B>(&vi), update)));
                    suite.check(format!("int_scatter_nd {update:?} {case}"), Tol::EXACT, r);
                }
            }
        }
    }
    // Views as inputs: a transposed data tensor and transposed indices. burn-ndarray needs
    // contiguous inputs, so the reference gets the transposes materialised on the host.
    let a = float_data(&mut rng, &[4, 3], DType::F32, -3.0, 3.0);
    let av = a.to_vec::<f32>().unwrap();
    let a_t = TensorData::new((0..12).map(|p| av[(p % 4) * 3 + p / 4]).collect::<Vec<f32>>(), [3, 4]);
    let idx_t = TensorData::new(vec![2i64, 0, 1, 1, 0, 2], [2, 3]);
    let idx = TensorData::new(vec![2i64, 1, 0, 0, 1, 2], [3, 2]);
    let v = float_data(&mut rng, &[3], DType::F32, -3.0, 3.0);
    let ours = catch(|| rf::<Ex>(Ex::float_gather_nd(Ex::float_swap_dims(f::<Ex>(&a), 0, 1), Ex::int_swap_dims(i::<Ex>(&idx_t), 0, 1))));
    let reference = rf::<Ref>(Ref::float_gather_nd(f::<Ref>(&a_t), i::<Ref>(&idx)));
    suite.check("float_gather_nd on views", Tol::EXACT, (ours, reference));
    let ours = catch(|| {
        let data = Ex::float_swap_dims(f::<Ex>(&a), 0, 1);
        rf::<Ex>(Ex::float_scatter_nd(data, Ex::int_swap_dims(i::<Ex>(&idx_t), 0, 1), f::<Ex>(&v), IndexingUpdateOp::Add))
    });
    let reference = rf::<Ref>(Ref::float_scatter_nd(f::<Ref>(&a_t), i::<Ref>(&idx), f::<Ref>(&v), IndexingUpdateOp::Add));
    suite.check("float_scatter_nd on views", Tol::of(1e-6), (ours, reference));

    // Out of range (burn-ndarray panics there): ours reads 0 and writes nothing.
    let data = TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]);
    let bad = TensorData::new(vec![1i64, 5, -1, 0], [2, 2]);
    let ours = catch(|| rf::<Ex>(Ex::float_gather_nd(f::<Ex>(&data), i::<Ex>(&bad))));
    suite.check("gather_nd out of range reads 0", Tol::EXACT, (ours, TensorData::new(vec![0.0f32, 0.0], [2])));
    let bad_rows = TensorData::new(vec![3i64, 1], [2, 1]);
    let vals = TensorData::new(vec![9.0f32, 9.0, 7.0, 7.0], [2, 2]);
    let ours = catch(|| rf::<Ex>(Ex::float_scatter_nd(f::<Ex>(&data), i::<Ex>(&bad_rows), f::<Ex>(&vals), IndexingUpdateOp::Assign)));
    suite.check("scatter_nd out of range writes nothing", Tol::EXACT, (ours, TensorData::new(vec![1.0f32, 2.0, 7.0, 7.0], [2, 2])));

    // Bad shapes panic with the op and the shapes.
    let r = catch(|| rf::<Ex>(Ex::float_gather_nd(f::<Ex>(&data), i::<Ex>(&TensorData::new(vec![0i64; 6], [2, 3])))));
    suite.check_panics("gather_nd with k > rank", "ex_cubecl: float_gather_nd", r);
    let wrong = TensorData::new(vec![0.0f32; 6], [3, 2]);
    let r = catch(|| rf::<Ex>(Ex::float_scatter_nd(f::<Ex>(&data), i::<Ex>(&bad_rows), f::<Ex>(&wrong), IndexingUpdateOp::Add)));
    suite.check_panics("scatter_nd with values of the wrong shape", "don't fit", r);
    suite.finish();
}
