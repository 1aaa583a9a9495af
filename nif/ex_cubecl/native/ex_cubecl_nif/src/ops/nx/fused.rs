//! `nx_fused`: a chain of Nx's elementwise float ops in one launch, as `ExBurn.Defn.Compiler`
//! groups them (`ExCubeclBackend::float_fused`).
//!
//! Options: `type` and `shape` (the group's, which every output has), `ops` (a list of
//! `{name, [register, ...]}` with Nx's op names; register `k` is input `k`, and each op writes
//! the next register) and `outputs` (the registers given, in order). Inputs are cast to
//! `type` where they differ; every op gives the bits that its own `nx_<name>` entry gives,
//! but comparisons give 1 or 0 of `type` rather than u8 (what `select` reads alike).
//! `{"constant", [bits]}` is a finite f32 constant (f32 groups only), a literal of the kernel.
//!
//! A group of an integer type runs Nx's integer ops (`add`, `subtract`, `multiply`,
//! `bitwise_*`, shifts, `max`, `min`, `negate`, `bitwise_not`, comparisons read by `select`)
//! in one launch of the integer kernel (`ExCubeclBackend::int_fused`), where
//! `{"constant", [value]}` is a value of the type; where the device can't bind that many
//! buffers, the ops run one by one through their own entries. With option `stacked: true` an
//! integer group gives one tensor: its outputs concatenated along the first axis (what a
//! `concatenate` of them would give, written in place by the one launch); `shape` is then
//! that tensor's, and the group runs over it with its first axis divided by the outputs.
use burn_backend::Shape;
use ex_cubecl::launch::fused::{BinaryFloatOp as B2, CompareOp as C, FusedOp, UnaryFloatOp as U};
use ex_cubecl::launch::fused_int::{BinaryIntOp as I2, IntFusedOp};

use super::Out;
use super::any;
use crate::error::{NifError, NifResult};
use crate::ops::Extension;
use crate::opts::{OptVal, Opts};
use crate::tensor::Prim;

/// The fused ops of Nx op `name` on `args` (registers of the kernel).
fn lower(name: &str, args: &[usize]) -> Option<Vec<FusedOp>> {
    let unary = |u: U| match args {
        [x] => Some(vec![FusedOp::Unary(u, *x)]),
        _ => None,
    };
    let binary = |op: fn(usize, usize) -> FusedOp| match args {
        [x, y] => Some(vec![op(*x, *y)]),
        _ => None,
    };
    match name {
        "exp" => unary(U::Exp),
        "log" => unary(U::Log),
        "log1p" => unary(U::Log1p),
        "sigmoid" => unary(U::Sigmoid),
        "cos" => unary(U::Cos),
        "sin" => unary(U::Sin),
        "tan" => unary(U::Tan),
        "cosh" => unary(U::Cosh),
        "sinh" => unary(U::Sinh),
        "tanh" => unary(U::Tanh),
        "expm1" => unary(U::Expm1),
        "erfc" => unary(U::Erfc),
        "acos" => unary(U::Acos),
        "asin" => unary(U::Asin),
        "atan" => unary(U::Atan),
        "acosh" => unary(U::Acosh),
        "asinh" => unary(U::Asinh),
        "atanh" => unary(U::Atanh),
        "sqrt" => unary(U::Sqrt),
        "erf" => unary(U::Erf),
        "abs" => unary(U::Abs),
        "ceil" => unary(U::Ceil),
        "floor" => unary(U::Floor),
        "negate" => unary(U::Neg),
        "sign" => unary(U::Sign),
        "rsqrt" => unary(U::Rsqrt),
        "cbrt" => unary(U::Cbrt),
        "erf_inv" => unary(U::ErfInv),
        "add" => binary(|x, y| FusedOp::Binary(B2::Add, x, y)),
        "subtract" => binary(|x, y| FusedOp::Binary(B2::Sub, x, y)),
        "multiply" => binary(|x, y| FusedOp::Binary(B2::Mul, x, y)),
        "divide" => binary(|x, y| FusedOp::Binary(B2::Div, x, y)),
        "pow" => binary(|x, y| FusedOp::Binary(B2::Powf, x, y)),
        "atan2" => binary(|x, y| FusedOp::Binary(B2::Atan2, x, y)),
        "max" => binary(FusedOp::NanMax),
        "min" => binary(FusedOp::NanMin),
        // Comparisons give 1 or 0 in the group's type: the compiler fuses them only where
        // `select` alone reads them (as its predicate, non-zero meaning true).
        "equal" => binary(|x, y| FusedOp::Compare(C::Equal, x, y)),
        "not_equal" => binary(|x, y| FusedOp::Compare(C::NotEqual, x, y)),
        "greater" => binary(|x, y| FusedOp::Compare(C::Greater, x, y)),
        "greater_equal" => binary(|x, y| FusedOp::Compare(C::GreaterEqual, x, y)),
        "less" => binary(|x, y| FusedOp::Compare(C::Lower, x, y)),
        "less_equal" => binary(|x, y| FusedOp::Compare(C::LowerEqual, x, y)),
        "select" => match args {
            [p, x, y] => Some(vec![FusedOp::Select(*p, *x, *y)]),
            _ => None,
        },
        _ => None,
    }
}

