//! Fused elementwise launches (`ExCubeclBackend::float_fused`): random programs over inputs
//! of every layout (contiguous, transposed, stepped, reversed, broadcast, scalar), each
//! compared bit for bit with the same ops run one launch at a time, and a fixed chain
//! compared with burn-ndarray.
use burn_backend::ops::*;
use burn_backend::{DType, Shape, TensorData, TensorMetadata};
use ex_cubecl::launch::elementwise::{Rhs, binary_float_op, unary_float_op};
use ex_cubecl::launch::fused::{BinaryFloatOp, Chain, CompareOp, FusedOp, PredicateOp, UnaryFloatOp, fused_chain};
use ex_cubecl_conformance::*;

type T = ex_cubecl::CubeTensor<Rt>;

const UNARY: [UnaryFloatOp; 9] = [
    UnaryFloatOp::Exp,
    UnaryFloatOp::Log,
    UnaryFloatOp::Sqrt,
    UnaryFloatOp::Neg,
    UnaryFloatOp::Abs,
    UnaryFloatOp::Tanh,
    UnaryFloatOp::Sigmoid,
    UnaryFloatOp::Erf,
    UnaryFloatOp::Recip,
];
const COMPARE: [CompareOp; 6] =
    [CompareOp::Equal, CompareOp::NotEqual, CompareOp::Greater, CompareOp::GreaterEqual, CompareOp::Lower, CompareOp::LowerEqual];
const BINARY: [BinaryFloatOp; 6] =
    [BinaryFloatOp::Add, BinaryFloatOp::Sub, BinaryFloatOp::Mul, BinaryFloatOp::Div, BinaryFloatOp::Powf, BinaryFloatOp::Max];

/// An input of `shape` laid out as `layout` says (0 contiguous, 1 transposed, 2 stepped,
/// 3 reversed, 4 broadcast from its first row).
fn input(rng: &mut Rng, shape: &[usize], dtype: DType, layout: u64) -> T {
    let rank = shape.len();
    let data = |s: &[usize], rng: &mut Rng| f::<Ex>(&float_data(rng, s, dtype, -2.0, 2.0));
    match layout {
        1 if rank >= 2 => {
            let mut s = shape.to_vec();
            s.swap(0, rank - 1);
            Ex::float_swap_dims(data(&s, rng), 0, rank - 1)
        }
        2 if rank >= 1 => {
            let mut s = shape.to_vec();
            s[rank - 1] *= 2;
            float_view::<Ex>(data(&s, rng), View::Stepped)
        }
        3 if rank >= 1 => float_view::<Ex>(data(shape, rng), View::Reversed),
        4 if rank >= 1 => float_view::<Ex>(data(shape, rng), View::Expanded),
        _ => data(shape, rng),
    }
}

/// A shape that broadcasts to `shape`: itself, some dimensions 1, a suffix, or a scalar.
fn broadcast_from(rng: &mut Rng, shape: &[usize]) -> Vec<usize> {
    match rng.int(0, 4) {
        0 => shape.to_vec(),
        1 => shape.iter().map(|&n| if rng.int(0, 2) == 0 { 1 } else { n }).collect(),
        2 => shape[rng.int(0, shape.len() as i64 + 1) as usize..].to_vec(),
        _ => Vec::new(),
    }
}

/// Nx's max or min (NaN where either is NaN) in separate launches.
fn nan_pick(a: T, b: T, larger: bool) -> T {
    let store = burn_backend::BoolStore::Native;
    let pick = if larger { Ex::float_greater(a.clone(), b.clone(), store) } else { Ex::float_lower(a.clone(), b.clone(), store) };
    let nan = Ex::bool_or(Ex::float_is_nan(a.clone(), store), Ex::float_is_nan(b.clone(), store));
    let sum = Ex::float_add(a.clone(), b.clone());
    Ex::float_mask_where(Ex::float_mask_where(b, pick, a), nan, sum)
}

/// `a op b` by the backend's comparison.
fn compare(op: CompareOp, a: T, b: T) -> T {
    let store = burn_backend::BoolStore::Native;
    match op {
        CompareOp::Equal => Ex::float_equal(a, b, store),
        CompareOp::NotEqual => Ex::float_not_equal(a, b, store),
        CompareOp::Greater => Ex::float_greater(a, b, store),
        CompareOp::GreaterEqual => Ex::float_greater_equal(a, b, store),
        CompareOp::Lower => Ex::float_lower(a, b, store),
        CompareOp::LowerEqual => Ex::float_lower_equal(a, b, store),
    }
}

