//! Fuzz target: `orbit_core::check::compile` on arbitrary text, alone and
//! next to a valid file, must return diagnostics or definitions — never panic,
//! loop forever or blow the stack.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orbit_core::check::{compile, Source};

const VALID: &str = include_str!("../../../examples/order.orbit");

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let alone = [Source {
        name: "fuzz.orbit".to_owned(),
        text: text.clone(),
    }];
    let compiled = compile(&alone, &|_, _| None);
    assert!(compiled.is_ok() || !compiled.diagnostics.is_empty());
    let beside = [
        Source {
            name: "order.orbit".to_owned(),
            text: VALID.to_owned(),
        },
        Source {
            name: "fuzz.orbit".to_owned(),
            text,
        },
    ];
    let _ = compile(&beside, &|_, _| None);
});