/// The integer kernel's op for Nx op `name` on `args`.
fn lower_int(name: &str, args: &[usize]) -> Option<IntFusedOp> {
    let binary = |b: I2| match args {
        [x, y] => Some(IntFusedOp::Binary(b, *x, *y)),
        _ => None,
    };
    let two = |op: fn(usize, usize) -> IntFusedOp| match args {
        [x, y] => Some(op(*x, *y)),
        _ => None,
    };
    let compare = |c: C| two_args(args).map(|(x, y)| IntFusedOp::Compare(c, x, y));
    match name {
        "add" => binary(I2::Add),
        "subtract" => binary(I2::Sub),
        "multiply" => binary(I2::Mul),
        "max" => binary(I2::Max),
        "min" => binary(I2::Min),
        "bitwise_and" => binary(I2::BitAnd),
        "bitwise_or" => binary(I2::BitOr),
        "bitwise_xor" => binary(I2::BitXor),
        "left_shift" => two(IntFusedOp::ShiftLeft),
        "right_shift" => two(IntFusedOp::ShiftRight),
        "negate" => one_arg(args).map(IntFusedOp::Negate),
        "bitwise_not" => one_arg(args).map(IntFusedOp::BitNot),
        "equal" => compare(C::Equal),
        "not_equal" => compare(C::NotEqual),
        "greater" => compare(C::Greater),
        "greater_equal" => compare(C::GreaterEqual),
        "less" => compare(C::Lower),
        "less_equal" => compare(C::LowerEqual),
        "select" => match args {
            [p, x, y] => Some(IntFusedOp::Select(*p, *x, *y)),
            _ => None,
        },
        _ => None,
    }
}

fn one_arg(args: &[usize]) -> Option<usize> {
    match args {
        [x] => Some(*x),
        _ => None,
    }
}

fn two_args(args: &[usize]) -> Option<(usize, usize)> {
    match args {
        [x, y] => Some((*x, *y)),
        _ => None,
    }
}

/// One item of option `ops`: its name and argument list.
fn item<'a>(op: &str, opts: &Opts, i: usize, item: &'a OptVal) -> NifResult<(&'a String, &'a Vec<OptVal>)> {
    match item {
        OptVal::List(pair) => match pair.as_slice() {
            [OptVal::Str(name) | OptVal::Atom(name), OptVal::List(args)] => Ok((name, args)),
            _ => Err(NifError::new(op, format!("op {i} must be {{name, [register, ...]}}"), format!("ops {:?}", opts.get("ops")))),
        },
        _ => Err(NifError::new(op, format!("op {i} must be {{name, [register, ...]}}"), format!("ops {:?}", opts.get("ops")))),
    }
}