/// `t` (bool) as 1.0 / 0.0 in `dtype`.
fn as_float(t: T, dtype: DType) -> T {
    Ex::bool_into_float(t, dtype.into())
}

/// The program's registers computed one launch per op (`chain`'s scalars and parameters).
fn unfused(inputs: &[T], ops: &[FusedOp], chain: &Chain) -> Vec<T> {
    let mut regs = inputs.to_vec();
    let store = burn_backend::BoolStore::Native;
    let full = |v: f64, dtype: DType| Ex::float_full(Shape::from(Vec::<usize>::new()), burn_backend::Scalar::Float(v), &dev::<Ex>(), dtype.into());
    for op in ops {
        let r = match *op {
            FusedOp::Unary(u, x) => unary_float_op(regs[x].clone(), u, 0.0, 0.0),
            FusedOp::UnaryWith(u, x, a, b) => unary_float_op(regs[x].clone(), u, chain.params[a], chain.params[b]),
            FusedOp::Binary(b, x, y) => binary_float_op(regs[x].clone(), Rhs::Tensor(regs[y].clone()), b),
            FusedOp::NanMax(x, y) => nan_pick(regs[x].clone(), regs[y].clone(), true),
            FusedOp::NanMin(x, y) => nan_pick(regs[x].clone(), regs[y].clone(), false),
            FusedOp::Compare(c, x, y) => {
                let dtype = regs[x].dtype;
                as_float(compare(c, regs[x].clone(), regs[y].clone()), dtype)
            }
            FusedOp::Predicate(PredicateOp::IsNan, x) => as_float(Ex::float_is_nan(regs[x].clone(), store), regs[x].dtype),
            FusedOp::Predicate(PredicateOp::IsInf, x) => as_float(Ex::float_is_inf(regs[x].clone(), store), regs[x].dtype),
            FusedOp::Not(x) => as_float(Ex::float_equal_elem(regs[x].clone(), burn_backend::Scalar::Float(0.0), store), regs[x].dtype),
            FusedOp::Const(bits) => full(f32::from_bits(bits) as f64, DType::F32),
            FusedOp::Scalar(k) => full(chain.scalars[k], regs[0].dtype),
            FusedOp::Select(p, x, y) => {
                let nonzero = Ex::float_not_equal_elem(regs[p].clone(), burn_backend::Scalar::Float(0.0), store);
                Ex::float_mask_where(regs[y].clone(), nonzero, regs[x].clone())
            }
        };
        regs.push(r);
    }
    regs
}

/// The launch scalars (exact in every float dtype) and parameters the random programs read.
fn chain_values() -> Chain {
    Chain { scalars: vec![-1.5, 0.25, 3.0, 0.0009765625], params: vec![0.5, 2.0, -1.0, 3.0, 0.1], ..Chain::default() }
}

const WITH_PARAMS: [UnaryFloatOp; 5] =
    [UnaryFloatOp::Clamp, UnaryFloatOp::PowScalar, UnaryFloatOp::PowInt, UnaryFloatOp::LeakyRelu, UnaryFloatOp::HardSigmoid];

fn random_op(rng: &mut Rng, registers: usize, dtype: DType) -> FusedOp {
    let mut reg = || rng.int(0, registers as i64) as usize;
    let (x, y, z) = (reg(), reg(), reg());
    let values = chain_values();
    let param = |rng: &mut Rng| rng.int(0, values.params.len() as i64) as usize;
    match rng.int(0, 15) {
        10 if dtype == DType::F32 => FusedOp::Const([0.5f32, -2.0, 1.0e-8, 3.25][rng.int(0, 4) as usize].to_bits()),
        0 | 1 => FusedOp::Unary(UNARY[rng.int(0, UNARY.len() as i64) as usize], x),
        2 => FusedOp::NanMax(x, y),
        3 => FusedOp::NanMin(x, y),
        4 => FusedOp::Compare(COMPARE[rng.int(0, COMPARE.len() as i64) as usize], x, y),
        5 => FusedOp::Select(x, y, z),
        11 => FusedOp::Scalar(rng.int(0, values.scalars.len() as i64) as usize),
        12 => {
            let (a, b) = (param(rng), param(rng));
            // PowInt takes an integer exponent (params 1 and 3 hold 2.0 and 3.0).
            let (u, a) = match WITH_PARAMS[rng.int(0, WITH_PARAMS.len() as i64) as usize] {
                UnaryFloatOp::PowInt => (UnaryFloatOp::PowInt, [1, 3][rng.int(0, 2) as usize]),
                u => (u, a),
            };
            FusedOp::UnaryWith(u, x, a, b)
        }
        13 => FusedOp::Predicate([PredicateOp::IsNan, PredicateOp::IsInf][rng.int(0, 2) as usize], x),
        14 => FusedOp::Not(x),
        _ => FusedOp::Binary(BINARY[rng.int(0, BINARY.len() as i64) as usize], x, y),
    }
}

