//! The CTC forward (alpha) and backward (beta) recursions in log space, in f32.
//!
//! One unit per sample walks the time steps in order, over the blank-extended target
//! `l' = [blank, y1, blank, y2, ..., blank]` of length `L = 2 * target_length + 1`.
//! Both recursions include `log_probs[t, l'[s]]` at every step (Graves et al., 2006), and
//! positions past the sample's input length or extended target are `-inf`.
use cubecl::prelude::*;

/// `l'[s]` of sample `n`: the blank at even positions, target `s / 2` at odd ones. Reads stay
/// inside `targets` whatever `s` (a value is read and discarded where it isn't needed).
#[cube]
fn label(targets: &Tensor<i32>, n: usize, s: usize, blank: i32) -> i32 {
    let idx = n * targets.shape(1) + s / 2;
    let safe = select(idx < targets.len(), idx, 0usize);
    select(s % 2 == 1, targets[safe], blank)
}

/// `log_probs[row + class]`; a class outside `0..classes` has probability 0.
#[cube]
fn log_prob(log_probs: &Tensor<f32>, row: usize, class: i32, classes: usize, neg_inf: f32) -> f32 {
    let valid = class >= 0 && (class as usize) < classes;
    let c = select(valid, class as usize, 0usize);
    select(valid, log_probs[row + c], neg_inf)
}

/// `len` clamped to `0..=max`.
#[cube]
fn clamp_len(len: i32, max: usize) -> usize {
    let low = select(len < 0, 0i32, len);
    select(low > max as i32, max as i32, low) as usize
}

/// `log(exp(a) + exp(b))`, exact for `-inf` operands.
#[cube]
fn log_add(a: f32, b: f32, neg_inf: f32) -> f32 {
    let hi = select(a > b, a, b);
    let lo = select(a > b, b, a);
    select(hi == neg_inf, neg_inf, hi + f32::log1p(f32::exp(lo - hi)))
}

/// Fills `alpha` and `beta` (`[T, N, L]`) and the per-sample loss `nll` (`[N]`, `+inf` when
/// the target cannot be aligned with the input) from `log_probs` (`[T, N, C]`, contiguous),
/// `targets` (`[N, S]`), and the lengths (`[N]`), all contiguous. Lengths are clamped to the
/// tensors' extents. Every read stays inside its buffer: indices that a step doesn't need are
/// clamped and their values discarded by `select`, which keeps the control flow simple.
#[cube(launch_unchecked)]
pub fn ctc_alpha_beta(
    log_probs: &Tensor<f32>,
    targets: &Tensor<i32>,
    input_lengths: &Tensor<i32>,
    target_lengths: &Tensor<i32>,
    alpha: &mut Tensor<f32>,
    beta: &mut Tensor<f32>,
    nll: &mut Tensor<f32>,
    blank: i32,
    neg_inf: f32,
) {
    let n = ABSOLUTE_POS;
    if n >= nll.len() {
        terminate!();
    }
    let t_max = log_probs.shape(0);
    let batch = log_probs.shape(1);
    let classes = log_probs.shape(2);
    let l_max = alpha.shape(2);
    let tn = clamp_len(input_lengths[n], t_max);
    let sn = clamp_len(target_lengths[n], targets.shape(1));
    let ln = 2 * sn + 1;

    for t in 0..t_max {
        for s in 0..l_max {
            alpha[(t * batch + n) * l_max + s] = neg_inf;
            beta[(t * batch + n) * l_max + s] = neg_inf;
        }
    }

    // alpha[t, s] = lp[t, l'[s]] + logsumexp(alpha[t-1, s], alpha[t-1, s-1], alpha[t-1, s-2]),
    // the last term where l'[s] is not blank and differs from l'[s-2]; alpha[0, s] starts
    // the paths at the first blank or the first label.
    for t in 0..tn {
        let row = (t * batch + n) * l_max;
        let prev = (select(t > 0, t - 1, 0usize) * batch + n) * l_max;
        let lp = (t * batch + n) * classes;
        for s in 0..ln {
            let l = label(targets, n, s, blank);
            let s1 = select(s >= 1, s - 1, 0usize);
            let s2 = select(s >= 2, s - 2, 0usize);
            let skip = s >= 2 && l != blank && l != label(targets, n, s2, blank);
            let a1 = select(s >= 1, alpha[prev + s1], neg_inf);
            let a2 = select(skip, alpha[prev + s2], neg_inf);
            let from_prev = log_add(log_add(alpha[prev + s], a1, neg_inf), a2, neg_inf);
            let acc = select(t > 0, from_prev, select(s < 2, 0.0f32, neg_inf));
            alpha[row + s] = select(acc == neg_inf, neg_inf, acc + log_prob(log_probs, lp, l, classes, neg_inf));
        }
    }

    // beta[t, s] = lp[t, l'[s]] + logsumexp(beta[t+1, s], beta[t+1, s+1], beta[t+1, s+2]),
    // the last term where l'[s] is not blank and differs from l'[s+2]; at the last step the
    // paths end on the last label or the final blank.
    for step in 0..tn {
        let t = tn - 1 - step;
        let row = (t * batch + n) * l_max;
        let last = t + 1 == tn;
        let next = (select(last, t, t + 1) * batch + n) * l_max;
        let lp = (t * batch + n) * classes;
        for s in 0..ln {
            let l = label(targets, n, s, blank);
            let s1 = select(s + 1 < ln, s + 1, s);
            let s2 = select(s + 2 < ln, s + 2, s);
            let skip = s + 2 < ln && l != blank && l != label(targets, n, s2, blank);
            let b1 = select(s + 1 < ln, beta[next + s1], neg_inf);
            let b2 = select(skip, beta[next + s2], neg_inf);
            let from_next = log_add(log_add(beta[next + s], b1, neg_inf), b2, neg_inf);
            let acc = select(last, select(s + 2 >= ln, 0.0f32, neg_inf), from_next);
            beta[row + s] = select(acc == neg_inf, neg_inf, acc + log_prob(log_probs, lp, l, classes, neg_inf));
        }
    }

    // -log P: the paths that end on the last label or the final blank at the last step.
    let end = (select(tn > 0, tn - 1, 0usize) * batch + n) * l_max;
    let penultimate = select(ln >= 2, alpha[end + select(ln >= 2, ln - 2, 0usize)], neg_inf);
    let total = log_add(alpha[end + ln - 1], penultimate, neg_inf);
    nll[n] = -select(tn > 0, total, select(sn == 0, 0.0f32, neg_inf));
}
