//! Two reductions in a row, the second of the first's result along another axis: autodiff's
//! gradient of a broadcast, `[1, C, H, W]` summed over `H` then `W`, in one launch. Every
//! result must be the unfused backend's (two launches) bit for bit.
use super::*;

/// Pairs of reductions of `x` (`[N, C, H, W]`): the autodiff pattern (over `N` after a
/// product, then `H`, then `W`), a mean then a max, a later axis before an earlier one, and
/// lines too long for one unit each (run as the two launches).
fn pairs<B: Backend>(x: &TensorData, dtype: DType) -> Vec<TensorData> {
    let d = dev::<B>();
    let x = Tensor::<B, 4>::from_data(x.clone(), (&d, held::<B>(dtype)));
    let grad = (x.clone() * 0.5).sum_dim(0).sum_dim(2).sum_dim(3);
    let mean_max = x.clone().mean_dim(2).max_dim(3);
    let backwards = x.clone().sum_dim(3).mean_dim(1);
    let [n, c, h, w] = x.dims();
    let long = x.reshape([1, n * c, h * w, 1]).sum_dim(2).sum_dim(1);
    vec![grad.into_data(), mean_max.into_data(), backwards.into_data(), long.into_data()]
}

#[test]
fn reduction_pairs_as_unfused() {
    let _turn = serial();
    let mut suite = Suite::new("fusion reduction pairs");
    let names = ["sum over N, H, W", "mean over H, max over W", "sum over W, mean over C", "lines of H * W"];
    for dtype in float_dtypes() {
        let mut rng = Rng::new(0x9A12 + dtype.size() as u64);
        for shape in [[2, 3, 5, 7], [1, 4, 24, 33]] {
            let x = float_data(&mut rng, &shape, DType::F32, -2.0, 2.0);
            let fused = catch(|| pairs::<Fused>(&x, dtype));
            let (unfused, reference) = (pairs::<Ex>(&x, dtype), pairs::<Ref>(&x, dtype));
            check_outputs(&mut suite, &format!("{dtype:?} {shape:?}"), dtype, Tol::of(1e-4), |j| names[j].to_string(), fused, unfused, reference);
        }
    }
    suite.finish();
}

#[test]
fn a_reduction_pair_is_one_launch() {
    let _turn = serial();
    let mut suite = Suite::new("fusion reduction pair launches");
    let device = dev::<Fused>();
    let mut rng = Rng::new(0x9A13);
    let x = Tensor::<Fused, 4>::from_data(float_data(&mut rng, &[1, 4, 12, 9], DType::F32, -1.0, 1.0), &device);
    let pair = launches(|| vec![x.clone().sum_dim(2).sum_dim(3)]);
    suite.record("[1, 4, 12, 9] summed over H, then W: one launch", if pair == 1 { Ok(()) } else { Err(format!("{pair} launches")) });
    // The first result read again later: both reductions run as they are.
    let kept = launches(|| {
        let h = x.clone().sum_dim(2);
        vec![h.clone().sum_dim(3), h]
    });
    suite.record("the first result kept: two launches", if kept == 2 { Ok(()) } else { Err(format!("{kept} launches")) });
    // Lines of 600 (a cube per line alone): two launches.
    let y = Tensor::<Fused, 4>::from_data(float_data(&mut rng, &[1, 2, 600, 3], DType::F32, -1.0, 1.0), &device);
    let long = launches(|| vec![y.clone().sum_dim(2).sum_dim(3)]);
    suite.record("lines of 600: two launches", if long == 2 { Ok(()) } else { Err(format!("{long} launches")) });
    suite.finish();
}
