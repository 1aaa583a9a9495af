//! A block cut into units: segments (maximal runs of ops and hooks, each captured as one
//! pipeline) and the control-flow instructions and runtime calls between them.
use std::collections::HashSet;

use super::{Block, Instr, Slot};

/// Where a segment's op reads a value from.
#[derive(Clone, Copy, Debug)]
pub enum Src {
    /// The segment's input `i`.
    Input(usize),
    /// Output `k` of the segment's own instruction `n`.
    Local(usize, usize),
    /// The program's constant `c`.
    Const(usize),
}

/// A run of ops and hooks.
#[derive(Clone, Debug)]
pub struct Segment {
    /// The block's instructions, in order.
    pub instrs: Vec<usize>,
    /// What each instruction reads, in the segment's terms.
    pub reads: Vec<Vec<Src>>,
    /// The block slots the segment takes as inputs (parameters, earlier units' values).
    pub inputs: Vec<Slot>,
    /// The values of its own that later units or the block's outputs read; the segment gives
    /// these first.
    pub outputs: Vec<(usize, usize)>,
    /// Its hooks: the hook's id and its values, which the segment gives after `outputs`.
    pub hooks: Vec<(usize, Vec<Src>)>,
}

/// A unit of a block.
#[derive(Clone, Debug)]
pub enum Unit {
    Segment(Segment),
    /// A cond, a while, a repeat or a runtime call: instruction `n` of the block.
    Control(usize),
}

fn is_control(i: &Instr) -> bool {
    matches!(i, Instr::Cond { .. } | Instr::While { .. } | Instr::Repeat { .. } | Instr::Call { .. })
}

/// The units of `block`.
pub fn units(block: &Block) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut n = 0;
    while n < block.instrs.len() {
        if is_control(&block.instrs[n]) {
            units.push(Unit::Control(n));
            n += 1;
            continue;
        }
        let end = (n..block.instrs.len()).find(|&m| is_control(&block.instrs[m])).unwrap_or(block.instrs.len());
        units.push(Unit::Segment(segment(block, n..end)));
        n = end;
    }
    units
}

fn segment(block: &Block, range: std::ops::Range<usize>) -> Segment {
    let mut inputs: Vec<Slot> = Vec::new();
    let mut src = |s: Slot| match s {
        Slot::Value(n, k) if range.contains(&n) => Src::Local(n, k),
        Slot::Const(c) => Src::Const(c),
        outer => Src::Input(inputs.iter().position(|&i| i == outer).unwrap_or_else(|| {
            inputs.push(outer);
            inputs.len() - 1
        })),
    };
    let mut reads = Vec::new();
    let mut hooks = Vec::new();
    for n in range.clone() {
        match &block.instrs[n] {
            Instr::Hook { id, inputs } => {
                hooks.push((*id, inputs.iter().map(|&s| src(s)).collect()));
                reads.push(Vec::new());
            }
            other => reads.push(other.inputs().iter().map(|&s| src(s)).collect()),
        }
    }
    // Own values read after the segment: by later instructions or the block's outputs.
    let later = block.instrs[range.end..].iter().flat_map(Instr::inputs).chain(&block.outputs);
    let mut seen = HashSet::new();
    let outputs = later
        .filter_map(|s| match *s {
            Slot::Value(n, k) if range.contains(&n) && seen.insert((n, k)) => Some((n, k)),
            _ => None,
        })
        .collect();
    Segment { instrs: range.collect(), reads, inputs, outputs, hooks }
}
