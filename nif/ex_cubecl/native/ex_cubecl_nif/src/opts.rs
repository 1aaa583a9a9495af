//! Kernel options: an Elixir keyword list, decoded once into owned values so that pipelines
//! and asynchronous commands can run a kernel long after the call that described it.
use rustler::{Term, TermType};

use crate::error::{NifError, NifResult};

/// One option value.
#[derive(Clone, Debug, PartialEq)]
pub enum OptVal {
    /// Any integer of i64's or u64's range (u64 tensors take constants up to 2^64 - 1).
    Int(i128),
    Float(f64),
    Bool(bool),
    Atom(String),
    Str(String),
    List(Vec<OptVal>),
}

/// The options of one kernel call, in the order given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Opts(pub Vec<(String, OptVal)>);

fn value(op: &str, term: Term) -> NifResult<OptVal> {
    let bad = || {
        NifError::new(
            op,
            "an option value must be a number, an atom, a string, or a list or tuple of them",
            format!("{term:?}"),
        )
    };
    Ok(match term.get_type() {
        TermType::Integer => OptVal::Int(match term.decode::<i64>() {
            Ok(v) => v.into(),
            Err(_) => term.decode::<u64>().map_err(|_| bad())?.into(),
        }),
        TermType::Float => OptVal::Float(term.decode::<f64>().map_err(|_| bad())?),
        TermType::Atom => {
            let name = term.atom_to_string().map_err(|_| bad())?;
            match name.as_str() {
                "true" => OptVal::Bool(true),
                "false" => OptVal::Bool(false),
                _ => OptVal::Atom(name),
            }
        }
        TermType::Binary => OptVal::Str(term.decode::<String>().map_err(|_| bad())?),
        TermType::List => OptVal::List(
            term.decode::<Vec<Term>>()
                .map_err(|_| bad())?
                .into_iter()
                .map(|t| value(op, t))
                .collect::<NifResult<_>>()?,
        ),
        TermType::Tuple => OptVal::List(
            rustler::types::tuple::get_tuple(term)
                .map_err(|_| bad())?
                .into_iter()
                .map(|t| value(op, t))
                .collect::<NifResult<_>>()?,
        ),
        _ => return Err(bad()),
    })
}

impl Opts {
    /// Decodes a keyword list.
    pub fn decode(op: &str, term: Term) -> NifResult<Self> {
        let bad = || NifError::new(op, "options must be a keyword list", format!("{term:?}"));
        let pairs: Vec<(Term, Term)> = term.decode().map_err(|_| bad())?;
        let mut out = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let key = k.atom_to_string().map_err(|_| bad())?;
            out.push((key, value(op, v)?));
        }
        Ok(Opts(out))
    }

    /// The value of option `key`, if given.
    pub fn get(&self, key: &str) -> Option<&OptVal> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn wrong(&self, op: &str, key: &str, want: &str) -> NifError {
        NifError::new(
            op,
            format!("option {key} must be {want}"),
            format!("got {:?}", self.get(key)),
        )
    }

    /// An integer option, or `default` where absent.
    pub fn int(&self, op: &str, key: &str, default: Option<i64>) -> NifResult<i64> {
        match (self.get(key), default) {
            (Some(OptVal::Int(v)), _) => i64::try_from(*v).map_err(|_| self.wrong(op, key, "an integer of i64's range")),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(NifError::new(
                op,
                format!("option {key} is required"),
                format!("options: {:?}", self.0),
            )),
            _ => Err(self.wrong(op, key, "an integer")),
        }
    }

    /// A number option (ints are accepted), or `default` where absent.
    pub fn float(&self, op: &str, key: &str, default: Option<f64>) -> NifResult<f64> {
        match (self.get(key), default) {
            (Some(OptVal::Float(v)), _) => Ok(*v),
            (Some(OptVal::Int(v)), _) => Ok(*v as f64),
            (Some(OptVal::Atom(a)), _) if a == "infinity" => Ok(f64::INFINITY),
            (Some(OptVal::Atom(a)), _) if a == "neg_infinity" => Ok(f64::NEG_INFINITY),
            (Some(OptVal::Atom(a)), _) if a == "nan" => Ok(f64::NAN),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(NifError::new(
                op,
                format!("option {key} is required"),
                format!("options: {:?}", self.0),
            )),
            _ => Err(self.wrong(op, key, "a number")),
        }
    }

    /// A boolean option, `default` where absent.
    pub fn bool(&self, op: &str, key: &str, default: bool) -> NifResult<bool> {
        match self.get(key) {
            Some(OptVal::Bool(v)) => Ok(*v),
            None => Ok(default),
            _ => Err(self.wrong(op, key, "true or false")),
        }
    }

    /// An atom or string option, or `default` where absent.
    pub fn name(&self, op: &str, key: &str, default: Option<&str>) -> NifResult<String> {
        match (self.get(key), default) {
            (Some(OptVal::Atom(v) | OptVal::Str(v)), _) => Ok(v.clone()),
            (None, Some(d)) => Ok(d.to_string()),
            (None, None) => Err(NifError::new(
                op,
                format!("option {key} is required"),
                format!("options: {:?}", self.0),
            )),
            _ => Err(self.wrong(op, key, "an atom")),
        }
    }

    /// A list of integers (a single integer is a list of one), or `default` where absent.
    pub fn ints(&self, op: &str, key: &str, default: Option<Vec<i64>>) -> NifResult<Vec<i64>> {
        match (self.get(key), default) {
            (Some(OptVal::Int(v)), _) => Ok(vec![i64::try_from(*v).map_err(|_| self.wrong(op, key, "a list of integers of i64's range"))?]),
            (Some(OptVal::List(items)), _) => items
                .iter()
                .map(|v| match v {
                    OptVal::Int(i) => i64::try_from(*i).map_err(|_| self.wrong(op, key, "a list of integers of i64's range")),
                    _ => Err(self.wrong(op, key, "a list of integers")),
                })
                .collect(),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(NifError::new(
                op,
                format!("option {key} is required"),
                format!("options: {:?}", self.0),
            )),
            _ => Err(self.wrong(op, key, "a list of integers")),
        }
    }

    /// Whether the option is given.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}