#[test]
fn fused_programs_match_their_ops_bit_for_bit() {
    let mut suite = Suite::new("fused");
    for dtype in float_dtypes() {
        for seed in 0..24u64 {
            let mut rng = Rng::new(900 + seed);
            let rank = rng.int(0, 5) as usize;
            let shape = rng.shape(rank, 6);
            let count = rng.int(1, 5) as usize;
            let inputs: Vec<T> = (0..count)
                .map(|k| {
                    // The first input has the full shape, so that every program covers it.
                    let s = if k == 0 { shape.clone() } else { broadcast_from(&mut rng, &shape) };
                    let layout = rng.int(0, 5) as u64;
                    input(&mut rng, &s, dtype, layout)
                })
                .collect();
            let nops = rng.int(1, 14) as usize;
            let ops: Vec<FusedOp> = (0..nops).map(|i| random_op(&mut rng, count + i, dtype)).collect();
            let registers = count + nops;
            let outputs: Vec<usize> = (0..rng.int(1, 4)).map(|_| rng.int(count as i64, registers as i64) as usize).collect();
            let case = format!("{dtype:?} shape {shape:?} inputs {:?} ops {ops:?} outputs {outputs:?} (seed {})", inputs.iter().map(|t| t.shape()).collect::<Vec<_>>(), 900 + seed);
            let chain = Chain { ops: ops.clone(), outputs: outputs.clone(), ..chain_values() };
            let fused = catch(|| fused_chain(inputs.clone(), Vec::new(), Shape::from(shape.clone()), dtype, chain.clone()).0);
            let regs = unfused(&inputs, &ops, &chain);
            for (j, &r) in outputs.iter().enumerate() {
                let expected = rf::<Ex>(Ex::float_expand(regs[r].clone(), Shape::from(shape.clone())));
                let ours = fused.as_ref().map(|outs| rf::<Ex>(outs[j].clone())).map_err(Clone::clone);
                suite.check(format!("{case} output {j}"), Tol::EXACT, (ours, expected));
            }
        }
    }
    suite.finish();
}

/// An input for the vectorised kernel's cases, broadcast to `shape` as `kind` says: 0 full,
/// 1 a suffix (rows broadcast: strided, innermost contiguous), 2 the last dimension 1
/// (broadcast along it), 3 a scalar, 4 full behind an offset of one row (aligned when the
/// row is), 5 transposed (no vector read: the scalar kernel).
fn vector_input(rng: &mut Rng, shape: &[usize], dtype: DType, kind: i64) -> T {
    let rank = shape.len();
    let data = |s: &[usize], rng: &mut Rng| f::<Ex>(&float_data(rng, s, dtype, -2.0, 2.0));
    match kind {
        1 => data(&shape[rank / 2..], rng),
        2 => data(&[&shape[..rank - 1], &[1][..]].concat(), rng),
        3 => data(&[], rng),
        4 => {
            let mut s = shape.to_vec();
            s[0] += 1;
            let mut slices = vec![burn_backend::Slice::new(0, None, 1); rank];
            slices[0] = burn_backend::Slice::new(1, None, 1);
            Ex::float_slice(data(&s, rng), &slices)
        }
        5 => input(rng, shape, dtype, 1),
        _ => data(shape, rng),
    }
}

