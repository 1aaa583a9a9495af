use burn_tensor::{Tensor, Int};
use ex_cubecl::ExWgpu;
fn main() {
    let d = Default::default();
    let x = Tensor::<ExWgpu, 2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &d);
    println!("{}", (x.clone() + x.clone().exp()).sum());
    println!("{}", x.clone().matmul(x.clone().transpose()));
    println!("{}", x.clone().sort_descending(1));
    println!("{}", x.clone().argmax(1));
    let i = Tensor::<ExWgpu, 1, Int>::arange(0..10, &d);
    println!("{}", i.clone().cumsum(0));
    println!("{}", x.clone().greater_elem(2.5));
    println!("{}", x.clone().slice([0..2, 0..3]).flip([1]));
    println!("{}", x.sum_dim(0));
}
