//! The shape of a template function: Go's parameter types, for the executor's
//! argument conversions and type checks, and the implementation.

use super::value::V;

/// A parameter type, for Go's argument conversions and type checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P {
    /// `interface{}`
    Any,
    /// `reflect.Value` (builtins): any value, including a missing one.
    Val,
    Str,
    Int,
    Float,
    Bool,
    /// `map[string]interface{}`
    Map,
}

impl P {
    pub fn go_name(self) -> &'static str {
        match self {
            P::Any => "interface {}",
            P::Val => "reflect.Value",
            P::Str => "string",
            P::Int => "int",
            P::Float => "float64",
            P::Bool => "bool",
            P::Map => "map[string]interface {}",
        }
    }
}

pub type Impl = fn(Vec<V>) -> Result<V, String>;

pub struct Func {
    pub fixed: &'static [P],
    pub variadic: Option<P>,
    pub f: Impl,
}

/// What each function group registers itself through: name, fixed parameters,
/// the variadic parameter if any, and the implementation.
pub type Register<'a> = dyn FnMut(&'static str, &'static [P], Option<P>, Impl) + 'a;
