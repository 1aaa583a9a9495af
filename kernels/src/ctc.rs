//! The CTC forward (alpha) and backward (beta) recursions in log space, in f32.
//!
//! One launch per time step, one unit per sample and position of the blank-extended target
//! `l' = [blank, y1, blank, y2, ..., blank]` (length `L = 2 * target_length + 1`): the steps
//! depend on each other, the positions of one step don't. Both recursions include
//! `log_probs[t, l'[s]]` at every step (Graves et al., 2006), and positions past the
//! sample's input length or extended target are `-inf`.
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

/// Lengths of sample `n`: input steps `tn` (clamped to `T`) and extended target `2 * sn + 1`.
#[cube]
fn lengths(input_lengths: &Tensor<i32>, target_lengths: &Tensor<i32>, targets: &Tensor<i32>, n: usize, t_max: usize) -> (usize, usize, usize) {
    let tn = clamp_len(input_lengths[n], t_max);
    let sn = clamp_len(target_lengths[n], targets.shape(1));
    (tn, sn, 2 * sn + 1)
}

/// Step `t` of the alpha recursion, one unit per `(n, s)` of `alpha` `[T, N, L]`:
/// `alpha[t, s] = lp[t, l'[s]] + logsumexp(alpha[t-1, s], alpha[t-1, s-1], alpha[t-1, s-2])`,
/// the last term where `l'[s]` is not blank and differs from `l'[s-2]`; at `t = 0` the paths
/// start at the first blank or the first label. Positions past the sample's input length or
/// extended target are `-inf`. Every read stays inside its buffer: indices a position doesn't
/// need are clamped and their values discarded by `select`.
#[cube(launch_unchecked)]
pub fn ctc_alpha_step(
    log_probs: &Tensor<f32>,
    targets: &Tensor<i32>,
    input_lengths: &Tensor<i32>,
    target_lengths: &Tensor<i32>,
    alpha: &mut Tensor<f32>,
    t: usize,
    blank: i32,
    neg_inf: f32,
) {
    let batch = alpha.shape(1);
    let l_max = alpha.shape(2);
    if ABSOLUTE_POS >= batch * l_max {
        terminate!();
    }
    let n = ABSOLUTE_POS / l_max;
    let s = ABSOLUTE_POS % l_max;
    let (tn, _sn, ln) = lengths(input_lengths, target_lengths, targets, n, log_probs.shape(0));
    let prev = (select(t > 0, t - 1, 0usize) * batch + n) * l_max;
    let l = label(targets, n, s, blank);
    let s1 = select(s >= 1, s - 1, 0usize);
    let s2 = select(s >= 2, s - 2, 0usize);
    let skip = s >= 2 && l != blank && l != label(targets, n, s2, blank);
    let a1 = select(s >= 1, alpha[prev + s1], neg_inf);
    let a2 = select(skip, alpha[prev + s2], neg_inf);
    let from_prev = log_add(log_add(alpha[prev + s], a1, neg_inf), a2, neg_inf);
    let acc = select(t > 0, from_prev, select(s < 2, 0.0f32, neg_inf));
    let lp = log_prob(log_probs, (t * batch + n) * log_probs.shape(2), l, log_probs.shape(2), neg_inf);
    let value = select(acc == neg_inf, neg_inf, acc + lp);
    alpha[(t * batch + n) * l_max + s] = select(t < tn && s < ln, value, neg_inf);
}

/// Step `t` of the beta recursion (run from the last step down), one unit per `(n, s)`:
/// `beta[t, s] = lp[t, l'[s]] + logsumexp(beta[t+1, s], beta[t+1, s+1], beta[t+1, s+2])`,
/// the last term where `l'[s]` is not blank and differs from `l'[s+2]`; at the sample's last
/// step the paths end on the last label or the final blank.
#[cube(launch_unchecked)]
pub fn ctc_beta_step(
    log_probs: &Tensor<f32>,
    targets: &Tensor<i32>,
    input_lengths: &Tensor<i32>,
    target_lengths: &Tensor<i32>,
    beta: &mut Tensor<f32>,
    t: usize,
    blank: i32,
    neg_inf: f32,
) {
    let batch = beta.shape(1);
    let l_max = beta.shape(2);
    if ABSOLUTE_POS >= batch * l_max {
        terminate!();
    }
    let n = ABSOLUTE_POS / l_max;
    let s = ABSOLUTE_POS % l_max;
    let t_max = log_probs.shape(0);
    let (tn, _sn, ln) = lengths(input_lengths, target_lengths, targets, n, t_max);
    let last = t + 1 == tn;
    let next = (select(t + 1 < t_max, t + 1, t) * batch + n) * l_max;
    let l = label(targets, n, s, blank);
    let s1 = select(s + 1 < l_max, s + 1, s);
    let s2 = select(s + 2 < l_max, s + 2, s);
    let skip = s + 2 < ln && l != blank && l != label(targets, n, s2, blank);
    let b1 = select(s + 1 < ln, beta[next + s1], neg_inf);
    let b2 = select(skip, beta[next + s2], neg_inf);
    let from_next = log_add(log_add(beta[next + s], b1, neg_inf), b2, neg_inf);
    let acc = select(last, select(s + 2 >= ln, 0.0f32, neg_inf), from_next);
    let lp = log_prob(log_probs, (t * batch + n) * log_probs.shape(2), l, log_probs.shape(2), neg_inf);
    let value = select(acc == neg_inf, neg_inf, acc + lp);
    beta[(t * batch + n) * l_max + s] = select(t < tn && s < ln, value, neg_inf);
}

/// `-log P` per sample from the finished alpha: the paths that end on the last label or the
/// final blank at the sample's last step (`+inf` where none does).
#[cube(launch_unchecked)]
pub fn ctc_nll(
    targets: &Tensor<i32>,
    input_lengths: &Tensor<i32>,
    target_lengths: &Tensor<i32>,
    alpha: &Tensor<f32>,
    nll: &mut Tensor<f32>,
    neg_inf: f32,
) {
    let n = ABSOLUTE_POS;
    if n >= nll.len() {
        terminate!();
    }
    let batch = alpha.shape(1);
    let l_max = alpha.shape(2);
    let (tn, sn, ln) = lengths(input_lengths, target_lengths, targets, n, alpha.shape(0));
    let end = (select(tn > 0, tn - 1, 0usize) * batch + n) * l_max;
    let penultimate = select(ln >= 2, alpha[end + select(ln >= 2, ln - 2, 0usize)], neg_inf);
    let total = log_add(alpha[end + ln - 1], penultimate, neg_inf);
    nll[n] = -select(tn > 0, total, select(sn == 0, 0.0f32, neg_inf));
}
