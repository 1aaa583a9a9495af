//! Module kernels: matrix products, convolutions, pooling, resampling, attention, softmax.
use burn_backend::Backend;
use burn_backend::ops::{AttentionModuleOptions, ConvOptions, InterpolateMode, InterpolateOptions};

use super::{axis, float, same_dtype, sizes, take};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let out = match op {
        "matmul" => {
            let [a, b] = take::<B, 2>(op, inputs)?;
            same_dtype(op, &a, &b)?;
            let (sa, sb) = (a.shape(), b.shape());
            let (ra, rb) = (sa.num_dims(), sb.num_dims());
            if ra < 2 || ra != rb || sa[ra - 1] != sb[rb - 2] {
                return Err(NifError::new(
                    op,
                    "needs [.., m, k] and [.., k, n] of the same rank (2 or more)",
                    format!("{} and {}", a.describe(), b.describe()),
                ));
            }
            match (a, b) {
                (Prim::Float(a), Prim::Float(b)) => Prim::Float(B::float_matmul(a, b)),
                (Prim::Int(a), Prim::Int(b)) => Prim::Int(B::int_matmul(a, b)),
                (a, _) => {
                    return Err(NifError::new(
                        op,
                        "takes float or int tensors",
                        a.describe(),
                    ));
                }
            }
        }
        "conv" => conv::<B>(op, inputs, opts)?,
        "max_pool2d" | "avg_pool2d" | "interpolate" => {
            let [x] = take::<B, 1>(op, inputs)?;
            if x.shape().num_dims() != 4 {
                return Err(NifError::new(
                    op,
                    "needs a [batch, channels, height, width] input",
                    x.describe(),
                ));
            }
            let x = float(op, x)?;
            let pair = |key: &str, default: Option<Vec<i64>>| -> NifResult<[usize; 2]> {
                let v = sizes(op, opts, key, default)?;
                match v.as_slice() {
                    [a] => Ok([*a, *a]),
                    [a, b] => Ok([*a, *b]),
                    _ => Err(NifError::new(
                        op,
                        format!("option {key} needs one or two sizes"),
                        format!("{v:?}"),
                    )),
                }
            };
            match op {
                "interpolate" => {
                    let mode = match opts.name(op, "mode", Some("nearest"))?.as_str() {
                        "nearest" => InterpolateMode::Nearest,
                        "bilinear" => InterpolateMode::Bilinear,
                        "bicubic" => InterpolateMode::Bicubic,
                        other => {
                            return Err(NifError::new(
                                op,
                                format!("unknown mode {other}"),
                                "modes: nearest, bilinear, bicubic",
                            ));
                        }
                    };
                    let align_corners = opts.bool(op, "align_corners", false)?;
                    Prim::Float(B::interpolate(
                        x,
                        pair("size", None)?,
                        InterpolateOptions {
                            mode,
                            align_corners,
                        },
                    ))
                }
                _ => {
                    let kernel = pair("kernel", None)?;
                    let stride = pair("stride", Some(kernel.iter().map(|&k| k as i64).collect()))?;
                    let padding = pair("padding", Some(vec![0]))?;
                    if kernel.contains(&0) || stride.contains(&0) {
                        return Err(NifError::new(
                            op,
                            "kernel and stride must be positive",
                            format!("kernel {kernel:?}, stride {stride:?}"),
                        ));
                    }
                    if op == "max_pool2d" {
                        Prim::Float(B::max_pool2d(
                            x,
                            kernel,
                            stride,
                            padding,
                            pair("dilation", Some(vec![1]))?,
                            false,
                        ))
                    } else {
                        Prim::Float(B::avg_pool2d(
                            x,
                            kernel,
                            stride,
                            padding,
                            opts.bool(op, "count_include_pad", true)?,
                            false,
                        ))
                    }
                }
            }
        }
        "attention" => {
            let [q, k, v] = take::<B, 3>(op, inputs)?;
            if [&q, &k, &v].iter().any(|t| t.shape().num_dims() != 4) {
                return Err(NifError::new(
                    op,
                    "needs [batch, heads, seq, dim] query, key and value",
                    format!("{}, {}, {}", q.describe(), k.describe(), v.describe()),
                ));
            }
            let options = AttentionModuleOptions {
                scale: if opts.has("scale") {
                    Some(opts.float(op, "scale", None)?)
                } else {
                    None
                },
                softcap: if opts.has("softcap") {
                    Some(opts.float(op, "softcap", None)?)
                } else {
                    None
                },
                is_causal: opts.bool(op, "causal", false)?,
            };
            Prim::Float(B::attention(
                float(op, q)?,
                float(op, k)?,
                float(op, v)?,
                None,
                None,
                options,
            ))
        }
        _ => {
            let [x] = take::<B, 1>(op, inputs)?;
            let dim = axis(op, opts, "axis", x.shape().num_dims(), Some(-1))?;
            let x = float(op, x)?;
            if op == "softmax" {
                Prim::Float(B::softmax(x, dim))
            } else {
                Prim::Float(B::log_softmax(x, dim))
            }
        }
    };
    Ok(vec![out])
}

