//! The fused optimizers of `ex_cubecl::optim` against burn-optim's on burn-ndarray: several
//! steps of each configuration (weight decay, momentum, Nesterov, AMSGrad, cautious decay)
//! on contiguous and transposed parameters, every float dtype; parameters shared with another
//! tensor are left untouched; and a module trained through burn-optim's adaptor.
use burn_autodiff::Autodiff;
use burn_backend::{Backend, DType, TensorData, TensorPrimitive};
use burn_nn::{Linear, LinearConfig, LinearRecord};
use burn_optim::decay::WeightDecayConfig;
use burn_optim::momentum::MomentumConfig;
use burn_optim::{GradientsParams, Optimizer, SimpleOptimizer};
use burn_tensor::Tensor;
use burn_core::module::{Module, Param};
use ex_cubecl::optim;
use ex_cubecl_conformance::*;

const STEPS: usize = 4;
const LR: f64 = 0.05;

/// A parameter and its gradients, uploaded as `[r, c]` or as the transpose of `[c, r]` data.
struct Case {
    shape: [usize; 2],
    transposed: bool,
    dtype: DType,
    param: TensorData,
    grads: Vec<TensorData>,
}

impl Case {
    fn new(rng: &mut Rng, shape: [usize; 2], transposed: bool, dtype: DType) -> Self {
        let stored = if transposed { [shape[1], shape[0]] } else { shape };
        let param = float_data(rng, &stored, dtype, -1.0, 1.0);
        let grads = (0..STEPS).map(|_| float_data(rng, &stored, dtype, -2.0, 2.0)).collect();
        Self { shape, transposed, dtype, param, grads }
    }

    fn tensor<B: Backend>(&self, data: &TensorData) -> Tensor<B, 2> {
        let t = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(f::<B>(data)));
        if self.transposed { t.transpose() } else { t }
    }

    /// The parameter after each step of `optim`.
    fn run<B: Backend, O: SimpleOptimizer<B>>(&self, optim: &O) -> Vec<TensorData> {
        let (mut param, mut state) = (self.tensor::<B>(&self.param), None);
        let mut out = Vec::new();
        for grad in &self.grads {
            let (p, s) = optim.step(LR, param, self.tensor::<B>(grad), state);
            out.push(p.to_data());
            (param, state) = (p, s);
        }
        out
    }

    fn name(&self) -> String {
        format!("{:?} {:?}{}", self.shape, self.dtype, if self.transposed { " transposed" } else { "" })
    }
}

fn cases() -> Vec<Case> {
    let mut rng = Rng::new(41);
    let mut cases = Vec::new();
    for dtype in float_dtypes() {
        // [8, 16] is read in vectors; [7, 13] is not.
        for (shape, transposed) in [([8, 16], false), ([7, 13], false), ([8, 16], true)] {
            cases.push(Case::new(&mut rng, shape, transposed, dtype));
        }
    }
    cases
}

fn compare_steps(suite: &mut Suite, name: &str, case: &Case, ours: Result<Vec<TensorData>, String>, reference: Vec<TensorData>) {
    let tol = Tol::of(2e-5).for_dtype(case.dtype);
    for (step, expected) in reference.into_iter().enumerate() {
        let ours = ours.as_ref().map(|o| o[step].clone()).map_err(Clone::clone);
        suite.check(format!("{name} {} step {}", case.name(), step + 1), tol, (ours, expected));
    }
}

macro_rules! check_optimizer {
    ($suite:expr, $name:expr, $ours:expr, $reference:expr) => {
        for case in cases() {
            let ours = catch(|| case.run::<Ex, _>(&$ours));
            let reference = case.run::<Ref, _>(&$reference);
            compare_steps(&mut $suite, $name, &case, ours, reference);
        }
    };
}

#[test]
fn adam_matches_burn_optim() {
    let mut suite = Suite::new("optim adam");
    check_optimizer!(suite, "adam", optim::AdamConfig::new().build(), burn_optim::AdamConfig::new().build());
    let decay = Some(WeightDecayConfig::new(0.1));
    check_optimizer!(
        suite,
        "adam l2 amsgrad",
        optim::AdamConfig::new().with_weight_decay(decay.clone()).with_amsgrad(true).with_beta_1(0.8).build(),
        burn_optim::AdamConfig::new().with_weight_decay(decay.clone()).with_amsgrad(true).with_beta_1(0.8).build()
    );
    check_optimizer!(suite, "adamw", optim::AdamWConfig::new().build(), burn_optim::AdamWConfig::new().build());
    check_optimizer!(
        suite,
        "adamw cautious amsgrad",
        optim::AdamWConfig::new().with_weight_decay(0.5).with_cautious_weight_decay(true).with_amsgrad(true).build(),
        burn_optim::AdamWConfig::new().with_weight_decay(0.5).with_cautious_weight_decay(true).with_amsgrad(true).build()
    );
    suite.finish();
}

