//! The function table: Go's builtins overlaid with sprig's hermetic text functions.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::func::{Func, Impl, P};
use super::{builtins, sprig};

fn table() -> &'static HashMap<&'static str, Func> {
    static T: OnceLock<HashMap<&'static str, Func>> = OnceLock::new();
    T.get_or_init(|| {
        let mut t: HashMap<&'static str, Func> = HashMap::new();
        let mut add = |name: &'static str, fixed: &'static [P], variadic: Option<P>, f: Impl| {
            t.insert(name, Func { fixed, variadic, f });
        };
        builtins::register(&mut add);
        sprig::register(&mut add);
        t
    })
}

/// Whether a function name is defined (for the parser).
pub fn exists(name: &str) -> bool {
    table().contains_key(name)
}

pub fn lookup(name: &str) -> Option<&'static Func> {
    table().get(name)
}