/// Convolution of `x` `[batch, c_in, spatial..]` (1 to 3 spatial dims) with `weight`
/// `[c_out, c_in / groups, kernel..]` and an optional `bias` `[c_out]`.
fn conv<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Prim<B>> {
    let n = inputs.len();
    if !(2..=3).contains(&n) {
        return Err(NifError::new(
            op,
            format!("takes x, weight and an optional bias; got {n} inputs"),
            "",
        ));
    }
    let mut it = inputs.into_iter();
    let (x, w, bias) = (it.next().unwrap(), it.next().unwrap(), it.next());
    let (rx, rw) = (x.shape().num_dims(), w.shape().num_dims());
    let spatial = rx.wrapping_sub(2);
    let groups = opts.int(op, "groups", Some(1))?;
    let c_in = x.shape().get(1).copied().unwrap_or(0);
    let valid = (3..=5).contains(&rx)
        && rx == rw
        && groups >= 1
        && c_in % groups as usize == 0
        && w.shape()[1] * groups as usize == c_in;
    if !valid {
        return Err(NifError::new(
            op,
            "needs x [batch, c_in, spatial..] (1 to 3 spatial dims) and weight [c_out, c_in / groups, kernel..]",
            format!(
                "x {}, weight {}, groups {groups}",
                x.describe(),
                w.describe()
            ),
        ));
    }
    let list = |key: &str, default: i64| -> NifResult<Vec<usize>> {
        let v = sizes(op, opts, key, Some(vec![default]))?;
        match v.len() {
            1 => Ok(vec![v[0]; spatial]),
            l if l == spatial => Ok(v),
            _ => Err(NifError::new(
                op,
                format!("option {key} needs 1 or {spatial} sizes"),
                format!("{v:?}"),
            )),
        }
    };
    let (stride, padding, dilation) = (
        list("stride", 1)?,
        list("padding", 0)?,
        list("dilation", 1)?,
    );
    if stride.contains(&0) || dilation.contains(&0) {
        return Err(NifError::new(
            op,
            "stride and dilation must be positive",
            format!("stride {stride:?}, dilation {dilation:?}"),
        ));
    }
    let (x, w) = (float(op, x)?, float(op, w)?);
    let bias = bias.map(|b| float(op, b)).transpose()?;
    let g = groups as usize;
    fn arr<const N: usize>(v: &[usize]) -> [usize; N] {
        v.try_into().expect("length checked")
    }
    Ok(Prim::Float(match spatial {
        1 => B::conv1d(
            x,
            w,
            bias,
            ConvOptions::new(arr(&stride), arr(&padding), arr(&dilation), g),
        ),
        2 => B::conv2d(
            x,
            w,
            bias,
            ConvOptions::new(arr(&stride), arr(&padding), arr(&dilation), g),
        ),
        _ => B::conv3d(
            x,
            w,
            bias,
            ConvOptions::new(arr(&stride), arr(&padding), arr(&dilation), g),
        ),
    }))
}