#[test]
fn sgd_matches_burn_optim() {
    let mut suite = Suite::new("optim sgd");
    check_optimizer!(suite, "sgd", optim::SgdConfig::new().build(), burn_optim::SgdConfig::new().build::<Ref>());
    let decay = Some(WeightDecayConfig::new(0.1));
    let momentum = Some(MomentumConfig::new().with_dampening(0.2));
    check_optimizer!(
        suite,
        "sgd l2 momentum",
        optim::SgdConfig::new().with_weight_decay(decay.clone()).with_momentum(momentum.clone()).build(),
        burn_optim::SgdConfig::new().with_weight_decay(decay.clone()).with_momentum(momentum.clone()).build::<Ref>()
    );
    let nesterov = Some(MomentumConfig::new().with_nesterov(true).with_dampening(0.0));
    check_optimizer!(
        suite,
        "sgd nesterov",
        optim::SgdConfig::new().with_momentum(nesterov.clone()).build(),
        burn_optim::SgdConfig::new().with_momentum(nesterov.clone()).build::<Ref>()
    );
    suite.finish();
}

/// A parameter whose buffer another tensor shares is copied, not updated in place; state
/// whose shape is not the parameter's is refused with a message naming the op and shapes.
#[test]
fn shared_parameters_stay_and_bad_state_is_refused() {
    let mut suite = Suite::new("optim buffers");
    let mut rng = Rng::new(5);
    let case = Case::new(&mut rng, [8, 16], false, DType::F32);
    let adam = optim::AdamConfig::new().build();
    let result = catch(|| {
        let param = case.tensor::<Ex>(&case.param);
        let kept = param.clone();
        let (state, grad) = (None, case.tensor::<Ex>(&case.grads[0]));
        let (updated, _) = SimpleOptimizer::<Ex>::step(&adam, LR, param, grad.clone(), state);
        (kept.to_data(), grad.to_data(), updated.to_data())
    });
    let (kept, grad, updated) = match result {
        Ok((k, g, u)) => (Ok(k), Ok(g), Ok(u)),
        Err(e) => (Err(e.clone()), Err(e.clone()), Err(e)),
    };
    suite.check("adam keeps a shared parameter", Tol::EXACT, (kept, case.param.clone()));
    suite.check("adam keeps the gradient", Tol::EXACT, (grad, case.grads[0].clone()));
    let reference = case.run::<Ref, _>(&burn_optim::AdamConfig::new().build()).remove(0);
    suite.check("adam updates a copy", Tol::of(2e-5), (updated, reference));

    let bad = catch(|| {
        let sgd = optim::SgdConfig::new().with_momentum(Some(MomentumConfig::new())).build();
        let param = Tensor::<Ex, 2>::zeros([4, 4], &dev::<Ex>());
        let velocity = Tensor::<Ex, 2>::zeros([4, 5], &dev::<Ex>());
        let state = optim::SgdState { velocity: Some(velocity) };
        SimpleOptimizer::<Ex>::step(&sgd, LR, param.clone(), param, Some(state)).0.to_data()
    });
    suite.check_panics("sgd refuses a velocity of another shape", "sgd step", bad.clone());
    suite.check_panics("the message names the shapes", "[4, 5]", bad);
    suite.finish();
}

/// A parameter uploaded inside a pipeline's closure is a constant of the pipeline: the fused
/// update must not write into it, or each replay would start from the previous one's result.
#[test]
fn pipeline_replays_start_from_the_same_parameter() {
    use ex_cubecl::{Pipeline, from_cube, to_cube};
    let mut suite = Suite::new("optim pipeline");
    let mut rng = Rng::new(13);
    let case = Case::new(&mut rng, [8, 16], false, DType::F32);
    let expected = case.run::<Ref, _>(&burn_optim::AdamConfig::new().build()).remove(0);
    let replays = catch(|| {
        let grad = case.tensor::<Ex>(&case.grads[0]);
        let param = case.param.clone();
        let pipeline = Pipeline::capture(&dev::<Ex>(), &[to_cube(grad.clone())], move |inputs| {
            let grad = from_cube::<_, 2, burn_tensor::Float>(inputs[0].clone());
            let param = Tensor::<Ex, 2>::from_data(param.clone(), &dev::<Ex>());
            let adam = optim::AdamConfig::new().build();
            vec![to_cube(SimpleOptimizer::<Ex>::step(&adam, LR, param, grad, None).0)]
        })
        .expect("capture");
        let run = || from_cube::<_, 2, burn_tensor::Float>(pipeline.run(&[to_cube(grad.clone())]).expect("replay").remove(0)).to_data();
        [run(), run()]
    });
    for replay in 0..2 {
        let ours = replays.as_ref().map(|r| r[replay].clone()).map_err(Clone::clone);
        suite.check(format!("adam in a pipeline, replay {}", replay + 1), Tol::of(2e-5), (ours, expected.clone()));
    }
    suite.finish();
}

