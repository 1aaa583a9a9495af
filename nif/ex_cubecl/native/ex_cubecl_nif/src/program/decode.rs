//! Programs from Elixir terms (see the [module docs](super) for the format), and the checks
//! that make a decoded program safe to run: slots name earlier instructions, parameters and
//! constants that exist; blocks name later blocks of the right arity; kernels exist.
use rustler::Term;

use super::{Block, Instr, Slot};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;

fn bad(op: &str, what: &str, term: &Term) -> NifError {
    NifError::new(op, format!("a program's {what} is malformed"), format!("{term:?}"))
}

fn tuple<'a>(op: &str, what: &str, term: Term<'a>) -> NifResult<(String, Vec<Term<'a>>)> {
    let parts = rustler::types::tuple::get_tuple(term).map_err(|_| bad(op, what, &term))?;
    let tag = parts.first().and_then(|t| t.atom_to_string().ok()).ok_or_else(|| bad(op, what, &term))?;
    Ok((tag, parts[1..].to_vec()))
}

fn index(op: &str, what: &str, term: Term) -> NifResult<usize> {
    term.decode::<usize>().map_err(|_| bad(op, what, &term))
}

fn slot(op: &str, term: Term) -> NifResult<Slot> {
    let (tag, args) = tuple(op, "slot", term)?;
    let at = |k: usize| args.get(k).map_or_else(|| Err(bad(op, "slot", &term)), |t| index(op, "slot", *t));
    match (tag.as_str(), args.len()) {
        ("param", 1) => Ok(Slot::Param(at(0)?)),
        ("value", 2) => Ok(Slot::Value(at(0)?, at(1)?)),
        ("const", 1) => Ok(Slot::Const(at(0)?)),
        _ => Err(bad(op, "slot", &term)),
    }
}

fn slots(op: &str, term: Term) -> NifResult<Vec<Slot>> {
    let list: Vec<Term> = term.decode().map_err(|_| bad(op, "slot list", &term))?;
    list.into_iter().map(|t| slot(op, t)).collect()
}

fn instr(op: &str, term: Term) -> NifResult<Instr> {
    let (tag, a) = tuple(op, "instruction", term)?;
    let string = |t: Term| t.decode::<String>().map_err(|_| bad(op, "instruction", &term));
    Ok(match (tag.as_str(), a.len()) {
        ("op", 4) => Instr::Op { kernel: string(a[0])?, inputs: slots(op, a[1])?, opts: Opts::decode(op, a[2])?, label: string(a[3])? },
        ("cond", 3) => {
            let clauses: Vec<(usize, usize)> = a[1].decode().map_err(|_| bad(op, "cond", &term))?;
            Instr::Cond { inputs: slots(op, a[0])?, clauses, last: index(op, "cond", a[2])? }
        }
        ("while", 3) => Instr::While { initial: slots(op, a[0])?, pred: index(op, "while", a[1])?, body: index(op, "while", a[2])? },
        ("repeat", 3) => {
            let times: Option<usize> = a[1].decode().map_err(|_| bad(op, "repeat", &term))?;
            Instr::Repeat { inputs: slots(op, a[0])?, times, body: index(op, "repeat", a[2])? }
        }
        ("hook", 2) => Instr::Hook { id: index(op, "hook", a[0])?, inputs: slots(op, a[1])? },
        ("call", 3) => {
            let outputs: Vec<(Vec<usize>, String)> = a[2].decode().map_err(|_| bad(op, "call", &term))?;
            let outputs = outputs.into_iter().map(|(shape, dtype)| Ok(super::Param { shape, dtype: crate::dtype::parse(op, &dtype)? })).collect::<NifResult<_>>()?;
            Instr::Call { id: index(op, "call", a[0])?, inputs: slots(op, a[1])?, outputs }
        }
        _ => return Err(bad(op, "instruction", &term)),
    })
}