/// The integer kernel's ops and output registers for options `ops` and `outputs` over
/// `inputs` inputs, and the Nx ops themselves (name, argument registers) for the op-by-op
/// path.
fn int_program(op: &str, opts: &Opts, inputs: usize) -> NifResult<(Vec<IntFusedOp>, Vec<usize>, Vec<(String, Vec<usize>)>)> {
    let bad = |what: String| NifError::new(op, what, format!("ops {:?}", opts.get("ops")));
    let Some(OptVal::List(items)) = opts.get("ops") else {
        return Err(bad("option ops must be a list of {name, [register, ...]}".into()));
    };
    let mut ops = Vec::new();
    let mut named = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let (name, args) = item(op, opts, i, it)?;
        let written = inputs + ops.len();
        if name == "constant" {
            let value = match args.as_slice() {
                // (u64 values above i64's range as their bits: the kernel casts to the type)
                [OptVal::Int(v)] if *v >= i128::from(i64::MIN) && *v <= i128::from(u64::MAX) => *v as i64,
                _ => return Err(bad(format!("op {i}: a constant of an integer group is {{\"constant\", [value]}}"))),
            };
            ops.push(IntFusedOp::Const(value));
            named.push((format!("constant {value}"), Vec::new()));
            continue;
        }
        let args = args
            .iter()
            .map(|a| match a {
                OptVal::Int(r) if *r >= 0 && (*r as usize) < written => Ok(*r as usize),
                other => Err(bad(format!("op {i} ({name}) reads {other:?}, not one of the {written} registers before it"))),
            })
            .collect::<NifResult<Vec<usize>>>()?;
        ops.push(lower_int(name, &args).ok_or_else(|| bad(format!("op {i}: {name} of {} registers is not a fusable integer op", args.len())))?);
        named.push((name.clone(), args));
    }
    let registers = inputs + ops.len();
    let outputs = opts
        .ints(op, "outputs", None)?
        .into_iter()
        .map(|r| usize::try_from(r).ok().filter(|&r| r < registers).ok_or_else(|| bad(format!("output register {r} is not one of the {registers}"))))
        .collect::<NifResult<Vec<usize>>>()?;
    if outputs.is_empty() {
        return Err(bad("option outputs names no register".into()));
    }
    Ok((ops, outputs, named))
}

/// The kernel's ops and output registers for option `ops` and `outputs` over `inputs` inputs
/// (an Nx op may take more than one kernel op, so registers are renumbered).
fn program(op: &str, opts: &Opts, inputs: usize) -> NifResult<(Vec<FusedOp>, Vec<usize>)> {
    let bad = |what: String| NifError::new(op, what, format!("ops {:?}", opts.get("ops")));
    let Some(OptVal::List(items)) = opts.get("ops") else {
        return Err(bad("option ops must be a list of {name, [register, ...]}".into()));
    };
    // Where each of Nx's registers is among the kernel's.
    let mut registers: Vec<usize> = (0..inputs).collect();
    let mut ops = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let (name, args) = match item {
            OptVal::List(pair) => match pair.as_slice() {
                [OptVal::Str(name) | OptVal::Atom(name), OptVal::List(args)] => (name, args),
                _ => return Err(bad(format!("op {i} must be {{name, [register, ...]}}"))),
            },
            _ => return Err(bad(format!("op {i} must be {{name, [register, ...]}}"))),
        };
        if name == "constant" {
            // `{"constant", [bits]}`: a finite f32 constant, by its bits.
            let bits = match args.as_slice() {
                [OptVal::Int(b)] => u32::try_from(*b).ok(),
                _ => None,
            };
            let bits = bits.ok_or_else(|| bad(format!("op {i}: a constant is {{\"constant\", [f32 bits]}}")))?;
            ops.push(FusedOp::Const(bits));
            registers.push(inputs + ops.len() - 1);
            continue;
        }
        let args = args
            .iter()
            .map(|a| match a {
                OptVal::Int(r) if *r >= 0 && (*r as usize) < registers.len() => Ok(registers[*r as usize]),
                other => Err(bad(format!("op {i} ({name}) reads {other:?}, not one of the {} registers before it", registers.len()))),
            })
            .collect::<NifResult<Vec<usize>>>()?;
        let lowered = lower(name, &args).ok_or_else(|| bad(format!("op {i}: {name} of {} registers is not fusable", args.len())))?;
        ops.extend(lowered);
        registers.push(inputs + ops.len() - 1);
    }
    let outputs = opts
        .ints(op, "outputs", None)?
        .into_iter()
        .map(|r| usize::try_from(r).ok().and_then(|r| registers.get(r).copied()).ok_or_else(|| bad(format!("output register {r} is not one of the {}", registers.len()))))
        .collect::<NifResult<Vec<usize>>>()?;
    if outputs.is_empty() {
        return Err(bad("option outputs names no register".into()));
    }
    Ok((ops, outputs))
}

