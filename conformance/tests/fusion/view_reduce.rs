//! Reductions of reshaped views: batch norm's statistics as burn-nn takes them,
//! `x.swap_dims(0, 1).reshape([C, N*H*W]).mean_dim(1)`, read `x` where it lies instead of a
//! copy of the view. Every result must be the unfused backend's (which copies) bit for bit,
//! for lines short (a unit each), long (a cube each) and split over cubes.
use super::*;

/// The statistics of `x` (`[N, C, H, W]`) over the batch and the pixels: the mean, the
/// variance as burn-nn's batch norm takes it, a sum over a permutation, a max; and a mean of
/// a reshape that splits a dimension of the view (no two-level line: run as the ops are).
fn statistics<B: Backend>(x: &TensorData, dtype: DType) -> Vec<TensorData> {
    let d = dev::<B>();
    let x = Tensor::<B, 4>::from_data(x.clone(), (&d, held::<B>(dtype)));
    let [n, c, h, w] = x.dims();
    let flat = |t: Tensor<B, 4>| t.swap_dims(0, 1).reshape([c, n * h * w]);
    let mean = flat(x.clone()).mean_dim(1);
    let centred = x.clone() - mean.clone().reshape([1, c, 1, 1]);
    let var = flat(centred.clone() * centred).mean_dim(1);
    let sum = x.clone().permute([1, 3, 0, 2]).reshape([c * w, n * h]).sum_dim(1);
    let max = flat(x.clone()).max_dim(1);
    let split = x.swap_dims(0, 1).reshape([c * n * h, w]).mean_dim(1);
    vec![mean.into_data(), var.into_data(), sum.into_data(), max.into_data(), split.into_data()]
}

#[test]
fn statistics_of_swapped_views_as_unfused() {
    let _turn = serial();
    let mut suite = Suite::new("fusion view reductions");
    let names = ["mean", "var", "sum of a permutation", "max", "mean of a split reshape"];
    for dtype in float_dtypes() {
        let mut rng = Rng::new(0x7135 + dtype.size() as u64);
        // Lines of 12 (a unit each), 1,024 (a cube each) and 8,192 (split over cubes).
        for shape in [[3, 2, 2, 2], [4, 3, 16, 16], [8, 2, 32, 32]] {
            let x = float_data(&mut rng, &shape, DType::F32, -2.0, 2.0);
            let fused = catch(|| statistics::<Fused>(&x, dtype));
            let (unfused, reference) = (statistics::<Ex>(&x, dtype), statistics::<Ref>(&x, dtype));
            let label = format!("{dtype:?} {shape:?}");
            check_outputs(&mut suite, &label, dtype, Tol::of(1e-4), |j| names[j].to_string(), fused, unfused, reference);
        }
    }
    suite.finish();
}

#[test]
fn a_swapped_view_reduces_in_one_launch() {
    let _turn = serial();
    let mut suite = Suite::new("fusion view reduction launches");
    let device = dev::<Fused>();
    let mut rng = Rng::new(0x7136);
    // The mean reads `x` in place: one launch (a unit or a cube per line) or a split
    // reduction's two, where the copy of the view took one more.
    for (shape, expected) in [([3, 2, 2, 2], 1), ([4, 3, 16, 16], 1), ([8, 2, 32, 32], 2)] {
        let x = Tensor::<Fused, 4>::from_data(float_data(&mut rng, &shape, DType::F32, -1.0, 1.0), &device);
        let [n, c, h, w] = shape;
        let mean = launches(|| vec![x.swap_dims(0, 1).reshape([c, n * h * w]).mean_dim(1)]);
        let label = format!("mean of a swapped {shape:?}: {expected} launches");
        suite.record(label, if mean == expected { Ok(()) } else { Err(format!("{mean} launches")) });
    }
    let x = Tensor::<Fused, 4>::from_data(float_data(&mut rng, &[4, 3, 16, 16], DType::F32, -1.0, 1.0), &device);
    let flat = |t: Tensor<Fused, 4>| t.swap_dims(0, 1).reshape([3, 4 * 16 * 16]);
    // The variance: `(x - m)^2` one launch, its statistics one.
    let var = launches(|| {
        let m = flat(x.clone()).mean_dim(1).reshape([1, 3, 1, 1]);
        let c = x.clone() - m;
        vec![flat(c.clone() * c).mean_dim(1)]
    });
    suite.record("mean, (x - m)^2 and its mean: three launches", if var == 3 { Ok(()) } else { Err(format!("{var} launches")) });
    // The view read again later: not the reshape's last read, so the ops run as they are.
    let kept = launches(|| {
        let v = x.clone().swap_dims(0, 1);
        vec![v.clone().reshape([3, 4 * 16 * 16]).mean_dim(1), v.reshape([3, 4 * 16 * 16]).max_dim(1)]
    });
    suite.record("a view read twice: copies and reductions (four launches)", if kept == 4 { Ok(()) } else { Err(format!("{kept} launches")) });
    suite.finish();
}