/// A linear layer trained through burn-optim's `OptimizerAdaptor` with our Adam matches the
/// same layer trained with burn-optim's Adam on burn-ndarray.
#[test]
fn linear_layer_trains_through_the_adaptor() {
    let mut suite = Suite::new("optim adaptor");
    let mut rng = Rng::new(9);
    let weight = float_data(&mut rng, &[6, 3], DType::F32, -0.5, 0.5);
    let bias = float_data(&mut rng, &[3], DType::F32, -0.5, 0.5);
    let x = float_data(&mut rng, &[5, 6], DType::F32, -1.0, 1.0);
    let y = float_data(&mut rng, &[5, 3], DType::F32, -1.0, 1.0);

    fn train<B: burn_tensor::backend::AutodiffBackend, O: Optimizer<Linear<B>, B>>(
        mut optim: O,
        data: [&TensorData; 4],
    ) -> TensorData {
        let device = dev::<B>();
        let record = LinearRecord {
            weight: Param::from_tensor(Tensor::from_data(data[0].clone(), &device)),
            bias: Some(Param::from_tensor(Tensor::from_data(data[1].clone(), &device))),
        };
        let mut linear = LinearConfig::new(6, 3).init::<B>(&device).load_record(record);
        for _ in 0..3 {
            let x = Tensor::<B, 2>::from_data(data[2].clone(), &device);
            let y = Tensor::<B, 2>::from_data(data[3].clone(), &device);
            let loss = (linear.forward(x) - y).powi_scalar(2).mean();
            let grads = GradientsParams::from_grads(loss.backward(), &linear);
            linear = optim.step(0.01, linear, grads);
        }
        linear.weight.val().to_data()
    }
    let data = [&weight, &bias, &x, &y];
    let ours = catch(|| train::<Autodiff<Ex>, _>(optim::AdamConfig::new().init(), data));
    let reference = train::<Autodiff<Ref>, _>(burn_optim::AdamConfig::new().init(), data);
    suite.check("linear 6x3, 3 Adam steps", Tol::of(2e-5), (ours, reference));
    suite.finish();
}

/// Adam with the step count in a device tensor (read by the kernel, which computes the bias
/// corrections) against the host step count, steps 1 to 4 in eager mode, for each
/// configuration and parameter dtype, with the count as f32 and as i32.
#[test]
fn adam_device_step_count_matches_host() {
    use burn_tensor::Int;
    use ex_cubecl::launch::optim::{AdamDecay, AdamRule, AdamTime, adam_step};
    let mut suite = Suite::new("optim adam device step count");
    let configs = [
        ("adam", AdamDecay::None, false),
        ("adam l2 amsgrad", AdamDecay::L2(0.1), true),
        ("adamw", AdamDecay::Decoupled { rate: 0.01, cautious: false }, false),
        ("adamw cautious amsgrad", AdamDecay::Decoupled { rate: 0.5, cautious: true }, true),
    ];
    let count = |step: usize, dtype: DType| match dtype {
        DType::I32 => Tensor::<Ex, 1, Int>::from_data(TensorData::new(vec![step as i32], [1]), &dev::<Ex>()).into_primitive(),
        _ => Tensor::<Ex, 1>::from_data(TensorData::new(vec![step as f32], [1]), &dev::<Ex>()).into_primitive().tensor(),
    };
    for case in cases() {
        for (name, decay, amsgrad) in configs {
            for count_dtype in [DType::F32, DType::I32] {
                let run = |device: bool| {
                    catch(|| {
                        let (mut param, mut state) = (case.tensor::<Ex>(&case.param).into_primitive().tensor(), None);
                        let mut out = Vec::new();
                        for (k, grad) in case.grads.iter().enumerate() {
                            let time = if device { AdamTime::Device(count(k + 1, count_dtype)) } else { AdamTime::Host(k + 1) };
                            let rule = AdamRule { lr: LR, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-5, decay, time };
                            let grad = case.tensor::<Ex>(grad).into_primitive().tensor();
                            let (p, s) = adam_step(param, grad, state, &rule, amsgrad);
                            out.push(Tensor::<Ex, 2>::from_primitive(TensorPrimitive::Float(p.clone())).to_data());
                            (param, state) = (p, Some(s));
                        }
                        out
                    })
                };
                let host = run(false).unwrap_or_else(|e| panic!("{name} {} host time: {e}", case.name()));
                compare_steps(&mut suite, &format!("{name} (count {count_dtype:?})"), &case, run(true), host);
            }
        }
    }
    suite.finish();
}