#[test]
fn vectorised_programs_match_their_ops_bit_for_bit() {
    // Shapes whose innermost dimension takes vectors of 2, 4 or 8 (and one that takes none),
    // inputs read as vectors, as one value per vector and as values, bool inputs and outputs:
    // the vectorised kernel's bits against the ops one launch at a time.
    let mut suite = Suite::new("fused, vectorised");
    let shapes: [&[usize]; 6] = [&[16], &[3, 8], &[2, 3, 16], &[4, 2, 8, 8], &[5, 12], &[3, 7]];
    for dtype in float_dtypes() {
        for seed in 0..36u64 {
            let mut rng = Rng::new(1900 + seed);
            let shape = shapes[seed as usize % shapes.len()].to_vec();
            let count = rng.int(1, 4) as usize;
            let kinds: Vec<i64> = (0..count).map(|k| if k == 0 { 0 } else { rng.int(0, 6) }).collect();
            let mut inputs: Vec<T> = kinds.iter().map(|&kind| vector_input(&mut rng, &shape, dtype, kind)).collect();
            let bool_kind = rng.int(0, 5);
            let bools = vec![Ex::float_greater_elem(vector_input(&mut rng, &shape, dtype, bool_kind), burn_backend::Scalar::Float(0.0), burn_backend::BoolStore::Native)];
            let bool_dtype = bools[0].dtype;
            let registers = count + 1;
            let nops = rng.int(1, 10) as usize;
            let ops: Vec<FusedOp> = (0..nops).map(|i| random_op(&mut rng, registers + i, dtype)).collect();
            let pick = |rng: &mut Rng| rng.int(registers as i64, (registers + nops) as i64) as usize;
            let (outputs, bool_outputs): (Vec<usize>, Vec<usize>) = ((0..rng.int(1, 3)).map(|_| pick(&mut rng)).collect(), (0..rng.int(0, 2)).map(|_| pick(&mut rng)).collect());
            let case = format!("{dtype:?} shape {shape:?} input kinds {kinds:?} bool kind {bool_kind} ops {ops:?} outputs {outputs:?} {bool_outputs:?} (seed {})", 1900 + seed);
            let chain = Chain { ops: ops.clone(), outputs: outputs.clone(), bool_outputs: bool_outputs.clone(), bool_dtype: Some(bool_dtype), ..chain_values() };
            let fused = catch(|| fused_chain(inputs.clone(), bools.clone(), Shape::from(shape.clone()), dtype, chain.clone()));
            inputs.push(as_float(bools[0].clone(), dtype));
            let regs = unfused(&inputs, &ops, &chain);
            let full = |r: usize| Ex::float_expand(regs[r].clone(), Shape::from(shape.clone()));
            for (j, &r) in outputs.iter().enumerate() {
                let ours = fused.as_ref().map(|(outs, _)| rf::<Ex>(outs[j].clone())).map_err(Clone::clone);
                suite.check(format!("{case} output {j}"), Tol::EXACT, (ours, rf::<Ex>(full(r))));
            }
            for (j, &r) in bool_outputs.iter().enumerate() {
                let nonzero = as_float(Ex::float_not_equal_elem(full(r), burn_backend::Scalar::Float(0.0), burn_backend::BoolStore::Native), dtype);
                let ours = fused.as_ref().map(|(_, outs)| rf::<Ex>(as_float(outs[j].clone(), dtype))).map_err(Clone::clone);
                suite.check(format!("{case} bool output {j}"), Tol::EXACT, (ours, rf::<Ex>(nonzero)));
            }
        }
    }
    suite.finish();
}

#[test]
fn programs_with_more_buffers_than_a_kernel_binds_give_the_same_bits() {
    // 40 inputs and 3 outputs: one launch on CUDA (1024 bindings), one launch per op on
    // lavapipe (31).
    let mut suite = Suite::new("fused, many inputs");
    let mut rng = Rng::new(4040);
    let shape = vec![3, 5];
    let inputs: Vec<T> = (0..40)
        .map(|k| {
            let s = if k == 0 { shape.clone() } else { broadcast_from(&mut rng, &shape) };
            let layout = rng.int(0, 5) as u64;
            input(&mut rng, &s, DType::F32, layout)
        })
        .collect();
    let mut ops = vec![FusedOp::NanMax(0, 1)];
    for k in 2..40 {
        let op = [BinaryFloatOp::Add, BinaryFloatOp::Mul, BinaryFloatOp::Sub][k % 3];
        ops.push(FusedOp::Binary(op, 40 + k - 2, k));
    }
    ops.push(FusedOp::Unary(UnaryFloatOp::Tanh, 40 + 38));
    ops.push(FusedOp::Compare(CompareOp::Greater, 40 + 39, 3));
    ops.push(FusedOp::Select(40 + 40, 40 + 39, 5));
    let outputs = vec![40, 40 + 39, 40 + 41];
    let fused = catch(|| Ex::float_fused(inputs.clone(), Shape::from(shape.clone()), ops.clone(), outputs.clone()));
    let regs = unfused(&inputs, &ops, &Chain::default());
    for (j, &r) in outputs.iter().enumerate() {
        let expected = rf::<Ex>(Ex::float_expand(regs[r].clone(), Shape::from(shape.clone())));
        let ours = fused.as_ref().map(|outs| rf::<Ex>(outs[j].clone())).map_err(Clone::clone);
        suite.check(format!("40 inputs, output {j}"), Tol::EXACT, (ours, expected));
    }
    suite.finish();
}