pub fn run<B: Extension>(inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let op = "nx_fused";
    if inputs.is_empty() {
        return Err(NifError::new(op, "takes at least one input", out.describe()));
    }
    if !out.dtype.is_float() {
        return run_int::<B>(inputs, out, opts);
    }
    let (ops, outputs) = program(op, opts, inputs.len())?;
    let tensors = inputs
        .into_iter()
        .map(|p| match any::cast(op, p, out.dtype)? {
            Prim::Float(t) => Ok(t),
            other => Err(NifError::new(op, "fuses float ops only", format!("an input is {}, the group {}", other.describe(), out.describe()))),
        })
        .collect::<NifResult<Vec<_>>>()?;
    Ok(B::float_fused(tensors, Shape::from(out.shape.clone()), ops, outputs).into_iter().map(Prim::Float).collect())
}

/// An integer group: one launch of the integer kernel, or its ops one by one.
fn run_int<B: Extension>(inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let op = "nx_fused";
    let (ops, outputs, named) = int_program(op, opts, inputs.len())?;
    let inputs = inputs.into_iter().map(|p| any::cast(op, p, out.dtype)).collect::<NifResult<Vec<_>>>()?;
    let tensors = inputs
        .iter()
        .map(|p| match p {
            Prim::Int(t) => Ok(t.clone()),
            other => Err(NifError::new(op, "fuses integer ops of one type", format!("an input is {}, the group {}", other.describe(), out.describe()))),
        })
        .collect::<NifResult<Vec<_>>>()?;
    let stacked = matches!(opts.get("stacked"), Some(OptVal::Bool(true)));
    let mut shape = out.shape.clone();
    if stacked {
        match shape.first_mut() {
            Some(d) if *d % outputs.len() == 0 => *d /= outputs.len(),
            _ => return Err(NifError::new(op, format!("stacked: the first axis must hold the {} outputs", outputs.len()), out.describe())),
        }
    }
    let group = Out { dtype: out.dtype, shape: shape.clone() };
    let out = &group;
    if let Some(results) = B::int_fused(tensors, Shape::from(shape), ops, outputs.clone(), stacked) {
        return Ok(results.into_iter().map(Prim::Int).collect());
    }
    // Too many buffers for one launch: each op through its own entry, in the group's type.
    let device = inputs[0].device();
    let mut regs = inputs;
    for (name, args) in named {
        let r = match (name.strip_prefix("constant "), args.as_slice()) {
            (Some(value), _) => {
                let value: i64 = value.parse().map_err(|_| NifError::new(op, "internal: a constant's value", name.clone()))?;
                any::full::<B>(&out.shape, out.dtype, value as f64, &device)
            }
            (None, [x]) => super::elementwise::unary::<B>(&name, regs[*x].clone(), out)?,
            (None, [p, x, y]) => any::select_where::<B>(any::nonzero::<B>(regs[*p].clone()), regs[*x].clone(), regs[*y].clone()),
            (None, [x, y]) => super::elementwise::binary::<B>(&name, regs[*x].clone(), regs[*y].clone(), out, out.dtype)?,
            _ => return Err(NifError::new(op, "internal: an op of the group", name.clone())),
        };
        regs.push(r);
    }
    let results: Vec<Prim<B>> = outputs.into_iter().map(|r| regs[r].clone()).collect();
    match stacked {
        true => Ok(vec![any::cat::<B>(results, 0)]),
        false => Ok(results),
    }
}
