//! Linear regression trained with Burn's autodiff on `Autodiff<ExWgpu>`: every forward and
//! backward op runs on ExCubecl's kernels. Prints the loss per epoch and the learned weights
//! next to the true ones.
use burn_autodiff::Autodiff;
use burn_tensor::backend::Backend;
use burn_tensor::{Distribution, Tensor};
use ex_cubecl::ExWgpu;

type B = Autodiff<ExWgpu>;

fn main() {
    let device = Default::default();
    B::seed(&device, 42);
    let (n, features) = (512, 4);
    let true_w = Tensor::<B, 2>::from_floats([[1.5], [-2.0], [0.5], [3.0]], &device);
    let true_b = 0.7;
    let x = Tensor::<B, 2>::random([n, features], Distribution::Normal(0.0, 1.0), &device);
    let noise = Tensor::<B, 2>::random([n, 1], Distribution::Normal(0.0, 0.01), &device);
    let y = x.clone().matmul(true_w.clone()).add_scalar(true_b) + noise;

    let mut w = Tensor::<B, 2>::zeros([features, 1], &device).require_grad();
    let mut b = Tensor::<B, 1>::zeros([1], &device).require_grad();
    let lr = 0.1;
    let start = std::time::Instant::now();
    for epoch in 1..=60 {
        let pred = x.clone().matmul(w.clone()) + b.clone().unsqueeze::<2>();
        let loss = (pred - y.clone()).powi_scalar(2).mean();
        let grads = loss.backward();
        let gw = w.grad(&grads).expect("gradient of w");
        let gb = b.grad(&grads).expect("gradient of b");
        w = Tensor::from_inner(w.inner() - gw.mul_scalar(lr)).require_grad();
        b = Tensor::from_inner(b.inner() - gb.mul_scalar(lr)).require_grad();
        if epoch % 10 == 0 || epoch == 1 {
            let loss: f32 = loss.into_scalar();
            if !loss.is_finite() {
                eprintln!("loss is {loss} at epoch {epoch}; stopping");
                std::process::exit(1);
            }
            println!("epoch {epoch:3}  loss {loss:.6}");
        }
    }
    println!("learned w {:?}", w.into_data().to_vec::<f32>().unwrap());
    println!("true    w {:?}", true_w.into_data().to_vec::<f32>().unwrap());
    println!("learned b {:?} (true {true_b})", b.into_data().to_vec::<f32>().unwrap());
    println!("{} on {}: {:.2?}", <B as Backend>::name(&device), "wgpu", start.elapsed());
}
