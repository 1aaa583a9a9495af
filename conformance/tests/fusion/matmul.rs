//! The matrix-product fuser: products with elementwise work on their result (bias,
//! activation, masks), `matmul` and `linear`, against the unfused backend and burn-ndarray, and
//! a layer in one launch.
use super::*;

/// A product and elementwise work on it: 0, `relu(x @ w + b)`; 1, `tanh(x @ w * 0.5 + c)`
/// with the product read out too; 2, `linear(x, w, b)`, then `y / (exp(-y) + 1)`;
/// 3, `linear(x, w)` without bias, then `exp` and a mask of it. `x` is `[batch, m, k]` (held
/// `[batch, k, m]` and transposed where `transposed`), `w` `[k, n]` (held `[n, k]` and
/// transposed), `b` `[n]`, `c` `[batch, 1, n]`.
fn matmul_case<B: Backend>(data: &[TensorData; 4], dtype: DType, case: usize, transposed: bool) -> Vec<TensorData> {
    let d = dev::<B>();
    let held = (&d, held::<B>(dtype));
    let (x, w) = (Tensor::<B, 3>::from_data(data[0].clone(), held), Tensor::<B, 2>::from_data(data[1].clone(), held));
    let (b, c) = (Tensor::<B, 1>::from_data(data[2].clone(), held), Tensor::<B, 3>::from_data(data[3].clone(), held));
    let (x, w) = match transposed {
        true => (x.swap_dims(1, 2), w.transpose()),
        false => (x, w),
    };
    // `b`'s view is taken between the product and the addition (case 0), as `linear` does.
    let w3 = w.clone().unsqueeze::<3>();
    let out = match case {
        0 => {
            let p = x.matmul(w3);
            vec![activation::relu(p + b.unsqueeze::<3>())]
        }
        1 => {
            let p = x.matmul(w3);
            vec![(p.clone() * 0.5 + c).tanh(), p]
        }
        2 => {
            let y = burn_tensor::module::linear(x, w, Some(b));
            vec![y.clone() / ((-y).exp() + 1.0)]
        }
        _ => {
            let y = burn_tensor::module::linear(x, w, None);
            vec![y.clone().exp(), y.clone().mask_fill(y.lower_elem(0.0), 0.25)]
        }
    };
    out.into_iter().map(Tensor::into_data).collect()
}

#[test]
fn matmul_epilogues_match_unfused_bits_and_ndarray() {
    let _turn = serial();
    let mut suite = Suite::new("fusion matmul epilogues");
    for dtype in float_dtypes() {
        let mut rng = Rng::new(0x3A7 + dtype.size() as u64);
        // Products of at least 16 rows and columns (tensor-core kernels where the device has
        // them), and in f32 small products and tiles of the large tiling (over 64 rows and
        // columns) too.
        let shapes = [[2, 17, 12, 20], [2, 3, 5, 4], [1, 7, 1, 9], [1, 70, 9, 66]];
        let shapes = if dtype == DType::F32 { &shapes[..] } else { &shapes[..1] };
        for (k, &[batch, m, kk, n]) in shapes.iter().enumerate() {
            for case in 0..4 {
                let transposed = (k + case) % 2 == 1;
                let (x_shape, w_shape) = match transposed {
                    true => ([batch, kk, m], [n, kk]),
                    false => ([batch, m, kk], [kk, n]),
                };
                let data = [
                    float_data(&mut rng, &x_shape, DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &w_shape, DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &[n], DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &[batch, 1, n], DType::F32, -1.0, 1.0),
                ];
                let label = format!("{dtype:?} [{batch}, {m}, {kk}] @ [{kk}, {n}] case {case} transposed {transposed}");
                let fused = catch(|| matmul_case::<Fused>(&data, dtype, case, transposed));
                let (unfused, reference) = (matmul_case::<Ex>(&data, dtype, case, transposed), matmul_case::<Ref>(&data, dtype, case, transposed));
                check_outputs(&mut suite, &label, dtype, Tol::of(1e-4), |j| format!("output {j}"), fused, unfused, reference);
            }
        }
    }
    suite.finish();
}

#[test]
fn a_layer_is_one_launch() {
    let _turn = serial();
    let mut suite = Suite::new("fusion matmul launches");
    let mut rng = Rng::new(31);
    let x = float_data(&mut rng, &[5, 12], DType::F32, -1.0, 1.0);
    let w = float_data(&mut rng, &[12, 8], DType::F32, -1.0, 1.0);
    let b = float_data(&mut rng, &[8], DType::F32, -1.0, 1.0);
    fn layer<B: Backend>(x: &TensorData, w: &TensorData, b: &TensorData, linear: bool) -> Tensor<B, 2> {
        let d = dev::<B>();
        let (x, w, b) = (Tensor::<B, 2>::from_data(x.clone(), &d), Tensor::<B, 2>::from_data(w.clone(), &d), Tensor::<B, 1>::from_data(b.clone(), &d));
        match linear {
            true => activation::relu(burn_tensor::module::linear(x, w, Some(b))),
            false => activation::relu(x.matmul(w) + b.unsqueeze::<2>()),
        }
    }
    let d = dev::<Fused>();
    for linear in [false, true] {
        let name = if linear { "relu(linear(x, w, b))" } else { "relu(x @ w + b)" };
        Fused::sync(&d).unwrap();
        let before = launch_count();
        let out = layer::<Fused>(&x, &w, &b, linear).into_data();
        Fused::sync(&d).unwrap();
        let launches = launch_count() - before;
        // The tiled kernel runs f32 products on lavapipe (and exact f32 products everywhere).
        suite.record(format!("{name}: 1 launch"), if launches == 1 { Ok(()) } else { Err(format!("{launches} launches")) });
        suite.check(name, Tol::of(1e-5), (Ok(out), layer::<Ref>(&x, &w, &b, linear).into_data()));
    }
    suite.finish();
}