/// Decodes the blocks `[{params, instrs, outputs}]`.
pub fn blocks(op: &str, terms: Vec<Term>) -> NifResult<Vec<Block>> {
    terms
        .into_iter()
        .map(|term| {
            let (params, instrs, outputs): (usize, Vec<Term>, Term) = term.decode().map_err(|_| bad(op, "block", &term))?;
            Ok(Block { params, instrs: instrs.into_iter().map(|t| instr(op, t)).collect::<NifResult<_>>()?, outputs: slots(op, outputs)? })
        })
        .collect()
}

/// Checks a decoded program (see the module docs); `params` is the main block's arity.
pub fn check(op: &str, blocks: &[Block], consts: usize, params: usize) -> NifResult<()> {
    let fail = |b: usize, what: String| Err(NifError::new(op, format!("block {b}: {what}"), format!("{} blocks, {consts} constants", blocks.len())));
    match blocks.first() {
        None => return Err(NifError::new(op, "a program has at least one block", "")),
        Some(main) if main.params != params => return fail(0, format!("takes {} parameters, the program {params} inputs", main.params)),
        _ => {}
    }
    for (b, block) in blocks.iter().enumerate() {
        let slot_ok = |s: &Slot, before: usize| match *s {
            Slot::Param(i) => i < block.params,
            Slot::Value(n, _) => n < before,
            Slot::Const(c) => c < consts,
        };
        let callee = |c: usize, arity: usize, outputs: Option<usize>| -> Result<(), String> {
            match blocks.get(c) {
                _ if c <= b => Err(format!("names block {c}, which is not after it")),
                None => Err(format!("names block {c}, which doesn't exist")),
                Some(cb) if cb.params != arity => Err(format!("block {c} takes {} parameters, given {arity}", cb.params)),
                Some(cb) if outputs.is_some_and(|o| cb.outputs.len() != o) => Err(format!("block {c} gives {} outputs, expected {}", cb.outputs.len(), outputs.unwrap_or(0))),
                Some(_) => Ok(()),
            }
        };
        for (n, ins) in block.instrs.iter().enumerate() {
            if let Some(s) = ins.inputs().iter().find(|s| !slot_ok(s, n)) {
                return fail(b, format!("instruction {n} reads {s:?}, which has no value there"));
            }
            let called = match ins {
                Instr::Op { kernel, .. } => {
                    let k = crate::ops::kernel(kernel).map_err(|e| NifError::new(op, format!("block {b}, instruction {n}: {}", e.reason), e.details))?;
                    if k.family == crate::ops::Family::Quant {
                        return fail(b, format!("instruction {n}: {kernel} takes or gives quantized tensors, which programs don't hold"));
                    }
                    Ok(())
                }
                Instr::Cond { inputs, clauses, last } => {
                    let outputs = blocks.get(*last).map(|l| l.outputs.len());
                    clauses
                        .iter()
                        .try_for_each(|&(p, body)| callee(p, inputs.len(), Some(1)).and(callee(body, inputs.len(), outputs)))
                        .and(callee(*last, inputs.len(), None))
                }
                Instr::While { initial, pred, body } => callee(*pred, initial.len(), Some(1)).and(callee(*body, initial.len(), Some(initial.len()))),
                Instr::Repeat { inputs, times, body } => {
                    let state = inputs.len() - usize::from(times.is_none());
                    match times.is_none() && inputs.is_empty() {
                        true => Err("a repeat without a count takes its count as the first input".to_string()),
                        false => callee(*body, state, Some(state)),
                    }
                }
                Instr::Hook { .. } | Instr::Call { .. } => Ok(()),
            };
            if let Err(why) = called {
                return fail(b, format!("instruction {n}: {why}"));
            }
        }
        if let Some(s) = block.outputs.iter().find(|s| !slot_ok(s, block.instrs.len())) {
            return fail(b, format!("output {s:?} has no value"));
        }
    }
    Ok(())
}