#[test]
fn a_fused_chain_matches_ndarray() {
    let mut suite = Suite::new("fused chain");
    let mut rng = Rng::new(77);
    for dtype in float_dtypes() {
        let (a, b, c) = (
            float_data(&mut rng, &[5, 7], dtype, 0.1, 2.0),
            float_data(&mut rng, &[7], dtype, -1.0, 1.0),
            float_data(&mut rng, &[], dtype, 0.5, 1.5),
        );
        // y = tanh(a * b + c) / sqrt(a), z = exp(-y)
        let ops = vec![
            FusedOp::Binary(BinaryFloatOp::Mul, 0, 1),
            FusedOp::Binary(BinaryFloatOp::Add, 3, 2),
            FusedOp::Unary(UnaryFloatOp::Tanh, 4),
            FusedOp::Unary(UnaryFloatOp::Sqrt, 0),
            FusedOp::Binary(BinaryFloatOp::Div, 5, 6),
            FusedOp::Unary(UnaryFloatOp::Neg, 7),
            FusedOp::Unary(UnaryFloatOp::Exp, 8),
        ];
        let ours = catch(|| Ex::float_fused(vec![f::<Ex>(&a), f::<Ex>(&b), f::<Ex>(&c)], Shape::from(vec![5, 7]), ops.clone(), vec![7, 9]));
        let reference = |out: usize| {
            type B = Ref;
            let (a, b, c) = (f::<B>(&a), f::<B>(&b), f::<B>(&c));
            let b = B::float_expand(B::float_reshape(b, Shape::from(vec![1, 7])), Shape::from(vec![5, 7]));
            let c = B::float_expand(B::float_reshape(c, Shape::from(vec![1, 1])), Shape::from(vec![5, 7]));
            let y = B::float_div(B::float_tanh(B::float_add(B::float_mul(a.clone(), b), c)), B::float_sqrt(a));
            if out == 0 { rf::<B>(y) } else { rf::<B>(B::float_exp(B::float_neg(y))) }
        };
        for j in 0..2 {
            let got = ours.as_ref().map(|outs| rf::<Ex>(outs[j].clone())).map_err(Clone::clone);
            suite.check(format!("{dtype:?} chain output {j}"), Tol::of(1e-5).for_dtype(dtype), (got, reference(j)));
        }
    }
    suite.finish();
}

#[test]
fn bad_programs_are_refused_with_the_reason() {
    let mut suite = Suite::new("fused errors");
    let x = || f::<Ex>(&TensorData::new(vec![1.0f32, 2.0], vec![2]));
    let shape = || Shape::from(vec![2]);
    let case = |ins: Vec<T>, s: Shape, ops: Vec<FusedOp>, outs: Vec<usize>| catch(|| rf::<Ex>(Ex::float_fused(ins, s, ops, outs).remove(0)));
    suite.check_panics("register not yet written", "reads register 2", case(vec![x()], shape(), vec![FusedOp::Unary(UnaryFloatOp::Exp, 2)], vec![1]));
    suite.check_panics("output out of range", "outputs [5]", case(vec![x()], shape(), vec![FusedOp::Unary(UnaryFloatOp::Exp, 0)], vec![5]));
    suite.check_panics("no broadcast", "doesn't broadcast to [3]", case(vec![x()], Shape::from(vec![3]), vec![FusedOp::Unary(UnaryFloatOp::Exp, 0)], vec![1]));
    suite.check_panics("infinite constant", "is not finite", case(vec![x()], shape(), vec![FusedOp::Const(f32::INFINITY.to_bits())], vec![1]));
    if let Some(&other) = float_dtypes().iter().find(|&&d| d != DType::F32) {
        let input = vec![Ex::float_cast(x(), other.into())];
        suite.check_panics("constant in another dtype", "constants are for f32", case(input, shape(), vec![FusedOp::Const(1.0f32.to_bits())], vec![1]));
        let mixed = vec![x(), Ex::float_cast(x(), other.into())];
        suite.check_panics("mixed dtypes", "share one float dtype", case(mixed, shape(), vec![FusedOp::Binary(BinaryFloatOp::Add, 0, 1)], vec![2]));
    }
    suite.finish();
}
